"""Passes with no tile over short rows run as one loop over all their elements when every op in
them is pointwise at the pass's shape (emit.channels.flat_pass): numerics against ONNX Runtime,
with dims of 1 inside and after the shape, a scalar operand, and the cases that keep the row nest
(a per-channel operand, rows of 64 and more)."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, graph


def _silu_add(shape, other):
    t = {"x": list(shape), "o": {"shape": list(other), "constant": True}}
    nodes = [("s", "Sigmoid", ["x"], ["sg"]), ("m", "Mul", ["x", "sg"], ["h"]), ("a", "Add", ["h", "o"], ["y"])]
    return graph(t, ["x"], ["y"], nodes)


@pytest.mark.parametrize("shape,other,flat", [
    ((1, 96, 4, 4), (1, 96, 4, 4), True),       # EfficientNet's SiLU on a 4x4 plane
    ((2, 6, 5, 1), (1,), True),                 # a trailing dim of 1, a scalar operand
    ((3, 1, 7), (3, 1, 7), True),               # a dim of 1 inside
    ((1, 96, 4, 4), (1, 96, 1, 1), False),      # a per-channel operand: the row nest
    ((2, 3, 64), (2, 3, 64), False),            # rows of 64: the row nest vectorises
])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_passes_over_short_rows_run_as_one_loop(shape, other, flat, threads, cache, small_kernels_parallel):
    g = _silu_add(shape, other)
    groups = [["s", "m", "a"]]
    plan, _, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    n = 1
    for d in shape:
        n *= d
    assert bool(re.search(rf"for \(long i\d+ = 0; i\d+ < {n}; i\d+\+\+\)", src)) == flat


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-flat-cache")


@pytest.mark.parametrize("plane,pads", [((2, 2), [0, 0, 1, 1, 0, 0, 2, 2]), ((6, 5), [0, 0, 1, 0, 0, 0, 2, 1])])
def test_the_math_before_a_pad_runs_at_its_own_shape(plane, pads, cache):
    """Conv + SiLU + constant Pad in one group (EfficientNet's TF-style padding before a strided
    depthwise conv): SiLU never runs inside the padded pass's per-element choice between the pad
    value and the data (on a 2x2 plane it runs in a pass at the conv's shape, on a 6x5 plane in
    the conv tile's epilogue, stored at the padded index); numerics against ONNX Runtime."""
    h, w = plane
    t = {"x": [1, 8, h, w], "w": {"shape": [16, 8, 1, 1], "constant": True},
         "p": {"shape": [8], "dtype": "int64", "constant": True, "value": pads}}
    nodes = [("c", "Conv", ["x", "w"], ["h"]), ("s", "Sigmoid", ["h"], ["sg"]), ("m", "Mul", ["h", "sg"], ["a"]),
             ("pd", "Pad", ["a", "p"], ["y"])]
    g = graph(t, ["x"], ["y"], nodes)
    groups = [["c", "s", "m", "pd"]]
    plan, _, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    assert "sf_expf" in src
    for choice in re.findall(r"float (p\d+) = [^;]+;\n\s*if \((.*?)\1 = ", src, re.S):
        assert "sf_expf" not in choice[1]


@pytest.mark.parametrize("c,hw", [(16, 8), (24, 5)])
def test_layernorm_rows_after_a_permute_are_made_contiguous(c, hw, cache):
    """ConvNeXt's block head: depthwise 7x7 conv, permute to channels-last, LayerNorm over the
    channels, in one group. The permuted rows are materialised contiguous in scratch before the
    statistics (read at the permute's stride they were slower than the unfused kernels); numerics
    against ONNX Runtime."""
    t = {"x": [1, c, hw, hw], "w": {"shape": [c, 1, 7, 7], "constant": True}, "s": {"shape": [c], "constant": True},
         "b": {"shape": [c], "constant": True}}
    nodes = [("dw", "Conv", ["x", "w"], ["h"], {"group": c, "pads": [3, 3, 3, 3]}),
             ("tr", "Transpose", ["h"], ["p"], {"perm": [0, 2, 3, 1]}),
             ("ln", "LayerNormalization", ["p", "s", "b"], ["y"], {"axis": -1, "epsilon": 1e-6})]
    g = graph(t, ["x"], ["y"], nodes)
    plan, _, _ = check(g, [["dw", "tr", "ln"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    # the conv's output and the permuted rows, each in a scratch of their own
    assert src.count("kernel-local scratch, output of") == 2
