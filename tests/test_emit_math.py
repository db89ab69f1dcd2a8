"""The emitted C's own float erf (``sf_erff`` in emit/ctext.py's prelude: a rational fit that
vectorises) against float64 references computed here with Python's ``math.erf``, and the GELU /
LayerNorm+GELU kernels that call it against ONNX Runtime; the loops that call it vectorise."""
from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pytest

from solverfuse import zoo
from solverfuse.emit.build import BASE_FLAGS, compile_plan
from solverfuse.emit.program import render
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, fuse_greedily, graph

#: Stated in emit/ctext.py: max abs and rel error of sf_erff in float32.
ERF_ABS, ERF_REL = 3.7e-7, 3.7e-7


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


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_onnxruntime(approximate, cache):
    g = graph({"x": [64, 256]}, ["x"], ["y"], [("g", "Gelu", ["x"], ["y"], {"approximate": approximate})])
    check(g, [["g"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")


def test_layernorm_gelu_row_kernel_matches_onnxruntime(cache):
    g = zoo.residual_layernorm_gelu(64, 768)
    check(g, fuse_greedily(g), cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    check(g, fuse_greedily(g), cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=2)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs GCC (-fopt-info-vec)")
@pytest.mark.parametrize("threads", [1, 2])
def test_the_loop_calling_erf_vectorises(threads, tmp_path):
    g = zoo.residual_layernorm_gelu(256, 768)
    files = render(build_plan(g, HW, fuse_greedily(g), strategy="t"), g, threads=threads)
    src = files["model.c"].splitlines()
    calls = [n + 1 for n, ln in enumerate(src) if "sf_erff(v" in ln]
    assert calls, "the GELU does not call sf_erff"
    loop = max(n + 1 for n in range(calls[0]) if re.match(r"\s*for \(long", src[n]))  # the enclosing loop
    for name in ("model.c", "model.h"):
        (tmp_path / name).write_text(files[name])
    flags = [f for f in BASE_FLAGS if f != "-fPIC"] + ["-march=native"] + (["-fopenmp"] if threads > 1 else [])
    r = subprocess.run(["gcc", *flags, "-fopt-info-vec-optimized", "-c", "model.c", "-o", "model.o"],
                       cwd=tmp_path, capture_output=True, text=True, check=True)
    vec = {int(m.group(1)) for m in re.finditer(r"model\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
    assert loop in vec, f"the loop at line {loop} ({src[loop - 1].strip()}) calling sf_erff is not vectorised"


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_row_loop_softmax_keeps_its_exponentials(op, cache):
    """x + mask then (Log)Softmax over rows, one group: a row loop; Softmax keeps each row's
    exponentials in a stack array (one exp per element), LogSoftmax has none to keep."""
    g = graph({"x": [48, 77], "m": {"shape": [77], "constant": True}}, ["x"], ["y"],
              [("a", "Add", ["x", "m"], ["h"]), ("s", op, ["h"], ["y"], {"axis": -1})])
    src = render(build_plan(g, HW, [["a", "s"]], strategy="t"), g)["model.c"]
    assert ("float E" in src) == (op == "Softmax")
    assert src.count("exp(") == 1  # the statistics loop only
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
