"""A deferred softmax row's max pass and exponentials as one pipelined loop (emit/softmax_pipeline.py):
under AVX-512 each vector of the max pass is computed as GCC vector operations beside the
exponentials of the vector one chunk back, taken at the running max at the end of that chunk, and
the output scales each chunk by its own factor. Checked against ONNX Runtime (code shared with none
of it) on rows whose max grows in every chunk (every chunk's sum rescaled, every chunk's factor
below 1), whose max is the row's last value (past the vector loop), whose max is in its first
chunk, whose max only one lane of its chunk's vector holds, with a NaN, and plain random rows;
for this host's build (the pipelined loop where the host has AVX-512) and without AVX-512 (the
two passes of the #else branch)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from solverfuse.emit import row_loop, row_stream, softmax_pipeline
from solverfuse.emit.build import compile_plan
from solverfuse.emit.program import render
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, graph, host_flags

#: Four full chunks of 512, a part chunk of vectors (2,048-2,112) and one value past the 64-lane blocks.
COLS = 2113
#: Lane 15 of a vector in the third chunk: a chunk max that leaves out any lane (a wrong step of
#: the lanes' max tree) misses it, and its exponential then overflows.
SPIKE = 2 * 512 + 16 * 5 + 15


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-pipeline-cache")


@pytest.fixture
def deferred(monkeypatch):
    """Outputs streamed and deferred at any size (the motif's rows are, at 2x the LLC)."""
    monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(row_stream, "DEFER_MIN_ROW_BYTES", 0)


def _ln_softmax(rows, op="Mul"):
    """softmax(layernorm(x) <op> 2) over rows of COLS (the l1_overflow motif), one row-loop group."""
    g = graph({"x": [rows, COLS], "s": {"shape": [COLS], "constant": True},
               "b": {"shape": [COLS], "constant": True}, "two": {"shape": [], "constant": True, "value": [2.0]}},
              ["x"], ["y"],
              [("ln", "LayerNormalization", ["x", "s", "b"], ["n"], {"axis": -1, "epsilon": 1e-5}),
               ("scale", op, ["n", "two"], ["h"]), ("sm", "Softmax", ["h"], ["y"], {"axis": -1})])
    return g, build_plan(g, HW, [["ln", "scale", "sm"]], strategy="test")


def _inputs(rows):
    rng = np.random.default_rng(11)
    x = rng.normal(0, 1, (rows, COLS)).astype(np.float32)
    x[0] = np.linspace(-3, 3, COLS)          # the max grows in every chunk
    x[1, -1] = 40.0                          # the max is the last value, after the vector loop
    x[2, 3] = 40.0                           # the max is in the first chunk
    x[3, 700] = np.nan
    x[4, SPIKE] = 60.0                       # a max only lane 15 of its chunk holds
    cs = {"s": np.abs(rng.normal(1, 0.3, COLS)).astype(np.float32),
          "b": rng.normal(0, 0.3, COLS).astype(np.float32), "two": np.float32(2.0)}
    cs["s"][SPIKE] = 3.0                     # ~250 after the LayerNorm: e^(it - any smaller max) is inf
    return {"x": x}, cs


def _kernel(src):
    return src[src.index("static int k0("):]


@pytest.mark.parametrize("build", ["native", "no-avx512"])
def test_pipelined_rows_match_onnxruntime(build, deferred, cache, no_avx512_cc):
    """The kernel holds the pipelined loop under AVX-512 and the two passes under #else; both
    builds match ONNX Runtime, the NaN row NaN and no other."""
    g, plan = _ln_softmax(6)
    k0 = _kernel(render(plan, g)["model.c"])
    assert k0.count("sf_oexp16(") == 2 and "sf_osum_total(" in k0, k0  # whole chunks, the part chunk
    avx = k0[k0.index("#if defined(SF_AVX512_TILES)"):]
    assert avx.index("sf_oexp16(") < avx.index("#else") < avx.index("#pragma omp simd reduction(max:")
    assert len(re.findall(r"\bsf_expsum_ln_max\(", k0)) == 1     # the #else branch's call
    ins, cs = _inputs(6)
    got = compile_plan(plan, g, cache_dir=cache, strict=True, cc=no_avx512_cc.get(build)).run(ins, cs)["y"]
    want = reference_outputs(g, ins, cs, engine="onnxruntime")["y"]
    assert np.isnan(want[3]).all() and not np.isnan(np.delete(want, 3, 0)).any()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-8)
    np.testing.assert_allclose(got[[0, 1, 2, 4, 5]].sum(axis=1), 1.0, rtol=1e-5)
    # the spike row's other values are e^-200 or so, 0 in float: no garbage below atol either (a missed
    # max puts an exponential past an exp's range, which only some exps turn into inf)
    np.testing.assert_allclose(got[4], want[4], rtol=2e-5, atol=1e-30)


def test_the_growing_max_rescales_every_chunk(deferred, cache):
    """Row 0's max grows in every chunk: every chunk's factor is e^(chunk max - row max) / sum
    with the chunk max below the row max; the outputs are exp(h - max) / sum to float rounding."""
    if "avx512f" not in host_flags():
        pytest.skip("the pipelined loop is the AVX-512 build's; this host has no AVX-512")
    g, plan = _ln_softmax(6)
    ins, cs = _inputs(6)
    got = compile_plan(plan, g, cache_dir=cache, strict=True).run(ins, cs)["y"][0].astype(np.float64)
    x = ins["x"][0].astype(np.float64)
    h = ((x - x.mean()) / np.sqrt(x.var() + 1e-5) * cs["s"] + cs["b"]) * 2.0
    want = np.exp(h - h.max()) / np.exp(h - h.max()).sum()
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("op, piped", [("Max", False), ("Pow", True), ("Div", True)])
def test_only_plain_arithmetic_bodies_are_pipelined(op, piped, deferred, cache):
    """A max pass with a comparison (Max: a conditional expression) keeps its two passes, no
    AVX-512 branch; a product (Pow by 2) or a division is pipelined, and matches ONNX Runtime."""
    g, plan = _ln_softmax(6, op=op)
    k0 = _kernel(render(plan, g)["model.c"])
    assert ("sf_oexp16(" in k0) == piped and ("SF_AVX512_TILES" in k0) == piped, k0
    if piped:
        ins, cs = _inputs(6)
        got = compile_plan(plan, g, cache_dir=cache, strict=True).run(ins, cs)["y"]
        np.testing.assert_allclose(got, reference_outputs(g, ins, cs, engine="onnxruntime")["y"], rtol=2e-5, atol=1e-8)


@pytest.mark.parametrize("line, ok", [
    ("const float v2 = b0[i1*8 + j] * c3;", True),
    ("const float v2 = b0[j] * 0.5;", False),            # a double literal: the scalar code computes in double
    ("const float v2 = b0[j + 1];", False),              # another index than the loop's
    ("const float v2 = b0[j] > 0 ? b0[j] : 0;", False),  # a comparison
    ("const float v2 = (float)b0[j];", False),           # a cast
    ("const float v2 = E1[j];", False),                  # a read of the kept array
])
def test_vector_body_converts_only_plain_float_arithmetic(line, ok):
    assert (softmax_pipeline.vector_body([line, "E1[j] = v2;"], "j", "E1") is not None) == ok
