"""TVM built along a solverfuse plan (``solverfuse.tvm.apply_plan`` + FuseTIR, llvm, Relax VM):
outputs match ONNX Runtime on the same model, weights and inputs. Skipped without TVM."""
from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm", reason="Apache TVM (the solverfuse[tvm] extra) is not installed")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from solverfuse.api import plan as make_plan  # noqa: E402
from solverfuse.plans import build_plan  # noqa: E402
from solverfuse.tvm import apply_plan, build, count_kernels, fuse_ops, prepare, run  # noqa: E402
from solverfuse.light import seeded_weights  # noqa: E402
from solverfuse.tvm.build import seeded_inputs  # noqa: E402

from .conftest import light_model_path  # noqa: E402
from .test_tvm_real import exported_models  # noqa: E402


def onnxruntime_outputs(model, inputs):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts).run(None, inputs)


def check(model, plan_of, inputs=None, rtol=1e-4):
    """Build ``model`` along ``plan_of(graph)`` and along TVM's FuseOps; both match ONNX Runtime."""
    prep = prepare(model)
    g = prep.graph
    xs = inputs if inputs is not None else seeded_inputs(g, seed=0)
    want = onnxruntime_outputs(prep.model, dict(zip(g.inputs, xs)))
    plan = plan_of(g)
    fused = apply_plan(prep, plan)
    for mod in (fused, fuse_ops(prep.pre)):
        got = run(build(mod), xs)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert float(np.std(b)) > 0  # a uniform reference would not check anything
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * float(np.abs(b).max()))
    return prep, plan, fused


def two_output_model():
    """h = exp(x) feeds relu (graph output) and neg: a group {exp, relu} must return h too."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [16, 32]) for n in ("y1", "y2")]
    nodes = [helper.make_node("Exp", ["x"], ["h"], name="exp"),
             helper.make_node("Relu", ["h"], ["y1"], name="relu"),
             helper.make_node("Neg", ["h"], ["n"], name="neg"),
             helper.make_node("Mul", ["n", "y1"], ["y2"], name="add")]
    return helper.make_model(helper.make_graph(nodes, "two", [x], outs),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_multi_output_group_matches_onnxruntime():
    prep, plan, fused = check(two_output_model(),
                              lambda g: build_plan(g, "nvidia-h100", [["exp", "relu"], ["neg", "add"]],
                                                   strategy="manual"))
    assert count_kernels(fused) == 2


def test_optimal_plan_on_squeezenet_matches_onnxruntime():
    model = seeded_weights(onnx.load(light_model_path("squeezenet")), seed=0)
    prep, plan, fused = check(model, lambda g: make_plan(g, "nvidia-h100", strategy="optimal",
                                                         time_limit=5, workers=1))
    # one TVM kernel per plan group, give or take the ops TVM lowers to several kernels
    assert count_kernels(fused) < count_kernels(fuse_ops(prep.pre))


def test_optimal_plan_on_transformer_exports_matches_onnxruntime():
    paths = [p for p in exported_models() if p.stem in ("distilbert_ts", "t5_ts", "vit_ts")]
    if not paths:
        pytest.skip("no transformer exports under tests/data/models")
    for p in paths:
        model = seeded_weights(onnx.load(p), seed=0)
        with np.load(p.with_suffix(".inputs.npz")) as f:
            named = {k: f[k] for k in f.files}
        graph_inputs = [i.name for i in model.graph.input if i.name in named]
        check(model, lambda g: make_plan(g, "nvidia-h100", strategy="optimal", time_limit=5, workers=1),
              inputs=[named[n] for n in graph_inputs])


def test_group_across_an_elided_dropout_matches_onnxruntime():
    """solverfuse elides an inference Dropout, TVM keeps a copy kernel for it; a plan fusing the
    ops on both sides of it must pull that kernel into the group (else a path leaves the group
    and re-enters it: the cycle inception_v1's optimal plan hit)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 32])
    nodes = [helper.make_node("Exp", ["x"], ["h"], name="exp"),
             helper.make_node("Dropout", ["h"], ["d"], name="drop"),
             helper.make_node("Neg", ["d"], ["y"], name="neg")]
    model = helper.make_model(helper.make_graph(nodes, "drop", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    prep, plan, fused = check(model, lambda g: build_plan(g, "nvidia-h100", [["exp", "neg"]], strategy="manual"))
    assert count_kernels(fused) == 1
