"""The exported transformers set (tests/data/models, see tests/model_set.py), end to end: every
model imports, plans with a proven optimum whose traffic lies between Q_min and the unfused
traffic, and `solverfuse run model.onnx --inputs x.npz -o y.npz` matches ONNX Runtime run on the
same model file (max abs error <= 1e-4 x max |reference|). Constant subgraphs (T5's position
buckets, RoPE tables) are folded at import."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from solverfuse import cost
from solverfuse.cli import app
from solverfuse.onnx_import import import_onnx

from .model_set import MODELS_DIR, load_inputs, materialise, model_names

runner = CliRunner()
NAMES = model_names()
FAMILIES = {"bert", "roberta", "distilbert", "gpt2", "llama", "mistral", "t5", "bart", "whisper",
            "vit", "clip_vision", "convnext", "resnet", "mobilenet_v2", "efficientnet"}


def test_the_set_covers_every_family_and_both_exporters():
    assert len(NAMES) >= 20
    assert {n.rsplit("_", 1)[0] for n in NAMES} == FAMILIES
    assert {n.rsplit("_", 1)[1] for n in NAMES} == {"ts", "dynamo"}
    assert sum(p.stat().st_size for p in MODELS_DIR.iterdir()) < 3 << 20


@pytest.mark.parametrize("name", NAMES)
def test_model_runs_like_onnxruntime_on_its_own_file(name, tmp_path):
    import onnxruntime as ort
    full = tmp_path / f"{name}.onnx"
    onnx.save(materialise(MODELS_DIR / f"{name}.onnx", seed=1), str(full))
    feeds = load_inputs(name)
    np.savez(tmp_path / "x.npz", **feeds)
    y = tmp_path / "y.npz"
    plan = tmp_path / "plan.json"
    r = runner.invoke(app, ["plan", str(full), "--workers", "2", "--time-limit", "300", "-o", str(plan)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["run", str(full), "--plan", str(plan), "--inputs", str(tmp_path / "x.npz"),
                            "-o", str(y), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["status"] == "optimal" and res["random_constants"] == 0
    g = import_onnx(full)
    assert cost.q_min(g) <= res["traffic_bytes"] <= cost.unfused_traffic(g)
    sess = ort.InferenceSession(str(full), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    with np.load(y) as f:
        for k, ref in want.items():
            scale = float(np.abs(ref).max())
            assert scale > 1e-3, f"{k}: reference vanishes, the test would prove nothing"
            assert float(np.abs(f[k] - ref).max()) <= 1e-4 * scale, k


@pytest.mark.parametrize("name, gone", [("t5_ts", {"Log", "Abs"}), ("llama_ts", {"Cos", "Sin"}),
                                        ("mistral_ts", {"Cos", "Sin"})])
def test_constant_subgraphs_are_folded(name, gone):
    model = onnx.load(str(MODELS_DIR / f"{name}.onnx"))
    assert gone <= {n.op_type for n in model.graph.node}  # the export computes them ...
    stats = {}
    g = import_onnx(model, stats=stats)
    assert not gone & {n.op for n in g.nodes}  # ... from constants only: folded away
    assert stats["folded_nodes"] >= 5


@pytest.mark.parametrize("name", NAMES)
def test_no_all_constant_node_is_left(name):
    g = import_onnx(MODELS_DIR / f"{name}.onnx")
    for n in g.nodes:
        ins = [t for t in n.inputs if t]
        assert not all(g.tensors[t].constant for t in ins), f"{n.name} ({n.op}) reads only constants"
