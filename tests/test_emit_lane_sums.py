"""Row sums in vector lanes (emit/row_loop.lane_sums: a row under 64 by one simd reduction, else
whole chunks of 64 lanes, then the row's last n % 64 by a simd reduction, blocks of 1,024 added
in double) against ONNX Runtime, at row lengths that take every path: shorter than a chunk, whole
chunks only, chunks and a remainder, and more than one block with a remainder; the LayerNorm
statistics (its one shifted pass with two sums), a ReduceMean row (the center motif) and a
LogSoftmax's exp sum (a row loop that keeps no exponentials) use it. Float64 rows keep their
double loops and are checked too. The lanes' order is checked bit for bit against NumPy."""
from __future__ import annotations

import re

import numpy as np
import pytest

from solverfuse import zoo
from solverfuse.emit.program import render
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, fuse_greedily, graph, run_plan

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


@pytest.mark.parametrize("op,shape,scale", [
    ("GlobalAveragePool", (2, 6, 13, 13), None),       # 169: chunks of lanes and a remainder
    ("ReduceSum", (2, 3, 5, 7), None),                 # 35: one simd reduction
    ("GlobalAveragePool", (1, 4, 9, 9), (1, 1, 9, 9)),  # a scale of the plane's own shape
    ("GlobalAveragePool", (1, 4, 9, 9), (1, 1, 9, 1)),  # a scale per row: the nested loops
])
def test_sums_over_trailing_axes_as_one_loop_match_onnxruntime(op, shape, scale, cache):
    """A sum/mean over the trailing axes (reductions.flat_trailing) that later ops of its group
    read (here a Softmax over the channels, as in SqueezeNet's classifier) runs as ONE loop over
    the reduced elements when every op computed inline reads the plane's own trailing shape or
    ones (a ReLU, a Mul by a same-shape scale); a Mul by a [.., 9, 1] scale keeps a loop per axis."""
    t = {"x": list(shape)}
    nodes = [("r", "Relu", ["x"], ["h"])]
    if scale is not None:
        t["s"] = {"shape": list(scale), "constant": True}
        nodes.append(("m", "Mul", ["h", "s"], ["h2"]))
    src = nodes[-1][3][0]
    if op == "ReduceSum":
        t["ax"] = {"shape": [2], "dtype": "int64", "constant": True, "value": [2, 3]}
        nodes.append(("p", op, [src, "ax"], ["z"], {"keepdims": 1}))
    else:
        nodes.append(("p", op, [src], ["z"]))
    nodes.append(("o", "Softmax", ["z"], ["y"], {"axis": 1}))
    g = graph(t, ["x"], ["y"], nodes)
    plan, _, _ = check(g, [[n[0] for n in nodes]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    body = render(plan, g)["model.c"]
    body = body[body.index("/* pass: " + op):]
    body = body[:body.index("/* pass:", 1)]
    plane = shape[2] * shape[3]
    flat = scale is None or scale[-1] == shape[-1]
    assert (f"< {plane}" in body or f", {plane})" in body) == flat, body


def _lane_order_mean(x: np.ndarray) -> np.float32:
    """The row mean as lane_sums documents its order, in NumPy float32/float64 arithmetic: per
    block of 1,024 values, 64 float lanes each adding its values in row order, the lanes added
    pairwise (l and l + 32, then l + 16, ... 1), each block's float added to a double."""
    total = 0.0
    for jb in range(0, x.size, 1024):
        lanes = np.zeros(64, np.float32)
        for chunk in x[jb:jb + 1024].reshape(-1, 64):
            lanes = lanes + chunk
        w = 32
        while w:
            lanes = lanes[:w] + lanes[w:2 * w]
            w //= 2
        total += float(lanes[0])
    return np.float32(total / x.size)


def test_row_sum_lanes_are_added_in_their_documented_order(cache):
    """sf_lanesum64 (AVX-512: vector adds and sf_hsum16) adds the 64 lanes in the order of one loop
    per level, so the row mean -- and x - mean, bit for bit -- is the one NumPy computes in that
    order; values of mixed magnitudes make a different order round differently."""
    n = 33 * 64  # two whole blocks and one chunk: no simd-reduction remainder
    g = zoo.center(3, n)
    _, prog, _, _, _ = run_plan(g, [[v.name for v in g.nodes]], cache)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((3, n)) * 10.0 ** rng.integers(-3, 4, size=(3, n))).astype(np.float32)
    want = np.stack([row - _lane_order_mean(row) for row in x])
    np.testing.assert_array_equal(prog.run({"x": x})["y"], want)
    assert not np.array_equal(np.stack([row - row.mean(dtype=np.float32) for row in x]), want)


@pytest.mark.parametrize("n", [7, 32])
def test_a_short_row_prefetches_the_next_row_only(n):
    """A row shorter than a chunk of lanes prefetches the next row's n values, one prefetch per
    64-byte line, and nothing past it (it had asked for a whole block of the exp sum's size, 256
    and then 1,024 values: 64 prefetches per row of 32 made the llama and t5 exports 9-14% slower)."""
    g = zoo.center(8, n)
    c = render(build_plan(g, HW, fuse_greedily(g), strategy="test"), g)["model.c"]
    loops = re.findall(r"for \(long q\d+ = 0; q\d+ < (\d+); q\d+ \+= 16\) \{\n\s*__builtin_prefetch", c)
    assert loops == [str(n)], loops
