"""The graph zoo: transformer blocks, synthetic DAGs and memory-bound motifs, built in code.

Tests and benchmarks need graphs that look like real workloads without shipping files: a
BERT-style and a GPT-2-style block with their real operator structure (as the ONNX exporters
emit them: separate Q/K/V projections or one fused QKV + Split, head reshape/transpose, scaled
scores, mask, Softmax, output projection, residual adds, LayerNormalization, a GELU MLP), layered
random DAGs of mixed ops at any size (for solve scaling), and the small memory-bound *motifs*
where fusion decides the runtime (for the C-vs-ONNX-Runtime benchmarks).

Every builder returns a checked :class:`~solverfuse.graph.Graph` (built as a dict and passed
through :func:`~solverfuse.graph.parse_graph`, so shapes are inferred and verified). Weights are
constants without a value (seeded random data when executed); scalars, reshape targets and the
causal mask carry their values.

>>> g = bert_block(layers=1, hidden=64, seq=16, heads=4)
>>> g.tensors[g.outputs[0]].shape, sum(n.op == "MatMul" for n in g.nodes)
([1, 16, 64], 8)
>>> sorted(MOTIFS)[:3]
['branches', 'center', 'elementwise_chain']
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, Optional, Sequence, Union

from .graph import Graph, parse_graph
from .hardware import Hardware, load_hardware


class _Builder:
    """Accumulates tensors and nodes; ``build()`` parses and checks the graph."""

    def __init__(self, name: str):
        self.name = name
        self.tensors: dict[str, dict] = {}
        self.nodes: list[dict] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self._count = 0

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> str:
        self.tensors[name] = {"shape": list(shape), "dtype": dtype}
        self.inputs.append(name)
        return name

    def const(self, name: str, shape: Sequence[int], value: Any = None, fill: Optional[float] = None,
              dtype: str = "float32") -> str:
        t: dict[str, Any] = {"shape": list(shape), "dtype": dtype, "constant": True}
        if value is not None:
            t["value"] = value
        if fill is not None:
            t["fill"] = fill
        self.tensors[name] = t
        return name

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, [], value=float(value))

    def ints(self, name: str, values: Sequence[int]) -> str:
        return self.const(name, [len(values)], value=[int(v) for v in values], dtype="int64")

    def op(self, op: str, inputs: Sequence[str], name: Optional[str] = None, n_out: int = 1,
           **attributes) -> Any:
        """Add a node; returns its output tensor name (a list when ``n_out > 1``)."""
        if name is None:
            name = f"{op.lower()}_{self._count}"
        self._count += 1
        outs = [name] if n_out == 1 else [f"{name}:{i}" for i in range(n_out)]
        node = {"name": name, "op": op, "inputs": list(inputs), "outputs": outs}
        if attributes:
            node["attributes"] = attributes
        self.nodes.append(node)
        return outs[0] if n_out == 1 else outs

    def build(self, outputs: Sequence[str]) -> Graph:
        return parse_graph({"format": "solverfuse-graph/1", "name": self.name, "tensors": self.tensors,
                            "inputs": self.inputs, "outputs": list(outputs), "nodes": self.nodes})


# ---------------------------------------------------------------- transformer blocks

def _linear(b: _Builder, x: str, d_in: int, d_out: int, name: str) -> str:
    """MatMul by a weight + bias Add (how PyTorch's exporter emits nn.Linear on 3-D input)."""
    w = b.const(f"{name}.weight", [d_in, d_out])
    bias = b.const(f"{name}.bias", [d_out])
    return b.op("Add", [b.op("MatMul", [x, w], name=f"{name}.matmul"), bias], name=f"{name}.add_bias")


def _layernorm(b: _Builder, x: str, hidden: int, name: str) -> str:
    scale = b.const(f"{name}.weight", [hidden], fill=1.0)
    bias = b.const(f"{name}.bias", [hidden], fill=0.0)
    return b.op("LayerNormalization", [x, scale, bias], name=name, axis=-1, epsilon=1e-5)


def _split_heads(b: _Builder, x: str, batch: int, seq: int, heads: int, name: str,
                 perm: Sequence[int] = (0, 2, 1, 3)) -> str:
    """[b, s, h*d] -> [b, s, h, d] -> transposed per ``perm`` (keys use (0, 2, 3, 1))."""
    shape = b.ints(f"{name}.shape", [batch, seq, heads, -1])
    r = b.op("Reshape", [x, shape], name=f"{name}.reshape")
    return b.op("Transpose", [r], name=f"{name}.transpose", perm=list(perm))


def _merge_heads(b: _Builder, x: str, batch: int, seq: int, hidden: int, name: str) -> str:
    t = b.op("Transpose", [x], name=f"{name}.transpose", perm=[0, 2, 1, 3])
    return b.op("Reshape", [t, b.ints(f"{name}.shape", [batch, seq, hidden])], name=f"{name}.reshape")


def _check_dims(hidden: int, heads: int, layers: int, seq: int) -> None:
    if hidden % heads or min(hidden, heads, layers, seq) < 1:
        raise ValueError(f"need hidden divisible by heads and positive sizes "
                         f"(hidden={hidden}, heads={heads}, layers={layers}, seq={seq})")


def bert_block(layers: int = 2, hidden: int = 768, seq: int = 128, heads: int = 12,
               batch: int = 1) -> Graph:
    """A BERT-style encoder (post-LN), ``layers`` layers, as the ONNX exporter emits it.

    Per layer: Q/K/V projections (MatMul + bias) sharing the input, head reshape/transpose,
    scores = Q K^T / sqrt(d) + additive attention mask, Softmax, context, output projection,
    residual Add, LayerNormalization; MLP 4x hidden with the exact (Erf) GELU
    ``x * 0.5 * (1 + erf(x / sqrt(2)))``, residual Add, LayerNormalization.

    >>> g = bert_block(layers=2, hidden=32, seq=8, heads=2)
    >>> g.inputs, g.tensors["l1.out_ln"].shape, sum(n.op == "Erf" for n in g.nodes)
    (['x', 'attention_mask'], [1, 8, 32], 2)
    """
    _check_dims(hidden, heads, layers, seq)
    b = _Builder(f"bert_l{layers}_h{hidden}_s{seq}")
    dh = hidden // heads
    x = b.input("x", [batch, seq, hidden])
    mask = b.input("attention_mask", [batch, 1, 1, seq])  # 0 / -10000 additive mask
    scale = b.scalar("sqrt_head_dim", math.sqrt(dh))
    inv_sqrt2, one, half = b.scalar("sqrt2", math.sqrt(2.0)), b.scalar("one", 1.0), b.scalar("half", 0.5)
    for i in range(layers):
        p = f"l{i}"
        q = _split_heads(b, _linear(b, x, hidden, hidden, f"{p}.q"), batch, seq, heads, f"{p}.q_heads")
        k = _split_heads(b, _linear(b, x, hidden, hidden, f"{p}.k"), batch, seq, heads, f"{p}.k_heads",
                         perm=(0, 2, 3, 1))
        v = _split_heads(b, _linear(b, x, hidden, hidden, f"{p}.v"), batch, seq, heads, f"{p}.v_heads")
        s = b.op("MatMul", [q, k], name=f"{p}.scores")
        s = b.op("Div", [s, scale], name=f"{p}.scale")
        s = b.op("Add", [s, mask], name=f"{p}.mask")
        probs = b.op("Softmax", [s], name=f"{p}.softmax", axis=-1)
        ctx = _merge_heads(b, b.op("MatMul", [probs, v], name=f"{p}.context"), batch, seq, hidden, f"{p}.ctx")
        a = _linear(b, ctx, hidden, hidden, f"{p}.attn_out")
        x = _layernorm(b, b.op("Add", [a, x], name=f"{p}.attn_residual"), hidden, f"{p}.attn_ln")
        h = _linear(b, x, hidden, 4 * hidden, f"{p}.fc1")
        g = b.op("Erf", [b.op("Div", [h, inv_sqrt2], name=f"{p}.gelu.div")], name=f"{p}.gelu.erf")
        g = b.op("Mul", [b.op("Mul", [h, b.op("Add", [g, one], name=f"{p}.gelu.add")], name=f"{p}.gelu.mul"),
                         half], name=f"{p}.gelu.half")
        o = _linear(b, g, 4 * hidden, hidden, f"{p}.fc2")
        x = _layernorm(b, b.op("Add", [o, x], name=f"{p}.out_residual"), hidden, f"{p}.out_ln")
    return b.build([x])


def gpt2_block(layers: int = 2, hidden: int = 768, seq: int = 128, heads: int = 12,
               batch: int = 1) -> Graph:
    """A GPT-2-style decoder (pre-LN), ``layers`` layers + the final LayerNorm.

    Per layer: LayerNormalization, one fused QKV projection (``c_attn``) + Split, head
    reshape/transpose, scores = Q K^T * 1/sqrt(d), causal mask via ``Where(mask, scores,
    -10000)`` (the mask is a constant lower-triangular bool tensor), Softmax, context, output
    projection, residual Add; LayerNormalization, MLP 4x hidden with the tanh GELU
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (with Pow), residual Add.

    >>> g = gpt2_block(layers=1, hidden=32, seq=8, heads=2)
    >>> [n.op for n in g.nodes if n.name.startswith("l0.gelu")][:3], g.tensors["causal_mask"].dtype
    (['Pow', 'Mul', 'Add'], 'bool')
    """
    _check_dims(hidden, heads, layers, seq)
    b = _Builder(f"gpt2_l{layers}_h{hidden}_s{seq}")
    dh = hidden // heads
    x = b.input("x", [batch, seq, hidden])
    causal = b.const("causal_mask", [1, 1, seq, seq], dtype="bool",
                     value=[[[[j <= i for j in range(seq)] for i in range(seq)]]])
    neg = b.scalar("mask_value", -10000.0)
    inv_scale = b.scalar("inv_sqrt_head_dim", 1.0 / math.sqrt(dh))
    three, c0, c1 = b.scalar("three", 3.0), b.scalar("gelu_c0", 0.044715), \
        b.scalar("gelu_c1", math.sqrt(2.0 / math.pi))
    one, half = b.scalar("one", 1.0), b.scalar("half", 0.5)
    split = b.ints("qkv_split", [hidden, hidden, hidden])
    for i in range(layers):
        p = f"l{i}"
        ln = _layernorm(b, x, hidden, f"{p}.ln_1")
        qkv = _linear(b, ln, hidden, 3 * hidden, f"{p}.c_attn")
        q, k, v = b.op("Split", [qkv, split], name=f"{p}.qkv_split", n_out=3, axis=-1)
        q = _split_heads(b, q, batch, seq, heads, f"{p}.q_heads")
        k = _split_heads(b, k, batch, seq, heads, f"{p}.k_heads", perm=(0, 2, 3, 1))
        v = _split_heads(b, v, batch, seq, heads, f"{p}.v_heads")
        s = b.op("Mul", [b.op("MatMul", [q, k], name=f"{p}.scores"), inv_scale], name=f"{p}.scale")
        s = b.op("Where", [causal, s, neg], name=f"{p}.causal")
        probs = b.op("Softmax", [s], name=f"{p}.softmax", axis=-1)
        ctx = _merge_heads(b, b.op("MatMul", [probs, v], name=f"{p}.context"), batch, seq, hidden, f"{p}.ctx")
        x = b.op("Add", [x, _linear(b, ctx, hidden, hidden, f"{p}.c_proj")], name=f"{p}.attn_residual")
        h = _linear(b, _layernorm(b, x, hidden, f"{p}.ln_2"), hidden, 4 * hidden, f"{p}.c_fc")
        cube = b.op("Pow", [h, three], name=f"{p}.gelu.pow")
        inner = b.op("Add", [h, b.op("Mul", [cube, c0], name=f"{p}.gelu.mul_c0")], name=f"{p}.gelu.add")
        t = b.op("Tanh", [b.op("Mul", [inner, c1], name=f"{p}.gelu.mul_c1")], name=f"{p}.gelu.tanh")
        g = b.op("Mul", [b.op("Mul", [h, half], name=f"{p}.gelu.half"),
                         b.op("Add", [t, one], name=f"{p}.gelu.add_one")], name=f"{p}.gelu.mul")
        x = b.op("Add", [x, _linear(b, g, 4 * hidden, hidden, f"{p}.mlp_proj")], name=f"{p}.mlp_residual")
    return b.build([_layernorm(b, x, hidden, "ln_f")])


# ---------------------------------------------------------------- synthetic DAGs

_UNARY = ("Relu", "Tanh", "Sigmoid", "Neg", "Abs", "Erf")
_BINARY = ("Add", "Mul", "Sub", "Max")
_REDUCE = ("ReduceMean", "ReduceMax", "ReduceMin")  # bounded by their input: no growth along chains
# (kind, weight): the op mix of one synthetic node; roughly what a transformer/CNN graph exported
# to ONNX contains once its convolutions are counted as MatMuls.
_MIX = (("unary", 26), ("binary", 7), ("bias", 14), ("reduce", 8), ("softmax", 4), ("layernorm", 4),
        ("matmul", 12), ("bmm", 3), ("transpose", 7), ("concat", 5), ("gather", 2))
P_FRESH = 0.93
#: Largest typical activation magnitude synthetic_graph lets a product create (see there).
MAX_MAGNITUDE = 100.0


def synthetic_graph(n_ops: int, seed: int = 0, dim: int = 64, max_width: int = 3) -> Graph:
    """A layered random DAG of ``n_ops`` mixed ops, deterministic for ``seed``.

    Layers of 1..``max_width`` ops; each op reads recent tensors (the last three layers), preferring
    ones nobody reads yet, so chains, siblings sharing an input, joins and long skip edges all
    occur. The mix: elementwise, broadcast (binary and bias), reductions to a row vector followed
    by a broadcasting row op (x - mean(x) style), Softmax, LayerNormalization, MatMul by weights
    and between activations, Transpose, Concat + Slice, Gather. Activations are ``[dim, dim]``
    so every combination is shape-valid; tensors nobody reads become graph outputs.

    >>> g = synthetic_graph(100, seed=1)
    >>> len(g.nodes), len({n.op for n in g.nodes}) > 10, g == synthetic_graph(100, seed=1)
    (100, True, True)
    """
    if n_ops < 1:
        raise ValueError("n_ops must be positive")
    rng = random.Random(seed)
    b = _Builder(f"synthetic_{n_ops}_s{seed}")
    d = dim
    square: list[tuple[str, int]] = [(b.input("x", [d, d]), 0)]   # (tensor, layer)
    rows: list[tuple[str, str]] = []   # ([d, 1] reduction, its input) waiting for their row op
    wide: list[str] = []          # [d, 2d] concats waiting for their slice
    read: set[str] = set()
    kinds, weights = zip(*_MIX)
    shared = {"bias": b.const("bias", [d]), "w": b.const("w", [d, d]),
              "idx": b.ints("gather_idx", [rng.randrange(d) for _ in range(d)])}
    made, layer = 0, 0
    # Typical magnitude (std) of each activation for seeded N(0, 1) data: a product of two large
    # values (Mul, activation @ activation) is replaced by its additive twin (Add / Sub)
    # when it would exceed MAX_MAGNITUDE, so long random chains stay finite in float32 and
    # ``run --check`` compares numbers, not infinities. No rng draw depends on it.
    mag: dict[str, float] = {square[0][0]: 1.0}

    def m(t: str) -> float:
        return mag.get(t, 1.0)

    def pick(recent: list[tuple[str, int]]) -> str:
        # Mostly a tensor nobody reads yet, the oldest first (branches close again, as in real
        # nets: about one tensor in ten has several readers); sometimes any recent tensor.
        fresh = [(t, lv) for t, lv in recent if t not in read]
        if fresh and fresh[0][1] <= layer - 2:      # about to leave the window unread: read it now
            t = fresh[0][0]
        elif fresh and rng.random() < P_FRESH:
            t = fresh[0][0] if rng.random() < 0.5 else rng.choice(fresh)[0]
        else:
            t = rng.choice(recent)[0]
        read.add(t)
        return t

    while made < n_ops:
        layer += 1
        start = len(square)          # square is in layer order: walk back over the last 3 layers
        while start > 0 and square[start - 1][1] >= layer - 3:
            start -= 1
        recent = square[start:] or square[-1:]
        new: list[tuple[str, int]] = []
        width = 1 if rng.random() < 0.6 else rng.randint(2, max_width)
        for _ in range(min(width, n_ops - made)):
            made += 1
            if rows:            # a pending reduction is consumed right away (x - mean(x), x / max(x))
                r, x = rows.pop()
                read.add(r)
                # x - mean(x), x * max(x): never a division by a row statistic, which is ~0
                # after a LayerNormalization or a Tanh (the check would see inf, not a bug)
                op = rng.choice(("Sub", "Sub", "Mul"))
                op = "Sub" if op == "Mul" and m(x) * m(r) > MAX_MAGNITUDE else op
                out = b.op(op, [x, r])
                mag[out] = m(x) * m(r) if op == "Mul" else m(x) + m(r)
            elif wide:
                w = wide.pop()
                read.add(w)
                k = rng.choice((0, d))
                out = b.op("Slice", [w, b.ints(f"s{made}.starts", [k]), b.ints(f"s{made}.ends", [k + d]),
                                     b.ints(f"s{made}.axes", [1])])
                mag[out] = m(w)
            else:
                kind = rng.choices(kinds, weights)[0]
                x = pick(recent)
                if kind == "unary":
                    op = rng.choice(_UNARY)
                    out = b.op(op, [x])
                    mag[out] = 1.0 if op in ("Tanh", "Sigmoid", "Erf") else m(x)
                elif kind == "binary":
                    op, y = rng.choice(_BINARY), pick(recent)
                    op = "Add" if op == "Mul" and m(x) * m(y) > MAX_MAGNITUDE else op
                    out = b.op(op, [x, y])
                    mag[out] = m(x) * m(y) if op == "Mul" else m(x) + m(y)
                elif kind == "bias":
                    out = b.op("Add", [x, shared["bias"]])
                    mag[out] = m(x) + 0.1
                elif kind == "reduce":
                    rows.append((b.op(rng.choice(_REDUCE), [x], axes=[1], keepdims=1), x))
                    mag[rows[-1][0]] = m(x)
                    continue
                elif kind == "softmax":
                    out = b.op("Softmax", [x], axis=-1)
                    mag[out] = 1.0
                elif kind == "layernorm":
                    out = b.op("LayerNormalization", [x, b.const(f"ln{made}.scale", [d], fill=1.0)], axis=-1)
                    mag[out] = 1.0
                elif kind == "matmul":
                    w = shared["w"] if rng.random() < 0.3 else b.const(f"w{made}", [d, d])
                    out = b.op("MatMul", [x, w])
                    mag[out] = m(x)
                elif kind == "bmm":
                    y = pick(recent)
                    big = m(x) * m(y) * math.sqrt(d) > MAX_MAGNITUDE
                    out = b.op("Add" if big else "MatMul", [x, y])
                    mag[out] = m(x) + m(y) if big else m(x) * m(y) * math.sqrt(d)
                elif kind == "transpose":
                    out = b.op("Transpose", [x], perm=[1, 0])
                    mag[out] = m(x)
                elif kind == "concat":
                    wide.append(b.op("Concat", [x, pick(recent)], axis=1))
                    mag[wide[-1]] = max(m(x), m(b.nodes[-1]["inputs"][1]))
                    continue
                else:
                    out = b.op("Gather", [x, shared["idx"]], axis=0)
                    mag[out] = m(x)
            new.append((out, layer))
        square.extend(new)
    produced = [n["outputs"][0] for n in b.nodes]
    return b.build([t for t in produced if t not in read])


# ---------------------------------------------------------------- memory-bound motifs

def residual_layernorm_gelu(rows: int = 4096, cols: int = 768) -> Graph:
    """``gelu(layernorm(x + residual))`` with the exact Erf GELU (BERT's output sub-block).

    >>> [n.op for n in residual_layernorm_gelu(4, 8).nodes]
    ['Add', 'LayerNormalization', 'Mul', 'Erf', 'Add', 'Mul', 'Mul']
    """
    b = _Builder(f"residual_layernorm_gelu_{rows}x{cols}")
    x, r = b.input("x", [rows, cols]), b.input("residual", [rows, cols])
    n = _layernorm(b, b.op("Add", [x, r], name="residual_add"), cols, "layernorm")
    e = b.op("Erf", [b.op("Mul", [n, b.scalar("inv_sqrt2", 1 / math.sqrt(2.0))], name="gelu_scale")],
             name="gelu_erf")
    g = b.op("Mul", [n, b.op("Add", [e, b.scalar("one", 1.0)], name="gelu_add")], name="gelu_mul")
    return b.build([b.op("Mul", [g, b.scalar("half", 0.5)], name="y")])


def softmax_rows(rows: int = 4096, cols: int = 1024) -> Graph:
    """Softmax over each row, decomposed as exporters and Inductor see it:
    ``e = exp(x - max(x)); y = e / sum(e)``.

    >>> [n.op for n in softmax_rows(4, 8).nodes]
    ['ReduceMax', 'Sub', 'Exp', 'ReduceSum', 'Div']
    """
    b = _Builder(f"softmax_rows_{rows}x{cols}")
    x = b.input("x", [rows, cols])
    m = b.op("ReduceMax", [x], name="row_max", axes=[1], keepdims=1)
    e = b.op("Exp", [b.op("Sub", [x, m], name="shift")], name="exp")
    s = b.op("ReduceSum", [e], name="row_sum", axes=[1], keepdims=1)
    return b.build([b.op("Div", [e, s], name="y")])


def elementwise_chain(rows: int = 4096, cols: int = 1024, length: int = 6) -> Graph:
    """A chain of ``length`` cheap elementwise/scalar ops (scale, shift, relu, ...): pure bandwidth.

    >>> [n.op for n in elementwise_chain(4, 8).nodes]
    ['Mul', 'Add', 'Relu', 'Mul', 'Sub', 'Abs']
    """
    b = _Builder(f"elementwise_chain{length}_{rows}x{cols}")
    t = b.input("x", [rows, cols])
    cycle = [("Mul", 1.5), ("Add", 0.25), ("Relu", None), ("Mul", 0.75), ("Sub", 0.5), ("Abs", None)]
    for i in range(length):
        op, c = cycle[i % len(cycle)]
        ins = [t] if c is None else [t, b.scalar(f"c{i}", c)]
        t = b.op(op, ins, name=f"op{i}" if i < length - 1 else "y")
    return b.build([t])


def branches(rows: int = 4096, cols: int = 1024) -> Graph:
    """Two branches reading the same input, each with its own output (horizontal fusion):
    ``y1 = relu(x * a + b)`` and ``y2 = abs(x - c)``.

    >>> g = branches(4, 8); g.index.consumers["x"], g.outputs
    (['b1_scale', 'b2_sub'], ['y1', 'y2'])
    """
    b = _Builder(f"branches_{rows}x{cols}")
    x = b.input("x", [rows, cols])
    h = b.op("Add", [b.op("Mul", [x, b.scalar("a", 1.5)], name="b1_scale"), b.scalar("b", 0.25)], name="b1_shift")
    y1 = b.op("Relu", [h], name="y1")
    y2 = b.op("Abs", [b.op("Sub", [x, b.scalar("c", 0.5)], name="b2_sub")], name="y2")
    return b.build([y1, y2])


def center(rows: int = 4096, cols: int = 1024) -> Graph:
    """``x - mean(x)`` over each row.

    >>> [n.op for n in center(4, 8).nodes]
    ['ReduceMean', 'Sub']
    """
    b = _Builder(f"center_{rows}x{cols}")
    x = b.input("x", [rows, cols])
    return b.build([b.op("Sub", [x, b.op("ReduceMean", [x], name="row_mean", axes=[1], keepdims=1)], name="y")])


def matmul_bias_relu(rows: int = 4096, cols: int = 1024, k: Optional[int] = None) -> Graph:
    """``relu(x @ W + bias)``: an anchor with its epilogue; ``x`` is ``[rows, k]``, ``W`` ``[k, cols]``.

    >>> matmul_bias_relu(4, 8, k=16).tensors["y"].shape
    [4, 8]
    """
    k = k or cols
    b = _Builder(f"matmul_bias_relu_{rows}x{k}x{cols}")
    x = b.input("x", [rows, k])
    h = b.op("MatMul", [x, b.const("w", [k, cols])], name="matmul")
    h = b.op("Add", [h, b.const("bias", [cols])], name="add_bias")
    return b.build([b.op("Relu", [h], name="y")])


def l1_overflow(rows: int = 4096, hardware: Union[str, Hardware] = "detect") -> Graph:
    """Two row-wise normalisations in a row whose rows each take ~60% of ``hardware``'s L1:
    ``y = softmax(layernorm(x) * 2)``. Fusing everything needs both rows resident at once,
    which overflows L1 (illegal in the capacity model); a fused pair is fine.

    >>> from solverfuse.cost import group_violation
    >>> hw = load_hardware("intel-xeon-8480")
    >>> g = l1_overflow(4, hw)
    >>> group_violation(g, [n.name for n in g.nodes], hw) is not None
    True
    >>> group_violation(g, ["layernorm", "scale"], hw) is None
    True
    """
    hw = load_hardware(hardware)
    cols = max(16, (hw.l1_bytes * 3 // 5) // 4 // 16 * 16)   # float32 row of ~0.6 L1
    b = _Builder(f"l1_overflow_{rows}x{cols}")
    x = b.input("x", [rows, cols])
    n = _layernorm(b, x, cols, "layernorm")
    s = b.op("Mul", [n, b.scalar("two", 2.0)], name="scale")
    return b.build([b.op("Softmax", [s], name="y", axis=-1)])


#: The runtime-benchmark motifs: name -> builder(rows, cols) (``l1_overflow`` ignores ``cols``
#: and sizes its rows from the detected L1; ``matmul_bias_relu`` uses ``k = cols``).
MOTIFS: dict[str, Callable[..., Graph]] = {
    "residual_layernorm_gelu": residual_layernorm_gelu,
    "softmax_rows": softmax_rows,
    "elementwise_chain": elementwise_chain,
    "branches": branches,
    "center": center,
    "matmul_bias_relu": matmul_bias_relu,
    "l1_overflow": lambda rows, cols=None, hardware="detect": l1_overflow(rows, hardware),
}
