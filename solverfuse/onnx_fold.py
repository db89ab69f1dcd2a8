"""Constant folding at import: every all-constant ONNX node becomes a constant, up to a cap.

:func:`fold_node` folds one node whose inputs are all known constants (:class:`Const`), as ONNX
Runtime and TVM's FoldConstant do: ``Shape``/``Size`` of a shaped tensor, layout ops on uniform
data by shape alone (no array is built, so a 400 MB ``ConstantOfShape`` weight costs nothing),
common ops in NumPy, any other deterministic op with ONNX's reference evaluator. A node is kept
when an input exceeds :data:`FOLD_INPUT_MAX` elements or a non-uniform result exceeds
:data:`FOLD_MAX` (position buckets, RoPE tables and masks fit; a folded weight matrix would not).

>>> c = from_array(np.arange(6, dtype=np.int64), "int64")
>>> c.shape, c.fill, from_array(np.zeros(3, np.float32), "float32").fill
((6,), None, 0.0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .errors import GraphError
from .dtypes import np_dtype
from .ops import DTYPE_SIZES, ONNX_DTYPE_CODES, OPS, ShapeError, infer_node, numel
from .weights import tensor_array

#: Constants with at most this many elements carry their ``value`` in the graph JSON.
VALUE_MAX_ELEMENTS = 4096
#: Uniform constants are materialised for general (numpy) folding only up to this size.
_MATERIALISE_MAX = 1 << 16
#: Folding cap: an all-constant node is folded when its result has at most this many elements
#: (RoPE tables, position buckets, masks) and no input is larger than FOLD_INPUT_MAX elements.
FOLD_MAX = 1 << 18
FOLD_INPUT_MAX = 1 << 22

# Ops whose output is uniform when their data input (input 0) is: folded without materialising.
_UNIFORM_OPS = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Expand", "Slice",
                "Gather", "Split", "Cast"}
# Never folded: their value is not a function of their inputs.
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
               "Multinomial", "Bernoulli", "If", "Loop", "Scan"}
# Ops folded by evaluating them in numpy when every input is a known constant (any other op
# is folded with ONNX's reference evaluator).
_FOLDABLE = {"ConstantOfShape", "Shape", "Size", "Unsqueeze", "Squeeze", "Reshape", "Flatten",
             "Transpose", "Concat", "Gather", "Cast", "Slice", "Expand", "Split", "Range",
             "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Min", "Max", "Equal", "Less", "Greater",
             "Where", "Not", "ReduceProd", "Sqrt", "Floor", "Ceil"}


@dataclass
class Const:
    """A constant during import: shape/dtype plus a uniform ``fill``, an ``array``, or a lazy
    ``proto`` (a large initializer, read only when folding needs it: planning never does)."""
    shape: tuple
    dtype: str
    fill: Any = None
    array: Optional[np.ndarray] = None
    proto: Any = None
    base_dir: Optional[str] = None

    def materialise(self, limit: int = _MATERIALISE_MAX) -> Optional[np.ndarray]:
        if self.array is not None:
            return self.array
        if self.fill is not None and numel(self.shape) <= limit:
            return np.full(self.shape, self.fill, dtype=np_dtype(self.dtype))
        if self.proto is not None and numel(self.shape) <= max(limit, FOLD_INPUT_MAX):
            self.array = tensor_array(self.proto, self.base_dir or ".")
            return self.array
        return None

    def load(self) -> Optional[np.ndarray]:
        """The full data (for execution), whatever its size."""
        if self.array is not None:
            return self.array
        if self.proto is not None:
            return tensor_array(self.proto, self.base_dir or ".")
        if self.fill is not None:
            return np.full(self.shape, self.fill, dtype=np_dtype(self.dtype))
        return None


def from_array(arr: np.ndarray, dtype: str) -> Const:
    """Wrap an array, recording a fill when every element is equal (checked once)."""
    arr = np.asarray(arr)
    fill = None
    if arr.size and (arr.size == 1 or bool(np.all(arr == arr.flat[0]))):
        fill = arr.flat[0].item()
    return Const(tuple(int(d) for d in arr.shape), dtype, fill, arr)


def onnx_dtype(code: int, where: str) -> str:
    if code not in ONNX_DTYPE_CODES:
        import onnx
        name = onnx.TensorProto.DataType.Name(code) if code in onnx.TensorProto.DataType.values() else code
        raise GraphError(f"{where}: unsupported ONNX element type {name}")
    return ONNX_DTYPE_CODES[code]


def _fold_uniform(op: str, attrs: dict, ins: list, consts: list, n_out: int) -> Optional[list[Const]]:
    """Fold a layout op on large uniform data by shape alone (no array is built)."""
    data = consts[0]
    if op not in _UNIFORM_OPS or data is None or data.fill is None or numel(data.shape) <= VALUE_MAX_ELEMENTS:
        return None
    values = [c.materialise() if c is not None and i > 0 else None for i, c in enumerate(consts)]
    if op == "Split":
        attrs = {**attrs, "_num_outputs": n_out}
    outs = infer_node(op, attrs, ins, values)
    fill = data.fill
    if op == "Cast":
        fill = np.asarray(fill).astype(np_dtype(outs[0][1])).item()
    return [Const(tuple(s), dt, fill) for s, dt in outs]


def _np_eval(op: str, attrs: dict, ins: list, arrays: list, out_shapes: list) -> list[np.ndarray]:
    """Evaluate one foldable op in numpy (ONNX semantics, any opset form the op table accepts).

    ``arrays`` lines up with the inputs (None for an omitted one); ``out_shapes`` comes from the
    op table's shape rule (empty for Shape/Size/Range, whose shapes are data)."""
    a = arrays[0] if arrays else None
    if op == "Shape":
        dims = list(ins[0][0])
        start, end = attrs.get("start", 0), attrs.get("end", len(dims))
        return [np.asarray(dims[slice(start, end)], dtype=np.int64)]
    if op == "Size":
        return [np.asarray(numel(ins[0][0]), dtype=np.int64)]
    if op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand"):
        return [np.broadcast_to(a, out_shapes[0]).copy() if op == "Expand" else a.reshape(out_shapes[0])]
    if op == "Transpose":
        perm = attrs.get("perm", list(range(a.ndim))[::-1])
        return [np.transpose(a, perm)]
    if op == "Concat":
        return [np.concatenate(arrays, axis=attrs.get("axis", 0))]
    if op == "Gather":
        return [np.take(a, arrays[1].astype(np.int64), axis=attrs.get("axis", 0))]
    if op == "Cast":
        return [a.astype(np_dtype(ONNX_DTYPE_CODES[attrs.get("to", 1)]))]
    if op == "Slice":
        from .ops import slice_params
        idx = [slice(None)] * a.ndim
        for axis, s, e, st in slice_params(attrs, ins, arrays):
            idx[axis] = slice(s, e if e >= 0 else None, st)
        return [a[tuple(idx)]]
    if op == "Split":
        sizes = [s[attrs.get("axis", 0) % a.ndim] for s in out_shapes]
        return np.split(a, np.cumsum(sizes)[:-1], axis=attrs.get("axis", 0))
    if op == "Range":
        return [np.arange(a.item(), arrays[1].item(), arrays[2].item(), dtype=a.dtype)]
    if op == "ReduceProd":
        from .ops import reduce_axes
        axes = tuple(reduce_axes(attrs, ins, [a] + list(arrays[1:])))
        return [np.prod(a, axis=axes, keepdims=True).astype(a.dtype).reshape(out_shapes[0])]
    if op == "Div" and a.dtype.kind in "iu":
        b = arrays[1]
        return [(np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)]
    unary = {"Neg": np.negative, "Abs": np.abs, "Not": np.logical_not, "Sqrt": np.sqrt,
             "Floor": np.floor, "Ceil": np.ceil}
    if op in unary:
        return [unary[op](a).astype(a.dtype)]
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
              "Min": np.minimum, "Max": np.maximum, "Equal": np.equal, "Less": np.less,
              "Greater": np.greater}
    if op in binary:
        out = arrays[0]
        for b in arrays[1:]:
            out = binary[op](out, b)
        return [out if op in ("Equal", "Less", "Greater") else out.astype(a.dtype)]
    if op == "Where":
        return [np.where(arrays[0], arrays[1], arrays[2])]
    raise KeyError(op)


def fold_node(node, name: str, attrs: dict, inputs: list[str], consts: dict[str, Const],
          known: dict[str, tuple], opset: int) -> Optional[list[Const]]:
    """Fold one node into constants, or return None to keep it as an op."""
    op = node.op_type
    if op in _NEVER_FOLD:
        return None
    real = [t for t in inputs if t]
    if op in ("Shape", "Size"):  # only the input's (inferred) shape matters
        if not real or known.get(real[0], (None,))[0] is None:
            return None
    elif not real or any(t not in consts for t in real):
        return None
    ins = [(tuple(known[t][0]), known[t][1]) if t else (None, None) for t in inputs]
    cs = [consts.get(t) if t else None for t in inputs]
    try:
        with np.errstate(all="ignore"):  # log(0) = -inf etc. are ONNX semantics, not problems
            if op == "ConstantOfShape":
                return [_constant_of_shape(node, name, attrs, cs[0])]
            folded = _fold_uniform(op, attrs, ins, cs, len(node.output))
            if folded is not None:
                return folded
            if op in _FOLDABLE and op in OPS:
                return _fold_arrays(op, attrs, ins, cs, len(node.output))
            return _fold_reference(node, inputs, cs, opset)
    except (ShapeError, KeyError, IndexError, ValueError, TypeError) as e:
        raise GraphError(f"node {name!r} ({op}): cannot fold its constant inputs ({e})") from None


def _constant_of_shape(node, name: str, attrs: dict, shape_const: Const) -> Const:
    """ConstantOfShape: always uniform, so it is recorded as a fill (small ones also as values)."""
    shape = tuple(int(d) for d in shape_const.materialise().reshape(-1))
    value = np.asarray(attrs.get("value", [0.0])).reshape(-1)[0]
    dtype = onnx_dtype(node.attribute[0].t.data_type, f"node {name!r}") if "value" in attrs else "float32"
    if numel(shape) > VALUE_MAX_ELEMENTS:
        return Const(shape, dtype, value.item())
    return from_array(np.full(shape, value, dtype=np_dtype(dtype)), dtype)


def _fold_arrays(op: str, attrs: dict, ins: list, cs: list, n_out: int) -> Optional[list[Const]]:
    """Fold by evaluating in numpy; None when an input is too large to materialise or the
    result could not be represented (large and non-uniform)."""
    arrays = [c.materialise() if c is not None else None for c in cs]
    if op not in ("Shape", "Size") and any(a is None for a, (s, _) in zip(arrays, ins) if s is not None):
        return None
    outs = [] if op in ("Shape", "Size", "Range") else \
        infer_node(op, {**attrs, "_num_outputs": n_out} if op == "Split" else attrs, ins, arrays)
    folded = []
    for i, r in enumerate(_np_eval(op, attrs, ins, arrays, [s for s, _ in outs])):
        r = np.asarray(r)
        dt = outs[i][1] if outs else _dtype_of_array(r)
        c = from_array(r.astype(np_dtype(dt)), dt)
        if c.fill is None and r.size > FOLD_MAX:
            return None
        folded.append(c)
    return folded


def _fold_reference(node, inputs: list[str], cs: list, opset: int) -> Optional[list[Const]]:
    """Fold any other deterministic op with ONNX's reference evaluator (exact ONNX semantics)."""
    arrays = [c.materialise() if c is not None else None for c in cs]
    if any(a is None for a, t in zip(arrays, inputs) if t):
        return None
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    names = [f"in{i}" if t else "" for i, t in enumerate(inputs)]
    outs = [f"out{i}" if t else "" for i, t in enumerate(node.output)]
    single = helper.make_node(node.op_type, names, outs, domain=node.domain)
    single.attribute.extend(node.attribute)
    graph = helper.make_graph([single], "fold", [], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        results = ReferenceEvaluator(model).run(
            [o for o in outs if o], {n: a for n, a in zip(names, arrays) if n})
    except Exception:  # noqa: BLE001 -- the evaluator lacks this op or form: keep the node
        return None
    folded, it = [], iter(results)
    for o in outs:
        if not o:
            folded.append(None)
            continue
        r = np.asarray(next(it))
        c = from_array(r, _dtype_of_array(r))
        if c.fill is None and r.size > FOLD_MAX:
            return None
        folded.append(c)
    return folded


def _dtype_of_array(arr: np.ndarray) -> str:
    name = "bool" if arr.dtype == np.bool_ else str(arr.dtype)
    if name not in DTYPE_SIZES:
        raise GraphError(f"unsupported constant dtype {name}")
    return name
