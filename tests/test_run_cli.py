"""`solverfuse run`: compile + run a plan, outputs keyed by tensor name, --check/--time/--json,
bad input gets one line naming the tensor and exit 2, with no output file left behind."""
from __future__ import annotations

import json
import statistics

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from solverfuse.api import plan as make_plan
from solverfuse.cli import app
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.sources import load_graph
from solverfuse.plans import save_plan

from .conftest import EXAMPLES

runner = CliRunner()

# Names with a slash and a quote: outputs are keyed by tensor name in the .npz.
ODD = {"format": "solverfuse-graph/1", "name": "odd",
       "tensors": {"in/x": {"shape": [4, 6]}, "b'0": {"shape": [6], "constant": True},
                   "gpu_0/out": {"shape": [4, 6]}},
       "inputs": ["in/x"], "outputs": ["gpu_0/out"],
       "nodes": [{"name": "add", "op": "Add", "inputs": ["in/x", "b'0"], "outputs": ["h"]},
                 {"name": "act", "op": "Tanh", "inputs": ["h"], "outputs": ["s"]},
                 {"name": "norm", "op": "Softmax", "inputs": ["s"], "outputs": ["gpu_0/out"],
                  "attributes": {"axis": -1}}]}


@pytest.fixture
def odd_graph(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(ODD))
    return path


def invoke(*args):
    return runner.invoke(app, ["run", *map(str, args)])


def last_json(output: str) -> dict:
    return json.loads(output[output.index("{"):])


def test_run_writes_outputs_matching_an_independent_reference(odd_graph, tmp_path):
    g = load_graph(odd_graph)
    x = {"in/x": np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)}
    np.savez(tmp_path / "in.npz", **x)
    out = tmp_path / "out.npz"
    r = invoke(odd_graph, "--inputs", tmp_path / "in.npz", "-o", out, "--check", "--json")
    assert r.exit_code == 0, r.output
    res = last_json(r.output)
    assert res["check"]["ok"] and res["check"]["max_abs_error"] < 1e-5
    assert res["outputs"] == {"gpu_0/out": [4, 6]} and res["strategy"] == "optimal"
    with np.load(out) as f:
        assert f.files == ["gpu_0/out"]
        got = f["gpu_0/out"]
    # independent oracle: NumPy by hand on the same constant data
    b = constants(g)["b'0"]
    s = np.tanh(x["in/x"] + b)
    want = np.exp(s) / np.exp(s).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_default_inputs_are_the_seeded_random_inputs(tmp_path):
    path = EXAMPLES / "layernorm_gelu.json"
    g = load_graph(path)
    np.savez(tmp_path / "in.npz", **random_inputs(g, seed=0))
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert invoke(path, "-o", a, "--strategy", "unfused").exit_code == 0
    assert invoke(path, "-o", b, "--strategy", "unfused", "--inputs", tmp_path / "in.npz").exit_code == 0
    with np.load(a) as fa, np.load(b) as fb:
        np.testing.assert_array_equal(fa["y"], fb["y"])
        want = reference_outputs(g, random_inputs(g, 0), constants(g, 0), "onnxruntime")["y"]
        np.testing.assert_allclose(fa["y"], want, rtol=1e-3, atol=1e-4)


def test_plan_file_and_time_json(tmp_path):
    path = EXAMPLES / "residual.json"
    g = load_graph(path)
    p = make_plan(g, "nvidia-h100", strategy="unfused")
    save_plan(p, tmp_path / "plan.json")
    r = invoke(path, "--plan", tmp_path / "plan.json", "--time", "--repeats", "3", "--json", "--check")
    assert r.exit_code == 0, r.output
    res = last_json(r.output)
    assert res["strategy"] == "unfused" and res["groups"] == len(p.groups) == len(g.nodes)
    assert len(res["times"]) == 3 and res["median_seconds"] == statistics.median(res["times"]) > 0
    assert res["check"]["ok"]


def conv_relu_model(path, weights):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 5])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2, 3, 3], weights)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "convrelu", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


def test_onnx_model_input(tmp_path):
    model = conv_relu_model(tmp_path / "m.onnx", np.linspace(-1, 1, 54, dtype=np.float32).tolist())
    r = invoke(model, "--check", "--engine", "reference", "-o", tmp_path / "o.npz")
    assert r.exit_code == 0, r.output
    assert "check vs reference: OK" in r.output
    assert "says little" not in r.output
    with np.load(tmp_path / "o.npz") as f:
        assert f["y"].shape == (1, 3, 5, 5) and (f["y"] >= 0).all() and f["y"].max() > 0


def test_a_constant_reference_output_is_flagged(tmp_path):
    """All-zero weights (a light model's fill) make every output element 0: the check passes, and
    says the match proves little."""
    model = conv_relu_model(tmp_path / "zero.onnx", [0.0] * 54)
    r = invoke(model, "--check", "--engine", "reference")
    assert r.exit_code == 0, r.output
    assert "check vs reference: OK" in r.output
    assert "every element of the reference 'y' is 0 within the tolerance, so this match says little" in r.output
    r = invoke(model, "--check", "--engine", "reference", "--json")
    assert last_json(r.output)["check"]["outputs"]["y"]["reference_flat"] == {"value": 0.0, "informative": 0}


def test_a_saturated_softmax_reference_is_flagged():
    """One class at ~1 and 999 at ~0 (a deep net on random weights): only one element is
    informative. A softmax over 1000 values spread beyond the tolerance is not flagged."""
    from solverfuse.runner import compare_outputs
    onehot = np.full(1000, 1e-12)
    onehot[7] = 1.0
    flat = compare_outputs({"y": onehot}, {"y": onehot})["outputs"]["y"]["reference_flat"]
    assert flat["informative"] == 1 and flat["value"] == pytest.approx(1e-12)
    spread = np.exp(np.linspace(-3, 3, 1000))
    spread /= spread.sum()
    assert "reference_flat" not in compare_outputs({"y": spread}, {"y": spread}, atol=1e-6)["outputs"]["y"]


def test_check_mismatch_exits_1(odd_graph, monkeypatch):
    import solverfuse.emit.reference as ref
    real = ref.reference_outputs

    def off_by_a_bit(*args, **kwargs):
        return {k: v + 0.01 for k, v in real(*args, **kwargs).items()}
    monkeypatch.setattr(ref, "reference_outputs", off_by_a_bit)
    r = invoke(odd_graph, "--check", "--json")
    assert r.exit_code == 1, r.output
    res = last_json(r.output)
    assert not res["check"]["ok"] and res["check"]["max_abs_error"] == pytest.approx(0.01, rel=1e-3)


@pytest.mark.parametrize("case", ["missing", "shape", "extra", "garbage", "dtype", "nofile"])
def test_bad_inputs_one_line_exit_2_no_output(odd_graph, tmp_path, case):
    npz = tmp_path / "in.npz"
    good = np.zeros((4, 6), np.float32)
    if case == "missing":
        np.savez(npz, other=good)
    elif case == "shape":
        np.savez(npz, **{"in/x": np.zeros((6, 4), np.float32)})
    elif case == "extra":
        np.savez(npz, **{"in/x": good, "in/y": good})
    elif case == "garbage":
        npz.write_bytes(b"not a zip file")
    elif case == "dtype":
        np.savez(npz, **{"in/x": np.full((4, 6), "a")})
    out = tmp_path / "out.npz"
    r = invoke(odd_graph, "--inputs", npz, "-o", out)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    if case in ("missing", "shape", "dtype"):
        assert "'in/x'" in lines[0]
    if case == "extra":
        assert "'in/y'" in lines[0]
    assert not out.exists() and not any(p.name.startswith(".out.npz") for p in tmp_path.iterdir())


def test_bad_arguments_exit_2(odd_graph, tmp_path):
    for args in (["--strategy", "nosuch"], ["--plan", tmp_path / "p.json", "--strategy", "xla"],
                 ["--engine", "tvm", "--check"], ["--plan", tmp_path / "missing.json"]):
        r = invoke(odd_graph, *args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.strip().startswith("error:") and "Traceback" not in r.output
    r = invoke(tmp_path / "nope.json")
    assert r.exit_code == 2 and "no such file" in r.output


def test_plan_for_another_graph_is_refused(tmp_path):
    p = make_plan(load_graph(EXAMPLES / "mlp.json"), "nvidia-h100", strategy="unfused")
    save_plan(p, tmp_path / "plan.json")
    r = invoke(EXAMPLES / "residual.json", "--plan", tmp_path / "plan.json", "-o", tmp_path / "o.npz")
    assert r.exit_code == 2 and "another graph" in r.output and not (tmp_path / "o.npz").exists()


def test_threads_give_the_same_outputs(tmp_path):
    path = EXAMPLES / "attention.json"
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert invoke(path, "-o", a, "--strategy", "unfused").exit_code == 0
    r = invoke(path, "-o", b, "--strategy", "unfused", "--threads", "2", "--json")
    assert r.exit_code == 0, r.output
    assert last_json(r.output)["threads"] == 2
    with np.load(a) as fa, np.load(b) as fb:
        np.testing.assert_allclose(fa["y"], fb["y"], rtol=1e-5, atol=1e-6)


def test_unwritable_output_is_one_line(odd_graph, tmp_path):
    r = invoke(odd_graph, "-o", tmp_path / "no" / "such" / "dir" / "out.npz")
    assert r.exit_code == 2 and r.output.startswith("error:") and "cannot write" in r.output
