"""The exported transformers test set: light ONNX files committed under ``tests/data/models``.

``tests/data/export_models.py`` (needs torch + transformers; a test-data tool, not a runtime
dependency) exports tiny random-weight models with both torch exporters and *lightens* them with
:func:`lighten`: every floating initializer over :data:`LIGHT_BYTES` is replaced by a
``ConstantOfShape`` node of the same name, shape and dtype (as the onnx package's light models do),
and its name is recorded in the model's ``metadata_props``. :func:`materialise` reverses that with
seeded random data, writing a full model for numerical tests. Each model has example inputs in
``<name>.inputs.npz`` beside it.

>>> import onnx, numpy as np
>>> from onnx import helper, numpy_helper, TensorProto
>>> w = numpy_helper.from_array(np.ones((32, 32), np.float32), "w")
>>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])
>>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])
>>> m = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])],
...                                          "g", [x], [y], [w]))
>>> light = lighten(m); [n.op_type for n in light.graph.node], len(light.graph.initializer)
(['Constant', 'ConstantOfShape', 'MatMul'], 0)
>>> full = materialise(light, seed=0); [n.op_type for n in full.graph.node], full.graph.initializer[0].dims
(['MatMul'], [32, 32])
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from solverfuse.light import LIGHTENED_KEY

MODELS_DIR = Path(__file__).resolve().parent / "data" / "models"
LIGHT_BYTES = 1024
#: Gain of seeded conv weights: keeps the signal alive through SiLU/sigmoid gates when the
#: exporter has folded BatchNorm away (no normalisation left to rescale it).
CONV_GAIN = 1.7
_KEY = LIGHTENED_KEY


def model_names() -> list[str]:
    """Stems of the committed light models (sorted)."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.onnx"))


def lighten(model):
    """A copy of ``model`` whose floating initializers over LIGHT_BYTES are ConstantOfShape nodes."""
    import onnx
    from onnx import helper, numpy_helper
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for n in g.node:  # the dynamo exporter's per-node stack traces: most of the file, no semantics
        del n.metadata_props[:]
        n.doc_string = ""
    keep, nodes, names = [], [], []
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind == "f" and arr.nbytes > LIGHT_BYTES:
            shape = numpy_helper.from_array(np.asarray(arr.shape, dtype=np.int64), f"{init.name}/shape")
            value = numpy_helper.from_array(np.zeros(1, arr.dtype) + 0.01, "value")
            nodes.append(helper.make_node("Constant", [], [shape.name], value=shape,
                                          name=f"{init.name}/shape_const"))
            nodes.append(helper.make_node("ConstantOfShape", [shape.name], [init.name], value=value,
                                          name=f"{init.name}/light"))
            names.append(init.name)
        else:
            keep.append(init)
    del g.initializer[:]
    g.initializer.extend(keep)
    rest = list(g.node)
    del g.node[:]
    g.node.extend(nodes + rest)
    # an initializer listed among graph inputs (IR < 4) must not stay an input
    ins = [i for i in g.input if i.name not in set(names)]
    del g.input[:]
    g.input.extend(ins)
    helper.set_model_props(out, {**{p.key: p.value for p in out.metadata_props}, _KEY: json.dumps(names)})
    return out


def materialise(model, seed: int = 0, scale: float = 0.05):
    """A copy of a lightened model with seeded random data in place of each light initializer.

    The placeholders get :func:`solverfuse.light.seeded_weights` data (depending only on (seed,
    tensor name)) with conv filters at :data:`CONV_GAIN`, 1-D tensors 1 + N(0, scale^2).
    """
    import onnx
    from onnx import numpy_helper
    from solverfuse.light import seeded_array, seeded_weights
    if isinstance(model, (str, Path)):
        model = onnx.load(str(model))
    out = seeded_weights(model, seed, gain=CONV_GAIN, scale=scale)
    names = set(json.loads({p.key: p.value for p in model.metadata_props}.get(_KEY, "[]")))
    # Convolution weights small enough to stay in the light file get seeded data too: the dynamo
    # exporter folds BatchNorm into them, and the folded values of a fresh model vanish (~1e-5).
    g = out.graph
    conv_w = {n.input[1] for n in g.node if n.op_type == "Conv" and len(n.input) > 1}
    for i, init in enumerate(g.initializer):
        if init.name in conv_w and init.name not in names:
            arr = numpy_helper.to_array(init)
            fresh = seeded_array(init.name, arr.shape, arr.dtype, seed, gain=CONV_GAIN)
            g.initializer[i].CopyFrom(numpy_helper.from_array(fresh, init.name))
    return out


def load_inputs(name: str) -> dict[str, np.ndarray]:
    """The example inputs saved beside a light model."""
    with np.load(MODELS_DIR / f"{name}.inputs.npz") as f:
        return {k: f[k] for k in f.files}
