"""Pooling windows that keep the plane's size (stride 1, an odd kernel padded by half its size:
inception's 3x3/1 pad 1 pools) as flat loops over the plane: the window's rows over the interior
rows at once, the edge rows apart, then its columns over the whole plane with the edge columns
recomputed; an average scaled by the reciprocal tap counts; the fused epilogue one loop over the
plane. Against ONNX Runtime: MaxPool / AveragePool, count_include_pad 0 and 1, 3x3, 5x5 and 3x1
windows, batch 2, planes just larger than the window, a BatchNorm + ReLU epilogue at 1 and 2
threads; under AddressSanitizer; each checks that the flat form was emitted."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-pool-same-cache")



CASES = [
    ("AveragePool", (1, 3, 9, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (2, 2, 6, 11), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", (1, 2, 8, 9), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),
    ("MaxPool", (2, 3, 4, 4), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}),
    ("MaxPool", (1, 2, 10, 5), {"kernel_shape": [3, 1], "pads": [1, 0, 1, 0]}),
    ("AveragePool", (1, 2, 7, 13), {"kernel_shape": [1, 5], "auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize("op,shape,attrs", CASES)
def test_same_size_pool_as_flat_loops(op, shape, attrs, cache):
    g = graph({"x": list(shape)}, ["x"], ["y"], [("p", op, ["x"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["p", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    body = src[src.index("/* group 0:"):src.index("int sf_run")]
    assert "sf_pool2d(" not in body and re.search(r"float V\d+\[" + str(shape[2] * shape[3]) + r"\] SF_ALIGN64;", body), body
    # the ReLU epilogue: one loop over the plane
    assert re.search(r"for \(long i\d+ = 0; i\d+ < " + str(shape[2] * shape[3]) + r"; i\d+\+\+\)", body), body
    check(g, [["p", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.usefixtures("small_kernels_parallel")
def test_pool_branch_with_batchnorm(threads, cache):
    """Inception's pool branch input: AveragePool 3x3/1 then BatchNorm + ReLU in one group, its
    statistics loaded once per channel; the channels shared by the threads."""
    c, h, w = 37, 28, 28
    t = {"x": [1, c, h, w], "s": const((c,)), "b": const((c,)), "m": const((c,)), "v": const((c,))}
    g = graph(t, ["x"], ["y"], [("p", "AveragePool", ["x"], ["h"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
                                ("bn", "BatchNormalization", ["h", "s", "b", "m", "v"], ["n"], {"epsilon": 1e-3}),
                                ("r", "Relu", ["n"], ["y"])])
    plan, _, _ = check(g, [["p", "bn", "r"]], cache, rtol=1e-5, atol=1e-5, engine="onnxruntime", threads=threads)
    body = render(plan, g, threads=threads)["model.c"].split("/* pass")[1]
    assert re.search(r"float V\d+\[784\] SF_ALIGN64;", body) and re.search(r"for \(long i\d+ = 0; i\d+ < 784; i\d+\+\+\)", body)
    if threads > 1:
        assert "#pragma omp" in body
