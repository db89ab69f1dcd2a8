"""The register-blocked GEMM/conv tiles on odd shapes, against ONNX Runtime: Gemm (transB linear
layers, alpha/beta, K=1, M and N not multiples of the tile), batched MatMul (attention-like B with
batch dims), depthwise and grouped convolutions with stride, padding and dilation; each with a
fused epilogue, and each checking that the fast tile was emitted (else the test proves nothing)."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph, host_flags


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-gemm-cache")


@pytest.mark.parametrize("m,k,n,attrs,cshape", [
    (1, 37, 50, {"transB": 1}, (50,)),                        # FC at batch 1, transB
    (7, 1, 33, {"transB": 1}, (7, 33)),                       # K = 1, full C
    (13, 64, 8, {}, (8,)),                                    # N = 8, M odd
    (6, 20, 70, {"alpha": 0.5, "beta": 2.0}, (6, 1)),         # alpha/beta, C broadcast per row
    (12, 300, 40, {"transB": 1, "beta": 0.0}, (40,)),         # K past one 256 block; beta 0
])
def test_blocked_gemm_with_epilogue(m, k, n, attrs, cshape, cache):
    bshape = (n, k) if attrs.get("transB") else (k, n)
    t = {"a": [m, k], "b": const(bshape), "c": const(cshape)}
    g = graph(t, ["a"], ["y"], [("g", "Gemm", ["a", "b", "c"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["g", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    assert "sf_mm_tile" in render(plan, g)["model.c"]


@pytest.mark.parametrize("threads,build", [(1, "host"), (2, "host"), (1, "sanitize"), pytest.param(
    2, "avx2", marks=pytest.mark.skipif(not {"avx2", "fma"} <= host_flags(), reason="the host cannot run AVX2+FMA code"))])
def test_large_b_is_read_in_slabs_every_block_of_rows_shares(threads, build, cache, no_avx512_cc):
    """A Gemm whose B (1100 x 1000 floats, 4.5 MB) is over gemm_tiles.SLAB_MIN: the loop runs
    over (slab of columns, block of rows) -- each block computes the slab's columns of its tile
    and the epilogue over them -- with 37 rows (5 blocks of 8, the last partial: enough blocks
    that 2 threads share whole blocks, not a block's columns); A packed once before the loop
    (sf_pack_a, the last block's 3 rows past M zero) and the tiles reading it (sf_mm_ptile8) --
    against ONNX Runtime, in the host's build, under the sanitizers and in the AVX2 one."""
    from solverfuse.emit.gemm_tiles import SLAB_MIN
    cc = no_avx512_cc["no-avx512"] if build == "avx2" else None
    m, k, n = 37, 1100, 1000
    assert k * 1024 * 4 > SLAB_MIN
    t = {"a": [m, k], "b": const((n, k)), "c": const((n,))}
    g = graph(t, ["a"], ["y"], [("g", "Gemm", ["a", "b", "c"], ["h"], {"transB": 1}), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["g", "r"]], cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=threads,
                       sanitize=build == "sanitize", cc=cc)
    src = render(plan, g, threads=threads)["model.c"]
    # the flat loop's block is its index modulo the 5 blocks, its slab the quotient
    assert re.search(r"const long SF_UNUSED \w+ = \w+ % 5;", src) and re.search(r"= \w+ / 5;", src), src[-3000:]
    body = src[src.index("static int k0("):]
    assert re.search(r"sf_pack_a\(\w+, \w+, 1100, 37, 1100, 8, ", body), body[:2000]
    assert "sf_mm_ptile8(&T" in body and "sf_mm_tile8(" not in body, body[:2000]


@pytest.mark.parametrize("build", ["host", "sanitize", pytest.param("avx2", marks=pytest.mark.skipif(
    not {"avx2", "fma"} <= host_flags(), reason="the host cannot run AVX2+FMA code"))])
@pytest.mark.parametrize("m,rows", [(64, 64), (96, 32)])
def test_large_b_fused_with_a_row_norm_takes_blocks_of_64_or_32_rows(m, rows, build, cache, no_avx512_cc):
    """A MatMul whose B (1100 x 1000 floats) is over gemm_tiles.SLAB_MIN, fused with a bias and
    a LayerNormalization over its rows: the row's epilogue needs whole rows, so the tile takes 64
    rows at a time where they divide M (sf_mm_tile64: B read once per 64 rows), else 32 -- against
    ONNX Runtime, in the host's build, under the sanitizers, and in the AVX2 one
    (built without AVX-512: A in blocks of 4 rows, 1100 = 4 x 256 + 76 columns)."""
    cc = no_avx512_cc["no-avx512"] if build == "avx2" else None
    k, n = 1100, 1000
    t = {"a": [m, k], "b": const((k, n)), "c": const((n,)), "s": const((n,)), "z": const((n,))}
    g = graph(t, ["a"], ["y"], [("mm", "MatMul", ["a", "b"], ["h"]), ("ad", "Add", ["h", "c"], ["u"]),
                                ("ln", "LayerNormalization", ["u", "s", "z"], ["y"], {"axis": -1})])
    plan, _, _ = check(g, [["mm", "ad", "ln"]], cache, rtol=1e-3, atol=1e-4, engine="onnxruntime",
                       sanitize=build == "sanitize", cc=cc)
    assert f"sf_mm_tile{rows}(" in render(plan, g)["model.c"]


def test_large_b_fused_with_a_row_norm_shares_two_tiles_between_two_threads(cache):
    """The same group with M = 128 at 2 threads: two tiles of 64 rows, which the threads take one
    each (a loop of whole tiles, schedule(guided); as a plain loop under 2 iterations per
    thread it ran on one thread) -- against ONNX Runtime."""
    m, k, n = 128, 1100, 1000
    t = {"a": [m, k], "b": const((k, n)), "c": const((n,)), "s": const((n,)), "z": const((n,))}
    g = graph(t, ["a"], ["y"], [("mm", "MatMul", ["a", "b"], ["h"]), ("ad", "Add", ["h", "c"], ["u"]),
                                ("ln", "LayerNormalization", ["u", "s", "z"], ["y"], {"axis": -1})])
    plan, _, _ = check(g, [["mm", "ad", "ln"]], cache, rtol=1e-3, atol=1e-4, engine="onnxruntime", threads=2)
    src = render(plan, g, threads=2)["model.c"]
    body = src[src.index("static int k0("):]
    assert re.search(r"#pragma omp for schedule\(guided\)[^\n]*\n\s*for \(long (\w+) = 0; \1 < 2; \1\+\+\) \{"
                     r"\n[^\n]*\n\s*float T\d+\[64\]", body), body[:1500]


@pytest.mark.parametrize("ashape,bshape,const_b", [
    ((2, 3, 5, 17), (2, 3, 17, 40), False),    # attention QK^T-like: B batched, computed
    ((3, 9, 16), (16, 33), True),              # weights, M = 9 (mb 1)
    ((4, 6, 1), (4, 1, 12), False),            # K = 1
    ((1, 3, 8, 10), (3, 10, 64), False),       # B broadcast over a leading batch dim
])
def test_blocked_batched_matmul_with_residual(ashape, bshape, const_b, cache):
    out = list(ashape[:-1]) + [bshape[-1]]
    t = {"a": list(ashape), "b": const(bshape) if const_b else list(bshape), "res": out}
    ins = ["a", "res"] if const_b else ["a", "b", "res"]
    g = graph(t, ins, ["y"], [("mm", "MatMul", ["a", "b"], ["h"]), ("add", "Add", ["h", "res"], ["y"])])
    plan, _, _ = check(g, [["mm", "add"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=2)
    assert "sf_mm_tile" in render(plan, g)["model.c"]


@pytest.mark.parametrize("shape,kernel,attrs", [
    ((1, 6, 11, 13), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [2, 2]}),
    ((2, 5, 9, 9), (5, 1, 3, 3), {"group": 5, "pads": [1, 0, 1, 2]}),          # depthwise, batch 2, odd C
    ((1, 6, 8, 8), (9, 2, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),           # grouped, 3 out/group
    ((1, 8, 7, 7), (8, 1, 5, 5), {"group": 8, "pads": [2, 2, 2, 2], "strides": [2, 1]}),
])
def test_blocked_depthwise_and_grouped_conv(shape, kernel, attrs, cache):
    t = {"x": list(shape), "w": const(kernel), "bb": const([kernel[0]])}
    g = graph(t, ["x"], ["y"], [("c", "Conv", ["x", "w", "bb"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["c", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    # the one-channel blocked tile; a strided one reads column-shifted copies of its input
    src = render(plan, g)["model.c"]
    assert "sf_conv_tile1(" in src or "sf_conv_tile2(" in src
    if attrs.get("strides", [1, 1])[1] != 1:
        assert "sf_conv_copy_cols(" in src


def test_blocked_tiles_under_sanitizer(cache):
    """Gemm transB with M, N off the tile and a depthwise conv, built with the sanitizers."""
    t = {"a": [3, 19], "b": const([45, 19]), "c": const([45]), "x": [1, 3, 6, 7], "w": const([3, 1, 3, 3])}
    g = graph(t, ["a", "x"], ["y", "z"], [("g", "Gemm", ["a", "b", "c"], ["y"], {"transB": 1}),
                                          ("c", "Conv", ["x", "w"], ["z"], {"group": 3, "pads": [1, 1, 1, 1]})])
    check(g, [["g"], ["c"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", sanitize=True)


def test_channel_shuffle_stored_forward_from_the_conv_tile(cache):
    """ShuffleNet's grouped 1x1 conv + ReLU + channel shuffle written from the conv's tile (the
    forward-mapped store): the shuffled channel index is split once per channel, so the store's
    inner loop over the row has no division or modulo (it did: 4 per element, 4x slower than the
    unfused plan on ShuffleNet); matches ONNX Runtime."""
    t = {"x": [1, 8, 6, 6], "w": const([8, 2, 1, 1]), "bb": const([8]),
         "s1": {"shape": [5], "dtype": "int64", "constant": True, "value": [1, 4, 2, 6, 6]}}
    nodes = [("c", "Conv", ["x", "w", "bb"], ["h"], {"group": 4}), ("r", "Relu", ["h"], ["a"]),
             ("r1", "Reshape", ["a", "s1"], ["b"]), ("tr", "Transpose", ["b"], ["y"], {"perm": [0, 2, 1, 3, 4]})]
    g = graph(t, ["x"], ["y"], nodes)
    plan, _, _ = check(g, [[n[0] for n in nodes]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    assert "to a mapped store" in src
    body = src[src.index("to a mapped store"):]
    body = body[body.index("sf_conv_tile"):body.index("return 0;")]
    col = re.findall(r"for \(long (i\d+) = 0;", body)[-1]  # the innermost loop: along the row
    store = next(line for line in body.splitlines() if line.strip().startswith("b") and "] = v" in line)
    # the store index is linear in the row position (before: re-derived by / and % from a flat index)
    assert f"+ {col}]" in store, store


@pytest.mark.parametrize("shape,kernel,attrs", [
    ((1, 6, 9, 9), (120, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),                # 60 per group
    ((2, 8, 7, 8), (124, 4, 1, 1), {"group": 2, "strides": [2, 1]}),                    # 62 per group
    ((1, 59, 6, 6), (59, 59, 3, 3), {"pads": [0, 1, 2, 1]}),                            # ungrouped, 59
])
def test_conv_blocks_padded_past_the_group(shape, kernel, attrs, cache):
    """Output channels per group not a multiple of 8 (but near one): blocks of 8 with the last
    one padded with zero weights; its extra channels get no bias and no epilogue store (they
    would write into the next group's channels or past the buffer); matches ONNX Runtime, also
    under the sanitizers and at 2 threads."""
    t = {"x": list(shape), "w": const(kernel), "bb": const([kernel[0]]), "res": [shape[0], kernel[0], 1, 1]}
    g = graph(t, ["x", "res"], ["y"], [("c", "Conv", ["x", "w", "bb"], ["h"], attrs), ("ad", "Add", ["h", "res"], ["a"]),
                                       ("r", "Relu", ["a"], ["y"])])
    plan, _, _ = check(g, [["c", "ad", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=2)
    src = render(plan, g)["model.c"]
    assert "sf_conv_tile8(" in src and ">= t" in src  # blocks of 8 with a valid-channel guard
    check(g, [["c", "ad", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("kernel,attrs", [((12, 4, 3, 3), {"pads": [1, 1, 1, 1]}), ((12, 1, 3, 3), {"group": 4}),
                                          ((4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]})])
def test_conv_epilogue_loads_channel_constants_before_the_row_loops(kernel, attrs, cache):
    """Conv + BatchNorm + a [C, 1, 1] bias + ReLU, with the blocked tile and (strided depthwise)
    the plain one: the per-channel constants are loaded once per channel, before the loops over
    its rows (inside them, BatchNorm's scale / sqrt(var) was recomputed per element); matches
    ONNX Runtime."""
    c = kernel[0]
    t = {"x": [2, 4, 7, 9], "w": const(kernel), "s": const([c]), "bn_b": const([c]), "mean": const([c]),
         "var": const([c]), "bias": const([c, 1, 1])}
    g = graph(t, ["x"], ["y"], [("c", "Conv", ["x", "w"], ["h"], attrs),
                                ("bn", "BatchNormalization", ["h", "s", "bn_b", "mean", "var"], ["n"]),
                                ("ad", "Add", ["n", "bias"], ["a"]), ("r", "Relu", ["a"], ["y"])])
    plan, _, _ = check(g, [["c", "bn", "ad", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    assert "sf_conv_tile" in src
    line = next(ln for ln in src.splitlines() if "sqrt(" in ln)
    var = re.search(r"sqrt\((v\d+) ", line).group(1)
    between = src[src.index(f"const float {var} = "):src.index(line)]
    assert "for (long" in between, between  # loaded outside the row loops


@pytest.mark.parametrize("other,flat", [
    ([2, 16, 64, 64], True),     # a residual: the band runs as one loop of 32 rows x 64
    ([1, 1, 64, 64], True),      # a per-position map, broadcast over channels
    ([64], False),               # broadcast along the rows: its index needs the column
    ([64, 1], False),            # broadcast along the columns: needs the row
])
def test_conv_1x1_epilogue_over_a_flat_band(other, flat, cache):
    """A 1x1 conv's tile rows lie back to back: a pointwise epilogue whose tensors all span the
    output's (H, W) (or neither) runs as one loop over the band (two bands of 32 rows here, batch
    2); one reading a tensor broadcast along only one of H, W keeps the row loops; matches ONNX
    Runtime either way."""
    t = {"x": [2, 8, 64, 64], "w": const([16, 8, 1, 1]), "s": const([16]), "bb": const([16]),
         "mean": const([16]), "var": const([16]), "o": other}
    g = graph(t, ["x", "o"], ["y"], [("c", "Conv", ["x", "w"], ["h"]),
                                     ("bn", "BatchNormalization", ["h", "s", "bb", "mean", "var"], ["n"]),
                                     ("ad", "Add", ["n", "o"], ["a"]), ("r", "Relu", ["a"], ["y"])])
    plan, _, _ = check(g, [["c", "bn", "ad", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=2)
    src = render(plan, g)["model.c"]
    assert "sf_conv_tile8(" in src
    assert (f"< {32 * 64}; " in src) == flat


@pytest.mark.parametrize("extra", [
    pytest.param("-mno-avx512f", marks=pytest.mark.skipif(
        not {"avx2", "fma"} <= host_flags(), reason="the host cannot run AVX2+FMA code")),
    "-mno-avx512f -mno-avx2 -mno-fma"])
def test_avx2_register_blocks_match_onnxruntime(extra, tmp_path, cache):
    """The tiles' AVX2 form (4 x 16 register blocks, intrinsics), built for this host without
    AVX-512 (as on an AVX2-only CPU), and their portable form (without AVX2 either): Gemm past
    one K block, a batched MatMul, convs in blocks of 8 and 2 channels and a padded group; matches
    ONNX Runtime. The compiler wrapper records that the -march=native build (the one with
    SF_AVX2_TILES) succeeded, not the fallback without -march."""
    import os
    import stat

    import numpy as np

    from solverfuse.emit.build import compile_plan
    from solverfuse.emit.data import constants, random_inputs
    from solverfuse.emit.reference import reference_outputs
    from solverfuse.plans import build_plan

    from .emit_helpers import HW
    log = tmp_path / "cc.log"
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\ncc "$@" {extra}\nrc=$?\necho "$rc $*" >> {log}\nexit $rc\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    t = {"a": [13, 300], "b": const([70, 300]), "c": const([70]), "q": [2, 5, 17], "k": [2, 17, 40],
         "x": [1, 6, 9, 9], "w8": const([16, 6, 3, 3]), "w2": const([6, 6, 1, 1]), "wg": const([120, 3, 3, 3])}
    g = graph(t, ["a", "q", "k", "x"], ["y1", "y2", "y3", "y4", "y5"], [
        ("g", "Gemm", ["a", "b", "c"], ["h1"], {"transB": 1}), ("r1", "Relu", ["h1"], ["y1"]),
        ("mm", "MatMul", ["q", "k"], ["h2"]), ("r2", "Relu", ["h2"], ["y2"]),
        ("c8", "Conv", ["x", "w8"], ["y3"], {"pads": [1, 1, 1, 1]}),
        ("c2", "Conv", ["x", "w2"], ["y4"]),
        ("cg", "Conv", ["x", "wg"], ["y5"], {"group": 2, "pads": [1, 1, 1, 1]})])
    plan = build_plan(g, HW, [["g", "r1"], ["mm", "r2"], ["c8"], ["c2"], ["cg"]], strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path / "cache", cc=str(cc))
    assert any(ln.startswith("0 ") and "-march=native" in ln for ln in log.read_text().splitlines())
    ins, cs = random_inputs(g, seed=1), constants(g, seed=1)
    out, ref = prog.run(ins, cs), reference_outputs(g, ins, cs, engine="onnxruntime")
    for name in g.outputs:
        np.testing.assert_allclose(out[name], ref[name], rtol=1e-4, atol=1e-5, err_msg=name)
    src = "".join(open(os.path.join(os.path.dirname(prog.path), f)).read()
                  for f in os.listdir(os.path.dirname(prog.path)) if f.endswith(".c"))
    assert "SF_AVX2_TILES" in src and "sf_mm_tile" in src and "sf_conv_tile8(" in src and "sf_conv_tile2(" in src
