"""Conv tiles on small planes and strided depthwise convolutions, against ONNX Runtime: the band's
last partial chunk of positions (masked, not rounded up to 32), 1x1 convs reading their input in
place, column-shifted input copies (no junk columns on 13x13 / 7x7 planes; strided depthwise), the
per-tile copy of a depthwise conv's input channel, bands split for an even share among threads
and taken one at a time --
at 1 and 2 threads, under the sanitizers (the host's vector form at -O1) and in the AVX2 build. Each case
also checks that the path it is about was emitted (else it would prove nothing). Then the depthwise
tile's last positions (every count of vectors left) at every SIMD target, and a depthwise conv
between two dense ones sharing their parallel region at 2 threads."""
from __future__ import annotations

import re

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph, host_flags


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-conv-small-cache")


#: (input shape, weight shape, attributes, a marker of the path in the C)
CASES = [
    # 13x13 3x3: column-shifted copy (pitch 13, not 15), 169 positions = 5 chunks + 9 masked
    ((1, 16, 13, 13), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "sf_conv_copy_cols("),
    # 7x7 1x1 in place: 49 positions = 1 chunk + 17 (two masked vectors)
    ((1, 40, 7, 7), (16, 40, 1, 1), {}, "reads its input in place"),
    # ShuffleNet's strided depthwise: a per-tile copy of the channel, column-shifted at stride 2
    ((1, 24, 14, 14), (24, 1, 3, 3), {"group": 24, "strides": [2, 2], "pads": [1, 1, 1, 1]}, "copies its input channel"),
    # the same on rows of 20 outputs (the copy's long-row form)
    ((1, 8, 40, 39), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}, "copies its input channel"),
    # depthwise with a channel multiplier of 2, column stride 2 and column dilation 2, batch 2
    ((2, 6, 11, 12), (12, 1, 3, 3), {"group": 6, "strides": [1, 2], "dilations": [1, 2], "pads": [1, 2, 1, 2]},
     "sf_conv_copy_cols("),
    # grouped, strided, asymmetric padding on a small plane
    ((1, 8, 9, 10), (16, 4, 3, 2), {"group": 2, "strides": [2, 1], "pads": [0, 1, 1, 0]}, "sf_conv_copy_cols("),
]


def _conv_bn_relu(shape, kernel, attrs):
    c = kernel[0]
    t = {"x": list(shape), "w": const(kernel), "s": const([c]), "bb": const([c]), "mean": const([c]),
         "var": const([c])}
    return graph(t, ["x"], ["y"], [("c", "Conv", ["x", "w"], ["h"], attrs),
                                   ("bn", "BatchNormalization", ["h", "s", "bb", "mean", "var"], ["n"]),
                                   ("r", "Relu", ["n"], ["y"])])


@pytest.mark.usefixtures("small_kernels_parallel")  # small convs: their own small regions
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,kernel,attrs,marker", CASES)
def test_small_plane_and_strided_depthwise_convs_match_onnxruntime(shape, kernel, attrs, marker, threads, cache):
    g = _conv_bn_relu(shape, kernel, attrs)
    plan, _, _ = check(g, [["c", "bn", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    assert "sf_conv_tile" in src and marker in src, marker
    if threads > 1 and "copy of a Conv input" in src and re.search(r"#pragma omp (parallel )?for", src):
        # the whole-input copy is shared among the threads: a run of planes each (a kernel under
        # emit.kernel's serial threshold has no parallel region at all)
        assert re.search(r"#pragma omp (?:parallel )?for[^\n]*\n\s*for \(long (c\d+) = 0;[^\n]*\n\s*sf_conv_copy\w*\(\w+ \+ \1\*", src)


@pytest.mark.usefixtures("small_kernels_parallel")  # a 26x26 conv: one small region
def test_bands_split_so_the_threads_share_tiles_evenly(cache):
    """3 blocks of 8 channels on a 26-row plane: one band per block would give 2 threads 2 and 1
    tiles; the rows are split into bands so that the count divides evenly (or is large)."""
    g = _conv_bn_relu((1, 8, 26, 26), (24, 8, 3, 3), {"pads": [1, 1, 1, 1]})
    plan, _, _ = check(g, [["c", "bn", "r"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=2)
    one = render(plan, g, threads=1)["model.c"]
    two = render(plan, g, threads=2)["model.c"]
    span = [int(re.search(r"float T\d+\[8\]\[(\d+)\] SF_ALIGN64;", src).group(1)) for src in (one, two)]
    assert span[0] % 26 == 0 and span[0] // 26 >= 26  # 1 thread: the whole plane in one band
    bands = span[0] // span[1]
    assert span[0] % span[1] == 0 and bands > 1 and (3 * bands) % 2 == 0  # 2 threads: 3 x bands tiles
    # and the threads take the tiles as they go (a late thread does not hold up a fixed half)
    assert "schedule(guided)" in two and "schedule(guided)" not in one


def test_small_plane_tiles_under_sanitizer(cache):
    """Every case at once in the host's build under ASan/UBSan: no read or write
    past the copies, the in-place input or the tiles."""
    ts, nodes, outs = {}, [], []
    for i, (shape, kernel, attrs, _) in enumerate(CASES):
        ts[f"x{i}"], ts[f"w{i}"] = list(shape), const(kernel)
        nodes.append((f"c{i}", "Conv", [f"x{i}", f"w{i}"], [f"y{i}"], attrs))
        outs.append(f"y{i}")
    g = graph(ts, [f"x{i}" for i in range(len(CASES))], outs, nodes)
    check(g, [[n[0]] for n in nodes], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("target,extra", [
    pytest.param("avx2", "-mno-avx512f", marks=pytest.mark.skipif(
        not {"avx2", "fma"} <= host_flags(), reason="the host cannot run AVX2+FMA code")),
    pytest.param("avx512", "", marks=pytest.mark.skipif(
        "avx512f" not in host_flags(), reason="the host cannot run AVX-512 code")),
    # no AVX2/AVX-512 tiles: the portable C of every tile (GNU vector loops), which the host's
    # own builds (and its sanitizer builds, also -march=native) never compile
    ("portable", "-mno-avx512f -mno-avx2 -mno-fma")])
def test_small_plane_tiles_in_the_simd_builds(target, extra, tmp_path, cache):
    """The AVX2 form (maskload/maskstore tail; built for this host without AVX-512), the
    AVX-512 form (masked builtins) and the portable form of every case; the compiler wrapper's log shows that the
    -march=native build itself succeeded (a failed one is retried without -march and would pass
    on the portable form)."""
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
    ts, nodes, outs = {}, [], []
    for i, (shape, kernel, attrs, _) in enumerate(CASES):
        ts[f"x{i}"], ts[f"w{i}"] = list(shape), const(kernel)
        nodes.append((f"c{i}", "Conv", [f"x{i}", f"w{i}"], [f"h{i}"], attrs))
        nodes.append((f"r{i}", "Relu", [f"h{i}"], [f"y{i}"]))
        outs.append(f"y{i}")
    g = graph(ts, [f"x{i}" for i in range(len(CASES))], outs, nodes)
    plan = build_plan(g, HW, [[f"c{i}", f"r{i}"] for i in range(len(CASES))], strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path / "cache", cc=str(cc))
    assert all(ln.startswith("0 ") for ln in log.read_text().splitlines() if "-march=native" in ln)
    assert any("-march=native" in ln for ln in log.read_text().splitlines())
    ins, cs = random_inputs(g, seed=2), constants(g, seed=2)
    out, ref = prog.run(ins, cs), reference_outputs(g, ins, cs, engine="onnxruntime")
    for name in g.outputs:
        np.testing.assert_allclose(out[name], ref[name], rtol=1e-4, atol=1e-5, err_msg=name)


#: Depthwise 3x3 planes (stride 1, padded) whose one-channel tiles (small planes: rows of w + 2
#: columns, h (w + 2) positions) leave, after the steps of 64 positions, every count of vectors
#: of 8 (1-8), the last one full or partial.
DW_PLANES = [(1, 3), (2, 3), (4, 4), (3, 7), (4, 6), (5, 5), (6, 6), (5, 8), (7, 6), (6, 8), (6, 10), (11, 13)]


@pytest.mark.parametrize("build", ["native", "no-avx512", "portable", "sanitized"])
def test_depthwise_tile_remainders_at_every_target(build, cache, no_avx512_cc):
    """sf_conv_tile1 (one output channel per tile) over spans whose last 1-63 positions take every
    count of vectors, built for this host (also under ASan/UBSan), for AVX2 (no AVX-512) and for
    neither, against ONNX Runtime; the spans emitted are the ones the planes were chosen for."""
    if build == "no-avx512" and not {"avx2", "fma"} <= host_flags():
        pytest.skip("the host cannot run AVX2+FMA code")
    t, nodes = {}, []
    for i, (h, w) in enumerate(DW_PLANES):
        t.update({f"x{i}": [1, 8, h, w], f"w{i}": const([8, 1, 3, 3]), f"b{i}": const([8])})
        nodes.append((f"c{i}", "Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"h{i}"], {"group": 8, "pads": [1, 1, 1, 1]}))
        nodes.append((f"r{i}", "Relu", [f"h{i}"], [f"y{i}"]))
    g = graph(t, [f"x{i}" for i in range(len(DW_PLANES))], [f"y{i}" for i in range(len(DW_PLANES))], nodes)
    groups = [[f"c{i}", f"r{i}"] for i in range(len(DW_PLANES))]
    cc = None if build in ("native", "sanitized") else no_avx512_cc[build]
    plan, _, _ = check(g, groups, cache / build, rtol=1e-5, atol=1e-6, engine="onnxruntime", cc=cc,
                       sanitize=build == "sanitized")
    src = render(plan, g)["model.c"]
    spans = [int(s) for s in re.findall(r"sf_conv_tile1\(&\w+\[0\]\[0\], (\d+),", src)]
    assert len(spans) == len(DW_PLANES), spans
    left = {full: {(s % 64 + 7) // 8 for s in spans if s % 64 and (s % 8 == 0) == full} for full in (True, False)}
    assert left[True] >= {1, 3, 4, 6, 7} and left[False] >= {1, 2, 4, 5, 7, 8}, spans  # last vector full / partial


def test_a_depthwise_conv_between_dense_convs_shares_their_region(cache):
    """ShuffleNet's 544-channel 7x7 unit at 2 threads (1x1 conv, 3x3 depthwise conv, 1x1 conv):
    the depthwise conv, under the serial threshold by its flops, is counted at its speed
    (sharing.DEPTHWISE_FLOP_WEIGHT) and runs on the threads inside the one region of the three
    kernels rather than serial between two; the values match ONNX Runtime."""
    c = 544
    g = graph({"x": [1, c, 7, 7], "w1": const([c, c, 1, 1]), "w2": const([c, 1, 3, 3]), "b2": const([c]),
               "w3": const([c, c, 1, 1])}, ["x"], ["y"],
              [("c1", "Conv", ["x", "w1"], ["h1"], {}), ("r1", "Relu", ["h1"], ["a1"]),
               ("c2", "Conv", ["a1", "w2", "b2"], ["h2"], {"group": c, "pads": [1, 1, 1, 1]}),
               ("c3", "Conv", ["h2", "w3"], ["h3"], {}), ("r3", "Relu", ["h3"], ["y"])])
    groups = [["c1", "r1"], ["c2"], ["c3", "r3"]]
    plan, _, _ = check(g, groups, cache, rtol=1e-4, atol=1e-4, engine="onnxruntime", threads=2)
    src = render(plan, g, threads=2)["model.c"]
    assert src.count("#pragma omp parallel") == 1, re.findall(r"#pragma omp parallel.*", src)
    dw = src[src.index("static int k1("):]
    dw = dw[:dw.index("\n}\n")]
    assert "sf_conv_tile1(" in dw and "#pragma omp for" in dw
