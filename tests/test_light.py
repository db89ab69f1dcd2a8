"""Light ONNX models' placeholder weights and ``run --seeded-weights``: the placeholders found are
exactly the ones the model stores as one repeated value, the seeded copy runs in ONNX Runtime with
data that is not uniform, and our run of it matches ONNX Runtime on that same copy."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from solverfuse.cli import app
from solverfuse.light import light_weights, seeded_weights

from .conftest import light_model_path

ort = pytest.importorskip("onnxruntime", reason="the seeded models are checked with ONNX Runtime")
runner = CliRunner()


def ort_run(model, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def data_input(model):
    """Name and dims of the model's one data input (IR 3 lists the initializers among the inputs)."""
    inits = {i.name for i in model.graph.initializer}
    vi = next(i for i in model.graph.input if i.name not in inits)
    return vi.name, [d.dim_value for d in vi.type.tensor_type.shape.dim]


def masked_matmul():
    """A light MatMul weight (onnx's ``__SHAPE`` convention) and a ConstantOfShape that is part of
    the model (a ones mask, its shape a plain constant): only the first is a placeholder."""
    shape = numpy_helper.from_array(np.array([6, 5], np.int64), "w__SHAPE")
    mshape = numpy_helper.from_array(np.array([2, 5], np.int64), "mask_shape")
    fill = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.02])
    one = helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("ConstantOfShape", ["w__SHAPE"], ["w"], value=fill),
             helper.make_node("ConstantOfShape", ["mask_shape"], ["mask"], value=one),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Mul", ["h", "mask"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    return helper.make_model(helper.make_graph(nodes, "masked", [x], [y], [shape, mshape]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_only_the_placeholders_are_seeded():
    m = masked_matmul()
    assert light_weights(m) == ["w"]
    full = seeded_weights(m, seed=3)
    assert [n.op_type for n in full.graph.node] == ["ConstantOfShape", "MatMul", "Mul"]
    assert {i.name for i in full.graph.initializer} == {"mask_shape", "w"}
    w = numpy_helper.to_array(next(i for i in full.graph.initializer if i.name == "w"))
    assert w.shape == (6, 5) and w.dtype == np.float32 and np.unique(w).size == 30
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_allclose(ort_run(full, {"x": x})[0], x @ w, rtol=1e-6)
    again = numpy_helper.to_array(next(i for i in seeded_weights(m, seed=3).graph.initializer if i.name == "w"))
    other = numpy_helper.to_array(next(i for i in seeded_weights(m, seed=4).graph.initializer if i.name == "w"))
    assert np.array_equal(w, again) and not np.array_equal(w, other)


def test_an_onnx_light_model_is_seeded_whole():
    """Every ConstantOfShape of the onnx package's light SqueezeNet (IR 3) is a placeholder; the
    seeded copy loads in ONNX Runtime and its output is no longer uniform."""
    m = onnx.load(str(light_model_path("squeezenet")))
    cos = [n.output[0] for n in m.graph.node if n.op_type == "ConstantOfShape"]
    assert m.ir_version < 4 and len(cos) > 20 and light_weights(m) == cos
    full = seeded_weights(m, seed=0)
    assert not any(n.op_type == "ConstantOfShape" for n in full.graph.node)
    name, dims = data_input(m)
    x = np.random.default_rng(0).standard_normal(dims).astype(np.float32)
    before, after = ort_run(m, {name: x})[0], ort_run(full, {name: x})[0]
    assert np.ptp(before) == 0 and np.ptp(after) > 0


def invoke(*args):
    return runner.invoke(app, ["run", *map(str, args)])


def test_run_with_seeded_weights_matches_onnxruntime(tmp_path):
    path = light_model_path("squeezenet")
    m = onnx.load(str(path))
    name, dims = data_input(m)
    x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{name: x})
    r = invoke(path, "--inputs", tmp_path / "in.npz", "--check", "--seeded-weights", "--threads", "2",
               "-o", tmp_path / "o.npz", "--time-limit", "30")
    assert r.exit_code == 0, r.output
    assert "check vs onnxruntime-model: OK" in r.output
    assert "light placeholder weights ran with seeded random data" in r.output
    assert "says little" not in r.output
    with np.load(tmp_path / "o.npz") as f:
        got = f[f.files[0]]
    # ONNX Runtime ran the seeded copy and matched: our run used that data, not the placeholders'
    assert np.ptp(got) > 0
    r = invoke(path, "--inputs", tmp_path / "in.npz", "--json", "-o", tmp_path / "plain.npz", "--time-limit", "30")
    res = json.loads(r.output[r.output.index("{"):])
    assert res["light_weights"] == len(light_weights(m)) and res["seeded_weights"] == 0
    with np.load(tmp_path / "plain.npz") as f:
        plain = f[f.files[0]]
    assert np.ptp(plain) == 0 and not np.allclose(plain, got)  # the placeholders' uniform output


def test_run_without_placeholders_refuses_seeded_weights(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), "w")
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "real.onnx")
    r = invoke(tmp_path / "real.onnx", "--seeded-weights", "-o", tmp_path / "o.npz")
    assert r.exit_code == 2 and "real.onnx: no light placeholder weights" in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not (tmp_path / "o.npz").exists()
