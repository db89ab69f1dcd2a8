"""The emitted C's float erf (``sf_erff``, emit/ctext.py) and the LayerNorm row kernel built for
every target the C meets: this host's widest vectors (AVX-512 here), AVX2 + FMA (the same host
with ``-mno-avx512f``) and the compiler's generic x86-64 target (no ``-march``: SSE2, no FMA, so
``SF_FMA`` is a multiply and an add). References are computed here, not by our code: Python's
``math.erf`` in float64, NumPy float64 layer norms, ONNX Runtime."""
from __future__ import annotations

import math
import re
import stat

import numpy as np
import pytest

from solverfuse import zoo
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, fuse_greedily, graph, host_flags
from .test_emit_math import ERF_ABS, ERF_REL


#: target -> the cc wrapper's edit of the command line (shell), with a skip where the host lacks it
TARGETS = [
    pytest.param("native", 'cc "$@"', marks=pytest.mark.skipif(
        "avx512f" not in host_flags(), reason="the host cannot run AVX-512 code")),
    pytest.param("avx2", 'cc "$@" -mno-avx512f', marks=pytest.mark.skipif(
        not {"avx2", "fma"} <= host_flags(), reason="the host cannot run AVX2+FMA code")),
    # every argument but -march=native: the compiler's generic target
    pytest.param("generic", 'for a; do shift; [ "$a" = -march=native ] || set -- "$@" "$a"; done; cc "$@"'),
]


def _cc(tmp_path, edit: str):
    """A cc wrapper applying ``edit``; its log records each compile's exit code and arguments."""
    log, cc = tmp_path / "cc.log", tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\n{edit}\nrc=$?\necho "$rc $*" >> {log}\nexit $rc\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    return str(cc), log


def _built(log, target: str) -> None:
    """The wrapper built every unit, for the target asked (a failed -march=native build would
    fall back to the generic one, and the test would check the wrong code)."""
    lines = log.read_text().splitlines()
    assert lines and all(ln.startswith("0 ") for ln in lines), lines
    compiles = [ln for ln in lines if " -c " in ln]
    assert compiles and all(("-march=native" in ln) == (target != "generic") for ln in compiles), lines


@pytest.mark.parametrize("target,edit", TARGETS)
def test_erf_over_a_dense_sweep_and_special_values(target, edit, tmp_path):
    """Every 5e-5 of [-10, 10], the values around the clamp (3.6) and the special values
    (+-0, +-inf, NaN, subnormals, the largest float) against float64 math.erf: abs and rel error
    within the bound ctext.py states, subnormal results within 2 of their spacing, erf(+-0) =
    +-0 (sign kept), erf(+-inf) = +-1 within the bound, NaN -> NaN."""
    tiny = np.finfo(np.float32).tiny
    c = np.float32(3.6)
    near = np.array([np.nextafter(c, np.float32(0)), c, np.nextafter(c, np.float32(9))], np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40, tiny, -tiny,
                        1e-30, -1e-30, 3.4e38, -3.4e38, 1e10, -1e10], np.float32)
    x = np.concatenate([np.linspace(-10, 10, 400_001, dtype=np.float32), near, -near, special])
    cc, log = _cc(tmp_path, edit)
    g = graph({"x": [x.size]}, ["x"], ["y"], [("e", "Erf", ["x"], ["y"])])
    prog = compile_plan(build_plan(g, HW, [["e"]], strategy="t"), g, cache_dir=tmp_path / "cache",
                        strict=True, cc=cc)
    _built(log, target)
    got = prog.run({"x": x}, {})["y"]
    nan = np.isnan(x)
    assert np.isnan(got[nan]).all() and not np.isnan(got[~nan]).any()
    want = np.array([math.erf(v) for v in x[~nan].astype(np.float64)])
    g64 = got[~nan].astype(np.float64)
    err = np.abs(g64 - want)
    assert err.max() <= ERF_ABS, f"max abs error {err.max():.3g} at x = {x[~nan][err.argmax()]}"
    normal = np.abs(want) >= tiny
    rel = err[normal] / np.abs(want[normal])
    assert rel.max() <= ERF_REL, f"max rel error {rel.max():.3g} at x = {x[~nan][normal][rel.argmax()]}"
    sub = ~normal & (want != 0)
    spacing = np.spacing(np.abs(want[sub]).astype(np.float32)).astype(np.float64)
    assert (err[sub] <= 2 * spacing).all(), "a subnormal result is off by more than 2 of its spacing"
    zero = np.flatnonzero(x == 0)
    assert (got[zero] == 0).all() and (np.signbit(got[zero]) == np.signbit(x[zero])).all()
    assert abs(got[x == np.inf][0] - 1) <= ERF_ABS and abs(got[x == -np.inf][0] + 1) <= ERF_ABS


@pytest.mark.parametrize("target,edit", TARGETS)
def test_gelu_kernels_match_onnxruntime_at_every_target(target, edit, tmp_path):
    """Gelu (exact and tanh) and the residual + LayerNorm + erf GELU row kernel (a row of 1000:
    not a multiple of the 256-value blocks) against ONNX Runtime, built for ``target``."""
    cc, log = _cc(tmp_path, edit)
    gelu = graph({"x": [64, 256]}, ["x"], ["y", "z"], [("g", "Gelu", ["x"], ["y"], {"approximate": "none"}),
                                                        ("h", "Gelu", ["x"], ["z"], {"approximate": "tanh"})])
    motif = zoo.residual_layernorm_gelu(37, 1000)
    for g, groups, tol in ((gelu, [["g", "h"]], (1e-5, 1e-6)), (motif, fuse_greedily(motif), (1e-4, 1e-5))):
        prog = compile_plan(build_plan(g, HW, groups, strategy="t"), g, cache_dir=tmp_path / "cache",
                            strict=True, cc=cc)
        x, cs = random_inputs(g, seed=4), constants(g, seed=4)
        got, want = prog.run(x, cs), reference_outputs(g, x, cs, engine="onnxruntime")
        for t in g.outputs:
            np.testing.assert_allclose(got[t], want[t], rtol=tol[0], atol=tol[1], err_msg=f"{g.name}: {t}")
    _built(log, target)


def _layernorm64(h: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Layer norm over the last axis in float64 (NumPy, two passes)."""
    h = h.astype(np.float64)
    mu = h.mean(axis=-1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)
    return (h - mu) / np.sqrt(var + eps) * scale.astype(np.float64) + bias.astype(np.float64)


@pytest.mark.parametrize("threads", [1, 2])
def test_layernorm_row_statistics_hold_a_large_mean(threads, tmp_path):
    """Residual add + LayerNorm in one row loop, rows of mean ~1000 and spread ~1 (E[x^2] -
    E[x]^2 in float loses every digit there), rows of 1000 and of 96 (one partial block): vs
    NumPy float64 on the float32 sum. Odd rows take the one pass about the mean of their first
    16 values; even rows have a first element 200 out, which puts that shift 12 from the mean:
    the rows of 1000 then take the second pass about the mean (12^2 is above their variance of
    ~41), the rows of 96 stay in the one pass (their variance is ~420). The output's error is
    then what rounding the float32 mean costs (~3e-5 at 1000)."""
    for cols in (1000, 96):
        g = graph({"x": [24, cols], "r": [24, cols], "s": {"shape": [cols], "constant": True},
                   "b": {"shape": [cols], "constant": True}}, ["x", "r"], ["y"],
                  [("a", "Add", ["x", "r"], ["h"]), ("ln", "LayerNormalization", ["h", "s", "b"], ["y"],
                                                     {"axis": -1, "epsilon": 1e-5})])
        rng = np.random.default_rng(11)
        x = (1000 + rng.normal(0, 1, (24, cols))).astype(np.float32)
        x[::2, 0] += 200  # a far-out first element
        r = rng.normal(0, 0.5, (24, cols)).astype(np.float32)
        s, b = rng.normal(1, 0.2, cols).astype(np.float32), rng.normal(0, 0.2, cols).astype(np.float32)
        prog = compile_plan(build_plan(g, HW, [["a", "ln"]], strategy="t"), g, cache_dir=tmp_path,
                            strict=True, threads=threads)
        got = prog.run({"x": x, "r": r}, {"s": s, "b": b})["y"]
        want = _layernorm64(x + r, s, b)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=3e-4)


def test_layernorm_rows_whose_first_values_are_far_out_take_a_second_pass(tmp_path):
    """A float LayerNorm row is shifted by the mean of its first 16 values before its one-pass
    sums. Rows of 4,096 whose first 16 values sit 64 spreads out put that shift 64 spreads from
    the mean, where the one-pass variance comes from sums ~240x larger than it: the kernel sums
    the squares about the mean in a second pass, and its outputs are as close to NumPy float64
    as the two-pass statistics'. (The shift's cancellation is bounded -- the 16 values are part
    of the row, so (shift - mean)^2 <= n / 16 variances -- and the one pass alone measured 4x
    the error here, 8e-6 relative: the second pass bounds the worst case, not this one.)"""
    n = 4096
    g = graph({"x": [2, n], "s": {"shape": [n], "constant": True}, "b": {"shape": [n], "constant": True}},
              ["x"], ["y"], [("ln", "LayerNormalization", ["x", "s", "b"], ["y"], {"axis": -1, "epsilon": 1e-5})])
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (2, n)).astype(np.float32)
    x[:, :16] += 64
    s, b = rng.normal(1, 0.2, n).astype(np.float32), rng.normal(0, 0.2, n).astype(np.float32)
    prog = compile_plan(build_plan(g, HW, [["ln"]], strategy="t"), g, cache_dir=tmp_path, strict=True)
    got = prog.run({"x": x}, {"s": s, "b": b})["y"]
    np.testing.assert_allclose(got, _layernorm64(x, s, b), rtol=1e-5, atol=1e-5)


def _gelu64(x: np.ndarray) -> np.ndarray:
    """Exact GELU in float64: x * 0.5 * (1 + erf(x / sqrt 2)), with math.erf."""
    x = x.astype(np.float64)
    return x * 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))


@pytest.mark.parametrize("target,edit", TARGETS)
def test_gelu_over_a_dense_sweep(target, edit, tmp_path):
    """The Gelu op (exact: ``sf_geluf``) every 5e-5 of [-10, 10] against float64: within
    0.5 |x| times sf_erff's bound plus 2 float32 spacings of the result; NaN -> NaN, +inf ->
    +inf, -inf -> NaN and x < -5.5 -> -0 (as ONNX Runtime), +-0 -> +-0."""
    x = np.concatenate([np.linspace(-10, 10, 400_001, dtype=np.float32),
                        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40], np.float32)])
    cc, log = _cc(tmp_path, edit)
    g = graph({"x": [x.size]}, ["x"], ["y"], [("g", "Gelu", ["x"], ["y"], {"approximate": "none"})])
    prog = compile_plan(build_plan(g, HW, [["g"]], strategy="t"), g, cache_dir=tmp_path / "cache",
                        strict=True, cc=cc)
    _built(log, target)
    got = prog.run({"x": x}, {})["y"]
    fin = np.isfinite(x)
    _assert_gelu_bound(got[fin], x[fin])
    assert np.isnan(got[np.isnan(x)]).all() and got[x == np.inf][0] == np.inf
    assert np.isnan(got[x == -np.inf][0])  # -inf * Phi(-inf) = -inf * 0, as float64 and ONNX Runtime
    assert (got[fin & (x < -5.5)] == 0).all()  # Phi 0 in float32 there: -0, as ONNX Runtime gives
    zero = np.flatnonzero(x == 0)
    assert (got[zero] == 0).all()


def _assert_gelu_bound(got, x):
    """Finite ``got`` = GELU(``x``) within 0.5 |x| sf_erff's bound plus 2 float32 spacings of the
    float64 result."""
    want = _gelu64(x)
    bound = 0.5 * np.abs(x).astype(np.float64) * ERF_ABS \
        + 2 * np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= bound).all(), f"error {err.max():.3g} at x = {x[np.argmax(err - bound)]}"


@pytest.mark.parametrize("target,edit", TARGETS)
def test_gelu_of_a_layernorm_row_loop_over_a_dense_sweep(target, edit, tmp_path):
    """The row loop's GELU output block (``sf_gelu_block``: AVX-512 per-interval polynomials, AVX2
    sf_gelu8; the loop calling sf_geluf elsewhere) at every 5e-5 of [-10, 10] plus NaN, +-inf, +-0 and
    subnormals, against float64 with the bound of the Gelu sweep above. The GELU's input is
    s + LayerNorm(x) with scale and bias 0 (the normalised row times 0 plus 0 is 0, s + 0 is s),
    rows of 1000 (a partial last block)."""
    n = 1000
    sweep = np.linspace(-10, 10, 400_000, dtype=np.float32)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 5.0911684, -5.5, 5.1, -5.6],
                       np.float32)
    s = np.concatenate([special, sweep, np.zeros(-(special.size + sweep.size) % n, np.float32)])
    rows = s.size // n
    g = graph({"x": [rows, n], "s": [rows, n], "scale": [n], "bias": [n]}, ["x", "s", "scale", "bias"], ["y"],
              [("ln", "LayerNormalization", ["x", "scale", "bias"], ["l"], {"axis": -1, "epsilon": 1e-5}),
               ("a", "Add", ["s", "l"], ["h"]), ("g", "Gelu", ["h"], ["y"], {"approximate": "none"})])
    cc, log = _cc(tmp_path, edit)
    prog = compile_plan(build_plan(g, HW, [["ln", "a", "g"]], strategy="t"), g, cache_dir=tmp_path / "cache",
                        strict=True, cc=cc)
    _built(log, target)
    x = np.random.default_rng(0).standard_normal((rows, n)).astype(np.float32)
    zero = np.zeros(n, np.float32)
    got = prog.run({"x": x, "s": s.reshape(rows, n), "scale": zero, "bias": zero}, {})["y"].ravel()
    fin = np.isfinite(s)
    _assert_gelu_bound(got[fin], s[fin])
    assert np.isnan(got[np.isnan(s)]).all()
    # -inf: -inf * Phi(-inf) = -inf * 0, NaN in float64 and in ONNX Runtime
    assert got[s == np.inf][0] == np.inf and np.isnan(got[s == -np.inf][0])
    assert (got[s == 0] == 0).all()
    # below -5.5 Phi is 0 in float32: -0, as ONNX Runtime gives (not a small negative)
    assert (got[fin & (s < -5.5)] == 0).all()


_SCALARS = {"half": 0.5, "one": 1.0, "rt2": math.sqrt(2), "irt2": 1 / math.sqrt(2), "six": 0.6}


def _written_gelu(nodes, outputs=("y",)):
    ts = {"x": [48, 300], "r": [48, 300]}
    ts.update({n: {"shape": [], "constant": True, "value": v} for n, v in _SCALARS.items()})
    return graph(ts, ["x", "r"], list(outputs), [("a", "Add", ["x", "r"], ["h"])] + nodes)


#: exact GELUs of h as exporters write them (torch.onnx: Div, Erf, Add, Mul by h, Mul by 0.5;
#: Hugging Face: h * 0.5 * (1 + erf(h / sqrt 2)); the zoo motif: Mul by 1/sqrt 2), and near
#: misses that must stay as ops: a 0.6 for the 0.5, the erf also written out
GELUS = {
    "torch_onnx": ([("d", "Div", ["h", "rt2"], ["s"]), ("e", "Erf", ["s"], ["f"]), ("p", "Add", ["f", "one"], ["u"]),
                    ("m", "Mul", ["h", "u"], ["w"]), ("y", "Mul", ["w", "half"], ["y"])], ("y",), True),
    "hugging_face": ([("m", "Mul", ["h", "half"], ["w"]), ("d", "Div", ["h", "rt2"], ["s"]), ("e", "Erf", ["s"], ["f"]),
                      ("p", "Add", ["one", "f"], ["u"]), ("y", "Mul", ["w", "u"], ["y"])], ("y",), True),
    "inv_sqrt2": ([("d", "Mul", ["irt2", "h"], ["s"]), ("e", "Erf", ["s"], ["f"]), ("p", "Add", ["f", "one"], ["u"]),
                   ("m", "Mul", ["u", "h"], ["w"]), ("y", "Mul", ["half", "w"], ["y"])], ("y",), True),
    "not_half": ([("d", "Div", ["h", "rt2"], ["s"]), ("e", "Erf", ["s"], ["f"]), ("p", "Add", ["f", "one"], ["u"]),
                  ("m", "Mul", ["h", "u"], ["w"]), ("y", "Mul", ["w", "six"], ["y"])], ("y",), False),
    "erf_written": ([("d", "Div", ["h", "rt2"], ["s"]), ("e", "Erf", ["s"], ["f"]), ("p", "Add", ["f", "one"], ["u"]),
                     ("m", "Mul", ["h", "u"], ["w"]), ("y", "Mul", ["w", "half"], ["y"])], ("y", "f"), False),
}


@pytest.mark.parametrize("name", sorted(GELUS))
def test_written_out_gelu_folds_into_sf_geluf(name, tmp_path):
    """An exact GELU written out as ops, fused in one group, is one ``sf_geluf`` per element
    (no ``sf_erff``) when it is exactly one; the near misses keep the ops. Each matches ONNX
    Runtime; the instrumented build keeps the ops (its counters see the constants)."""
    from solverfuse.emit.program import render
    nodes, outputs, folds = GELUS[name]
    g = _written_gelu(nodes, outputs)
    groups = [[n[0] for n in [("a",)] + nodes]]
    src = render(build_plan(g, HW, groups, strategy="t"), g)["model.c"]
    body = src[src.index("static int k0("):]
    assert ("sf_geluf(" in body) == folds and ("sf_erff(" in body) != folds
    check(g, groups, tmp_path, rtol=1e-5, atol=1e-5, engine="onnxruntime")
    counted = render(build_plan(g, HW, groups, strategy="t"), g, counters=True)["model.c"]
    assert "sf_geluf(" not in counted[counted.index("static int k0("):]


def test_folded_gelu_checks_its_constants_at_run_time(tmp_path):
    """The program folded 0.5, 1 and sqrt 2: run with another 0.5 it refuses (as with a Pow's
    exponent) instead of computing a GELU the constants no longer describe."""
    from solverfuse.errors import EmitError
    nodes, outputs, _ = GELUS["torch_onnx"]
    g = _written_gelu(nodes, outputs)
    prog = compile_plan(build_plan(g, HW, [["a"] + [n[0] for n in nodes]], strategy="t"), g, cache_dir=tmp_path,
                        strict=True)
    x, cs = random_inputs(g, seed=2), constants(g, seed=2)
    assert np.isfinite(prog.run(x, cs)["y"]).all()
    with pytest.raises(EmitError, match="differs from the value the program was built for"):
        prog.run(x, {**cs, "half": np.array(0.25, np.float32)})


def test_layernorm_gelu_row_kernel_is_sanitizer_clean(tmp_path):
    """The LN + GELU row kernel (row copy, one-pass shifted statistics, prefetching output loop,
    folded GELU) under AddressSanitizer and UBSan, rows of 1000 (a partial last block of 16), vs
    ONNX Runtime."""
    g = zoo.residual_layernorm_gelu(9, 1000)
    check(g, fuse_greedily(g), tmp_path, rtol=1e-4, atol=1e-5, engine="onnxruntime", sanitize=True)


def test_large_layernorm_rows_keep_the_prefetching_output_loop():
    """A LayerNorm + GELU row loop whose output is past the non-temporal-store threshold (the
    motif at 2x LLC) keeps its output loop that prefetches the next row; it had been replaced by
    the streamed output loop when the two branches met (residual_layernorm_gelu 56% -> 38% of the
    triad); its GELU blocks store non-temporally, and a fence follows, only at that size, and it
    prefetches each input line of the row 3 rows on into the L2 as well (row_loop.output_prefetch:
    inputs from memory). A softmax of the same size still streams."""
    from solverfuse.emit.program import render
    big = zoo.residual_layernorm_gelu(11000, 768)  # 33.8 MB output per tensor, above 32 MiB
    src = render(build_plan(big, HW, fuse_greedily(big), strategy="t"), big, threads=1)["model.c"]
    body = src[src.index("static int k0("):]
    assert "__builtin_prefetch" in body and "sf_stream(" not in body
    # the GELU block (test_gelu_of_a_layernorm_row_loop_...) writes the large output non-temporally
    assert re.search(r"sf_gelu_block\(.*, 1\);", body) and "sf_stream_fence();" in body
    near = re.findall(r"if \((i\d+) \+ 1 < 11000\) __builtin_prefetch\(&(b\d+)\[\(\(\1 \+ 1\)\)\*768 \+ [^]]+\]\);", body)
    far = re.findall(r"if \((i\d+) \+ 3 < 11000\) __builtin_prefetch\(&(b\d+)\[\(\(\1 \+ 3\)\)\*768 \+ [^]]+\], 0, 2\);", body)
    assert len(near) == len(far) == 8 and sorted(near) == sorted(far), (near, far)   # 2 inputs x 4 lines a block
    small = zoo.residual_layernorm_gelu(64, 768)
    src = render(build_plan(small, HW, fuse_greedily(small), strategy="t"), small, threads=1)["model.c"]
    body = src[src.index("static int k0("):]
    assert re.search(r"sf_gelu_block\(.*, 0\);", body) and "sf_stream_fence();" not in body
    assert "__builtin_prefetch" in body and ", 0, 2);" not in body
    soft = zoo.softmax_rows(11000, 768)
    src = render(build_plan(soft, HW, fuse_greedily(soft), strategy="t"), soft, threads=1)["model.c"]
    body = src[src.index("static int k0("):]
    assert "sf_stream" in body and "sf_stream_fence();" in body


def test_large_layernorm_gelu_rows_stream_their_output_correctly(tmp_path):
    """The LN + GELU row kernel whose output passes the non-temporal-store threshold (33.8 MB:
    whole 64-byte blocks at aligned addresses stored non-temporally, rows of 768) matches ONNX
    Runtime."""
    g = zoo.residual_layernorm_gelu(11000, 768)
    check(g, fuse_greedily(g), tmp_path, rtol=1e-4, atol=1e-5, engine="onnxruntime")
