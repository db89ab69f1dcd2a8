"""The op table: one row per known ONNX operator (opset 18 semantics).

Each :class:`OpInfo` records the facts every other stage uses and nobody re-derives:

* ``category`` -- ``compute`` (Conv, MatMul, Gemm), ``memory`` (elementwise, broadcast,
  reductions, normalisations, layout) or ``data`` (Gather and other index ops);
* ``role`` -- the fusion role, after TVM's op-pattern kinds:
  ``elementwise`` < ``broadcast`` < ``injective`` < ``reduction`` < ``anchor``
  (out-elementwise-fusable: Conv/MatMul/Gemm) < ``window`` (pooling, LRN) < ``gather`` < ``opaque``;
* ``registers`` -- live values the op adds to a fused kernel's schedule (see ``mapping.py``);
* ``l1`` -- what the op keeps resident in L1/shared memory: ``none``, ``row`` (the reduced extent of
  its input), ``gemm`` (operand tiles), ``window`` (a pooling window);
* ``shape`` -- the shape/dtype rule; ``flops`` -- floating-point operations;
* the fusion-rule data (read only by :mod:`solverfuse.rules`, which derives the legality predicate,
  the presolve masks, the assignment constraints and the explanations from it):
  ``materialised_inputs`` (reads every input from global memory: its in-edges are never fused),
  ``exclusive`` (a group holds at most one exclusive op), ``opaque`` (alone in its group) -- these
  three default from the role (:data:`ROLE_RULES`); ``streaming`` (a reduction that reads its row
  once: it needs a resident row only when an op of its group is downstream of it), ``view``
  (metadata only: a group of views alone moves no bytes and launches no kernel) and
  ``gather_data_input`` (input 0, the gathered data, is read from global memory -- its producer
  is never in the op's group -- and only where the indices point: a group reading a tensor only
  there pays the gathered bytes; the indices may be computed in the kernel, as Inductor's
  ``embedding`` kernels do) -- these are per row. A ``gather`` op never shares a group with an
  exclusive op (a compute anchor): gathers fuse with each other and with elementwise and
  reduction work (Inductor's word + position embedding + add + LayerNorm kernel), never into a
  GEMM's or convolution's kernel.

>>> OPS["Relu"].role, OPS["Conv"].category, OPS["Softmax"].l1
('elementwise', 'compute', 'row')
>>> OPS["MatMul"].exclusive, OPS["ReduceSum"].streaming, OPS["Softmax"].streaming, OPS["Reshape"].view
(True, True, False, True)
>>> infer_node("MatMul", {}, [((64, 512), "float32"), ((512, 256), "float32")], [None, None])
[((64, 256), 'float32')]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

Shape = tuple[int, ...]
TypedShape = tuple[Shape, str]

ROLES = ("elementwise", "broadcast", "injective", "reduction", "anchor", "window", "gather", "opaque")
#: Rule data each role implies unless a row says otherwise: (materialised_inputs, exclusive, opaque).
ROLE_RULES = {"elementwise": (False, False, False), "broadcast": (False, False, False),
              "injective": (False, False, False), "reduction": (False, False, False),
              "anchor": (True, True, False), "window": (True, False, False),
              "gather": (False, False, False), "opaque": (True, False, True)}
#: Pure index remaps (views, transposes, broadcasts, slices): compute no value, so they add no live
#: register, and a gather reads its data through them from memory (Inductor composes the indices).
INDEX_REMAP_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose",
                             "Expand", "Slice", "Select"})
MATERIALISED_INPUT_ROLES = frozenset(r for r, (m, _, _) in ROLE_RULES.items() if m)
CATEGORIES = ("compute", "memory", "data")

DTYPE_SIZES = {
    "float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
    "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
}
# ONNX TensorProto names -> our dtype names (the ONNX spelling is accepted on input too).
DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16"}
# ONNX TensorProto.DataType enum values, for Cast's `to` attribute.
ONNX_DTYPE_CODES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                    7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
                    13: "uint64", 16: "bfloat16"}


class ShapeError(ValueError):
    """Raised by a shape rule; the graph loader adds the node name."""


@dataclass(frozen=True)
class OpInfo:
    """One row of the op table."""
    name: str
    category: str
    role: str
    shape: Callable[..., list[TypedShape]]
    flops_per_element: float = 0.0
    registers: int = 1
    l1: str = "none"
    flops: Callable[..., int] | None = None
    materialised_inputs: bool | None = None   # None: from ROLE_RULES
    exclusive: bool | None = None
    opaque: bool | None = None
    streaming: bool = False
    view: bool = False
    gather_data_input: bool = False

    def __post_init__(self):
        for name, value in zip(("materialised_inputs", "exclusive", "opaque"), ROLE_RULES[self.role]):
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)


def numel(shape: Sequence[int]) -> int:
    """Number of elements of ``shape`` (1 for a scalar).

    >>> numel((2, 3, 4)), numel(())
    (24, 1)
    """
    return math.prod(shape)


def broadcast(*shapes: Shape) -> Shape:
    """Multidirectional (numpy-style) broadcast of shapes, as ONNX defines it.

    >>> broadcast((4, 1, 3), (5, 1))
    (4, 5, 3)
    """
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


def _need_value(values, i: int, what: str) -> np.ndarray:
    if i >= len(values) or values[i] is None:
        raise ShapeError(f"{what} must be a constant to infer the output shape")
    return np.asarray(values[i]).astype(np.int64).reshape(-1)


# ---- shape rules: (attrs, inputs: list[(shape, dtype)], values: list[ndarray|None]) -> outputs

def _same(attrs, ins, values):
    return [ins[0]]


def _present(ins):
    return [s for s, _ in ins if s is not None]


def _bcast(attrs, ins, values):
    return [(broadcast(*_present(ins)), ins[0][1])]


def _compare(attrs, ins, values):
    return [(broadcast(*_present(ins)), "bool")]


def _where(attrs, ins, values):
    return [(broadcast(*_present(ins)), ins[1][1])]


def _cast(attrs, ins, values):
    to = attrs.get("to", 1)
    dtype = ONNX_DTYPE_CODES.get(to, to) if isinstance(to, int) else DTYPE_ALIASES.get(to, to)
    if dtype not in DTYPE_SIZES:
        raise ShapeError(f"Cast to unknown dtype {to!r}")
    return [(ins[0][0], dtype)]


def _matmul(attrs, ins, values):
    (a, dt), (b, _) = ins[0], ins[1]
    a2, b2 = (a if len(a) > 1 else (1,) + a), (b if len(b) > 1 else b + (1,))
    if a2[-1] != b2[-2]:
        raise ShapeError(f"MatMul inner dimensions differ: {list(a)} x {list(b)}")
    out = broadcast(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [(out, dt)]


def _matmul_flops(attrs, ins, outs):
    k = ins[0][0][-1]
    return 2 * numel(outs[0][0]) * k


def _gemm(attrs, ins, values):
    (a, dt), (b, _) = ins[0], ins[1]
    if len(a) != 2 or len(b) != 2:
        raise ShapeError(f"Gemm needs 2-D inputs, got {list(a)} and {list(b)}")
    m, ka = (a[1], a[0]) if attrs.get("transA", 0) else a
    kb, n = (b[1], b[0]) if attrs.get("transB", 0) else b
    if ka != kb:
        raise ShapeError(f"Gemm inner dimensions differ: {ka} vs {kb}")
    if len(ins) > 2 and ins[2][0] is not None:
        broadcast(ins[2][0], (m, n))
    return [((m, n), dt)]


def _gemm_flops(attrs, ins, outs):
    a = ins[0][0]
    k = a[0] if attrs.get("transA", 0) else a[1]
    return 2 * numel(outs[0][0]) * k + 2 * numel(outs[0][0])


def _pads(attrs, nsp):
    pads = list(attrs.get("pads", [0] * (2 * nsp)))
    if len(pads) != 2 * nsp:
        raise ShapeError(f"pads has {len(pads)} entries, expected {2 * nsp}")
    return pads


def _spatial(attrs, in_sp, kernel, ceil=False):
    nsp = len(in_sp)
    strides = list(attrs.get("strides", [1] * nsp))
    dil = list(attrs.get("dilations", [1] * nsp))
    auto = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    out = []
    pads = _pads(attrs, nsp) if auto in ("NOTSET", "VALID") else None
    for i in range(nsp):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-in_sp[i] // strides[i]))
            continue
        if auto == "VALID":
            pads = [0] * (2 * nsp)
        ek = (kernel[i] - 1) * dil[i] + 1
        span = in_sp[i] + pads[i] + pads[i + nsp] - ek
        if span < 0:
            raise ShapeError(f"kernel {kernel[i]} larger than padded input {in_sp[i]}")
        o = (-(-span // strides[i]) if ceil else span // strides[i]) + 1
        if ceil and (o - 1) * strides[i] >= in_sp[i] + pads[i]:
            o -= 1
        out.append(o)
    return tuple(out)


def _conv(attrs, ins, values):
    (x, dt), (w, _) = ins[0], ins[1]
    if len(x) < 3 or len(w) != len(x):
        raise ShapeError(f"Conv input {list(x)} and weight {list(w)} ranks do not match")
    group = attrs.get("group", 1)
    if x[1] != w[1] * group:
        raise ShapeError(f"Conv input channels {x[1]} != weight channels {w[1]} x group {group}")
    kernel = tuple(attrs.get("kernel_shape", w[2:]))
    return [((x[0], w[0]) + _spatial(attrs, x[2:], kernel), dt)]


def _conv_flops(attrs, ins, outs):
    w = ins[1][0]
    return 2 * numel(outs[0][0]) * numel(w[1:]) + (numel(outs[0][0]) if len(ins) > 2 else 0)


def _pool(attrs, ins, values):
    x, dt = ins[0]
    kernel = tuple(attrs["kernel_shape"]) if "kernel_shape" in attrs else None
    if kernel is None:
        raise ShapeError("pooling needs kernel_shape")
    if len(kernel) != len(x) - 2:
        raise ShapeError(f"kernel_shape {list(kernel)} does not match input rank {len(x)}")
    return [((x[0], x[1]) + _spatial(attrs, x[2:], kernel, bool(attrs.get("ceil_mode", 0))), dt)]


def _pool_flops(attrs, ins, outs):
    return numel(outs[0][0]) * numel(attrs.get("kernel_shape", [1]))


def _global_pool(attrs, ins, values):
    x, dt = ins[0]
    return [((x[0], x[1]) + (1,) * (len(x) - 2), dt)]


def _reduce_axes(attrs, ins, values, rank):
    axes = attrs.get("axes")
    if axes is None and len(ins) > 1 and ins[1][0] is not None:
        axes = _need_value(values, 1, "axes").tolist()
    if axes is None or len(axes) == 0:
        if attrs.get("noop_with_empty_axes", 0):
            return []
        return list(range(rank))
    return sorted({_axis(a, rank) for a in axes})


def reduce_axes(attrs: dict, ins: list, values: list) -> list[int]:
    """The axes a Reduce* node reduces (attribute or constant second input)."""
    return _reduce_axes(attrs, ins, values, len(ins[0][0]))


def _reduce(attrs, ins, values):
    x, dt = ins[0]
    axes = _reduce_axes(attrs, ins, values, len(x))
    keep = attrs.get("keepdims", 1)
    out = tuple((1 if i in axes else d) for i, d in enumerate(x) if keep or i not in axes)
    return [(out, dt)]


def _softmax(attrs, ins, values):
    _axis(attrs.get("axis", -1), len(ins[0][0]))
    return [ins[0]]


def _layernorm(attrs, ins, values):
    x, dt = ins[0]
    axis = _axis(attrs.get("axis", -1), len(x))
    stat = tuple(d if i < axis else 1 for i, d in enumerate(x))
    if ins[1][0] is not None:
        broadcast(ins[1][0], x)
    return [(x, dt), (stat, "float32"), (stat, "float32")]


def _batchnorm(attrs, ins, values):
    x, dt = ins[0]
    for s, _ in ins[1:5]:
        if s != (x[1],):
            raise ShapeError(f"BatchNormalization parameter shape {list(s)} != [{x[1]}]")
    return [(x, dt)]


def _concat(attrs, ins, values):
    shapes = [s for s, _ in ins]
    rank = len(shapes[0])
    axis = _axis(attrs.get("axis", 0), rank)
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ShapeError(f"Concat inputs {list(shapes[0])} and {list(s)} differ off axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), ins[0][1])]


def _split(attrs, ins, values, n_out=None):
    x, dt = ins[0]
    axis = _axis(attrs.get("axis", 0), len(x))
    if len(ins) > 1 and ins[1][0] is not None:
        sizes = _need_value(values, 1, "split").tolist()
    elif "split" in attrs:
        sizes = list(attrs["split"])
    else:
        n = attrs.get("num_outputs") or attrs.get("_num_outputs", 1)
        chunk = -(-x[axis] // n)
        sizes = [min(chunk, x[axis] - i * chunk) for i in range(n)]
    if sum(sizes) != x[axis]:
        raise ShapeError(f"Split sizes {sizes} do not sum to {x[axis]}")
    return [(x[:axis] + (s,) + x[axis + 1:], dt) for s in sizes]


def transpose_perm(attrs: dict, rank: int) -> list[int]:
    """Transpose's permutation (default: reverse the axes)."""
    return list(attrs.get("perm", list(range(rank))[::-1]))


def _transpose(attrs, ins, values):
    x, dt = ins[0]
    perm = transpose_perm(attrs, len(x))
    if sorted(perm) != list(range(len(x))):
        raise ShapeError(f"perm {perm} is not a permutation of rank {len(x)}")
    return [(tuple(x[p] for p in perm), dt)]


def _reshape(attrs, ins, values):
    x, dt = ins[0]
    target = _need_value(values, 1, "Reshape's shape").tolist()
    out = [x[i] if (d == 0 and not attrs.get("allowzero", 0)) else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise ShapeError("Reshape shape has more than one -1")
    known = numel([d for d in out if d != -1])
    if -1 in out:
        if known == 0 or numel(x) % known:
            raise ShapeError(f"cannot reshape {list(x)} to {target}")
        out[out.index(-1)] = numel(x) // known
    if numel(out) != numel(x):
        raise ShapeError(f"cannot reshape {list(x)} ({numel(x)} elements) to {target}")
    return [(tuple(out), dt)]


def _flatten(attrs, ins, values):
    x, dt = ins[0]
    axis = attrs.get("axis", 1)
    axis = axis + len(x) if axis < 0 else axis
    return [((numel(x[:axis]), numel(x[axis:])), dt)]


def _axes_input(attrs, ins, values):
    if "axes" in attrs:
        return list(attrs["axes"])
    if len(ins) > 1:
        return _need_value(values, 1, "axes").tolist()
    return None


def _squeeze(attrs, ins, values):
    x, dt = ins[0]
    axes = _axes_input(attrs, ins, values)
    axes = [i for i, d in enumerate(x) if d == 1] if axes is None else [_axis(a, len(x)) for a in axes]
    for a in axes:
        if x[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {x[a]}")
    return [(tuple(d for i, d in enumerate(x) if i not in axes), dt)]


def _unsqueeze(attrs, ins, values):
    x, dt = ins[0]
    axes = _axes_input(attrs, ins, values) or []
    rank = len(x) + len(axes)
    axes = sorted(_axis(a, rank) for a in axes)
    out, it = [], iter(x)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return [(tuple(out), dt)]


def _expand(attrs, ins, values):
    x, dt = ins[0]
    return [(broadcast(x, tuple(_need_value(values, 1, "Expand's shape").tolist())), dt)]


def slice_params(attrs: dict, ins: list, values: list) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, clamped as ONNX Slice does."""
    x = ins[0][0]
    if "starts" in attrs:  # opset < 10: starts/ends/axes are attributes, steps are 1
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = _need_value(values, 1, "Slice starts").tolist()
        ends = _need_value(values, 2, "Slice ends").tolist()
        axes = _need_value(values, 3, "Slice axes").tolist() if len(ins) > 3 and ins[3][0] is not None \
            else list(range(len(starts)))
        steps = _need_value(values, 4, "Slice steps").tolist() if len(ins) > 4 and ins[4][0] is not None \
            else [1] * len(starts)
    out = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        a = _axis(a, len(x))
        d = x[a]
        if st == 0:
            raise ShapeError("Slice step 0")
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        out.append((a, s, e, st))
    return out


def _slice(attrs, ins, values):
    x, dt = ins[0]
    out = list(x)
    for a, s, e, st in slice_params(attrs, ins, values):
        out[a] = max(0, -(-(e - s) // st))
    return [(tuple(out), dt)]


def _gather(attrs, ins, values):
    (x, dt), (idx, _) = ins[0], ins[1]
    axis = _axis(attrs.get("axis", 0), len(x))
    return [(x[:axis] + idx + x[axis + 1:], dt)]


def _gather_elements(attrs, ins, values):
    (x, dt), (idx, _) = ins[0], ins[1]
    if len(idx) != len(x):
        raise ShapeError(f"GatherElements indices rank {len(idx)} != data rank {len(x)}")
    _axis(attrs.get("axis", 0), len(x))
    return [(idx, dt)]


def _gather_nd(attrs, ins, values):
    (x, dt), (idx, _) = ins[0], ins[1]
    b = attrs.get("batch_dims", 0)
    if not idx or idx[-1] > len(x) - b:
        raise ShapeError(f"GatherND indices {list(idx)} do not fit data {list(x)}")
    return [(tuple(idx[:-1]) + tuple(x[b + idx[-1]:]), dt)]


def _scatter(attrs, ins, values):
    return [ins[0]]


def _pad(attrs, ins, values):
    x, dt = ins[0]
    if "pads" in attrs:  # opset < 11
        pads = list(attrs["pads"])
    else:
        pads = _need_value(values, 1, "Pad's pads").tolist()
    axes = list(range(len(x)))
    if len(ins) > 3 and ins[3][0] is not None:
        axes = [_axis(a, len(x)) for a in _need_value(values, 3, "Pad's axes").tolist()]
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"Pad pads {pads} do not match {len(axes)} axes")
    out = list(x)
    for i, a in enumerate(axes):
        out[a] += pads[i] + pads[i + len(axes)]
        if out[a] < 0:
            raise ShapeError(f"Pad makes axis {a} negative")
    return [(tuple(out), dt)]


def _range(attrs, ins, values):
    start, limit, delta = (_need_value(values, i, "Range's inputs")[0] for i in range(3))
    if delta == 0:
        raise ShapeError("Range delta 0")
    return [((max(int(math.ceil((limit - start) / delta)), 0),), ins[0][1])]


def _tile(attrs, ins, values):
    x, dt = ins[0]
    reps = _need_value(values, 1, "Tile's repeats").tolist()
    if len(reps) != len(x):
        raise ShapeError(f"Tile repeats {reps} do not match rank {len(x)}")
    return [(tuple(d * r for d, r in zip(x, reps)), dt)]


def _bool_same(attrs, ins, values):
    return [(ins[0][0], "bool")]


def _shape_op(attrs, ins, values):
    return [((len(ins[0][0]),), "int64")]


def _constant_of_shape(attrs, ins, values):
    shape = tuple(_need_value(values, 0, "ConstantOfShape's shape").tolist())
    return [(shape, attrs.get("_dtype", "float32"))]


def _lrn(attrs, ins, values):
    if "size" not in attrs:
        raise ShapeError("LRN needs size")
    return [ins[0]]


def _dropout(attrs, ins, values):
    return [ins[0], (ins[0][0], "bool")]


def _sum(attrs, ins, values):
    return _bcast(attrs, ins, values)


def _elementwise_flops(per):
    return lambda attrs, ins, outs: int(per * numel(outs[0][0]))


_TABLE: list[OpInfo] = []


def _op(name, category, role, shape, fpe=1.0, registers=1, l1="none", flops=None, **rules):
    _TABLE.append(OpInfo(name, category, role, shape, fpe, registers, l1, flops, **rules))


# Elementwise (one input, same shape). registers: temporaries of the scalar code (polynomials).
for _n, _f, _r in [("Relu", 1, 1), ("Neg", 1, 1), ("Abs", 1, 1), ("Sqrt", 4, 1), ("Reciprocal", 1, 1),
                   ("Exp", 8, 2), ("Log", 8, 2), ("Tanh", 10, 3), ("Sigmoid", 10, 2), ("Erf", 12, 3),
                   ("Identity", 0, 1), ("Floor", 1, 1), ("Ceil", 1, 1), ("Not", 1, 1),
                   ("LeakyRelu", 2, 1), ("Elu", 8, 2), ("HardSigmoid", 3, 1), ("Softplus", 10, 2),
                   ("Gelu", 16, 3), ("Clip", 2, 1), ("Sin", 10, 2), ("Cos", 10, 2), ("Sign", 1, 1)]:
    _op(_n, "memory", "elementwise", _same, _f, 0 if _n == "Identity" else _r, view=_n == "Identity")
_op("Cast", "memory", "elementwise", _cast, 0, 1)
_op("Dropout", "memory", "elementwise", _dropout, 0, 1)
# Broadcasting binary / n-ary ops.
for _n, _f, _r in [("Add", 1, 1), ("Sub", 1, 1), ("Mul", 1, 1), ("Div", 1, 1), ("Pow", 10, 2),
                   ("Max", 1, 1), ("Min", 1, 1), ("Sum", 1, 1), ("Mean", 1, 1), ("PRelu", 2, 1),
                   ("And", 1, 1), ("Or", 1, 1), ("Mod", 2, 1)]:
    _op(_n, "memory", "broadcast", _bcast, _f, _r)
for _n in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
    _op(_n, "memory", "broadcast", _compare, 1, 1)
_op("Where", "memory", "broadcast", _where, 1, 1)
_op("BatchNormalization", "memory", "broadcast", _batchnorm, 2, 1)
# Layout / injective ops: pure index maps. A view or a strided remap (transpose, expand, slice)
# computes no value -- its consumer loads at a remapped index -- so it adds no live register.
for _n, _s in [("Transpose", _transpose), ("Reshape", _reshape), ("Flatten", _flatten),
               ("Squeeze", _squeeze), ("Unsqueeze", _unsqueeze), ("Expand", _expand),
               ("Concat", _concat), ("Slice", _slice), ("Split", _split)]:
    _op(_n, "memory", "injective", _s, 0, 1 if _n in ("Concat", "Split") else 0,
        view=_n in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"))
_op("Shape", "memory", "injective", _shape_op, 0, 1)
_op("ConstantOfShape", "memory", "injective", _constant_of_shape, 0, 1)
# Reductions: a row stays resident in L1 while the reduction and its group's later ops run; a
# streaming reduction reads its row once, so it needs the row only if an op of its group is
# downstream of it (Softmax, LogSoftmax, LayerNormalization read their row several times).
for _n in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
           "ReduceSumSquare"):
    _op(_n, "memory", "reduction", _reduce, 1, 1, "row", streaming=True)
_op("Softmax", "memory", "reduction", _softmax, 12, 2, "row")
_op("LogSoftmax", "memory", "reduction", _softmax, 12, 2, "row")
_op("LayerNormalization", "memory", "reduction", _layernorm, 8, 3, "row")
_op("GlobalAveragePool", "memory", "reduction", _global_pool, 1, 1, "row", streaming=True)
_op("GlobalMaxPool", "memory", "reduction", _global_pool, 1, 1, "row", streaming=True)
# Windowed ops: read their input with a halo, so it must be materialised.
_op("MaxPool", "memory", "window", _pool, flops=_pool_flops, registers=2, l1="window")
_op("AveragePool", "memory", "window", _pool, flops=_pool_flops, registers=2, l1="window")
_op("LRN", "memory", "window", _lrn, 8, 3, "window")
# Compute-intensive anchors: fused epilogues only.
_op("Conv", "compute", "anchor", _conv, flops=_conv_flops, l1="gemm")
_op("MatMul", "compute", "anchor", _matmul, flops=_matmul_flops, l1="gemm")
_op("Gemm", "compute", "anchor", _gemm, flops=_gemm_flops, l1="gemm")
# Data-dependent.
_op("Gather", "data", "gather", _gather, 0, 2, gather_data_input=True)
_op("GatherElements", "data", "gather", _gather_elements, 0, 2, gather_data_input=True)
_op("GatherND", "data", "gather", _gather_nd, 0, 2, gather_data_input=True)
# Scatters write data-dependent places: executed alone.
_op("ScatterND", "data", "opaque", _scatter, 0, 2)
_op("ScatterElements", "data", "opaque", _scatter, 0, 2)
# What exporters add around attention, masks and padding.
for _n in ("IsNaN", "IsInf"):
    _op(_n, "memory", "elementwise", _bool_same, 1, 1)
for _n, _f, _r in [("Round", 1, 1), ("HardSwish", 4, 1), ("Softsign", 2, 1), ("Selu", 8, 2),
                   ("Mish", 20, 3)]:
    _op(_n, "memory", "elementwise", _same, _f, _r)
_op("Xor", "memory", "broadcast", _bcast, 1, 1)
_op("Trilu", "memory", "injective", _same, 0, 1)  # an index test on each element
_op("Pad", "memory", "injective", _pad, 0, 1)
_op("Tile", "memory", "injective", _tile, 0, 1)
_op("Range", "memory", "injective", _range, 1, 1)
# A prefix scan keeps a running row: like a reduction it streams its axis, but its output is
# as large as its input, so it is kept alone (opaque) rather than fused as a reduction.
_op("CumSum", "memory", "opaque", _same, 1, 1)


# ---- ATen ops with no single ONNX equivalent (rows used by solverfuse.torch's importer) ----------
# Each is what Inductor computes for one FX node; the names are ours (no ONNX op has them).


def _select(attrs, ins, values):
    x, dt = ins[0]
    axis = _axis(attrs.get("axis", 0), len(x))
    index = attrs.get("index", 0)
    if not -x[axis] <= index < x[axis]:
        raise ShapeError(f"index {index} out of range for axis {axis} of size {x[axis]}")
    return [(x[:axis] + x[axis + 1:], dt)]


def _var_mean(attrs, ins, values):
    x, dt = ins[0]
    axes = sorted({_axis(a, len(x)) for a in attrs.get("axes", range(len(x)))})
    keep = attrs.get("keepdims", 0)
    out = tuple((1 if i in axes else d) for i, d in enumerate(x) if keep or i not in axes)
    return [(out, dt), (out, dt)]


def _sdpa(attrs, ins, values):
    (q, dt), (k, _), (v, _) = ins[0], ins[1], ins[2]
    if len(q) < 2 or q[-1] != k[-1] or k[-2] != v[-2]:
        raise ShapeError(f"attention shapes q {list(q)}, k {list(k)}, v {list(v)} do not fit")
    return [(q[:-1] + v[-1:], dt), (q[:-1], "float32")]


def _sdpa_flops(attrs, ins, outs):
    q, v = ins[0][0], ins[2][0]
    keys = ins[1][0][-2]
    return 2 * numel(q[:-1]) * keys * (q[-1] + v[-1]) + 5 * numel(q[:-1]) * keys


def _gather_elements(attrs, ins, values):
    (x, dt), (idx, _) = ins[0], ins[1]
    if len(idx) != len(x):
        raise ShapeError(f"GatherElements index rank {len(idx)} != data rank {len(x)}")
    _axis(attrs.get("axis", 0), len(x))
    return [(idx, dt)]


def _constant_pad(attrs, ins, values):
    x, dt = ins[0]
    pad = list(attrs.get("pad", []))
    out = list(x)
    for i in range(len(pad) // 2):  # torch order: last dimension first, (before, after) pairs
        out[len(x) - 1 - i] += pad[2 * i] + pad[2 * i + 1]
    if any(d < 0 for d in out):
        raise ShapeError(f"padding {pad} makes a negative size from {list(x)}")
    return [(tuple(out), dt)]


def _aten_op(name, *args, **kwargs):
    if all(o.name != name for o in _TABLE):  # an ONNX row of the same name, if added, wins
        _op(name, *args, **kwargs)


_aten_op("Rsqrt", "memory", "elementwise", _same, 5, 1)            # aten.rsqrt
_aten_op("Silu", "memory", "elementwise", _same, 11, 2)            # aten.silu: x * sigmoid(x)
_aten_op("NotEqual", "memory", "broadcast", _compare, 1, 1)        # aten.ne
_aten_op("Select", "memory", "injective", _select, 0, 0)           # aten.select.int: a strided view
_aten_op("ConstantPad", "memory", "injective", _constant_pad, 0, 1)  # aten.constant_pad_nd
_aten_op("GatherElements", "data", "gather", _gather_elements, 0, 2, gather_data_input=True)  # aten.gather
# aten.var_mean: Welford statistics over `axes` (two outputs); a row reduction like ReduceMean.
_aten_op("VarMean", "memory", "reduction", _var_mean, 3, 2, "row")
# aten._scaled_dot_product_flash_attention_for_cpu: an attention library call (a kernel of its
# own in Inductor, like an extern GEMM), so it is opaque to fusion.
_aten_op("ScaledDotProductAttention", "compute", "opaque", _sdpa, registers=4, l1="gemm",
         flops=_sdpa_flops)

OPS: dict[str, OpInfo] = {o.name: o for o in _TABLE}

#: Role given to an op the table does not know but whose node declares a category.
DECLARED_ROLE = {"compute": "opaque", "memory": "opaque", "data": "opaque"}


def infer_node(op: str, attrs: dict[str, Any], ins: list[TypedShape], values: list) -> list[TypedShape]:
    """Output (shape, dtype) pairs of one node, by the op table's shape rule.

    Raises :class:`ShapeError` when the inputs do not fit the op.

    >>> infer_node("Add", {}, [((4, 1), "float32"), ((3,), "float32")], [None, None])
    [((4, 3), 'float32')]
    """
    return OPS[op].shape(attrs, ins, values)


def node_flops(op: str, attrs: dict[str, Any], ins: list[TypedShape], outs: list[TypedShape]) -> int:
    """Floating-point operations of one node (table rule, or per-element cost x output size).

    >>> node_flops("MatMul", {}, [((2, 3), "float32"), ((3, 4), "float32")], [((2, 4), "float32")])
    48
    """
    info = OPS[op]
    if info.flops is not None:
        return int(info.flops(attrs, ins, outs))
    if info.role == "reduction" or info.name == "BatchNormalization":
        return int(info.flops_per_element * numel(ins[0][0]))
    return int(info.flops_per_element * sum(numel(s) for s, _ in outs))
