"""A convolution onto a wide plane (112 columns and more) copies each band of output rows' input
(every channel's rows with the taps' halo) just before its blocks of output channels read it, one
copy per thread, instead of copying the whole input first: checked against ONNX Runtime at 1 and
2 threads on the geometries that take it -- stride 1 and 2, a 7x7 stem split by stride phase, a
stride-2 3x3 on column-shifted copies, dilation, two groups, a batch of two -- where the padding
above and below each band, and each band's first row, are what a wrong shift gets wrong."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-conv-bands-cache")


#: name -> (input shape, weight shape, attributes): all onto output planes 112 or more wide
CASES = {
    "3x3": ([1, 8, 128, 128], [16, 8, 3, 3], {"pads": [1, 1, 1, 1]}),
    "7x7_stride2": ([1, 3, 224, 224], [8, 3, 7, 7], {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    "3x3_stride2": ([1, 4, 226, 226], [8, 4, 3, 3], {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3_dilated": ([1, 4, 116, 116], [8, 4, 3, 3], {"pads": [0, 0, 0, 0], "dilations": [2, 2]}),
    "grouped": ([1, 8, 128, 128], [16, 4, 3, 3], {"pads": [1, 1, 1, 1], "group": 2}),
    "batch2": ([2, 4, 112, 112], [8, 4, 3, 3], {"pads": [1, 2, 1, 0]}),
}


def _conv_relu(case):
    xs, ws, attrs = CASES[case]
    t = {"x": xs, "w": const(ws), "b": const([ws[0]])}
    nodes = [("conv", "Conv", ["x", "w", "b"], ["h"], attrs), ("relu", "Relu", ["h"], ["y"])]
    return graph(t, ["x"], ["y"], nodes)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wide_plane_conv_copies_its_input_band_by_band_and_matches_onnxruntime(case, threads, cache):
    g = _conv_relu(case)
    groups = [["conv", "relu"]]
    plan, _, _ = check(g, groups, cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    # the banded copy this test is about: one copy call inside the band loop, its padding shifted
    # by the band's first row, and (with threads) each thread's own copy
    assert "each thread's copy of a band" in src
    calls = [ln.strip() for ln in src.splitlines() if re.match(r"\s*sf_conv_copy(_cols)?\(", ln)]
    assert len(calls) == 1 and re.search(r", \d+ - t\d+(\*2)?, \d+", calls[0]), calls
    assert ("(long)SF_TID()*" in src) == (threads > 1)
