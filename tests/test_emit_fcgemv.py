"""Linear layers at batch 1 and small M (matrix-vector products: ``sf_mm_tile1`` over B packed in
column panels; at 2 threads the threads share the columns of a row), against ONNX Runtime at 1
and 2 threads: transB 0 and 1, N not a multiple of 16 or of the 32-column panel, alpha/beta, a
bias broadcast, a fused Softmax (the row path), M = 2 and 3 (few row blocks: column shares too).
Each case large enough that the kernel gets the threads, and each checks the emitted loop."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph

#: the 2-thread kernels here are sized for a 2^18 work threshold (see the fixture)
pytestmark = pytest.mark.usefixtures("small_kernels_parallel")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-fcgemv-cache")



def _shared_columns(src: str) -> bool:
    """The kernel's parallel loop hands out shares of a row's columns (the tile's column range)."""
    shares = re.search(r"sf_mm_tile1\(&\w+\[0\]\[0\], t\d+, t\d+,", src) \
        or re.search(r"sf_mm_p?tile\d\(&\w+\[0\]\[0\], .*, t\d+, t\d+(, \w+)?\);", src)
    # a loop of its own region, or an orphaned loop of the run's one region (emit/team.py)
    return bool(shares) and re.search(r"#pragma omp (parallel )?for schedule\(guided\)", src) is not None


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m,k,n,attrs,cshape", [
    (1, 600, 517, {"transB": 1}, (517,)),                       # FC at batch 1, odd N
    (1, 520, 601, {}, (1, 601)),                                # transB 0, odd N, full C
    (1, 333, 1000, {"transB": 1, "alpha": 0.5, "beta": 2.0}, (1,)),  # alpha/beta, scalar-like C
    (2, 300, 999, {"transB": 1}, (999,)),                       # M = 2: one block of 2 rows
    (3, 256, 700, {}, (700,)),                                  # M = 3: a full and a partial block
])
def test_fc_gemv_vs_onnxruntime(threads, m, k, n, attrs, cshape, cache):
    bshape = (n, k) if attrs.get("transB") else (k, n)
    t = {"a": [m, k], "b": const(bshape), "c": const(cshape)}
    g = graph(t, ["a"], ["y"], [("g", "Gemm", ["a", "b", "c"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["g", "r"]], cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    # M = 3: blocks of 2 rows, the last one stops at row 3; where the threads share a block's
    # columns, A is packed once (sf_pack_a) and the tiles read it (sf_mm_ptile)
    packed = threads == 2 and m > 1
    assert f"sf_mm_{'p' if packed else ''}tile{min(m, 2)}(" in src
    assert ("sf_pack_a(" in src) == packed
    assert _shared_columns(src) == (threads == 2)


@pytest.mark.parametrize("threads,m", [(1, 1), (2, 1), (2, 2)])
def test_fc_gemv_softmax_row(threads, m, cache):
    """Gemm + Softmax at batch 1 (every CNN's classifier) and M = 2: the row path (statistics over
    the whole row) with one block of rows. At 2 threads the threads share the block's columns in
    an arena tile, inside the run's one thread team (its kernel ran on one thread before), then
    thread 0 runs the rows."""
    t = {"a": [m, 512], "b": const((777, 512)), "c": const((777,))}
    g = graph(t, ["a"], ["y"], [("g", "Gemm", ["a", "b", "c"], ["h"], {"transB": 1}),
                                ("s", "Softmax", ["h"], ["y"], {"axis": 1})])
    plan, _, _ = check(g, [["g", "s"]], cache, rtol=1e-4, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    packed = threads == 2 and m > 1  # A packed once for the shares of its columns
    assert f"sf_mm_{'p' if packed else ''}tile{m}(" in src and ("sf_pack_a(" in src) == packed
    assert _shared_columns(src) == (threads == 2)
    if threads == 2:  # one region per run: the kernel is the team's, its loop an orphaned omp for
        assert src.count("#pragma omp parallel") == 1 and "#pragma omp for schedule(guided) nowait" in src
        assert "if (SF_TID() == 0) {" in src


def test_fc_gemv_softmax_row_shared_tile_sanitized(cache):
    """The shared tile's team code built without OpenMP (the sanitizer build): the one thread runs
    every share; no read outside the arena tile, A, B or C, and the values match ONNX Runtime."""
    t = {"a": [1, 300], "b": const((1001, 300)), "c": const((1001,))}
    g = graph(t, ["a"], ["y"], [("g", "Gemm", ["a", "b", "c"], ["h"], {"transB": 1}),
                                ("s", "Softmax", ["h"], ["y"], {"axis": 1})])
    plan, _, _ = check(g, [["g", "s"]], cache, rtol=1e-4, atol=1e-6, engine="onnxruntime", threads=2,
                       sanitize=True)
    assert _shared_columns(render(plan, g, threads=2)["model.c"])


def test_matmul_batch1_two_threads(cache):
    """A MatMul [1, K] x [K, N] (weights), N odd, at 2 threads: the shared-column loop."""
    t = {"a": [1, 640], "w": const((640, 450)), "res": [1, 450]}
    g = graph(t, ["a", "res"], ["y"], [("mm", "MatMul", ["a", "w"], ["h"]), ("add", "Add", ["h", "res"], ["y"])])
    plan, _, _ = check(g, [["mm", "add"]], cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=2)
    assert _shared_columns(render(plan, g, threads=2)["model.c"])


@pytest.mark.parametrize("threads", [1, 2])
def test_partial_row_blocks_vit_tokens(threads, cache):
    """M = 197 (ViT's tokens, not a multiple of 8): blocks of 8 rows, the last one stopping at row
    197 (it was 197 one-row tiles, each streaming all of B), with a residual epilogue."""
    t = {"a": [1, 197, 96], "w": const((96, 136)), "res": [1, 197, 136]}
    g = graph(t, ["a", "res"], ["y"], [("mm", "MatMul", ["a", "w"], ["h"]), ("add", "Add", ["h", "res"], ["y"])])
    plan, _, _ = check(g, [["mm", "add"]], cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    assert re.search(r"sf_mm_tile8\(.*, sf_min\(8, 197 - \w+\)\);|sf_mm_tile8\(.*, t\d+\);", src)
    assert "break;" in src


@pytest.mark.parametrize("m,mb", [(11, 8), (7, 4), (3, 2), (1, 1)])
def test_gemm_full_c_sanitized(m, mb, cache):
    """A Gemm with a full [M, N] C and alpha/beta, M not a multiple of the block (or 1: the
    matrix-vector tile), N = 50 (a partial panel): neither A, B nor C is read outside
    (AddressSanitizer) and the values match ONNX Runtime."""
    t = {"a": [m, 40], "b": const((50, 40)), "c": const((m, 50))}
    g = graph(t, ["a"], ["y"], [("g", "Gemm", ["a", "b", "c"], ["h"], {"transB": 1, "alpha": 0.5, "beta": 1.5}),
                                ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["g", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", sanitize=True)
    assert f"sf_mm_tile{mb}(" in render(plan, g)["model.c"]
