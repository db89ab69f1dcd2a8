"""torch.export / ATen FX graphs -> :class:`~solverfuse.graph.Graph` (node names = FX node names).

:func:`from_exported_program` reads an ``ExportedProgram`` (after a decomposition to ATen), and
:func:`from_module` exports a module first, decomposing with Inductor's own decomposition table so
that the graph is the one Inductor lowers (its kernels' origins then name our nodes).

Each ATen op maps onto a row of the op table (:data:`ATEN_TO_ONNX` for ops with an ONNX
equivalent, the ATen rows at the end of :mod:`solverfuse.ops` for the others). Shapes and dtypes
come from the FX nodes' ``meta["val"]`` and are checked against the op table's shape rules.
Parameters, buffers and lifted constants become constant tensors with their data; FX nodes that
read no tensor (``iota``, ``full``, ``scalar_tensor``, ...) are folded into constants. An ATen
op with no row is planned opaquely (declared category ``data``, alone in its group) and listed in
``graph_unknown_ops`` so no approximation is silent.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph, parse_graph

#: Largest constant (elements) stored inline as ``value``; bigger weights are kept as a scalar
#: ``fill`` when uniform and otherwise stored without data (a run then uses seeded random data).
MAX_INLINE_ELEMENTS = 1 << 16

_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
           torch.float64: "float64", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
           torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool"}


def dtype_name(dtype: "torch.dtype") -> str:
    """Our (ONNX) dtype name of a torch dtype.

    >>> dtype_name(torch.float32), dtype_name(torch.bool)
    ('float32', 'bool')
    """
    if dtype not in _DTYPES:
        raise GraphError(f"unsupported torch dtype {dtype}")
    return _DTYPES[dtype]


_A = torch.ops.aten

#: ATen overloads whose semantics are one ONNX op's, with the tensor arguments in ONNX order.
_UNARY = {_A.relu.default: "Relu", _A.neg.default: "Neg", _A.abs.default: "Abs",
          _A.sqrt.default: "Sqrt", _A.reciprocal.default: "Reciprocal", _A.exp.default: "Exp",
          _A.log.default: "Log", _A.tanh.default: "Tanh", _A.sigmoid.default: "Sigmoid",
          _A.erf.default: "Erf", _A.floor.default: "Floor", _A.ceil.default: "Ceil",
          _A.logical_not.default: "Not", _A.bitwise_not.default: "Not", _A.sin.default: "Sin",
          _A.cos.default: "Cos", _A.sign.default: "Sign", _A.clone.default: "Identity",
          _A.alias.default: "Identity", _A.rsqrt.default: "Rsqrt", _A.silu.default: "Silu",
          _A.gelu.default: "Gelu", _A.lift_fresh_copy.default: "Identity"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
           "maximum": "Max", "minimum": "Min", "eq": "Equal", "lt": "Less", "gt": "Greater",
           "le": "LessOrEqual", "ge": "GreaterOrEqual", "ne": "NotEqual",
           "logical_and": "And", "logical_or": "Or", "bitwise_and": "And", "bitwise_or": "Or",
           "remainder": "Mod", "fmod": "Mod"}
_REDUCE = {"amax": "ReduceMax", "amin": "ReduceMin", "sum": "ReduceSum", "mean": "ReduceMean",
           "prod": "ReduceProd"}
#: Ops kept as-is in our graph because they read no tensor data: folded into constants.
_SOURCE_FREE = {"iota", "arange", "full", "scalar_tensor", "zeros", "ones", "empty", "full_like",
                "zeros_like", "ones_like", "empty_like", "empty_strided", "new_zeros", "new_ones",
                "new_full", "new_empty"}

ATEN_TO_ONNX = {**{str(k): v for k, v in _UNARY.items()}, **_BINARY, **_REDUCE,
                "mm": "MatMul", "bmm": "MatMul", "matmul": "MatMul", "addmm": "Gemm",
                "convolution": "Conv", "view": "Reshape", "reshape": "Reshape", "_unsafe_view": "Reshape",
                "permute": "Transpose", "expand": "Expand", "unsqueeze": "Unsqueeze",
                "squeeze": "Squeeze", "slice": "Slice", "cat": "Concat", "where": "Where",
                "embedding": "Gather", "_softmax": "Softmax", "_log_softmax": "LogSoftmax",
                "max_pool2d_with_indices": "MaxPool", "avg_pool2d": "AveragePool",
                "convert_element_type": "Cast", "_to_copy": "Cast", "select": "Select",
                "var_mean": "VarMean", "_scaled_dot_product_flash_attention_for_cpu":
                    "ScaledDotProductAttention", "gather": "GatherElements",
                "clamp": "Clip", "constant_pad_nd": "ConstantPad"}


class _Builder:
    def __init__(self, name: str):
        self.name = name
        self.tensors: dict[str, dict] = {}
        self.nodes: list[dict] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.unknown: dict[str, int] = {}

    def constant(self, name: str, arr: np.ndarray, dtype: str) -> str:
        t: dict[str, Any] = {"shape": list(arr.shape), "dtype": dtype, "constant": True}
        if arr.size <= MAX_INLINE_ELEMENTS:
            t["value"] = arr.tolist()
        elif arr.size and np.all(arr.reshape(-1) == arr.reshape(-1)[0]):
            t["fill"] = float(arr.reshape(-1)[0])
        self.tensors[name] = t
        return name

    def ints(self, name: str, values) -> str:
        return self.constant(name, np.asarray(list(values), dtype=np.int64), "int64")

    def scalar(self, name: str, value, dtype: str) -> str:
        arr = np.asarray(value, dtype=np.float32 if dtype == "bfloat16" else
                         np.dtype("bool" if dtype == "bool" else dtype))
        return self.constant(name, arr, dtype)


def _tensor_meta(n) -> list:
    val = n.meta.get("val")
    return list(val) if isinstance(val, (tuple, list)) else [val]


def _shape(val) -> list[int]:
    try:
        return [int(d) for d in val.shape]
    except TypeError:
        raise GraphError(f"FX tensor of shape {tuple(val.shape)} has a symbolic size; "
                         f"export with static shapes") from None


def _is_tensor_node(a) -> bool:
    return isinstance(a, torch.fx.Node)


def _to_numpy(t: "torch.Tensor") -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.contiguous().numpy()


def _op_base(target) -> str:
    name = getattr(target, "__name__", str(target))          # e.g. "add.Tensor"
    return name.split(".")[0]


def from_graph_module(gm: "torch.fx.GraphModule", constants: dict[str, "torch.Tensor"],
                      name: str = "graph") -> Graph:
    """A Graph from an ATen-level FX graph whose placeholders named in ``constants`` are weights.

    Every other placeholder is a graph input; the output node's tensors are the graph outputs.
    """
    b = _Builder(name)
    tensor_of: dict[str, list[Optional[str]]] = {}   # FX node name -> its output tensor names
    getitems: dict[str, dict[int, str]] = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is operator.getitem and _is_tensor_node(n.args[0]):
            getitems.setdefault(n.args[0].name, {})[n.args[1]] = n.name
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            val = n.meta.get("val")
            if n.name in constants:
                b.constant(n.name, _to_numpy(constants[n.name]), dtype_name(constants[n.name].dtype))
            elif isinstance(val, torch.Tensor):
                b.tensors[n.name] = {"shape": _shape(val), "dtype": dtype_name(val.dtype)}
                b.inputs.append(n.name)
            tensor_of[n.name] = [n.name]
        elif n.op == "call_function":
            if n.target is operator.getitem:
                continue
            if n.meta.get("val") is None and not n.users:
                continue  # a runtime assertion (aten._assert_tensor_metadata, ...): no data, no work
            _convert(b, n, tensor_of, getitems.get(n.name, {}))
        elif n.op == "output":
            outs = n.args[0] if isinstance(n.args[0], (tuple, list)) else [n.args[0]]
            for o in outs:
                if _is_tensor_node(o):
                    t = _resolve(o, tensor_of)
                    if t and t not in b.outputs and not b.tensors.get(t, {}).get("constant"):
                        b.outputs.append(t)
        elif n.op in ("get_attr", "call_module", "call_method"):
            raise GraphError(f"FX node {n.name!r}: {n.op} is not supported (export and decompose to ATen first)")
    doc = {"format": "solverfuse-graph/1", "name": name, "tensors": b.tensors, "inputs": b.inputs,
           "outputs": b.outputs, "nodes": b.nodes}
    g = parse_graph(doc)
    g.__dict__["unknown_ops"] = dict(b.unknown)
    return g


def graph_unknown_ops(graph: Graph) -> dict[str, int]:
    """ATen ops of an imported graph that the op table does not know (planned opaquely), by count."""
    return dict(graph.__dict__.get("unknown_ops", {}))


def _resolve(a, tensor_of) -> Optional[str]:
    if a.target is operator.getitem if a.op == "call_function" else False:
        parent = tensor_of.get(a.args[0].name)
        return parent[a.args[1]] if parent else None
    outs = tensor_of.get(a.name)
    return outs[0] if outs else None


def _fold(b: _Builder, n, tensor_of) -> None:
    """Evaluate an FX node that reads no tensor data and store its result as a constant."""
    val = n.meta.get("val")
    base = _op_base(n.target)
    if base in ("full_like", "zeros_like", "ones_like", "empty_like") or base.startswith("new_"):
        fill = {"zeros_like": 0.0, "ones_like": 1.0, "empty_like": 0.0, "new_zeros": 0.0,
                "new_ones": 1.0, "new_empty": 0.0}.get(base)
        if fill is None:
            fill = n.args[1] if base == "full_like" else n.args[2]
        arr = np.full(_shape(val), fill, dtype=np.float32 if val.dtype == torch.bfloat16 else
                      _to_numpy(torch.empty(0, dtype=val.dtype)).dtype)
    else:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        kwargs = dict(n.kwargs)
        if "device" in kwargs:
            kwargs["device"] = torch.device("cpu")
        with unset_fake_temporarily():  # inside torch.compile a fake mode is active
            arr = _to_numpy(n.target(*n.args, **kwargs))
    b.constant(n.name, arr, dtype_name(val.dtype))
    tensor_of[n.name] = [n.name]


def _convert(b: _Builder, n, tensor_of, gets: dict[int, str]) -> None:
    metas = _tensor_meta(n)
    base = _op_base(n.target)
    overload = str(n.target)
    tensor_args = [a for a in list(n.args) + list(n.kwargs.values()) if _is_tensor_node(a)
                   or (isinstance(a, (list, tuple)) and any(_is_tensor_node(x) for x in a))]
    if base in _SOURCE_FREE and not any(_is_tensor_node(a) for a in n.args if base != "full_like"):
        return _fold(b, n, tensor_of)
    if base in ("full_like", "zeros_like", "ones_like", "empty_like") or base.startswith("new_"):
        return _fold(b, n, tensor_of)
    if not tensor_args:
        return _fold(b, n, tensor_of)
    # Output tensor names: the node's own name, or its getitem children's for tuple outputs.
    outs: list[str] = []
    for i, m in enumerate(metas):
        if len(metas) == 1:
            outs.append(n.name)
        else:
            outs.append(gets.get(i, f"{n.name}.out{i}"))
        if isinstance(m, torch.Tensor):
            b.tensors[outs[-1]] = {"shape": _shape(m), "dtype": dtype_name(m.dtype)}
    tensor_of[n.name] = outs

    def t(a) -> str:
        return _resolve(a, tensor_of)

    x = n.args[0] if n.args else None
    op, ins, attrs = None, [], {}
    out_meta = metas[0]
    out_dtype = dtype_name(out_meta.dtype) if isinstance(out_meta, torch.Tensor) else "float32"
    if n.target in _UNARY:
        op, ins = _UNARY[n.target], [t(x)]
        if op == "Gelu":
            attrs["approximate"] = n.kwargs.get("approximate", "none")
    elif base in _BINARY and len(n.args) >= 2:
        op = _BINARY[base]
        ins = []
        for k, a in enumerate(n.args[:2]):
            if _is_tensor_node(a):
                ins.append(t(a))
            else:
                other = n.args[1 - k]
                dt = dtype_name(other.meta["val"].dtype) if _is_tensor_node(other) else out_dtype
                if op in ("Pow",) and k == 1:
                    dt = out_dtype
                ins.append(b.scalar(f"{n.name}.c{k}", a, dt))
        alpha = n.kwargs.get("alpha", 1)
        if alpha != 1:
            raise GraphError(f"FX node {n.name!r}: {overload} with alpha={alpha} is not supported")
        if op == "Div" and n.kwargs.get("rounding_mode"):
            raise GraphError(f"FX node {n.name!r}: div rounding_mode is not supported")
    elif base in _REDUCE:
        dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        op, attrs = _REDUCE[base], {"keepdims": int(bool(keep))}
        ins = [t(x)]
        if dims is not None and list(dims) != []:
            ins.append(b.ints(f"{n.name}.axes", dims))
    elif base in ("mm", "bmm"):
        op, ins = "MatMul", [t(n.args[0]), t(n.args[1])]
    elif base == "addmm":
        op, ins = "Gemm", [t(n.args[1]), t(n.args[2]), t(n.args[0])]
        attrs = {"alpha": float(n.kwargs.get("alpha", 1)), "beta": float(n.kwargs.get("beta", 1))}
    elif base == "convolution":
        w, bias, stride, pad, dil, transposed, _, groups = n.args[1:9]
        if transposed:
            return _opaque(b, n, outs, tensor_of, "compute")
        op = "Conv"
        ins = [t(x), t(w)] + ([t(bias)] if bias is not None else [])
        attrs = {"strides": list(stride), "pads": list(pad) * 2, "dilations": list(dil), "group": groups}
    elif base in ("view", "reshape", "_unsafe_view"):
        op, ins = "Reshape", [t(x), b.ints(f"{n.name}.shape", _shape(out_meta))]
    elif base == "permute":
        op, ins, attrs = "Transpose", [t(x)], {"perm": list(n.args[1])}
    elif base == "expand":
        op, ins = "Expand", [t(x), b.ints(f"{n.name}.shape", _shape(out_meta))]
    elif base == "unsqueeze":
        op, ins = "Unsqueeze", [t(x), b.ints(f"{n.name}.axes", [n.args[1]])]
    elif base == "squeeze":
        dims = n.args[1] if len(n.args) > 1 else None
        dims = [dims] if isinstance(dims, int) else dims
        rank = len(x.meta["val"].shape)
        if dims is not None:
            dims = [d for d in dims if x.meta["val"].shape[d % rank] == 1]
        op, ins = "Squeeze", [t(x)] + ([b.ints(f"{n.name}.axes", dims)] if dims else [])
        if dims == []:
            op, ins = "Identity", [t(x)]
    elif base == "slice":
        dim = n.args[1] if len(n.args) > 1 else 0
        start = n.args[2] if len(n.args) > 2 and n.args[2] is not None else 0
        end = n.args[3] if len(n.args) > 3 and n.args[3] is not None else (1 << 62)
        step = n.args[4] if len(n.args) > 4 else 1
        op = "Slice"
        ins = [t(x), b.ints(f"{n.name}.starts", [start]), b.ints(f"{n.name}.ends", [min(end, 1 << 62)]),
               b.ints(f"{n.name}.axes", [dim]), b.ints(f"{n.name}.steps", [step])]
    elif base == "select":
        op, ins, attrs = "Select", [t(x)], {"axis": int(n.args[1]), "index": int(n.args[2])}
    elif base == "cat":
        op, ins = "Concat", [t(a) for a in n.args[0]]
        attrs = {"axis": int(n.args[1]) if len(n.args) > 1 else 0}
    elif base == "where":
        op, ins = "Where", []
        for k, a in enumerate(n.args[:3]):
            ins.append(t(a) if _is_tensor_node(a) else b.scalar(f"{n.name}.c{k}", a, out_dtype))
    elif base == "embedding":
        op, ins = "Gather", [t(n.args[0]), t(n.args[1])]
    elif base == "gather":
        op, ins, attrs = "GatherElements", [t(x), t(n.args[2])], {"axis": int(n.args[1])}
    elif base in ("_softmax", "_log_softmax"):
        op, ins, attrs = ("Softmax" if base == "_softmax" else "LogSoftmax"), [t(x)], {"axis": int(n.args[1])}
    elif base in ("convert_element_type", "_to_copy"):
        dt = n.args[1] if len(n.args) > 1 else n.kwargs.get("dtype")
        op, ins = ("Cast", [t(x)]) if dt is not None else ("Identity", [t(x)])
        if dt is not None:
            attrs = {"to": dtype_name(dt)}
    elif base == "var_mean":
        dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        op, ins = "VarMean", [t(x)]
        attrs = {"axes": list(dims) if dims is not None else list(range(len(x.meta["val"].shape))),
                 "correction": float(n.kwargs.get("correction", 1)),
                 "keepdims": int(bool(n.kwargs.get("keepdim", False)))}
    elif base == "_scaled_dot_product_flash_attention_for_cpu":
        q, k, v = n.args[:3]
        op, ins = "ScaledDotProductAttention", [t(q), t(k), t(v)]
        mask = n.kwargs.get("attn_mask")
        if mask is not None:
            ins.append(t(mask))
        attrs = {"causal": int(bool(n.args[4] if len(n.args) > 4 else n.kwargs.get("is_causal", False)))}
        scale = n.kwargs.get("scale")
        if scale is not None:
            attrs["scale"] = float(scale)
    elif base == "split" and isinstance(n.args[1], int):
        dim = int(n.args[2]) if len(n.args) > 2 else 0
        sizes = [int(m.shape[dim]) for m in metas]
        op, ins, attrs = "Split", [t(x), b.ints(f"{n.name}.split", sizes)], {"axis": dim}
    elif base in ("max_pool2d_with_indices", "_low_memory_max_pool_with_offsets"):
        kernel, stride = list(n.args[1]), list(n.args[2]) if len(n.args) > 2 and n.args[2] else list(n.args[1])
        pad = list(n.args[3]) if len(n.args) > 3 else [0, 0]
        dil = list(n.args[4]) if len(n.args) > 4 else [1, 1]
        ceil = bool(n.args[5]) if len(n.args) > 5 else False
        if 1 in gets:
            return _opaque(b, n, outs, tensor_of, "memory")
        op, ins = "MaxPool", [t(x)]
        attrs = {"kernel_shape": kernel, "strides": stride, "pads": pad * 2, "dilations": dil,
                 "ceil_mode": int(ceil)}
        outs = outs[:1]
    elif base == "avg_pool2d":
        kernel = list(n.args[1])
        stride = list(n.args[2]) if len(n.args) > 2 and n.args[2] else kernel
        pad = list(n.args[3]) if len(n.args) > 3 else [0, 0]
        op, ins = "AveragePool", [t(x)]
        attrs = {"kernel_shape": kernel, "strides": stride, "pads": pad * 2,
                 "ceil_mode": int(bool(n.args[4])) if len(n.args) > 4 else 0,
                 "count_include_pad": int(bool(n.args[5])) if len(n.args) > 5 else 1}
    elif base == "clamp":
        lo = n.args[1] if len(n.args) > 1 else None
        hi = n.args[2] if len(n.args) > 2 else None
        op, ins = "Clip", [t(x), b.scalar(f"{n.name}.min", lo, out_dtype) if lo is not None else "",
                           b.scalar(f"{n.name}.max", hi, out_dtype) if hi is not None else ""]
    elif base == "constant_pad_nd":
        op, ins = "ConstantPad", [t(x)]
        attrs = {"pad": list(n.args[1]), "value": float(n.args[2]) if len(n.args) > 2 else 0.0}
    else:
        return _opaque(b, n, outs, tensor_of, "data")
    while ins and ins[-1] == "":
        ins.pop()
    b.nodes.append({"name": n.name, "op": op, "inputs": ins, "outputs": outs, "attributes": attrs})


def _opaque(b: _Builder, n, outs, tensor_of, category: str) -> None:
    """An ATen op without a row: planned alone in its group, its shapes declared."""
    ins = []
    for a in list(n.args) + list(n.kwargs.values()):
        for y in (a if isinstance(a, (list, tuple)) else [a]):
            if _is_tensor_node(y):
                r = _resolve(y, tensor_of)
                if r and r not in ins:
                    ins.append(r)
    op = str(n.target)
    b.unknown[op] = b.unknown.get(op, 0) + 1
    for o in outs:
        if o not in b.tensors:
            b.tensors[o] = {"shape": [0], "dtype": "float32"}
    b.nodes.append({"name": n.name, "op": op, "inputs": ins, "outputs": outs, "category": category})


def exported_constants(ep) -> dict[str, "torch.Tensor"]:
    """Placeholder name -> tensor, for the parameters, buffers and lifted constants of ``ep``."""
    out = {}
    sd, consts = ep.state_dict, ep.constants
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            continue
        target = spec.target
        val = sd.get(target) if target in sd else consts.get(target)
        if val is None:
            raise GraphError(f"exported program: no data for {spec.arg.name!r} ({target})")
        out[spec.arg.name] = val
    return out


def from_exported_program(ep, name: str = "model") -> Graph:
    """A Graph from a ``torch.export.ExportedProgram`` (decomposed to core ATen if it is not yet).

    Node names are the FX node names; weights carry their data from the state dict.

    >>> m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    >>> g = from_exported_program(torch.export.export(m, (torch.randn(2, 4),)))
    >>> [(n.name, n.op) for n in g.nodes]
    [('permute', 'Transpose'), ('addmm', 'Gemm'), ('relu', 'Relu')]
    """
    if any(n.op == "call_function" and _op_base(n.target) in ("linear", "layer_norm", "scaled_dot_product_attention")
           for n in ep.graph.nodes):
        ep = ep.run_decompositions()
    return from_graph_module(ep.graph_module, exported_constants(ep), name)


def inductor_decompositions() -> dict:
    """Inductor's own decomposition table (what torch.compile lowers), for export."""
    import torch._inductor.lowering  # noqa: F401  (some decompositions consult the lowerings)
    from torch._inductor.decomposition import select_decomp_table
    return select_decomp_table()


def export_for_inductor(model, example_inputs: tuple):
    """``torch.export`` ``model`` and decompose with Inductor's table (eval mode, no grad)."""
    model = model.eval()
    with torch.no_grad():
        ep = torch.export.export(model, tuple(example_inputs), strict=False)
        return ep.run_decompositions(inductor_decompositions())


def from_module(model, example_inputs: tuple, name: Optional[str] = None) -> Graph:
    """Export ``model`` on ``example_inputs`` (static shapes) and import it as a Graph.

    The decomposition is Inductor's, so :func:`solverfuse.torch.inductor_plan` reads Inductor's
    kernels over exactly these nodes.

    >>> g = from_module(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()), (torch.randn(2, 4),))
    >>> [n.op for n in g.nodes]
    ['Transpose', 'Gemm', 'Mul', 'Mul', 'Erf', 'Add', 'Mul']
    """
    ep = export_for_inductor(model, example_inputs)
    return from_exported_program(ep, name or type(model).__name__)


def load_exported(path) -> tuple:
    """A saved ExportedProgram (``torch.export.save``, ``.pt2``) -> (program decomposed with
    Inductor's table, example inputs rebuilt from its input shapes: zeros)."""
    from pathlib import Path
    p = Path(path)
    if not p.exists():
        raise GraphError(f"{p}: no such file")
    import zipfile
    if not zipfile.is_zipfile(p):
        raise GraphError(f"{p}: not a saved ExportedProgram (not a zip archive)")
    try:
        ep = torch.export.load(str(p))
    except Exception as e:  # torch raises many types for a bad archive
        raise GraphError(f"{p}: not a saved ExportedProgram ({type(e).__name__}: {str(e)[:120]})") from None
    user = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in
            {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"}]
    inputs = tuple(torch.zeros(_shape(n.meta["val"]), dtype=n.meta["val"].dtype) for n in user)
    with torch.no_grad():
        ep = ep.run_decompositions(inductor_decompositions())
    return ep, inputs
