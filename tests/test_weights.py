"""Weights travel with the graph: import keeps every initializer (external data too), `import -o`
writes graph + weights file, run/emit use the real data, and a missing, corrupt or stale weights
file is one line naming it, exit 2, nothing written."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from solverfuse.cli import app
from solverfuse.emit.data import constants, without_data
from solverfuse.errors import GraphError
from solverfuse.sources import load_graph
from solverfuse.onnx_import import import_onnx
from solverfuse.weights import WeightsFile

runner = CliRunner()
RNG = np.random.default_rng(7)
W1 = RNG.standard_normal((96, 64)).astype(np.float32)   # large: referenced, not inline
W2 = RNG.standard_normal((64, 80)).astype(np.float32)
B = RNG.standard_normal(80).astype(np.float32)          # small: inline value


def _model(external_dir=None):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 96])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 80])
    inits = [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2"),
             numpy_helper.from_array(B, "b")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Tanh", ["h"], ["t"], name="act"),
             helper.make_node("MatMul", ["t", "w2"], ["u"], name="mm2"),
             helper.make_node("Add", ["u", "b"], ["y"], name="bias")]
    return helper.make_model(helper.make_graph(nodes, "mlp", [x], [y], inits),
                             opset_imports=[helper.make_opsetid("", 18)])


def _ort(path, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _one_line(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert "Traceback" not in result.output
    for n in needles:
        assert n in lines[0], result.output


@pytest.fixture
def mlp(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(_model(), str(path))
    return path


def test_import_keeps_every_initializer_and_reads_none_while_planning(mlp, monkeypatch):
    import solverfuse.onnx_import as imp
    big_reads = []
    real = imp.tensor_array
    monkeypatch.setattr(imp, "tensor_array", lambda t, d: big_reads.append(t.name) or real(t, d))
    g = import_onnx(mlp)
    from solverfuse.api import plan
    plan(g, "nvidia-h100")
    assert big_reads == ["b"]  # only the small one, read for its inline value
    assert g.tensors["w1"].data is not None and g.tensors["w1"].value is None
    assert without_data(g) == []
    np.testing.assert_array_equal(g.constant_data("w1"), W1)
    np.testing.assert_array_equal(g.constant_data("w2"), W2)
    np.testing.assert_array_equal(g.constant_data("b"), B)


def test_import_o_writes_graph_and_weights_that_run_like_the_model(mlp, tmp_path):
    out = tmp_path / "g.json"
    r = runner.invoke(app, ["import", str(mlp), "-o", str(out)])
    assert r.exit_code == 0, r.output
    wfile = tmp_path / "g.safetensors"
    data = json.loads(out.read_text())
    ref = data["tensors"]["w1"]["data"]
    assert ref["file"] == "g.safetensors" and ref["key"] == "w1" and len(ref["sha256"]) == 64
    np.testing.assert_array_equal(WeightsFile(wfile).array("w1", ref["sha256"]), W1)
    g = load_graph(out)
    np.testing.assert_array_equal(constants(g)["w2"], W2)
    x = RNG.standard_normal((4, 96)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    r = runner.invoke(app, ["run", str(out), "--inputs", str(tmp_path / "x.npz"), "-o",
                            str(tmp_path / "y.npz"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output[r.output.index("{"):])["random_constants"] == 0
    want = _ort(mlp, {"x": x})
    with np.load(tmp_path / "y.npz") as f:
        assert np.abs(f["y"] - want).max() <= 1e-4 * np.abs(want).max()


def test_run_check_on_a_model_compares_with_onnxruntime_on_the_file(mlp, tmp_path):
    r = runner.invoke(app, ["run", str(mlp), "--check", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["engine"] == "onnxruntime-model" and res["check"]["ok"]
    # the check is not fooled by wrong weights: the same graph run with other data fails it
    import solverfuse.emit.data as data
    real = data.constants
    try:
        data.constants = lambda g, seed=0: {k: v + 0.5 for k, v in real(g, seed).items()}
        r = runner.invoke(app, ["run", str(mlp), "--check", "--json"])
    finally:
        data.constants = real
    assert r.exit_code == 1, r.output


def test_hand_written_constants_without_data_are_counted(tmp_path):
    g = {"tensors": {"x": {"shape": [2, 3]}, "w": {"shape": [3, 3], "constant": True}},
         "inputs": ["x"], "outputs": ["y"],
         "nodes": [{"name": "m", "op": "MatMul", "inputs": ["x", "w"], "outputs": ["y"]}]}
    (tmp_path / "g.json").write_text(json.dumps(g))
    r = runner.invoke(app, ["run", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    assert "1 constants have no data" in r.output


def _written(tmp_path):
    out = tmp_path / "g.json"
    assert runner.invoke(app, ["import", str(tmp_path / "mlp.onnx"), "-o", str(out)]).exit_code == 0
    return out, tmp_path / "g.safetensors"


@pytest.mark.parametrize("case", ["missing", "truncated", "garbage", "swapped"])
def test_bad_weights_file_is_one_line_exit_2_nothing_written(mlp, tmp_path, case):
    out, wfile = _written(tmp_path)
    if case == "missing":
        wfile.unlink()
    elif case == "truncated":
        wfile.write_bytes(wfile.read_bytes()[:200])
    elif case == "garbage":
        wfile.write_bytes(b"\xff" * 64)
    else:  # same keys, shapes and dtypes, other data: only the sha256 can tell
        from solverfuse.weights import write_weights
        write_weights(wfile, {"w1": W1 + 1, "w2": W2})
    y = tmp_path / "y.npz"
    r = runner.invoke(app, ["run", str(out), "-o", str(y)])
    _one_line(r, "g.safetensors")
    assert not y.exists()
    if case == "swapped":
        assert "sha256" in r.output


def test_external_data_is_kept_and_a_missing_file_is_named(tmp_path):
    model = _model()
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=1024)
    g = import_onnx(path)
    np.testing.assert_array_equal(g.constant_data("w1"), W1)
    (tmp_path / "ext.data").unlink()
    with pytest.raises(GraphError, match="ext.data"):
        import_onnx(path)
    out = tmp_path / "g.json"
    _one_line(runner.invoke(app, ["import", str(path), "-o", str(out)]), "ext.data")
    assert not out.exists() and not (tmp_path / "g.safetensors").exists()


def test_emit_writes_the_weights_beside_the_c(mlp, tmp_path):
    plan = tmp_path / "p.json"
    assert runner.invoke(app, ["plan", str(mlp), "-o", str(plan), "--workers", "1"]).exit_code == 0
    r = runner.invoke(app, ["emit", str(plan), "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    w = WeightsFile(tmp_path / "c" / "weights.safetensors")
    rows = json.loads((tmp_path / "c" / "buffers.json").read_text())["buffers"]
    assert {r["tensor"] for r in rows if r["role"] == "constant"} == {"w1", "w2", "b"} == set(w.header)
    np.testing.assert_array_equal(w.array("w1"), W1)


def test_a_plan_of_a_graph_json_emits_its_weights_from_any_folder(mlp, tmp_path, monkeypatch):
    d = tmp_path / "model"
    d.mkdir()
    assert runner.invoke(app, ["import", str(mlp), "-o", str(d / "g.json")]).exit_code == 0
    assert runner.invoke(app, ["plan", str(d / "g.json"), "-o", str(d / "p.json"), "--workers", "1"]).exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    r = runner.invoke(app, ["emit", str(d / "p.json"), "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(WeightsFile(tmp_path / "c" / "weights.safetensors").array("w2"), W2)


def test_import_to_stdout_refers_to_the_model_file(mlp, tmp_path, monkeypatch):
    r = runner.invoke(app, ["import", str(mlp)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["tensors"]["w1"]["data"] == {"file": str(mlp.resolve()), "key": "w1", "sha256": None}
    (tmp_path / "g.json").write_text(r.output)
    monkeypatch.chdir(tmp_path)
    np.testing.assert_array_equal(constants(load_graph(tmp_path / "g.json"))["w1"], W1)


def test_an_op_without_c_lowering_plans_but_run_names_it(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="ok"),
         helper.make_node("Hardmax", ["r"], ["y"], name="hm")], "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert runner.invoke(app, ["plan", str(tmp_path / "m.onnx"), "--workers", "1"]).exit_code == 0
    _one_line(runner.invoke(app, ["run", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "y.npz")]),
              "'hm'", "Hardmax")
    assert not (tmp_path / "y.npz").exists()


def test_truncated_external_data_is_one_line_at_run(tmp_path):
    path = tmp_path / "ext.onnx"
    onnx.save(_model(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=1024)
    data = tmp_path / "ext.data"
    data.write_bytes(data.read_bytes()[:1000])
    y = tmp_path / "y.npz"
    _one_line(runner.invoke(app, ["run", str(path), "-o", str(y)]), "ext.data")
    assert not y.exists()
