"""A LayerNorm's row statistics carried from row to row (emit/norm_stats.py): in a serial row loop
whose Softmax keeps its exponentials, every row but the loop's first gets its mean and variance
from the previous row's ``sf_expsum_ln`` call (row_helpers.py), which sums the next row's shifted
values and squares in the exponentials' loop. Checked against ONNX Runtime (code shared with
none of it) for this host's build, without AVX-512 (the AVX2 loop), without AVX2 (the portable
loop) and under the sanitizers, on rows that take the second pass (a shift far from the mean),
a row with a NaN, rows of a large mean against their spread, and a loop over two row indices
(each inner sweep starts with its own statistics)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from solverfuse.emit import norm_stats, row_loop, row_stream
from solverfuse.emit.build import compile_plan
from solverfuse.emit.program import render
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, graph

#: A row of 2,113 floats (8,452 bytes: above CARRY_MIN_ROW_BYTES) ends in a partial vector and block.
COLS = 2113


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-carried-cache")


def _ln_softmax(shape):
    """softmax(layernorm(x) * 2) over the last axis (the l1_overflow motif), one row-loop group."""
    cols = shape[-1]
    g = graph({"x": list(shape), "s": {"shape": [cols], "constant": True}, "b": {"shape": [cols], "constant": True},
               "two": {"shape": [], "constant": True, "value": [2.0]}}, ["x"], ["y"],
              [("ln", "LayerNormalization", ["x", "s", "b"], ["n"], {"axis": -1, "epsilon": 1e-5}),
               ("scale", "Mul", ["n", "two"], ["h"]), ("sm", "Softmax", ["h"], ["y"], {"axis": -1})])
    return g, build_plan(g, HW, [["ln", "scale", "sm"]], strategy="test")


def _constants(cols):
    return {"s": np.random.default_rng(5).normal(1, 0.3, cols).astype(np.float32),
            "b": np.random.default_rng(6).normal(0, 0.3, cols).astype(np.float32), "two": np.float32(2.0)}


def _rows(shape):
    """Rows of several kinds: plain; the first 16 values far above the rest (the shift far from
    the mean: the second pass of squares about the mean); a large mean against the spread; a NaN."""
    x = np.random.default_rng(4).normal(0, 2, shape).astype(np.float32).reshape(-1, shape[-1])
    x[0, :16] += 500.0    # the loop's first row: its own statistics take the second pass
    x[2, :16] += 500.0    # a carried row takes it inside finish()
    x[3] += 3.0e4         # mean 30,000, spread 2
    x[4, 7] = np.nan      # this row NaN; the next row's statistics, summed in its loop, are not
    return x.reshape(shape)


def _kernel(src):
    return src[src.index("static int k0("):]


@pytest.mark.parametrize("build", ["native", "no-avx512", "portable"])
def test_carried_statistics_match_onnxruntime(build, cache, no_avx512_cc):
    """Six rows: the C carries the statistics (one sf_expsum_ln call per row, the first row's own
    pass in a conditional) and the outputs match ONNX Runtime row for row, the NaN row NaN and no
    other."""
    shape = (6, COLS)
    g, plan = _ln_softmax(shape)
    k0 = _kernel(render(plan, g)["model.c"])
    assert len(re.findall(r"\bsf_expsum_ln_max\(", k0)) == 1 and "if (i1 == 0) {" in k0, k0
    ins, cs = {"x": _rows(shape)}, _constants(COLS)
    got = compile_plan(plan, g, cache_dir=cache, strict=True, cc=no_avx512_cc.get(build)).run(ins, cs)["y"]
    want = reference_outputs(g, ins, cs, engine="onnxruntime")["y"]
    assert np.isnan(want[4]).all() and not np.isnan(np.delete(want, 4, 0)).any()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)


def test_carried_statistics_deferred_and_sanitized(cache, monkeypatch):
    """With the output streamed and deferred (row_stream) and the statistics' pass gone, the
    previous row is drained from the one buffer of exponentials chunk by chunk in the max pass,
    each chunk before the row overwrites it and takes its max in registers; the sanitizer build reports nothing and gives the
    plain build's outputs, which match ONNX Runtime."""
    monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(row_stream, "DEFER_MIN_ROW_BYTES", 0)
    shape = (6, COLS)
    g, plan = _ln_softmax(shape)
    lines = [ln.strip() for ln in _kernel(render(plan, g)["model.c"]).split("\n")]
    call = [i for i, ln in enumerate(lines) if "sf_expsum_ln_max(" in ln]
    drains = [i for i, ln in enumerate(lines) if ln.startswith("sf_drain(&")]
    assert len(call) == 1 and len(drains) == 3 and drains[0] < drains[1] < call[0] < drains[2], lines
    chunk = re.fullmatch(rf"for \(long (jc\d+) = 0; \1 \+ 64 <= {COLS}; \1 \+= 64\) \{{", lines[drains[0] - 1])
    assert chunk and re.fullmatch(rf"sf_drain\(&P\d+, {chunk.group(1)}, 64\);", lines[drains[0]]), lines
    # the row is kept, so each chunk's max is a simd reduction in registers (no lanes array)
    assert re.fullmatch(r"#pragma omp simd reduction\(max:m\d+\)", lines[drains[0] + 1]), lines
    assert re.fullmatch(rf"sf_drain\(&P\d+, {COLS // 64 * 64}, {COLS % 64}\);", lines[drains[1]]), lines
    assert re.search(rf"float SFB\d+\[{COLS}\] SF_ALIGN64;", _kernel(render(plan, g)["model.c"]))   # one buffer
    ins, cs = {"x": _rows(shape)}, _constants(COLS)
    plain = compile_plan(plan, g, cache_dir=cache, strict=True).run(ins, cs)["y"]
    np.testing.assert_allclose(plain, reference_outputs(g, ins, cs, engine="onnxruntime")["y"], rtol=2e-5, atol=1e-7)
    got = compile_plan(plan, g, cache_dir=cache, sanitize=True).run(ins, cs)["y"]
    np.testing.assert_allclose(got, plain, rtol=1e-6, atol=1e-9)


def test_carried_statistics_restart_with_each_inner_sweep(cache):
    """Rows indexed by two loops ([2, 3] rows): the next row is the next of the inner index only,
    so each inner sweep's first row computes its own statistics; outputs match ONNX Runtime."""
    shape = (2, 3, COLS)
    g, plan = _ln_softmax(shape)
    k0 = _kernel(render(plan, g)["model.c"])
    assert "sf_expsum_ln_max(" in k0 and re.search(r"if \(i\d+ == 0\) \{", k0), k0
    assert re.search(r"i(\d+) \+ 1 < 3 \? &b0\[", k0), k0     # the inner index's next row, not the outer's
    ins, cs = {"x": _rows(shape)}, _constants(COLS)
    got = compile_plan(plan, g, cache_dir=cache, strict=True).run(ins, cs)["y"]
    np.testing.assert_allclose(got, reference_outputs(g, ins, cs, engine="onnxruntime")["y"], rtol=2e-5, atol=1e-7)


def test_statistics_not_carried_where_rows_are_short_or_shared(small_kernels_parallel, monkeypatch):
    """Rows under CARRY_MIN_ROW_BYTES, a row loop shared by threads and a build with byte counters
    keep each row's own statistics (no sf_expsum_ln)."""
    g, plan = _ln_softmax((6, COLS))
    assert "sf_expsum_ln" in _kernel(render(plan, g)["model.c"])
    assert "sf_expsum_ln" not in _kernel(render(plan, g, threads=2)["model.c"])
    assert "sf_expsum_ln" not in _kernel(render(plan, g, counters=True)["model.c"])
    monkeypatch.setattr(norm_stats, "CARRY_MIN_ROW_BYTES", 4 * COLS + 4)
    assert "sf_expsum_ln" not in _kernel(render(plan, g)["model.c"])
