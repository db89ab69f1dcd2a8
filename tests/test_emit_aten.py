"""The C emitter's lowerings of the ATen-only op rows (ops of torch.export graphs with no ONNX
operator) against references written here: numpy formulas, and torch eager where torch is
installed. One kernel per op (the unfused plan) and one fused plan."""
from __future__ import annotations

import numpy as np
import pytest

from solverfuse.emit.build import compile_plan
from solverfuse.plans import build_plan

from .emit_helpers import HW, fuse_greedily, graph, unfused

RNG = np.random.default_rng(20261201)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-aten-cache")


def run_c(g, groups, cache_dir, ins):
    plan = build_plan(g, HW, groups, strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=cache_dir, counters=False, threads=1)
    return prog.run(ins, {})


def close(got, want, rtol=1e-5, atol=1e-6):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _elementwise_graph():
    t = {"x": [3, 5, 4], "p": [3, 5, 4], "i1": {"shape": [3, 1, 4], "dtype": "int64"},
         "i2": {"shape": [5, 4], "dtype": "int64"}, "f1": [5, 1]}
    nodes = [("rs", "Rsqrt", ["p"], ["o_rs"]), ("si", "Silu", ["x"], ["o_si"]),
             ("ne_i", "NotEqual", ["i1", "i2"], ["o_ne_i"]), ("ne_f", "NotEqual", ["x", "f1"], ["o_ne_f"])]
    g = graph(t, ["x", "p", "i1", "i2", "f1"], [o for n in nodes for o in n[3]], nodes)
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    f1 = x[0, :, :1].copy()  # some equal, some not
    f1[::2] += 1.0
    ins = {"x": x, "p": RNG.uniform(0.1, 4.0, (3, 5, 4)).astype(np.float32),
           "i1": RNG.integers(0, 3, (3, 1, 4)), "i2": RNG.integers(0, 3, (5, 4)), "f1": f1}
    return g, ins


@pytest.mark.parametrize("fused", [False, True])
def test_rsqrt_silu_not_equal(cache, fused):
    g, ins = _elementwise_graph()
    out = run_c(g, fuse_greedily(g) if fused else unfused(g), cache, ins)
    x, p = ins["x"].astype(np.float64), ins["p"].astype(np.float64)
    close(out["o_rs"], (1.0 / np.sqrt(p)).astype(np.float32))
    close(out["o_si"], (x / (1.0 + np.exp(-x))).astype(np.float32))
    assert out["o_ne_i"].dtype == np.bool_
    np.testing.assert_array_equal(out["o_ne_i"], ins["i1"] != ins["i2"])
    np.testing.assert_array_equal(out["o_ne_f"], ins["x"] != ins["f1"])
    assert out["o_ne_f"].any() and not out["o_ne_f"].all()
