"""The emitted C's float erf (``sf_erff``, emit/ctext.py) and the LayerNorm row kernel built for
every target the C meets: this host's widest vectors (AVX-512 here), AVX2 + FMA (the same host
with ``-mno-avx512f``) and the compiler's generic x86-64 target (no ``-march``: SSE2, no FMA, so
``SF_FMA`` is a multiply and an add). References are computed here, not by our code: Python's
``math.erf`` in float64, NumPy float64 layer norms, ONNX Runtime."""
from __future__ import annotations

import math
import stat

import numpy as np
import pytest

from solverfuse import zoo
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, fuse_greedily, graph
from .test_emit_math import ERF_ABS, ERF_REL


def _host_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(ln.split(":", 1)[1].split()) for ln in f if ln.startswith("flags")), set())
    except OSError:
        return set()


#: target -> the cc wrapper's edit of the command line (shell), with a skip where the host lacks it
TARGETS = [
    pytest.param("native", 'cc "$@"', marks=pytest.mark.skipif(
        "avx512f" not in _host_flags(), reason="the host cannot run AVX-512 code")),
    pytest.param("avx2", 'cc "$@" -mno-avx512f', marks=pytest.mark.skipif(
        not {"avx2", "fma"} <= _host_flags(), reason="the host cannot run AVX2+FMA code")),
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
    E[x]^2 in float loses every digit there), a first element far out (a shift by it would
    cancel), rows of 1000 and of 96 (one partial block): vs NumPy float64 on the float32 sum.
    The output's error is then what rounding the float32 mean costs (~3e-5 at 1000)."""
    for cols in (1000, 96):
        g = graph({"x": [24, cols], "r": [24, cols], "s": {"shape": [cols], "constant": True},
                   "b": {"shape": [cols], "constant": True}}, ["x", "r"], ["y"],
                  [("a", "Add", ["x", "r"], ["h"]), ("ln", "LayerNormalization", ["h", "s", "b"], ["y"],
                                                     {"axis": -1, "epsilon": 1e-5})])
        rng = np.random.default_rng(11)
        x = (1000 + rng.normal(0, 1, (24, cols))).astype(np.float32)
        x[:, 0] += 200  # a far-out first element
        r = rng.normal(0, 0.5, (24, cols)).astype(np.float32)
        s, b = rng.normal(1, 0.2, cols).astype(np.float32), rng.normal(0, 0.2, cols).astype(np.float32)
        prog = compile_plan(build_plan(g, HW, [["a", "ln"]], strategy="t"), g, cache_dir=tmp_path,
                            strict=True, threads=threads)
        got = prog.run({"x": x, "r": r}, {"s": s, "b": b})["y"]
        want = _layernorm64(x + r, s, b)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=3e-4)
