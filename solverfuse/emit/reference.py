"""The numerical reference: our Graph back to ONNX, run by ONNX's evaluator or ONNX Runtime.

:func:`to_onnx` writes a standard opset-18 model (opset 20 when the graph uses ``Gelu``, which
opset 18 lacks). Graphs imported from old models keep their opset-9 attribute forms (the op table
accepts both), so the attribute forms that later opsets moved to inputs are converted here:
``axes`` of Squeeze/Unsqueeze/Reduce*, ``split`` of Split, ``min``/``max`` of Clip, ``starts``/
``ends``/``axes``/``steps`` of Slice, ``shape`` of Reshape; attributes later opsets dropped
(Dropout's ``ratio``, BatchNormalization's ``spatial``/``is_test``/``consumed_inputs``) are
removed -- they do not change inference results.

:func:`reference_outputs` runs that model on given inputs and constants with
``engine="reference"`` (``onnx.reference.ReferenceEvaluator``: slow, pure NumPy, for small
graphs) or ``engine="onnxruntime"`` (graph optimisations off, one thread: a faithful, quiet
reference), and returns every requested tensor by name.

>>> import numpy as np
>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [2, 3]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "u", "op": "Unsqueeze", "inputs": ["x"], "outputs": ["h"],
...                "attributes": {"axes": [0]}},
...               {"name": "r", "op": "ReduceSum", "inputs": ["h"], "outputs": ["y"],
...                "attributes": {"axes": [2], "keepdims": 0}}]})
>>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> reference_outputs(g, {"x": x}, {})["y"].tolist()
[[3.0, 12.0]]
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from ..errors import EmitError
from ..graph import Graph
from ..ops import OPS
from ..dtypes import np_dtype

OPSET = 18
ENGINES = ("reference", "onnxruntime")
#: Constants larger than this are fed as inputs rather than stored as initializers.
FEED_BYTES = 1 << 20
#: Ops whose ``axes`` attribute became an input (opset 13 for ReduceSum/Squeeze/Unsqueeze, 18 rest).
_AXES_TO_INPUT = {"Squeeze", "Unsqueeze", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
                  "ReduceProd", "ReduceL2", "ReduceSumSquare"}
#: Attributes that later opsets removed and that do not affect inference.
_DROPPED = {"Dropout": {"ratio", "is_test", "seed"},
            "BatchNormalization": {"spatial", "is_test", "consumed_inputs", "momentum"}}
_NEEDS_OPSET = {"Gelu": 20}


def _onnx_dtype(dtype: str) -> int:
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(np_dtype(dtype))


def _tensor(name: str, array: np.ndarray):
    from onnx import numpy_helper
    return numpy_helper.from_array(np.asarray(array, order="C"), name)


def _attribute_value(op: str, key: str, value: Any, out_dtype: Optional[str]) -> Any:
    """A python attribute value in the form ``onnx.helper.make_node`` accepts."""
    if isinstance(value, str) and key not in ("to",):
        return value
    if op == "Cast" and key == "to" and isinstance(value, str):
        return _onnx_dtype(value)
    if op == "ConstantOfShape" and key == "value":
        return _tensor("value", np.asarray(value, dtype=np_dtype(out_dtype or "float32")).reshape(1))
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        return _tensor(key, np.asarray(value))
    return value


def _convert_node(graph: Graph, node, extra: list) -> list:
    """One of our nodes as ONNX node(s) in the target opset; constant inputs are appended to
    ``extra`` as initializers (named after the node, so they cannot collide)."""
    from onnx import helper
    attrs = dict(node.attributes)
    inputs = list(node.inputs)
    op = node.op

    def const_input(key: str, values) -> str:
        name = f"{node.name}::{key}"
        extra.append(_tensor(name, np.asarray(values, dtype=np.int64)))
        return name

    for key in _DROPPED.get(op, ()):
        attrs.pop(key, None)
    if op in _AXES_TO_INPUT and "axes" in attrs:
        axes = attrs.pop("axes")
        inputs = [inputs[0], const_input("axes", axes)]
    if op == "Split":
        if "split" in attrs:
            inputs = [inputs[0], const_input("split", attrs.pop("split"))]
        elif len(inputs) < 2 or not inputs[1]:
            attrs.setdefault("num_outputs", len(node.outputs))
    if op == "Slice" and "starts" in attrs:
        starts, ends = attrs.pop("starts"), attrs.pop("ends")
        inputs = [inputs[0], const_input("starts", starts), const_input("ends", ends)]
        if "axes" in attrs:
            inputs.append(const_input("axes", attrs.pop("axes")))
    if op == "Reshape" and "shape" in attrs:
        inputs = [inputs[0], const_input("shape", attrs.pop("shape"))]
    if op == "Clip" and ("min" in attrs or "max" in attrs):
        dt = np_dtype(graph.tensors[inputs[0]].dtype)
        lo, hi = attrs.pop("min", None), attrs.pop("max", None)
        inputs = [inputs[0]]
        for key, v in (("min", lo), ("max", hi)):
            if v is None:
                inputs.append("")
            else:
                name = f"{node.name}::{key}"
                extra.append(_tensor(name, np.asarray(v, dtype=dt)))
                inputs.append(name)
        while inputs and inputs[-1] == "":
            inputs.pop()
    out_dtype = graph.tensors[node.outputs[0]].dtype if node.outputs[0] in graph.tensors else None
    attrs = {k: _attribute_value(op, k, v, out_dtype) for k, v in attrs.items()
             if not k.startswith("_")}
    return [helper.make_node(op, inputs, list(node.outputs), name=node.name, **attrs)]


def to_onnx(graph: Graph, constants: Mapping[str, np.ndarray], *,
            outputs: Optional[Sequence[str]] = None, fed: Sequence[str] = ()):
    """Our graph as an ONNX ``ModelProto`` (opset 18, or 20 with Gelu), constants as initializers.

    ``outputs`` (default: the graph's outputs) may name any tensors, intermediates included.
    Constants named in ``fed`` become graph inputs instead (to be fed at run time: serialising
    hundreds of MB of initializers into a protobuf costs far more than running the model).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "d", "op": "Dropout", "inputs": ["x"], "outputs": ["y"],
    ...                "attributes": {"ratio": 0.5}}]})
    >>> m = to_onnx(g, {}); m.opset_import[0].version, list(m.graph.node[0].attribute)
    (18, [])
    """
    import onnx
    from onnx import helper
    unknown = next((n for n in graph.nodes if n.op not in OPS), None)
    if unknown is not None:
        raise EmitError(f"node {unknown.name!r}: op {unknown.op!r} is not in the op table; "
                        f"no reference can run it")
    opset = max([OPSET] + [_NEEDS_OPSET.get(n.op, OPSET) for n in graph.nodes])
    extra: list = []
    nodes = [m for n in graph.nodes for m in _convert_node(graph, n, extra)]
    consts = [n for n, t in graph.tensors.items() if t.constant]
    missing = next((c for c in consts if c not in constants), None)
    if missing is not None:
        raise EmitError(f"constant {missing!r} has no data")
    inits = []
    fed = set(fed)
    for c in consts:
        t = graph.tensors[c]
        if c in fed:
            continue
        arr = np.asarray(constants[c], dtype=np_dtype(t.dtype)).reshape(t.shape)
        if arr.size > 1024 and t.fill is not None and (arr == arr.flat[0]).all():
            # A filled weight (the ONNX light models' are) becomes ConstantOfShape: a 400 MB
            # initializer would cost seconds to serialise and gigabytes to hold twice.
            shape_name = f"{c}::shape"
            extra.append(_tensor(shape_name, np.asarray(t.shape, dtype=np.int64)))
            nodes.insert(0, helper.make_node("ConstantOfShape", [shape_name], [c], name=f"{c}::fill",
                                             value=_tensor("value", arr.reshape(-1)[:1])))
        else:
            inits.append(_tensor(c, arr))
    inits += extra

    def info(name):
        t = graph.tensors[name]
        return helper.make_tensor_value_info(name, _onnx_dtype(t.dtype), list(t.shape))

    inputs = [info(x) for x in graph.inputs if not graph.tensors[x].constant] + \
        [info(c) for c in consts if c in fed]
    outs = [info(y) for y in (graph.outputs if outputs is None else outputs)]
    g = helper.make_graph(nodes, graph.name or "graph", inputs, outs, initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="solverfuse")
    model.ir_version = 8 if opset <= 18 else 9
    onnx.checker.check_model(model)
    return model


def check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Graph inputs as contiguous arrays of the declared dtype; EmitError names a missing input,
    a wrong shape or an unconvertible dtype.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [2]}}, "inputs": ["x"], "outputs": ["y"],
    ...                 "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    >>> check_inputs(g, {"x": [1, 2]})["x"].dtype.name
    'float32'
    >>> check_inputs(g, {"x": np.zeros(3)})
    Traceback (most recent call last):
    solverfuse.errors.EmitError: input 'x' has shape [3], the graph says [2]
    """
    out = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        if t.constant:
            continue
        if name not in inputs:
            raise EmitError(f"input {name!r} is missing (need {', '.join(repr(x) for x in graph.inputs)})")
        arr = np.asarray(inputs[name])
        want = np_dtype(t.dtype)
        if list(arr.shape) != list(t.shape):
            raise EmitError(f"input {name!r} has shape {list(arr.shape)}, the graph says {t.shape}")
        if arr.dtype != want and not np.can_cast(arr.dtype, want, casting="same_kind") and \
                not (arr.dtype.kind in "iub" and want.kind in "iuf"):
            raise EmitError(f"input {name!r} has dtype {arr.dtype}, the graph says {t.dtype}")
        out[name] = np.asarray(arr, dtype=want, order="C")  # keeps 0-d arrays 0-d
    return out


def reference_outputs(graph: Graph, inputs: Mapping[str, np.ndarray],
                      constants: Mapping[str, np.ndarray], engine: str = "reference", *,
                      outputs: Optional[Sequence[str]] = None) -> dict[str, np.ndarray]:
    """Run ``graph`` with ONNX's reference evaluator or ONNX Runtime; outputs keyed by name.

    >>> import numpy as np
    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [3]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    >>> x = np.array([-1, 0, 2], dtype=np.float32)
    >>> reference_outputs(g, {"x": x}, {}, engine="onnxruntime")["y"].tolist()
    [0.0, 0.0, 2.0]
    """
    if engine not in ENGINES:
        raise EmitError(f"unknown reference engine {engine!r} ({', '.join(ENGINES)})")
    names = list(graph.outputs if outputs is None else outputs)
    big = [c for c, t in graph.tensors.items()
           if t.constant and c in constants and np.asarray(constants[c]).nbytes > FEED_BYTES]
    model = to_onnx(graph, constants, outputs=names, fed=big)
    feeds = check_inputs(graph, inputs)
    for c in big:
        feeds[c] = np.asarray(constants[c], dtype=np_dtype(graph.tensors[c].dtype), order="C") \
            .reshape(graph.tensors[c].shape)
    if engine == "reference":
        from onnx.reference import ReferenceEvaluator
        results = ReferenceEvaluator(model).run(None, feeds)
    else:
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        results = sess.run(None, feeds)
    return {n: np.asarray(r) for n, r in zip(names, results)}
