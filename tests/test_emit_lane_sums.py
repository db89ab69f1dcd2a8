"""Row sums in vector lanes (emit/row_loop.lane_sums: a row under 64 by one simd reduction, else
whole chunks of 64 lanes, then the row's last n % 64 by a simd reduction, blocks of 1,024 added
in double) against ONNX Runtime, at row lengths that take every path: shorter than a chunk, whole
chunks only, chunks and a remainder, and more than one block with a remainder; the LayerNorm
statistics (its two passes), a ReduceMean row (the center motif) and a LogSoftmax's exp sum (a
row loop that keeps no exponentials) use it. Float64 rows keep their double loops and are
checked too."""
from __future__ import annotations

import pytest

from solverfuse import zoo

from .emit_helpers import check, fuse_greedily, graph

#: < 64, 64 * k, 64 * k + r, > 1,024 with a remainder (l1_overflow's 4,912 is of this kind)
LENGTHS = [7, 128, 77, 2113]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-lane-sums-cache")


@pytest.mark.parametrize("n", LENGTHS)
def test_layernorm_rows_of_every_length_match_onnxruntime(n, cache):
    g = zoo.residual_layernorm_gelu(6, n)
    check(g, fuse_greedily(g), cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")


@pytest.mark.parametrize("n", LENGTHS)
def test_row_means_of_every_length_match_onnxruntime(n, cache):
    g = zoo.center(6, n)
    check(g, fuse_greedily(g), cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")


@pytest.mark.parametrize("n", LENGTHS)
def test_log_softmax_rows_of_every_length_match_onnxruntime(n, cache):
    g = graph({"x": [5, n], "m": {"shape": [n], "constant": True}}, ["x"], ["y"],
              [("a", "Add", ["x", "m"], ["h"]), ("s", "LogSoftmax", ["h"], ["y"], {"axis": -1})])
    check(g, [["a", "s"]], cache, rtol=1e-5, atol=1e-5, engine="onnxruntime")


@pytest.mark.parametrize("n", [77, 2113])
def test_float64_rows_match_the_reference(n, cache):
    f64 = {"shape": [4, n], "dtype": "float64"}
    g = graph({"x": f64, "r": f64}, ["x", "r"], ["y", "z"],
              [("a", "Add", ["x", "r"], ["h"]), ("m", "ReduceMean", ["h"], ["c"], {"axes": [1], "keepdims": 1}),
               ("d", "Sub", ["h", "c"], ["y"]), ("s", "Softmax", ["h"], ["z"], {"axis": -1})])
    check(g, [["a", "m", "d", "s"]], cache, rtol=1e-12, atol=1e-12)
