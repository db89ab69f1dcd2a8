"""The conv tile paths chosen for ResNet/Inception-like layers, against ONNX Runtime, each fused
with its BatchNormalization, a residual Add and a ReLU (the epilogue runs over the tile): column-
shifted input copies for every 3-wide kernel with junk columns (stride 1 under 56 columns, and
stride 2), the phase-split copy from 56 columns at stride 1, the channel-
vectorised tile on planes that fill 16-lane vectors partly (14 positions per pass, then 7, then
one at a time; 13 per pass on planes of a multiple of 13), the subsampled copy of a strided 1x1
conv, and channel counts that are not a multiple of the tile -- at 1 and 2 threads, under the
sanitizers (the host's vector form at -O1) and in the AVX2 build. Each case also checks that the path it is
about was emitted (else it would prove nothing)."""
from __future__ import annotations

import stat

import numpy as np
import pytest

from solverfuse.emit.conv_cm import CM_BLOCK_DEFS
from solverfuse.emit.conv_helpers import CBLOCK_DEFS
from solverfuse.emit.program import render

from .emit_helpers import check, const, graph, HW, host_flags


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-conv-paths-cache")


#: (input shape, weight shape, attributes, a marker of the path in the C)
CASES = [
    # 3x3 at stride 1 with 2 junk columns per 20 (the old rule took them below 1/12): column copies
    ((1, 16, 20, 20), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_copy_cols("),
    # 3x3 at stride 2, 16 columns per 15 outputs: column copies subsampled by the stride
    ((1, 8, 30, 30), (16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "sf_conv_copy_cols("),
    # 14x14, 128 channels: the channel-vectorised tile, 196 = 14 passes of 14 positions
    ((1, 24, 14, 14), (128, 24, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_tile32("),
    # 13x13, 128 channels: the channel-vectorised tile in 13 passes of 13 positions
    ((1, 20, 13, 13), (128, 20, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_tile32("),
    # 504 channels on 7x7: the channel-vectorised tile with its last block of 32 part padding
    # (504 = 15 x 32 + 24; the epilogue and bias stop at the real channels)
    ((1, 8, 7, 7), (504, 8, 1, 1), {}, "sf_conv_tile32("),
    # 11x11 1x1 in place, 160 channels (5 tiles): 121 = 8 x 14 + 7 + 2 single positions (AVX2:
    # 20 x 6 + 1, the one-position pass over an odd count of input channels)
    ((1, 39, 11, 11), (160, 39, 1, 1), {}, "sf_conv_tile32("),
    # 160 input channels x 9 taps on 7x7: the channel tile's packed weights (184 KB) are over
    # SF_CM_BLOCK_MIN, so its AVX2 form reduces in blocks of input channels (the last one partial)
    ((1, 160, 7, 7), (128, 160, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_tile32("),
    # stride-2 3x3 onto 7x7 (column copies, then the channel tile): 49 = 3 x 14 + 7, batch 2; its
    # packed weights (18 KB) on 49 positions are over SF_CM_BLOCK_MIN_SMALL: blocked on AVX2 too
    ((2, 16, 14, 14), (128, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "sf_conv_tile32("),
    # strided 1x1 without padding: only the positions it reads are copied (12 x 13 outputs)
    ((1, 12, 23, 25), (20, 12, 1, 1), {"strides": [2, 2]}, "sf_conv_copy_sub("),
    # strides (2, 3), batch 2, 136 channels on a 12x14 plane (blocks of 8, not the 32-channel tile)
    ((2, 8, 24, 40), (136, 8, 1, 1), {"strides": [2, 3]}, "sf_conv_copy_sub("),
    # a wide plane (112 columns) with 128 input channels: the phase-split copy (2 junk columns
    # per 112: one copy of the plane, not three), bands of 4 rows of pitch 114 (a band's input
    # copy within conv_tiles.BAND_BYTES; 2 rows at 2 threads)
    ((1, 128, 4, 112), (8, 128, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_copy("),
    # 56 columns (conv_tiles.COPY_WIDE) at stride 1: the phase-split copy (2 junk columns per 58);
    # 28 columns keep the column copies (2 junk per 30)
    ((1, 16, 6, 56), (8, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_copy("),
    ((1, 16, 4, 28), (8, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_copy_cols("),
    # 12 and 6 output channels: blocks of 4 and of 2 (the explicit AVX-512 main loop and the
    # masked tail at every block size; batch 2 for the 1x1 read in place)
    ((1, 8, 20, 20), (12, 8, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_tile4(&"),
    ((2, 5, 9, 33), (6, 5, 1, 1), {}, "sf_conv_tile2(&"),
    # 512 input channels on 28x28: a 5 MB input copy, reduced in blocks of channels (the last one
    # partial) with the partial sums in the tile (conv_helpers.CBLOCK_DEFS)
    ((1, 512, 28, 28), (8, 512, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_tile8(&"),
    # the same input onto 64 channels: tiles of 4 blocks of 8 at 1 thread, 2 at 2 threads
    # (conv_tiles._sub_blocks), each block of input channels read by the tile's blocks in turn
    ((1, 512, 28, 28), (64, 512, 3, 3), {"pads": [1, 1, 1, 1]}, "[784] SF_ALIGN64;"),
    # a strided 1x1 onto a small plane keeps the phase-split copy (slower subsampled, see conv_tiles)
    ((1, 16, 14, 14), (128, 16, 1, 1), {"strides": [2, 2]}, "sf_conv_copy("),
    # 81 positions: one pass of 48 (conv_helpers.WIDE vectors), one of 32, a masked tail of 1
    ((1, 12, 9, 9), (16, 12, 1, 1), {}, "sf_conv_tile8(&T"),
    # 1400 channels on 15x15 (a 4.3 MB copy: blocks of channels, partial sums in the tile) and
    # 225 = 4 x 48 + 33 positions: the 48- and the 32-position passes restart from the tile
    ((1, 1400, 15, 15), (8, 1400, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_tile8(&T"),
    # 1x1 convs take the tiles' one-loop reduction over the channels, here starting past the first
    # block (cs > 0): 120 channels on the position tile (AVX2: L1 blocks of 51, 51 and 18); on the
    # channel tile 160 channels on 7x7 (20 KB of packed weights on 49 positions: blocked, 75 + 75
    # + 10) and 200 on 13x13 (25 KB on 169 positions: chunks of 30 positions, blocks of 82)
    ((1, 120, 10, 20), (8, 120, 1, 1), {}, "sf_conv_tile8(&T"),
    ((1, 160, 7, 7), (128, 160, 1, 1), {}, "sf_conv_tile32("),
    ((1, 200, 13, 13), (128, 200, 1, 1), {}, "sf_conv_tile32("),
]


def _tensors(i, shape, kernel, attrs):
    """Conv (with bias) -> BatchNormalization -> Add(residual input) -> Relu, tensors suffixed i."""
    m = kernel[0]
    k = kernel[2:]
    st = attrs.get("strides", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    out = [(shape[2 + d] + pads[d] + pads[d + 2] - k[d]) // st[d] + 1 for d in range(2)]
    ts = {f"x{i}": list(shape), f"w{i}": const(kernel), f"b{i}": const([m]), f"s{i}": const([m]),
          f"bb{i}": const([m]), f"mean{i}": const([m]), f"var{i}": const([m]),
          f"res{i}": [shape[0], m] + out}
    nodes = [(f"c{i}", "Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"h{i}"], attrs),
             (f"bn{i}", "BatchNormalization", [f"h{i}", f"s{i}", f"bb{i}", f"mean{i}", f"var{i}"], [f"n{i}"]),
             (f"add{i}", "Add", [f"n{i}", f"res{i}"], [f"a{i}"]),
             (f"r{i}", "Relu", [f"a{i}"], [f"y{i}"])]
    return ts, [f"x{i}", f"res{i}"], nodes


def _graph(cases):
    ts, ins, nodes, outs = {}, [], [], []
    for i, (shape, kernel, attrs, _) in enumerate(cases):
        t, x, n = _tensors(i, shape, kernel, attrs)
        ts.update(t)
        ins += x
        nodes += n
        outs.append(f"y{i}")
    groups = [[n[0] for n in nodes[j:j + 4]] for j in range(0, len(nodes), 4)]
    return graph(ts, ins, outs, nodes), groups


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_conv_paths_with_fused_residual_epilogue_match_onnxruntime(case, threads, cache):
    g, groups = _graph([CASES[case]])
    plan, _, _ = check(g, groups, cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    marker = CASES[case][3]
    assert "sf_conv_tile" in src and marker in src, marker
    if marker == "sf_conv_copy(":  # the small plane's phase-split copy: not the subsampled one
        assert "sf_conv_copy_sub(" not in src


def test_conv_paths_under_sanitizer(cache):
    """Every case at once in the host's build under ASan/UBSan: no read or write past the
    copies, the in-place input or the tiles (the remainder passes of the channel tile, the
    subsampled copy's last row)."""
    g, groups = _graph(CASES)
    check(g, groups, cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("target,extra", [
    pytest.param("avx2", "-mno-avx512f", marks=pytest.mark.skipif(
        not {"avx2", "fma"} <= host_flags(), reason="the host cannot run AVX2+FMA code")),
    pytest.param("avx512", "", marks=pytest.mark.skipif(
        "avx512f" not in host_flags(), reason="the host cannot run AVX-512 code")),
    # no AVX2/AVX-512 tiles: the portable C of every tile (GNU vector loops), which the host's
    # own builds (and its sanitizer builds, also -march=native) never compile
    ("portable", "-mno-avx512f -mno-avx2 -mno-fma")])
def test_conv_paths_in_the_simd_builds(target, extra, tmp_path):
    """The AVX2 form (the channel tile as 16 channels x 6 positions per pass, reduced in blocks
    of input channels for the 160-channel case; built for this host without AVX-512), the AVX-512
    form and the portable one of every case; the compiler wrapper's log shows that the
    -march=native build itself succeeded (a failed one is retried without -march and would pass
    on the portable form)."""
    from solverfuse.emit.build import compile_plan
    from solverfuse.emit.data import constants, random_inputs
    from solverfuse.emit.reference import reference_outputs
    from solverfuse.plans import build_plan
    log = tmp_path / "cc.log"
    cc = tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\ncc "$@" {extra}\nrc=$?\necho "$rc $*" >> {log}\nexit $rc\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    g, groups = _graph(CASES)
    plan = build_plan(g, HW, groups, strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path / "cache", cc=str(cc))
    assert all(ln.startswith("0 ") for ln in log.read_text().splitlines() if "-march=native" in ln)
    assert any("-march=native" in ln for ln in log.read_text().splitlines())
    ins, cs = random_inputs(g, seed=2), constants(g, seed=2)
    out, ref = prog.run(ins, cs), reference_outputs(g, ins, cs, engine="onnxruntime")
    for name in g.outputs:
        np.testing.assert_allclose(out[name], ref[name], rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("case", [i for i, c in enumerate(CASES) if c[1][:2] in ((24, 16), (136, 8))])
def test_blocked_tile_prefetches_the_epilogue_output_and_residual(case):
    """The position-vectorised tile is given the block's region of the group's output (written by
    the epilogue) and of the residual (read by it) to prefetch while it computes: the written
    buffer and the residual input, not the conv's input or 0 (batch 2, 136 channels: the region's
    offset counts the batch)."""
    from solverfuse.plans import build_plan
    g, groups = _graph([CASES[case]])
    src = render(build_plan(g, HW, groups, strategy="test"), g, threads=1)["model.c"]
    call = next(ln for ln in src.splitlines() if "sf_conv_tile8(&T" in ln)
    args = call[call.index("(") + 1:call.rindex(")")].split(", ")
    pw, pr = args[9].split(" + ")[0], args[10].split(" + ")[0]
    assert f"float *restrict {pw} = (float *)" in src, call  # a written global buffer
    assert f"const float *restrict {pr} = (const float *)" in src and pr != args[2].split(" + ")[0], call
    if CASES[case][0][0] == 2:
        assert "*136 + " in args[9] and "*136 + " in args[10], call  # (n*136 + m0)*plane


def test_large_input_takes_the_channel_blocked_reduction():
    """The 512- and 1400-channel cases' input copies are over the tile's blocking threshold (so
    the blocked reduction is what the numerics test above checked), the others' are not."""
    from solverfuse.plans import build_plan
    limit = 2 * 1024 * 1024
    assert f"({limit // (1024 * 1024)}L*1024*1024)" in CBLOCK_DEFS
    for shape, kernel, attrs, marker in CASES:
        g, groups = _graph([(shape, kernel, attrs, marker)])
        src = render(build_plan(g, HW, groups, strategy="test"), g, threads=1)["model.c"]
        call = next(ln for ln in src.splitlines() if "sf_conv_tile" in ln and "(&T" in ln)
        args = call[call.index("(") + 1:call.rindex(")")].split(", ")
        assert (int(args[3]) * int(args[5]) * 4 > limit) == (shape[1] >= 512), call
        # only an ungrouped conv of several 8-channel blocks over the threshold gets sub-blocks (its
        # last argument: the sub-block count); the 8-channel ones keep one block a tile
        if "sf_conv_tile32(" not in call:
            assert int(args[-1]) == (4 if shape[1] >= 512 and kernel[0] == 64 else 1), call


def test_channel_tile_blocks_its_reduction_only_over_the_weight_thresholds():
    """The channel tile's AVX2 form blocks its reduction when its packed weights (C x taps x 32
    floats) are over SF_CM_BLOCK_MIN (128 KB), or over SF_CM_BLOCK_MIN_SMALL (16 KB) on a span of at
    most SF_CM_SMALL_SPAN (64) positions; over 16 KB on a larger span it runs in chunks of
    positions. Of the cases above the 160-channel 3x3 one (184 KB) and the stride-2 3x3 onto 7x7
    (18 KB, 49 positions) are blocked, the 3x3 convs of 24 and 20 channels on 14x14 and 13x13 (27
    and 23 KB) chunked, and of the 1x1 convs the 160-channel one on 7x7 blocked and the
    200-channel one on 13x13 chunked (the one-loop reduction from a later block), the others
    neither, so the numerics tests checked all three forms."""
    from solverfuse.plans import build_plan
    limit, small, span_max = 128 * 1024, 16 * 1024, 64
    for define in (f"SF_CM_BLOCK_MIN ({limit // 1024}L*1024)\n", f"SF_CM_BLOCK_MIN_SMALL ({small // 1024}L*1024)\n",
                   f"SF_CM_SMALL_SPAN {span_max}\n", "SF_CM_CHUNK 30\n"):
        assert f"#define {define}" in CM_BLOCK_DEFS, define
    seen = {"blocked": [], "chunked": [], "whole": []}
    for shape, kernel, attrs, marker in CASES:
        if marker != "sf_conv_tile32(":
            continue
        g, groups = _graph([(shape, kernel, attrs, marker)])
        src = render(build_plan(g, HW, groups, strategy="test"), g, threads=1)["model.c"]
        call = next(ln for ln in src.splitlines() if "sf_conv_tile32(&" in ln)
        args = call[call.index("(") + 1:call.rindex(")")].split(", ")
        wbytes, span = int(args[5]) * int(args[6]) * 32 * 4, int(args[1])
        mode = ("blocked" if wbytes > limit or (span <= span_max and wbytes > small)
                else "chunked" if wbytes > small else "whole")
        seen[mode].append((shape[1], kernel[2]))
    assert seen["blocked"] == [(160, 3), (16, 3), (160, 1)] and seen["chunked"] == [(24, 3), (20, 3), (200, 1)] \
        and seen["whole"], seen


def _l1_block(offsets, channels, budget):
    """Reference for sf_conv_cblock_l1: the channels whose windows of 40 floats at the taps'
    offsets (counted once where they overlap: a set of floats) fit ``budget`` bytes."""
    return max(1, min(channels, budget // (4 * len(_l1_block_floats(offsets)))))


def _l1_block_floats(offsets):
    """The floats that windows of 40 at ``offsets`` cover, as a set."""
    floats = set()
    for o in offsets:
        floats.update(range(o, o + 40))
    return floats


def test_avx2_position_tile_blocks_its_channels_for_the_l1(tmp_path):
    """The AVX2 position tile's channel block: the per-channel pass footprint rendered after the
    taps' offsets (``conv_tiles.pass_floats``) and the C clamp ``sf_conv_cblock_l1`` (compiled from
    the helper's text) against a set of the floats the windows cover: column copies of a 28x28
    3x3 (3 copies of 840 floats), the phase-split 56x56 3x3 (row pitch 58), a 1x1, repeated and
    unordered offsets, a 7x7 stem; every rendered offset table of the cases above; and those cases
    include blocked reductions with a partial last block (so the numerics and SIMD-build tests ran
    that path)."""
    import subprocess
    import re
    from solverfuse.emit.conv_tiles import pass_floats
    from solverfuse.plans import build_plan
    budget = 8 * 1024
    assert f"#define SF_CONV_L1_AVX2 ({budget // 1024}L*1024)" in CBLOCK_DEFS
    src = tmp_path / "cb.c"
    src.write_text("#include <stdio.h>\n#include <stdlib.h>\n#define SF_UNUSED __attribute__((unused))\n" + CBLOCK_DEFS + """
int main(int argc, char **argv) {
    printf("%ld\\n", sf_conv_cblock_l1(atol(argv[1]), atol(argv[2])));
    return 0;
}
""")
    exe = tmp_path / "cb"
    subprocess.run(["cc", "-O1", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    layouts = {
        "cols 28x28 3x3": [kw * 840 + r * 28 for r in range(3) for kw in range(3)],
        "phase 56x56 3x3": [r * 58 + kw for r in range(3) for kw in range(3)],
        "1x1": [0],
        "repeated": [5, 5, 0, 100, 5, 30],
        "stem 7x7": [r * 115 + kw for r in range(7) for kw in range(7)],
        "far apart": [0, 1000, 2000, 10],
    }
    for name, offs in layouts.items():
        for channels in (1, 3, 64, 512):
            out = subprocess.run([str(exe), str(channels), str(pass_floats(offs))],
                                 capture_output=True, text=True, check=True).stdout
            assert int(out) == _l1_block(offs, channels, budget), (name, channels, out)
    partial = []
    for shape, kernel, attrs, marker in CASES:
        g, groups = _graph([(shape, kernel, attrs, marker)])
        text = render(build_plan(g, HW, groups, strategy="test"), g, threads=1)["model.c"]
        for table in re.findall(r"static const long \w+\[(\d+)\] = \{([^}]*)\}", text):
            vals = [int(v) for v in table[1].split(",")]
            assert len(vals) == int(table[0]) and vals[-1] == len(_l1_block_floats(vals[:-1])), table
        call = next((ln for ln in text.splitlines() if re.search(r"sf_conv_tile[248]\(&T", ln)), None)
        if call is None:
            continue
        args = call[call.index("(") + 1:call.rindex(")")].split(", ")
        offs = re.search(rf"{args[7]}\[\d+\] = \{{([^}}]*)\}}", text).group(1)
        cb = _l1_block([int(o) for o in offs.split(",")][:-1], int(args[5]), budget)
        if cb < int(args[5]) and int(args[5]) % cb:
            partial.append((shape[1], kernel[2]))
    assert (512, 3) in partial and (1400, 3) in partial and len(partial) >= 3, partial
