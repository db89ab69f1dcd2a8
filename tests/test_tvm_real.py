"""TVM's real FuseOps partition (``solverfuse.tvm``) against the ``tvm`` reproduction.

The reference is Apache TVM itself: the partition Relax ``FuseOps`` makes after LegalizeOps,
AnnotateTIROpPattern and FoldConstant, read from the fused module and mapped back to ONNX node
names. ``greedy.tvm`` never calls TVM, so agreement is a real check of the reproduction. Skipped
when TVM (the ``solverfuse[tvm]`` extra) is not installed.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="Apache TVM (the solverfuse[tvm] extra) is not installed")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from solverfuse import cost, greedy  # noqa: E402
from solverfuse.errors import GraphError  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.onnx_import import import_onnx  # noqa: E402
from solverfuse.tvm import edge_agreement, fuseops_partition, fuseops_plan, partition_problems  # noqa: E402

from .conftest import LIGHT_MODELS, ROOT, light_model_path  # noqa: E402

H100 = load_hardware("nvidia-h100")
#: Transformer exports (helper ``imp``'s test set); those our importer reads are used.
EXPORTS = ROOT / "tests" / "data" / "models"
MIN_AGREEMENT = 0.98


def exported_models() -> list[Path]:
    """Exported models under tests/data/models that solverfuse imports (others are skipped)."""
    out = []
    for p in sorted(EXPORTS.glob("*.onnx")):
        try:
            import_onnx(p)
        except GraphError:
            continue
        out.append(p)
    return out


def agreement(path) -> tuple[float, list, object]:
    g = import_onnx(path)
    real = fuseops_partition(path, g)
    assert sorted(v for grp in real.groups for v in grp) == sorted(g.index.order)  # nothing lost
    ours = greedy.tvm(g, H100)
    return edge_agreement(g, real.groups, ours) + (real,)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_reproduction_matches_real_fuseops_on_light_models(name):
    agree, differ, real = agreement(light_model_path(name))
    assert agree >= MIN_AGREEMENT, f"{name}: {agree:.3f} edge agreement, first differences {differ[:5]}"
    assert partition_problems(real.graph, real.groups, H100) == []


#: Transformer exports measured in benchmarks/results/tvm.md (the sweep there covers the rest).
TRANSFORMERS = ("distilbert_ts", "t5_ts", "t5_dynamo", "vit_ts", "clip_vision_ts", "clip_vision_dynamo")


def test_reproduction_matches_real_fuseops_on_transformer_exports():
    transformers = [p for p in exported_models() if p.stem in TRANSFORMERS]
    if len(transformers) < 4:
        pytest.skip(f"fewer than 4 importable transformer exports under {EXPORTS}")
    for p in transformers:
        agree, differ, _ = agreement(p)
        assert agree >= MIN_AGREEMENT, f"{p.stem}: {agree:.3f} edge agreement, first differences {differ[:5]}"


def folding_model():
    """y = relu(x + exp(c)) * 2 with c a 1024x512 non-uniform constant: TVM folds exp(c) before
    fusion (FoldConstant); solverfuse's importer keeps it as a node, its result being over the
    import-time folding cap (onnx_fold's 256K elements)."""
    n, m = 1024, 512
    c = numpy_helper.from_array(np.linspace(0, 1, n * m, dtype=np.float32).reshape(n, m), "c")
    two = numpy_helper.from_array(np.full((n, m), 2.0, np.float32) + np.eye(n, m, dtype=np.float32), "two")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, m])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m])
    nodes = [helper.make_node("Exp", ["c"], ["e"], name="exp"),
             helper.make_node("Add", ["x", "e"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Mul", ["r", "two"], ["y"], name="mul")]
    return helper.make_model(helper.make_graph(nodes, "fold", [x], [y], [c, two]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_real_plan_reports_constant_folded_nodes():
    model = folding_model()
    real = fuseops_partition(model)
    assert real.folded == ["exp"]
    assert sorted(sorted(g) for g in real.groups) == [["add", "mul", "relu"], ["exp"]]
    plan = fuseops_plan(model, H100)
    assert plan.strategy == "tvm-real" and len(plan.groups) == 2
    assert plan.traffic_bytes == sum(cost.group_traffic(real.graph, g) for g in real.groups)
    # the reproduction treats the constant-only node the same way
    assert sorted(sorted(g) for g in greedy.tvm(real.graph, H100)) == [["add", "mul", "relu"], ["exp"]]


def test_real_partition_shows_batch_norm_ending_a_group():
    """On ResNet-50 TVM never fuses a Conv into the BatchNormalization after it (issue 14)."""
    real = fuseops_partition(light_model_path("resnet50"))
    g = real.graph
    where = {v: i for i, grp in enumerate(real.groups) for v in grp}
    bn = [v for v in g.index.order if g.index.node[v].op == "BatchNormalization"]
    assert bn and all(where[u] != where[v] for v in bn for u in g.index.preds[v])


def test_compare_lists_tvm_real(tmp_path):
    from typer.testing import CliRunner
    from solverfuse.cli import app
    path = tmp_path / "fold.onnx"
    onnx.save(folding_model(), path)
    res = CliRunner().invoke(app, ["compare", str(path), "--json", "--time-limit", "5", "--workers", "1"])
    assert res.exit_code == 0, res.output
    rows = {r["strategy"]: r for r in json.loads(res.output)["rows"]}
    assert "tvm-real" in rows and rows["tvm-real"]["groups"] == 2
    assert rows["tvm-real"]["traffic_bytes"] >= rows["optimal"]["traffic_bytes"]
