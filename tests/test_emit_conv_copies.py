"""The convolutions' input copies (sf_conv_copy, sf_conv_copy_cols) are inlined at each call site
with its geometry as constants: a program whose one translation unit holds several geometries --
ConvNeXt's stem (4x4 stride 4), its depthwise 7x7 conv with the permute and LayerNorm fused, its
2x2 stride-2 downsampling and the next stage's depthwise conv on a 4x4 plane, plus a 3x3 conv
(column-shifted copy) -- against ONNX Runtime, at 1 and 2 threads."""
from __future__ import annotations

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-conv-copies-cache")


def _convnext_stages():
    t = {"x": [1, 3, 32, 32], "w0": const([16, 3, 4, 4]), "b0": const([16]),
         "w1": const([16, 1, 7, 7]), "b1": const([16]), "s1": const([16]), "o1": const([16]),
         "w2": const([32, 16, 2, 2]), "b2": const([32]),
         "w3": const([32, 1, 7, 7]), "b3": const([32]), "s3": const([32]), "o3": const([32]),
         "w4": const([8, 16, 3, 3])}
    nodes = [("stem", "Conv", ["x", "w0", "b0"], ["h0"], {"strides": [4, 4]}),
             ("dw1", "Conv", ["h0", "w1", "b1"], ["d1"], {"group": 16, "pads": [3, 3, 3, 3]}),
             ("tr1", "Transpose", ["d1"], ["p1"], {"perm": [0, 2, 3, 1]}),
             ("ln1", "LayerNormalization", ["p1", "s1", "o1"], ["y1"], {"axis": -1, "epsilon": 1e-6}),
             ("down", "Conv", ["h0", "w2", "b2"], ["h2"], {"strides": [2, 2]}),
             ("dw3", "Conv", ["h2", "w3", "b3"], ["d3"], {"group": 32, "pads": [3, 3, 3, 3]}),
             ("tr3", "Transpose", ["d3"], ["p3"], {"perm": [0, 2, 3, 1]}),
             ("ln3", "LayerNormalization", ["p3", "s3", "o3"], ["y3"], {"axis": -1, "epsilon": 1e-6}),
             ("c3x3", "Conv", ["h0", "w4"], ["y4"], {"pads": [1, 1, 1, 1]})]
    groups = [["stem"], ["dw1", "tr1", "ln1"], ["down"], ["dw3", "tr3", "ln3"], ["c3x3"]]
    return graph(t, ["x"], ["y1", "y3", "y4"], nodes), groups


@pytest.mark.parametrize("threads", [1, 2])
def test_inlined_conv_copies_of_several_geometries_in_one_unit_match_onnxruntime(threads, cache):
    g, groups = _convnext_stages()
    plan, _, _ = check(g, groups, cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    # the copies this test is about were emitted, each call with its own geometry
    calls = [ln.strip() for ln in src.splitlines() if ln.strip().startswith(("sf_conv_copy(", "sf_conv_copy_cols("))]
    assert len({c.split(",", 2)[2] for c in calls}) >= 3, calls
