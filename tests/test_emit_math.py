"""The emitted C's own float erf (``sf_erff`` in emit/ctext.py's prelude: a rational fit that
vectorises) against float64 references computed here with Python's ``math.erf``, and the GELU /
LayerNorm+GELU kernels that call it against ONNX Runtime; the loops that call it vectorise. The
same for its float exp (``sf_expf``) against NumPy's float64 exp."""
from __future__ import annotations

import math
import re
import shutil
import stat
import subprocess

import numpy as np
import pytest

from solverfuse import zoo
from solverfuse.emit import row_loop
from solverfuse.emit.build import BASE_FLAGS, compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.program import render
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, exp_errors, fuse_greedily, graph

#: Stated in emit/ctext.py: max abs and rel error of sf_erff in float32.
ERF_ABS, ERF_REL = 3.7e-7, 3.7e-7
#: Stated in emit/ctext.py: sf_expf's max error in float32 ulps of the true value (1.25 measured
#: over every 7th float32 in [-110, 110]), and its max relative error on normal results.
EXP_ULP, EXP_REL = 1.3, 1.25e-7


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-math-cache")


def test_erf_error_is_within_its_stated_bound(cache):
    grid = np.concatenate([np.linspace(-4.5, 4.5, 200_001), np.linspace(-1e-3, 1e-3, 2001),
                           np.array([6.0, -6.0, 40.0, -1e-30, 1e-30, 0.0])]).astype(np.float32)
    g = graph({"x": [grid.size]}, ["x"], ["y"], [("e", "Erf", ["x"], ["y"])])
    prog = compile_plan(build_plan(g, HW, [["e"]], strategy="t"), g, cache_dir=cache, strict=True)
    got = prog.run({"x": grid}, {})["y"].astype(np.float64)
    want = np.array([math.erf(v) for v in grid.astype(np.float64)])
    err = np.abs(got - want)
    assert err.max() <= ERF_ABS, f"max abs error {err.max():.3g} at x = {grid[err.argmax()]}"
    nz = np.abs(grid) > 0
    rel = err[nz] / np.abs(want[nz])
    assert rel.max() <= ERF_REL, f"max rel error {rel.max():.3g} at x = {grid[nz][rel.argmax()]}"
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    g2 = graph({"x": [special.size]}, ["x"], ["y"], [("e", "Erf", ["x"], ["y"])])
    out = compile_plan(build_plan(g2, HW, [["e"]], strategy="t"), g2, cache_dir=cache).run({"x": special}, {})["y"]
    assert abs(out[0] - 1) <= ERF_ABS and abs(out[1] + 1) <= ERF_ABS and np.isnan(out[2])
    assert out[3] == 0.0 and out[4] == 0.0


def _vectorised_lines(tmp_path, files, threads, extra=()):
    """Line numbers of model.c whose loop GCC reports vectorised (the emitter's flags)."""
    for name in ("model.c", "model.h"):
        (tmp_path / name).write_text(files[name])
    flags = [f for f in BASE_FLAGS if f != "-fPIC"] + ["-march=native", *extra] + (["-fopenmp"] if threads > 1 else [])
    r = subprocess.run(["gcc", *flags, "-fopt-info-vec-optimized", "-c", "model.c", "-o", "model.o"],
                       cwd=tmp_path, capture_output=True, text=True, check=True)
    return {int(m.group(1)) for m in re.finditer(r"model\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}


def test_exp_error_is_within_its_stated_bound(cache):
    """Every 7th float32 bit pattern in [-110, 110] (overflow above 88.72, subnormal results below
    -87.34, zero below -103.97) and the special values, against float64 exp rounded to float32:
    error in ulps of the float32 result, relative error on normal results, and exactly the same
    overflow to inf, underflow to 0, and NaN. In chunks of 2^24 patterns: the whole grid at once
    peaked near 19 GB, more than a 2-worker run on a 24 GB machine has."""
    special = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-30, -1e-30, 88.72283, 88.72284,
                        89.0, 1e30, 3e38, -87.33, -103.97, -103.98, -104.0, -1e30, -3e38], np.float32)
    chunk = 1 << 24  # bit patterns per call, so the test holds ~1 GB, not the whole grid at once
    g = graph({"x": [chunk + special.size]}, ["x"], ["y"], [("e", "Exp", ["x"], ["y"])])
    prog = compile_plan(build_plan(g, HW, [["e"]], strategy="t"), g, cache_dir=cache, strict=True)
    worst_ulp = 0.0
    for lo in range(0, 2 ** 32, 7 * chunk):
        bits = np.arange(lo, min(lo + 7 * chunk, 2 ** 32), 7, dtype=np.uint64).astype(np.uint32).view(np.float32)
        grid = bits[np.isfinite(bits) & (np.abs(bits) <= 110)]
        x = np.concatenate([grid, special]) if lo == 0 else grid
        got = prog.run({"x": np.resize(x, chunk + special.size)}, {})["y"][:x.size]
        want, fin, ulp = exp_errors(x, got)
        assert ulp.max(initial=0) <= EXP_ULP, f"max error {ulp.max():.3g} ulp at x = {x[fin][ulp.argmax()]}"
        normal = fin & (want >= np.finfo(np.float32).tiny)
        rel = np.abs(got[normal] - want[normal]) / want[normal]
        assert rel.max(initial=0) <= EXP_REL, f"max rel error {rel.max():.3g} at x = {x[normal][rel.argmax()]}"
        worst_ulp = max(worst_ulp, ulp.max(initial=0))
        if lo == 0:
            s = got[grid.size:]
            assert s[4] == s[5] == 1.0 and s[6] == s[7] == 1.0  # exp(+-0), exp(+-1e-30)
    assert worst_ulp > 0.5, "the grid was not covered"  # a float32 exp is not correctly rounded everywhere


def _defines(extra, macro: str) -> bool:
    """Whether gcc -march=native with the flags ``extra`` defines ``macro``."""
    r = subprocess.run(["gcc", "-march=native", *extra, "-dM", "-E", "-"], input="", capture_output=True,
                       text=True, check=True)
    return f"#define {macro} " in r.stdout


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs GCC (-fopt-info-vec)")
@pytest.mark.parametrize("threads,extra", [(1, ()), (2, ()), (1, ("-mno-avx512f",)),
                                           (1, ("-mno-avx512f", "-mno-avx2"))])
def test_the_loops_calling_exp_vectorise(threads, extra, tmp_path):
    """softmax_rows (an Exp op) and l1_overflow (a Softmax op in a row loop) compute their
    exponentials with the sf_expsum helper, and every loop that calls sf_expf (the helper's)
    vectorises, at AVX-512 and (where the host has it) AVX2 widths."""
    from solverfuse import api
    from solverfuse.hardware import detect
    host = detect()  # l1_overflow's optimal plan (one looped kernel) on the hardware its rows are sized for
    g1 = zoo.l1_overflow(16, host)
    for g, plan in ((g0 := zoo.softmax_rows(64, 1024), build_plan(g0, HW, [[n.name for n in g0.nodes]], strategy="t")),
                    (g1, api.plan(g1, host, strategy="optimal", time_limit=20, workers=1))):
        files = render(plan, g, threads=threads)
        src = files["model.c"].splitlines()
        assert any("sf_expsum" in ln for ln in src[src.index("SF_NOINLINE static int k0(void *const *B)"):]), \
            f"{g.name}: the kernel does not call sf_expsum(_from)"
        # without AVX-512 or AVX2 + FMA sf_expsum's loop calls sf_expf (else sf_exp16 / sf_exp8)
        simd = _defines(extra, "__AVX512F__") or _defines(extra, "__AVX2__") and _defines(extra, "__FMA__")
        helper = "sf_expf(v" if simd else "sf_expf(x[j]"
        calls = [n + 1 for n, ln in enumerate(src) if "sf_expf(v" in ln or "sf_expf(E" in ln or helper in ln]
        vec = _vectorised_lines(tmp_path, files, threads, extra)
        for c in calls:
            loop = max(n + 1 for n in range(c) if re.match(r"\s*for \(long", src[n]))
            # GCC names an omp simd loop by its pragma's line
            at = {loop, loop - 1} if "#pragma omp simd" in src[loop - 2] else {loop}
            assert at & vec, f"{g.name}: the loop at line {loop} ({src[loop - 1].strip()}) calling sf_expf is not vectorised"


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_onnxruntime(approximate, cache):
    g = graph({"x": [64, 256]}, ["x"], ["y"], [("g", "Gelu", ["x"], ["y"], {"approximate": approximate})])
    check(g, [["g"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")


def test_layernorm_gelu_row_kernel_matches_onnxruntime(cache):
    g = zoo.residual_layernorm_gelu(64, 768)
    check(g, fuse_greedily(g), cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    check(g, fuse_greedily(g), cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=2)


@pytest.mark.parametrize("extra", ["", "-mno-avx512f"])
def test_streamed_layernorm_gelu_matches_onnxruntime(extra, monkeypatch, tmp_path):
    """LN + GELU whose output the row loop writes with non-temporal stores (``STREAM_MIN_BYTES``
    forced to 0): sf_gelu_block with stream set -- AVX-512 where the host has it, AVX2 + FMA with
    -mno-avx512f there and natively on AVX2 hosts -- on rows of 100 (a block of 36 at each row's
    end, rows starting at every 16-byte offset: whole blocks at unaligned dst take plain stores)
    and of 768, against ONNX Runtime."""
    monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)
    cc = None
    if extra:
        cc = tmp_path / "cc.sh"
        cc.write_text(f'#!/bin/sh\nexec "${{SF_TEST_CC:-cc}}" "$@" {extra}\n')
        cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    for cols in (100, 768):
        g = zoo.residual_layernorm_gelu(37, cols)
        plan = build_plan(g, HW, fuse_greedily(g), strategy="t")
        assert re.search(r"sf_gelu_block\([^;]*, 1\);", render(plan, g)["model.c"]), "the GELU block is not streamed"
        prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path / "cache", cc=str(cc) if cc else None)
        ins, cs = random_inputs(g, seed=3), constants(g, seed=3)
        out, ref = prog.run(ins, cs), reference_outputs(g, ins, cs, engine="onnxruntime")
        for t in g.outputs:
            np.testing.assert_allclose(out[t], ref[t], rtol=1e-4, atol=1e-5, err_msg=f"{t!r}, rows of {cols}")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs GCC (-fopt-info-vec)")
@pytest.mark.parametrize("threads", [1, 2])
def test_the_loop_calling_erf_vectorises(threads, tmp_path):
    """The LN + GELU output loop is vectorised: with AVX-512, and with AVX2 + FMA (-mno-avx512f on a
    host that has them), the loop filling the block of 64 that sf_gelu_block takes (emit/rows.py;
    vectorised as a loop, or unrolled and vectorised as blocks of 64 or 32 bytes; the helper's
    GELU is vector code there, sf_gelu16 or sf_gelu8); without either (-mno-avx512f -mno-avx2)
    the kernel's loop calling sf_geluf."""
    g = zoo.residual_layernorm_gelu(256, 768)
    files = render(build_plan(g, HW, fuse_greedily(g), strategy="t"), g, threads=threads)
    src = files["model.c"].splitlines()
    for name in ("model.c", "model.h"):
        (tmp_path / name).write_text(files[name])
    flags = [f for f in BASE_FLAGS if f != "-fPIC"] + ["-march=native"] + (["-fopenmp"] if threads > 1 else [])
    block = [n + 1 for n, ln in enumerate(src) if re.search(r"\bG\d+\[i\d+ - j\d+\] = ", ln)]
    calls = [n + 1 for n, ln in enumerate(src) if "sf_erff(v" in ln or "sf_geluf(v" in ln]
    assert calls and block, "the GELU does not call sf_geluf in the loop and sf_gelu_block in the block"
    cases = [(["-mavx512f"], block)]
    if _defines(("-mno-avx512f",), "__AVX2__") and _defines(("-mno-avx512f",), "__FMA__"):
        cases.append((["-mno-avx512f"], block))
    cases.append((["-mno-avx512f", "-mno-avx2"], calls))
    for extra, at in cases:
        loop = max(n + 1 for n in range(at[0]) if re.match(r"\s*for \(long", src[n]))  # the enclosing loop
        r = subprocess.run(["gcc", *flags, *extra, "-fopt-info-vec-optimized", "-c", "model.c", "-o", "model.o"],
                           cwd=tmp_path, capture_output=True, text=True, check=True)
        # a loop vectorised, or (the 16 stores into the block) unrolled and vectorised as one block
        vec = {int(m.group(1)) for m in re.finditer(
            r"model\.c:(\d+):\d+: optimized: (?:loop vectorized|basic block part vectorized using (?:64|32))",
            r.stderr)}
        assert {loop, at[0]} & vec, f"{extra}: the GELU loop at line {loop} ({src[loop - 1].strip()}) is not vectorised"


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_row_loop_softmax_keeps_its_exponentials(op, cache):
    """x + mask then (Log)Softmax over rows, one group: a row loop; Softmax keeps each row's
    exponentials in a stack array (one exp per element), LogSoftmax has none to keep."""
    g = graph({"x": [48, 77], "m": {"shape": [77], "constant": True}}, ["x"], ["y"],
              [("a", "Add", ["x", "m"], ["h"]), ("s", op, ["h"], ["y"], {"axis": -1})])
    src = render(build_plan(g, HW, [["a", "s"]], strategy="t"), g)["model.c"]
    assert ("float E" in src) == (op == "Softmax")
    body = src[src.index("static int k0("):]
    # the statistics loops only (the row's whole chunks of lanes and its last 77 % 64), none after
    cut = re.search(r"const float (rnorm|rmax)\d+ =", body).start()
    calls = [part.count("exp(") + part.count("sf_expf(") + len(re.findall(r"sf_expsum\w*\(", part)) for part in (body[:cut], body[cut:])]
    assert calls[0] >= 1 and calls[1] == 0, calls
    check(g, [["a", "s"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    check(g, [["a", "s"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=2)


@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 4.0, 0.5, -1.0, -2.0, -0.5, 1.7])
def test_pow_by_a_known_constant_matches_onnxruntime(exponent, cache):
    """A Pow whose exponent is a known one-element constant is written out as multiplies/sqrt
    (1.7 keeps pow()); values vs ONNX Runtime on |x| of random inputs (every form defined), and
    the instrumented build (generic form) still counts the bytes the cost model predicts."""
    from .emit_helpers import model_counts
    g = graph({"x": [64, 130], "e": {"shape": [], "constant": True, "value": exponent}}, ["x"], ["y"],
              [("a", "Abs", ["x"], ["h"]), ("p", "Pow", ["h", "e"], ["y"])])
    src = render(build_plan(g, HW, [["a", "p"]], strategy="t"), g)["model.c"]
    assert ("pow(" in src) == (exponent == 1.7)
    check(g, [["a", "p"]], cache, rtol=1e-6, atol=1e-6, engine="onnxruntime")
    plan, prog, _ = check(g, [["a", "p"]], cache, rtol=1e-6, atol=1e-6, engine="onnxruntime", counters=True)
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)


def test_double_softmax_keeps_double_exponentials(tmp_path):
    """A float64 Softmax in a row loop keeps its exponentials for the division: they are double
    (they were once stored through a float temporary, an error of ~1e-8 relative), so the result
    matches a float64 softmax computed here with NumPy to 1e-13."""
    import numpy as np

    from solverfuse.emit.build import compile_plan
    from solverfuse.plans import build_plan

    from .emit_helpers import HW, graph
    g = graph({"x": {"shape": [4, 300], "dtype": "float64"}, "s": {"shape": [4, 300], "dtype": "float64"},
               "y": {"shape": [4, 300], "dtype": "float64"}}, ["x"], ["y"],
              [("sm", "Softmax", ["x"], ["s"], {"axis": -1}), ("sq", "Mul", ["s", "s"], ["y"])])
    plan = build_plan(g, HW, [["sm", "sq"]], strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path)
    x = np.random.default_rng(5).normal(0, 3, size=(4, 300))
    y = prog.run({"x": x}, {})["y"]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    want = (e / e.sum(axis=-1, keepdims=True)) ** 2
    np.testing.assert_allclose(y, want, rtol=1e-13, atol=0)


def test_double_layernorm_keeps_double_statistics(tmp_path):
    """A float64 LayerNormalization's mean and 1/stddev are double (they were float), so the
    result matches a float64 layer norm computed here with NumPy to 1e-12."""
    import numpy as np

    from solverfuse.emit.build import compile_plan
    from solverfuse.plans import build_plan

    from .emit_helpers import HW, graph
    g = graph({"x": {"shape": [4, 300], "dtype": "float64"}, "y": {"shape": [4, 300], "dtype": "float64"},
               "sc": {"shape": [300], "dtype": "float64", "constant": True, "value": [1.0] * 300}},
              ["x"], ["y"], [("ln", "LayerNormalization", ["x", "sc"], ["y"], {"axis": -1, "epsilon": 1e-5})])
    prog = compile_plan(build_plan(g, HW, [["ln"]], strategy="test"), g, strict=True, cache_dir=tmp_path)
    x = np.random.default_rng(6).normal(3, 2, size=(4, 300))
    y = prog.run({"x": x}, {"sc": np.ones(300)})["y"]
    mu = x.mean(axis=-1, keepdims=True)
    want = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
