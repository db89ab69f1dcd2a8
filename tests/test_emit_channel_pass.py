"""A pass over an NCHW tensor that computes a BatchNormalization (DenseNet: Concat, then the next
layer's BatchNorm + ReLU) loops over (n, c), loads the statistics once per channel, then the
plane (one loop over it when every op is pointwise or a channel Concat) -- against ONNX Runtime at 1 and 2 threads and under the sanitizers, batch 2, with a
plane too small for the split (kept as one nest); the C is checked for the per-channel loads
before the plane's loops (else the test proves nothing)."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, graph

#: the 2-thread kernels here are sized for a 2^18 work threshold (see the fixture)
pytestmark = pytest.mark.usefixtures("small_kernels_parallel")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-channel-pass-cache")


def _concat_bn_relu(n: int, h: int, w: int):
    c = 7
    const = lambda s: {"shape": s, "constant": True}  # noqa: E731
    t = {"a": [n, 3, h, w], "b": [n, 4, h, w], "s": const([c]), "bb": const([c]), "m": const([c]), "v": const([c]),
         "k": const([c, 1, 1])}
    return graph(t, ["a", "b"], ["cat", "y"], [
        ("cat", "Concat", ["a", "b"], ["cat"], {"axis": 1}),
        ("bn", "BatchNormalization", ["cat", "s", "bb", "m", "v"], ["n"], {"epsilon": 1e-3}),
        ("mul", "Mul", ["n", "k"], ["p"]),
        ("r", "Relu", ["p"], ["y"])])


@pytest.mark.parametrize("threads", [1, 2])
def test_batchnorm_pass_loads_statistics_per_channel(threads, cache):
    g = _concat_bn_relu(2, 64, 80)  # enough work for the threads (sharing.PARALLEL_MIN_WORK)
    groups = [["cat", "bn", "mul", "r"]]
    plan, _, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    body = src.split("/* pass")[1]
    # the statistics (and the [C, 1, 1] factor) loaded between the channel loop and the row loop
    head = body.split("for (long i", 3)
    assert len(re.findall(r"const float v\d+ = b\d+\[i\d+\];", head[2] if threads == 1 else head[2] + head[3])) >= 5, body
    assert re.search(r"for \(long i\d+ = 0; i\d+ < 5120; i\d+\+\+\)", body)  # the plane as one loop (64 x 80)
    if threads > 1:
        assert "schedule(guided)" in body
    check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


def test_small_plane_keeps_one_nest(cache):
    g = _concat_bn_relu(1, 3, 4)  # 12 positions per channel: not split
    plan, _, _ = check(g, [["cat", "bn", "mul", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    body = render(plan, g)["model.c"].split("/* pass")[1]
    assert not re.search(r"const float v\d+ = b\d+\[i\d+\];\s+for", body)
