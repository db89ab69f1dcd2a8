"""The convolutions' input copies (sf_conv_copy, sf_conv_copy_cols) are inlined at each call site
with its geometry as constants: a program whose one translation unit holds several geometries --
ConvNeXt's stem (4x4 stride 4), its depthwise 7x7 conv with the permute and LayerNorm fused, its
2x2 stride-2 downsampling and the next stage's depthwise conv on a 4x4 plane, plus a 3x3 conv
(column-shifted copy) -- against ONNX Runtime, at 1 and 2 threads."""
from __future__ import annotations

import re

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


def _arena_offset(src: str, kernel: str, scratch: str) -> int:
    """The arena offset of kernel ``kernel``'s scratch array ``scratch``: its parameter slot in
    the kernel, the X index the run passes there, that slot's entry in ``sf_offset``."""
    body = src[src.index(f"static int {kernel}(void *const *B)"):]
    param = int(re.search(rf"\b{scratch} = \(float \*\)B\[(\d+)\]", body).group(1))
    args = re.search(rf"\b{kernel}\(\(void \*const\[\]\)\{{([^}}]*)\}}\)", src).group(1).split(", ")
    slot = int(re.fullmatch(r"X\[(\d+)\]", args[param]).group(1))
    offsets = re.search(r"sf_offset\[SF_NUM_SLOTS \+ 1\] = \{([^}]*)\}", src).group(1).split(", ")
    return int(offsets[slot])


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_copy_a_conv_input_each_for_itself_into_one_region(threads, cache):
    """With threads, each thread copies the whole input of a 3x3 conv into a part of its own (it
    then writes lines only it has used; sharing one copy, each wrote half into lines the other had
    read) and its tiles read that part; every kernel's parts start at the same address. The
    results match ONNX Runtime at 1 and 2 threads."""
    # the second conv's output (live while it and the Relu after it run) outgrows the first
    # conv's copies: where each kernel's copies were scratch of its own, the arena put the first
    # conv's at its start and the second's after that output
    t = {"x": [1, 64, 28, 28], "w1": const([16, 64, 3, 3]), "w2": const([512, 16, 3, 3])}
    nodes = [("c1", "Conv", ["x", "w1"], ["a"], {"pads": [1, 1, 1, 1]}),
             ("c2", "Conv", ["a", "w2"], ["d"], {"pads": [1, 1, 1, 1]}),
             ("r", "Relu", ["d"], ["y"], {})]
    g = graph(t, ["x"], ["y"], nodes)
    plan, _, _ = check(g, [["c1"], ["c2"], ["r"]], cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    copies = re.findall(r"(sf_conv_copy\w*)\((s\d+)( \+ c\d+\*(\d+))?, (b\d+)(?: \+ [^,]*)?, (\d+), ", src)
    assert len(copies) == 2, copies
    if threads == 1:
        assert "each thread's" not in src and all(not c[2] for c in copies)
        return
    offsets = set()
    for kernel, (fn, s, _, per, _, planes) in zip(("k0", "k1"), copies):
        assert planes == ("64" if kernel == "k0" else "16")  # every input channel, by every thread
        assert f"({s} + (long)SF_TID()*{per})" in src  # the tiles read the calling thread's copy
        offsets.add(_arena_offset(src, kernel, s))
    assert len(offsets) == 1, offsets
