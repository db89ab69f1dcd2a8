"""ONNX -> :class:`~solverfuse.graph.Graph`: shape inference, lazy weights, constant folding, elision.

:func:`import_onnx` reads a model (path, bytes or ``ModelProto``) and returns a checked graph in
which every tensor is shaped. The steps, in order:

1. **Shape inference** with ONNX's own ``infer_shapes`` (strict, with data propagation; if strict
   inference fails the non-strict result is used and solverfuse's op table infers the rest, so a
   shape that cannot be inferred is still reported by name). Symbolic input dimensions must be
   given a value (``dims={"N": 1}``).
2. **Constants.** Initializers and ``Constant`` nodes become constant tensors (an initializer
   listed among the graph inputs, as IR < 4 does, is a constant too: its data is the default). A
   small one (<= :data:`VALUE_MAX_ELEMENTS` elements) gets its exact ``value``; a larger one is not
   read at all: it gets a ``data`` reference to the model file (``WeightRef(file=<model path>,
   key=<name>)``) and the graph holds a lazy loader, so planning never touches weight data and
   ``run``/``emit`` read it when they execute. External-data files must exist (checked at import,
   read when executed). A large uniform constant made by ``ConstantOfShape`` (the light models'
   weights) gets a ``fill``.
3. **Constant folding** of every all-constant node (as ONNX Runtime and TVM's FoldConstant do):
   ``Shape``/``Size`` of a shaped tensor, layout ops on uniform data by shape alone (no array is
   built, so the light models' 400 MB ``ConstantOfShape`` weights cost nothing), common ops in
   NumPy, and any other deterministic op with ONNX's reference evaluator -- when no input exceeds
   :data:`FOLD_INPUT_MAX` elements and the result has at most :data:`FOLD_MAX` (position buckets,
   RoPE tables, masks). Folded values are constants with data; ``stats`` counts them.
4. **Elision**: ``Dropout`` (inference mode) and ``Identity`` are removed and their consumers
   rewired; when the elided output is a graph output, the producer is renamed so graph outputs
   keep their names.

An op outside the op table is kept as an opaque node (``category`` declared) with ONNX's inferred
output shapes: it plans, and ``emit``/``run`` name it in one line. Node and tensor names are kept
exactly (empty or duplicate node names get a unique ``<op>_<index>`` name). Ops keep the
attributes of the model's opset; the only rewrite is
``Softmax``/``LogSoftmax`` below opset 13, whose 2-D coercion is made explicit (an explicit
``axis`` when it is the last one, otherwise Flatten -> Softmax -> Reshape). Every failure raises
:class:`GraphError` with one line naming the node or tensor.

>>> import onnx
>>> from onnx import helper, TensorProto
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])
>>> shape = helper.make_tensor("shape", TensorProto.INT64, [1], [6])
>>> g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"], name="flat"),
...                        helper.make_node("Dropout", ["r"], ["y"], name="drop")],
...                       "tiny", [x], [y], [shape])
>>> graph = import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
>>> [(n.name, n.op, n.outputs) for n in graph.nodes], graph.tensors["shape"].value
([('flat', 'Reshape', ['y'])], [6])
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from .errors import GraphError
from .dtypes import np_dtype
from .graph import Graph, Node, Tensor, WeightRef, check_graph
from .onnx_fold import VALUE_MAX_ELEMENTS, Const, fold_node, from_array, onnx_dtype
from .ops import OPS, numel
from .weights import tensor_array

ELIDED_OPS = ("Dropout", "Identity")
def _training_mode(op: str, attrs: dict, ins: list, consts: dict) -> Optional[str]:
    """Why a Dropout/BatchNormalization node runs in training mode (None in inference mode).

    Eliding a training-mode Dropout or running a training-mode BatchNormalization with its running
    statistics would silently change the numbers, so such graphs are refused.
    """
    if attrs.get("is_test", 1) == 0 and op in ("Dropout", "BatchNormalization"):
        return "is_test=0"
    if op == "BatchNormalization" and attrs.get("training_mode", 0):
        return "training_mode=1"
    if op == "Dropout" and len(ins) > 2 and ins[2]:
        flag, ratio = _scalar(consts, ins[2]), _scalar(consts, ins[1]) if ins[1] else 0.5
        if (flag is None or flag) and ratio != 0:  # ratio 0 drops nothing: identity even in training
            return "training_mode input is true or not a constant"
    return None


def _scalar(consts: dict, tensor: str):
    """The first element of a constant tensor, or None if it is not a known constant."""
    c = consts.get(tensor)
    value = c.materialise() if c is not None else None
    return None if value is None else np.asarray(value).reshape(-1)[0].item()


def _load(source) -> "onnx.ModelProto":
    import onnx
    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, (bytes, bytearray)):
            return onnx.load_from_string(bytes(source))
        path = Path(source)
        if not path.exists():
            raise GraphError(f"{path}: no such file")
        model = onnx.load(str(path), load_external_data=False)
    except GraphError:
        raise
    except Exception as e:  # protobuf DecodeError, OSError, external-data errors ...
        raise GraphError(f"{source}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    if not model.graph.node and not model.graph.output:
        raise GraphError(f"{source}: not a readable ONNX model (empty graph)")
    return model


def _set_dims(model, dims: dict[str, int]) -> None:
    """Replace symbolic input dimensions by the values given (in place)."""
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = int(dims[d.dim_param])


def _inference_view(model):
    """The model with its large initializers replaced by typed graph inputs: all that shape
    inference needs, without serialising the weights through ONNX's C++ checker (seconds on a
    large model)."""
    import onnx
    from onnx import helper
    g = model.graph
    big = [t for t in g.initializer if numel(t.dims) > VALUE_MAX_ELEMENTS]
    if not big:
        return model
    view = onnx.ModelProto()
    view.ir_version, view.producer_name = model.ir_version, model.producer_name
    view.opset_import.extend(model.opset_import)
    view.functions.extend(model.functions)
    vg = view.graph
    vg.name = g.name
    vg.node.extend(g.node)
    vg.output.extend(g.output)
    vg.value_info.extend(g.value_info)
    names = {t.name for t in big}
    vg.initializer.extend(t for t in g.initializer if t.name not in names)
    vg.input.extend(i for i in g.input if i.name not in names)
    vg.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in big)
    return view


def _infer_shapes(model):
    """ONNX shape inference: strict if the model allows it, else best effort."""
    from onnx import shape_inference
    model = _inference_view(model)
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception:
        try:
            return shape_inference.infer_shapes(model)
        except Exception:
            return model


def _value_type(vi) -> tuple[Optional[tuple], Optional[int]]:
    """(static shape or None, elem type or None) of a ValueInfoProto."""
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None:
        return None, None
    code = tt.elem_type or None
    if not tt.HasField("shape"):
        return None, code
    shape = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None, code
        shape.append(int(d.dim_value))
    return tuple(shape), code


def _attributes(node) -> dict[str, Any]:
    """ONNX attributes as JSON-ready Python values (bytes decoded, tensors as nested lists)."""
    from onnx import AttributeProto, helper, numpy_helper
    out = {}
    for a in node.attribute:
        if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            raise GraphError(f"node {node.name!r} ({node.op_type}): subgraph attributes are not supported")
        v = helper.get_attribute_value(a)
        if a.type == AttributeProto.TENSOR:
            v = numpy_helper.to_array(v).tolist()
        elif a.type == AttributeProto.TENSORS:
            v = [numpy_helper.to_array(t).tolist() for t in v]
        elif isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list):
            v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


def _constant_node(node, attrs: dict) -> Const:
    """The value of a ``Constant`` node (any of its value_* attributes)."""
    from onnx import numpy_helper
    for a in node.attribute:
        if a.name == "value":
            arr = numpy_helper.to_array(a.t)
            return from_array(arr, onnx_dtype(a.t.data_type, f"node {node.name!r}"))
    for key, dtype in (("value_float", "float32"), ("value_floats", "float32"),
                       ("value_int", "int64"), ("value_ints", "int64")):
        if key in attrs:
            return from_array(np.asarray(attrs[key], dtype=np_dtype(dtype)), dtype)
    raise GraphError(f"node {node.name!r}: Constant without a supported value attribute")


# ---- the importer --------------------------------------------------------------------------

class _Names:
    """Unique node names: the ONNX name when it is set and free, else ``<op>_<index>``."""

    def __init__(self):
        self.used: set[str] = set()

    def take(self, wanted: str, op: str, index: int) -> str:
        name = wanted if wanted and wanted not in self.used else f"{wanted or op}_{index}"
        k = 1
        while name in self.used:
            name, k = f"{wanted or op}_{index}_{k}", k + 1
        self.used.add(name)
        return name


def import_onnx(source: Union[str, os.PathLike, bytes, Any], *, dims: Optional[dict[str, int]] = None,
                name: Optional[str] = None, stats: Optional[dict] = None) -> Graph:
    """Import an ONNX model (path, serialized bytes or ``onnx.ModelProto``) as a checked Graph.

    ``dims`` gives values to symbolic input dimensions (e.g. ``{"batch": 1}``); ``name`` overrides
    the graph name (default: the ONNX graph name, else the file stem). ``stats``, when given, is
    filled with ``folded_nodes`` (all-constant nodes folded into constants), ``onnx_nodes`` and
    ``opaque_nodes`` (ops the table does not know, kept with ONNX's inferred shapes).
    Large initializers are not read: they become constants referring to the model file
    (``data``), read when the graph is executed. Raises GraphError.
    """
    import onnx
    model = _load(source)
    if dims:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        _set_dims(copy, dims)
        model = copy
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 18)
    inferred = _infer_shapes(model)
    g = inferred.graph
    graph_name = name or g.name or (Path(source).stem if isinstance(source, (str, os.PathLike)) else "onnx")

    base_dir = str(Path(source).parent) if isinstance(source, (str, os.PathLike)) else "."
    consts: dict[str, Const] = {}
    for init in model.graph.initializer:
        consts[init.name] = _initializer(init, base_dir)
    # known: tensor -> (shape|None, dtype) from ONNX inference (refined by folding below).
    known: dict[str, tuple] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        shape, code = _value_type(vi)
        if code is not None:
            known[vi.name] = (shape, onnx_dtype(code, f"tensor {vi.name!r}"))
    for t, c in consts.items():
        known[t] = (c.shape, c.dtype)

    inputs = []
    for vi in g.input:
        if vi.name in consts:
            continue  # IR < 4 lists initializers among the inputs: they are constants
        shape, code = _value_type(vi)
        if code is None:
            raise GraphError(f"graph input {vi.name!r} is not a tensor with a known element type")
        if shape is None:
            dims_ = [d.dim_param or "?" for d in vi.type.tensor_type.shape.dim if not d.HasField("dim_value")]
            raise GraphError(f"graph input {vi.name!r} has symbolic or unknown dimensions {dims_} "
                             f"(give them values, e.g. dims={{{dims_[0]!r}: 1}})" if dims_ else
                             f"graph input {vi.name!r} has no shape")
        inputs.append(vi.name)

    alias: dict[str, str] = {}  # elided tensor -> the tensor it equals
    elided_by: dict[str, str] = {}  # elided tensor -> name of the node that produced it
    names = _Names()
    nodes: list[Node] = []
    folded_count = opaque = 0
    for i, onode in enumerate(g.node):
        label = onode.name or f"{onode.op_type}_{i}"
        if onode.domain not in ("", "ai.onnx"):
            raise GraphError(f"node {label!r}: op {onode.domain}.{onode.op_type} is not supported (custom domain)")
        attrs = _attributes(onode)
        ins = [alias.get(t, t) for t in onode.input]
        op = onode.op_type
        if op == "Constant":
            consts[onode.output[0]] = c = _constant_node(onode, attrs)
            known[onode.output[0]] = (c.shape, c.dtype)
            continue
        training = _training_mode(op, attrs, ins, consts)
        if training:
            raise GraphError(f"node {label!r}: {op} in training mode ({training}) is not supported; "
                             f"solverfuse plans inference graphs")
        if op in ELIDED_OPS and ins and ins[0]:
            alias[onode.output[0]] = ins[0]
            elided_by[onode.output[0]] = label
            for extra in onode.output[1:]:  # Dropout's mask: all true in inference
                if extra and ins[0] in known and known[ins[0]][0] is not None:
                    consts[extra] = Const(tuple(known[ins[0]][0]), "bool", True)
                    known[extra] = (consts[extra].shape, "bool")
            continue
        folded = fold_node(onode, label, attrs, ins, consts, known, opset)
        if folded is not None:
            folded_count += 1
            for t, c in zip(onode.output, folded):
                if t:
                    consts[t] = c
                    known[t] = (c.shape, c.dtype)
            continue
        node_name = names.take(onode.name, op, i)
        if op not in OPS:
            missing = [t for t in onode.output if t and known.get(t, (None,))[0] is None]
            if missing:
                raise GraphError(f"node {label!r}: op {op!r} is not in the op table and ONNX could not "
                                 f"infer the shape of its output {missing[0]!r}")
            opaque += 1
            nodes.append(Node(name=node_name, op=op, inputs=ins, outputs=list(onode.output),
                              attributes=attrs, category="data" if "Gather" in op or "Scatter" in op
                              else "memory"))
            continue
        outs = list(onode.output)
        if op in ("Softmax", "LogSoftmax") and opset < 13:
            nodes.extend(_old_softmax(node_name, op, attrs, ins[0], outs[0], known, consts, names))
            continue
        nodes.append(Node(name=node_name, op=op, inputs=ins, outputs=outs, attributes=attrs))

    outputs = [o.name for o in g.output]
    nodes = _rename_elided_outputs(nodes, outputs, alias, elided_by, names)

    used = {t for n in nodes for t in n.inputs if t} | set(outputs) | set(inputs)
    model_file = str(Path(source).resolve()) if isinstance(source, (str, os.PathLike)) else None
    tensors: dict[str, Tensor] = {}
    arrays: dict = {}
    for t in inputs:
        tensors[t] = Tensor(shape=list(known[t][0]), dtype=known[t][1])
    for t, c in consts.items():
        if t in used:
            tensors[t] = _tensor_of(t, c, model_file)
            if tensors[t].data is not None or (tensors[t].value is None and tensors[t].fill is None):
                arrays[t] = c.load
    for n in nodes:
        for t in n.outputs:
            if t and t in known and known[t][0] is not None and t not in consts:
                tensors[t] = Tensor(shape=list(known[t][0]), dtype=known[t][1])
    graph = Graph.model_construct(name=graph_name, tensors=tensors, inputs=inputs, outputs=outputs,
                                  nodes=nodes, format="solverfuse-graph/1")
    graph._arrays = arrays
    if stats is not None:
        stats.update(folded_nodes=folded_count, onnx_nodes=len(g.node), opaque_nodes=opaque)
    return check_graph(graph)


def _initializer(init, base_dir: str) -> Const:
    """An initializer as a constant: small ones read now (exact values), large ones lazily."""
    dtype = onnx_dtype(init.data_type, f"initializer {init.name!r}")
    shape = tuple(int(d) for d in init.dims)
    from onnx.external_data_helper import uses_external_data
    if uses_external_data(init):
        loc = Path(base_dir) / next((e.value for e in init.external_data if e.key == "location"), "")
        if not loc.is_file():
            raise GraphError(f"external data file {loc} of initializer {init.name!r}: no such file")
    if numel(shape) <= VALUE_MAX_ELEMENTS:
        return from_array(tensor_array(init, base_dir), dtype)
    return Const(shape, dtype, proto=init, base_dir=base_dir)


def _tensor_of(name: str, c: Const, model_file: Optional[str]) -> Tensor:
    """The graph tensor of a constant: value if small (exact, also for int64), fill if uniform,
    else a reference to its data in the model file (read only when executed)."""
    small = c.materialise() if numel(c.shape) <= VALUE_MAX_ELEMENTS else None
    if small is not None:
        return Tensor(shape=list(c.shape), dtype=c.dtype, constant=True, value=small.tolist())
    if c.fill is not None:
        return Tensor(shape=list(c.shape), dtype=c.dtype, constant=True, fill=float(c.fill))
    ref = WeightRef(file=model_file, key=name) if model_file else None
    return Tensor(shape=list(c.shape), dtype=c.dtype, constant=True, data=ref)


def _rename_elided_outputs(nodes, outputs, alias, elided_by, names) -> list[Node]:
    """Keep graph-output names when an elided Dropout/Identity produced them.

    The producer of the aliased tensor is renamed to write the output name directly; when that is
    impossible (the source is an input, a constant, or another output) an Identity node is kept.
    """
    renames: dict[str, str] = {}
    extra: list[Node] = []
    producers = {t for n in nodes for t in n.outputs}
    claimed: set[str] = set()
    for o in outputs:
        if o not in alias:
            continue
        src = alias[o]
        if src in producers and src not in outputs and src not in claimed:
            renames[src] = o
            claimed.add(src)
        else:
            extra.append(Node(name=names.take(elided_by[o], "Identity", len(nodes) + len(extra)),
                              op="Identity", inputs=[src], outputs=[o]))
    if renames:
        nodes = [n.model_copy(update={"inputs": [renames.get(t, t) for t in n.inputs],
                                      "outputs": [renames.get(t, t) for t in n.outputs]})
                 for n in nodes]
        extra = [n.model_copy(update={"inputs": [renames.get(t, t) for t in n.inputs]}) for n in extra]
    return nodes + extra


def _old_softmax(name, op, attrs, x, y, known, consts, names) -> list[Node]:
    """Softmax/LogSoftmax below opset 13 normalise over the input coerced to 2-D at ``axis``."""
    shape = known.get(x, (None,))[0]
    if shape is None:
        raise GraphError(f"node {name!r} ({op}): input {x!r} has no inferred shape")
    rank = len(shape)
    axis = attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if numel(shape[axis + 1:]) == 1:  # the coerced row is this one axis: opset-13 semantics agree
        return [Node(name=name, op=op, inputs=[x], outputs=[y], attributes={**attrs, "axis": axis})]
    flat, soft, target = f"{y}/flat", f"{y}/{op.lower()}", f"{y}/shape"
    consts[target] = from_array(np.asarray(shape, dtype=np.int64), "int64")
    known[target] = ((rank,), "int64")
    return [Node(name=names.take(f"{name}/flatten", "Flatten", 0), op="Flatten", inputs=[x],
                 outputs=[flat], attributes={"axis": axis}),
            Node(name=name, op=op, inputs=[flat], outputs=[soft], attributes={"axis": -1}),
            Node(name=names.take(f"{name}/reshape", "Reshape", 0), op="Reshape",
                 inputs=[soft, target], outputs=[y])]
