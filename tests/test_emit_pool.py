"""The pooling tiles (bounds-free loops per window tap over a row or plane of outputs) against
ONNX Runtime: MaxPool/AveragePool in 1-D, 2-D and 3-D with stride, padding, dilation, ceil_mode
and count_include_pad, each with a fused epilogue, one under the sanitizers; each checks that
the tile was emitted (else the test proves nothing)."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, graph, host_flags


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-pool-cache")


@pytest.mark.parametrize("op,shape,attrs", [
    ("MaxPool", (2, 3, 11, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 2, 13, 10), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1],
                                 "dilations": [2, 1], "ceil_mode": 1}),
    ("MaxPool", (1, 4, 17), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ("AveragePool", (1, 3, 9, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (2, 2, 8, 7), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "count_include_pad": 1}),
    ("AveragePool", (1, 2, 7, 9), {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 0, 1], "ceil_mode": 1}),
    ("AveragePool", (1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 3], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 1, 1]}),
])
def test_pool_tile_with_epilogue(op, shape, attrs, cache):
    t = {"x": list(shape)}
    g = graph(t, ["x"], ["y"], [("p", op, ["x"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["p", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    assert ("static const int cnt" in src) if op == "AveragePool" else ("-INFINITY" in src)
    assert "if (p" not in src.split("/* pass")[1].split("for (long j")[-1]  # no per-element bounds check


def test_pool_tiles_under_sanitizer(cache):
    t = {"x": [1, 2, 7, 6]}
    g = graph(t, ["x"], ["y", "z"], [
        ("mp", "MaxPool", ["x"], ["y"], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
        ("ap", "AveragePool", ["x"], ["z"], {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0], "count_include_pad": 1})])
    check(g, [["mp"], ["ap"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("op,shape,attrs", [
    ("MaxPool", (2, 3, 9, 70), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 2, 11, 67), {"kernel_shape": [2, 3], "strides": [2, 2], "dilations": [2, 1], "ceil_mode": 1}),
    ("AveragePool", (1, 2, 8, 66), {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 0, 1, 1],
                                    "count_include_pad": 1}),
    ("AveragePool", (1, 1, 40, 30, 70), {"kernel_shape": [2, 3, 3], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 1, 1]}),
])
def test_pool_separable_rows(op, shape, attrs, cache):
    """Rows of 32+ outputs: the window in two 1-D passes (along the columns per input row, then
    along the rows), also under a 3-D pool's outer taps and under the sanitizers; matches ONNX Runtime."""
    t = {"x": list(shape)}
    g = graph(t, ["x"], ["y"], [("p", op, ["x"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["p", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    # a 2-D window without dilation takes sf_pool2d (rows first), the others the column-first passes
    plane2d = len(shape) == 4 and attrs.get("dilations", [1, 1]) == [1, 1]
    assert ("sf_pool2d(T" in src) if plane2d else re.search(r"float R\d+\[", src)
    check(g, [["p", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("op,shape,attrs", [
    ("MaxPool", (2, 3, 111, 111), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("MaxPool", (1, 2, 14, 13), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 2, 10, 11), {"kernel_shape": [4, 3], "strides": [3, 1], "pads": [2, 0, 1, 2]}),
    ("AveragePool", (1, 2, 9, 8), {"kernel_shape": [3, 3], "strides": [3, 3], "pads": [2, 2, 2, 2]}),
    ("AveragePool", (1, 3, 7, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                   "count_include_pad": 1, "ceil_mode": 1}),
    ("AveragePool", (2, 2, 28, 28), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    # column stride 2, rows of 16+ outputs: the vector blocks, taps shifted by up to 2 columns
    ("MaxPool", (1, 2, 9, 75), {"kernel_shape": [3, 5], "strides": [2, 2], "pads": [1, 2, 1, 2]}),
    ("AveragePool", (1, 2, 8, 70), {"kernel_shape": [2, 4], "strides": [2, 2]}),
])
def test_pool_plane_helper(op, shape, attrs, cache):
    """sf_pool2d (a whole 2-D plane: the window's rows first, then its columns at the stride) with
    stride > kernel side, asymmetric pads, ceil_mode, windows wholly in the padding (AveragePool:
    output 0), count_include_pad, and at column stride 2 the AVX-512 blocks of 16 outputs (38 and
    34 wide: two blocks and a scalar tail); matches ONNX Runtime, also under the sanitizers."""
    t = {"x": list(shape)}
    g = graph(t, ["x"], ["y"], [("p", op, ["x"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["p", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    assert "sf_pool2d(T" in render(plan, g)["model.c"]
    check(g, [["p", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


#: column stride 2: blocks of 8 outputs (AVX2) and of 16 (AVX-512) with tails of every length
#: class, kernels 2 and 3 wide (the even/odd streams) and 5 wide (a load per tap); windows wholly
#: inside the input (one loop over the window's rows) and padded ones (a loop per row)
STRIDE2 = [
    ("MaxPool", (2, 3, 111, 111), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("MaxPool", (1, 2, 9, 77), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 3, 10, 36), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", (1, 2, 12, 35), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 2, 9, 75), {"kernel_shape": [3, 5], "strides": [2, 2], "pads": [1, 2, 1, 2]}),
    ("AveragePool", (1, 2, 11, 49), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ("AveragePool", (1, 2, 8, 46), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                    "count_include_pad": 1}),
]


@pytest.mark.parametrize("build", ["native", "no-avx512", "portable"])
@pytest.mark.parametrize("op,shape,attrs", STRIDE2)
def test_pool_stride2_columns_at_every_target(build, op, shape, attrs, cache, no_avx512_cc):
    """sf_pool2d at column stride 2 built for this host, for AVX2 (no AVX-512) and for neither:
    a pool alone (its planes written straight into the output) and with a ReLU epilogue (a
    stack tile), against ONNX Runtime."""
    if build == "no-avx512" and not {"avx2", "fma"} <= host_flags():
        pytest.skip("the host cannot run AVX2+FMA code")
    cc = None if build == "native" else no_avx512_cc[build]
    t = {"x": list(shape)}
    alone = graph(t, ["x"], ["y"], [("p", op, ["x"], ["y"], attrs)])
    fused = graph(t, ["x"], ["y"], [("p", op, ["x"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    for g, groups in ((alone, [["p"]]), (fused, [["p", "r"]])):
        plan, _, _ = check(g, groups, cache / build, rtol=1e-5, atol=1e-6, engine="onnxruntime", cc=cc)
        src = render(plan, g)["model.c"]
        kernel = src[src.index("static int k0("):]
        assert "sf_pool2d(" in kernel
        # alone: no stack tile and no copy loop; with the epilogue: the tile, then the ReLU loop
        assert ("float T" in kernel) == (g is fused) and ("sf_pool2d(O" in kernel) == (g is alone)


def test_pool_planes_written_in_place_with_threads_and_sanitizers(cache):
    """A pool alone writes each plane straight into its output: at 2 threads (the threads take
    disjoint planes) and under the sanitizers (no write outside the output, the row buffer
    included), AveragePool's tap counts with padding included, against ONNX Runtime."""
    t = {"x": [2, 8, 56, 56]}
    g = graph(t, ["x"], ["y", "z"], [
        ("mp", "MaxPool", ["x"], ["y"], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("ap", "AveragePool", ["x"], ["z"], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                              "count_include_pad": 0})])
    check(g, [["mp"], ["ap"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=2)
    check(g, [["mp"], ["ap"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)
    src = render(build_plan(g, HW, [["mp"], ["ap"]], strategy="t"), g, threads=2)["model.c"]
    assert src.count("sf_pool2d(O") == 2 and "float T" not in src
