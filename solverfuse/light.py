"""Light ONNX models: weights stored as ``ConstantOfShape`` placeholders, and seeded data for them.

The onnx package's light models (``onnx/backend/test/data/light``: each weight a ``ConstantOfShape``
node fed by an initializer named ``<weight>__SHAPE``) and the lightened transformer exports of
``tests/data/models`` (their weights listed in the model's metadata under :data:`LIGHTENED_KEY`)
keep a file small by storing every large weight as one repeated value. Run as they are, most of
their outputs come out uniform whatever the kernels compute, so a numerics check of them proves
little. :func:`seeded_weights` puts seeded random data in the placeholders' place
(``solverfuse run --seeded-weights``): the run says so, and the check's reference runs on the same data.

>>> import onnx
>>> from onnx import TensorProto, helper, numpy_helper
>>> shape = numpy_helper.from_array(np.array([4, 3], np.int64), "w__SHAPE")
>>> fill = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.02])
>>> nodes = [helper.make_node("ConstantOfShape", ["w__SHAPE"], ["w"], value=fill),
...          helper.make_node("MatMul", ["x", "w"], ["y"])]
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
>>> m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [shape]))
>>> light_weights(m)
['w']
>>> full = seeded_weights(m, seed=0)
>>> [n.op_type for n in full.graph.node], [(i.name, list(i.dims)) for i in full.graph.initializer]
(['MatMul'], [('w', [4, 3])])
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional

import numpy as np

from .emit.data import tensor_rng

#: Metadata key of a lightened export: the JSON list of its placeholder weights.
LIGHTENED_KEY = "solverfuse.lightened"
#: Suffix of the shape initializer of an onnx light model's placeholder.
SHAPE_SUFFIX = "__SHAPE"


def _listed(model) -> Optional[set]:
    props = {p.key: p.value for p in model.metadata_props}
    return set(json.loads(props[LIGHTENED_KEY])) if LIGHTENED_KEY in props else None


def light_weights(model) -> list[str]:
    """Names of the placeholder weights of a light model (``[]`` for a model with real weights).

    A placeholder is a ``ConstantOfShape`` node whose output the metadata lists, or, without
    that list, whose shape comes from an initializer named after it plus :data:`SHAPE_SUFFIX`
    (the onnx package's convention). Other ``ConstantOfShape`` nodes (masks, zero states) are part
    of the model and are never counted.
    """
    listed = _listed(model)
    return [n.output[0] for n in model.graph.node
            if n.op_type == "ConstantOfShape" and n.input and n.output
            and (n.output[0] in listed if listed is not None else n.input[0] == n.output[0] + SHAPE_SUFFIX)]


def seeded_array(name: str, dims: tuple, dtype, seed: int = 0, *, gain: float = float(np.sqrt(2.0)),
                 scale: float = 0.05) -> np.ndarray:
    """Seeded data for the weight ``name``: it depends only on (seed, name), not on the model's
    node order. Rank >= 3 (conv filters ``(O, I/group, k...)``): N(0, gain^2 / fan_in); rank 2
    (linear or embedding, either layout): N(0, 1 / larger dim); rank 1 (norm scales, biases,
    BatchNorm statistics): 1 + N(0, scale^2), so variances stay positive (at the default scale, 1
    is 20 standard deviations from 0); rank 0: N(0, scale^2).

    >>> a = seeded_array("w", (8, 4, 3, 3), np.float32)
    >>> a.dtype, bool(np.array_equal(a, seeded_array("w", (8, 4, 3, 3), np.float32))), bool(abs(a.std() - 0.236) < 0.05)
    (dtype('float32'), True, True)
    """
    rng = tensor_rng(name, seed)
    if len(dims) >= 3:
        std = gain / np.sqrt(np.prod(dims[1:]))
    elif len(dims) == 2:
        std = 1 / np.sqrt(max(dims))
    else:
        std = scale
    arr = rng.standard_normal(dims) * std
    if arr.ndim == 1:
        arr = arr + 1.0
    return arr.astype(dtype)


def _shape_of(model, name: str) -> Optional[tuple]:
    from onnx import helper, numpy_helper
    for init in model.graph.initializer:
        if init.name == name:
            return tuple(int(d) for d in numpy_helper.to_array(init))
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name and n.attribute:
            return tuple(int(d) for d in numpy_helper.to_array(helper.get_attribute_value(n.attribute[0])))
    return None


def seeded_weights(model, seed: int = 0, arrays: Optional[Mapping[str, np.ndarray]] = None, **kwargs: Any):
    """A copy of a light model with data as initializers in place of its placeholders
    (:func:`light_weights`): ``arrays[name]`` where given, else :func:`seeded_array` (``kwargs``
    go to it: ``gain``, ``scale``); shape tensors only the placeholders used are dropped."""
    import onnx
    from onnx import helper, numpy_helper
    names = set(light_weights(model))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    kept, made, shape_names = [], [], set()
    for n in g.node:
        dims = _shape_of(model, n.input[0]) if n.output and n.output[0] in names else None
        if dims is None:
            kept.append(n)
            continue
        value = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "value"), None)
        dtype = numpy_helper.to_array(value).dtype if value is not None else np.dtype(np.float32)
        name = n.output[0]
        data = arrays[name] if arrays is not None and name in arrays else seeded_array(name, dims, dtype, seed, **kwargs)
        made.append(numpy_helper.from_array(np.asarray(data, dtype).reshape(dims), name))
        shape_names.add(n.input[0])
    used = {t for n in kept for t in n.input}
    unused = shape_names - used
    kept = [n for n in kept if not (n.op_type == "Constant" and n.output and n.output[0] in unused)]
    inits = [i for i in g.initializer if i.name not in unused]
    ins = [i for i in g.input if i.name not in unused]
    del g.node[:], g.initializer[:], g.input[:]
    g.node.extend(kept)
    g.initializer.extend(inits + made)
    g.input.extend(ins)
    if out.ir_version < 4:  # initializers must also be graph inputs there
        g.input.extend(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in made)
    return out
