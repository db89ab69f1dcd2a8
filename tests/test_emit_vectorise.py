"""The innermost loop of an emitted kernel stays a vector loop when the outer loop is parallel:
the motifs are compiled with GCC's -fopt-info-vec and the compiler must report the inner loop
(found by its line in the source) vectorised, at 1 and at 2 threads."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from solverfuse import zoo
from solverfuse.emit.build import BASE_FLAGS
from solverfuse.emit.program import render
from solverfuse.plans import build_plan

from .emit_helpers import HW, fuse_greedily, graph


def _gcc() -> str | None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    out = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    return cc if "GCC" in out or "gcc" in out else None


pytestmark = pytest.mark.skipif(_gcc() is None, reason="needs GCC (-fopt-info-vec)")


def _vectorised_lines(files, tmp_path, threads):
    for name in ("model.c", "model.h"):
        (tmp_path / name).write_text(files[name])
    flags = [f for f in BASE_FLAGS if f != "-fPIC"] + (["-fopenmp"] if threads > 1 else [])
    r = subprocess.run([_gcc(), *flags, "-fopt-info-vec-optimized", "-fopt-info-loop-optimized", "-c", "model.c",
                        "-o", "model.o"], cwd=tmp_path, capture_output=True, text=True, check=True)
    vec = {int(m.group(1)) for m in re.finditer(r"model\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
    # a nest of loops that is all a copy (a tile stored contiguously) becomes a memcpy: GCC names
    # the nest's first line; its loops count as vector code
    for m in re.finditer(r"model\.c:(\d+):\d+: optimized: Loop nest \d+ distributed: split to 0 loops", r.stderr):
        vec |= {int(m.group(1)), int(m.group(1)) + 1}
    return vec


def _inner_loops(src: str, trip: int):
    """(first, last) lines (1-based) of the loops of the kernels that run ``trip`` times (or a
    block of a row of ``trip``: ``i < jb + 256``, ``i < j + 16``, a GELU's ``i < j + 64``) with no
    loop inside. Loops in a kernel's ``#if defined(SF_AVX512_TILES)`` branch are left out: the
    build here has no -march, so that branch is not compiled (its ``#else`` is)."""
    lines = src.splitlines()
    out = []
    avx512 = False
    for n, ln in enumerate(lines):
        if ln.startswith("#if defined(SF_AVX512_TILES)"):
            avx512 = True
        elif ln.startswith(("#else", "#endif")):
            avx512 = False
        if avx512:
            continue
        m = re.match(r"\s*for \(long (\w+) = [^;]+; \1 < (\w+|jb?\d+ \+ \d+|sf_min\(jb?\d+ \+ \d+, \d+\)); "
                     r"\1\+\+\) \{$", ln)
        if not m:
            continue
        body = []
        depth = 1
        for nxt in lines[n + 1:]:
            depth += nxt.count("{") - nxt.count("}")
            if depth <= 0:
                break
            body.append(nxt)
        blocked = m.group(2).startswith(("j", "sf_min(j")) and (trip == 0 or m.group(2).endswith((f", {trip})", " + 256", " + 16", " + 64")))
        if not any(b.strip().startswith("for ") for b in body) and (m.group(2) == str(trip) or trip == 0 or blocked):
            out.append((n + 1, n + 1 + len(body)))
    return out


MOTIFS = {
    "elementwise_chain": (lambda: zoo.elementwise_chain(256, 1024), 1024),
    "residual_layernorm_gelu": (lambda: zoo.residual_layernorm_gelu(256, 768), 768),
    "branches": (lambda: zoo.branches(256, 1024), 1024),
    "softmax_rows": (lambda: zoo.softmax_rows(256, 1024), 1024),
    "center": (lambda: zoo.center(256, 1024), 1024),
    "softmax_after_layernorm": (lambda: graph({"x": [64, 4912], "g": {"shape": [4912], "constant": True},
                                               "b": {"shape": [4912], "constant": True}}, ["x"], ["y"],
                                              [("n", "LayerNormalization", ["x", "g", "b"], ["h"], {"axis": -1}),
                                               ("s", "Softmax", ["h"], ["y"], {"axis": -1})]), 4912),
    # the LayerNorm statistics in scratch arrays (a pass of their own after the Gemm tile): the
    # output loop reads them once per row (Kernel.invariant); read in it, it stayed scalar (gpt2)
    "gemm_add_layernorm": (lambda: graph({"x": [8, 32], "w": {"shape": [32, 32], "constant": True},
                                          "r": [1, 8, 32], "g": {"shape": [32], "constant": True},
                                          "b": {"shape": [32], "constant": True},
                                          "sh": {"shape": [3], "dtype": "int64", "constant": True,
                                                 "value": [1, 8, 32]}}, ["x", "r"], ["e", "y"],
                                         [("m", "Gemm", ["x", "w"], ["h"]), ("v", "Reshape", ["h", "sh"], ["h3"]),
                                          ("a", "Add", ["h3", "r"], ["e"]),
                                          ("n", "LayerNormalization", ["e", "g", "b"], ["y"], {"axis": -1})]), 32),
    "flat_chain": (lambda: graph({"x": [1 << 16]}, ["x"], ["y"], [("a", "Relu", ["x"], ["h"]),
                                                                  ("b", "Neg", ["h"], ["y"])]), 0),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("motif", sorted(MOTIFS))
def test_inner_loop_vectorised(motif, threads, tmp_path):
    make, trip = MOTIFS[motif]
    g = make()
    files = render(build_plan(g, HW, fuse_greedily(g), strategy="t"), g, threads=threads)
    loops = _inner_loops(files["model.c"], trip)
    assert loops, "no innermost loop found"
    vec = _vectorised_lines(files, tmp_path, threads)
    src = files["model.c"].splitlines()
    # GCC reports a '#pragma omp simd' loop at the pragma's line, some reductions at a line of
    # the body (the loops are innermost: a "loop vectorized" inside one is about that loop)
    missed = [n for n, end in loops if not any(n <= v <= end for v in vec)
              and not (n - 1 in vec and "#pragma omp simd" in src[n - 2])]
    assert not missed, f"inner loops not vectorised at lines {missed}: " + \
        " | ".join(files["model.c"].splitlines()[n - 1].strip() for n in missed)


@pytest.mark.parametrize("march", ["sapphirerapids", "icelake-server"])
def test_matmul_tile_in_512_bit_vectors_under_intel_server_tuning(march, tmp_path):
    """GCC's tuning for Intel server cores prefers 256-bit vectors: the auto-vectorised matmul
    tile (8 x 32 accumulators) became 32 ymm multiply-adds, half the rate of 16 zmm ones on a
    Xeon with two 512-bit FMA ports. The prelude asks for 512-bit vectors; the tile's assembly
    built for that target must multiply-add in zmm registers only."""
    g = graph({"a": [64, 256], "w": {"shape": [256, 256], "constant": True}}, ["a"], ["y"],
              [("m", "MatMul", ["a", "w"], ["y"])])
    files = render(build_plan(g, HW, [["m"]], strategy="t"), g, threads=1)
    assert "sf_mm_tile8(" in files["model.c"]
    for name in ("model.c", "model.h"):
        (tmp_path / name).write_text(files[name])
    flags = [f for f in BASE_FLAGS if f not in ("-fPIC", "-Wall", "-Wextra")]
    r = subprocess.run([_gcc(), *flags, f"-march={march}", "-S", "model.c", "-o", "model.s"], cwd=tmp_path,
                       capture_output=True, text=True)
    if r.returncode and "march" in r.stderr:
        pytest.skip(f"this GCC does not know -march={march}")
    assert r.returncode == 0, r.stderr[-2000:]
    asm = (tmp_path / "model.s").read_text()
    start = re.search(r"^sf_mm_tile8[.\w]*:$", asm, re.M)
    assert start, "no sf_mm_tile8 in the assembly"
    body = asm[start.end():asm.index(".cfi_endproc", start.end())]
    fmas = re.findall(r"vfn?madd\w+ps\s+[^\n]*", body)
    assert fmas and all("zmm" in f for f in fmas), fmas
