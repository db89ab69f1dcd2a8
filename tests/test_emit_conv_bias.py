"""A Conv bias as the start value of the register-blocked tile's accumulators (no pass of its own
over the tile), against ONNX Runtime: blocks of 8, 4 and 2 output channels, a depthwise conv
(one channel per tile), a 13x13 plane (the masked last chunk starts at the bias too), 7x7 planes
of 128 channels (the channel-vectorised tile, 32 channels per tile; in the AVX2 and portable
builds its position-vectorised fallback), a grouped conv whose last block per group is part padding (keeps the separate bias pass: the tile would
read past the last group's bias), at 2 threads, under the sanitizers (the host's vector form at -O1) and in
the AVX2 build. Each case checks which form the C took (else it would prove nothing)."""
from __future__ import annotations

import stat

import numpy as np
import pytest

from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.program import render
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, graph, host_flags


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-conv-bias-cache")


#: (input shape, weight shape, attributes, bias in the tile call)
CASES = [
    ((1, 5, 12, 11), (16, 5, 3, 3), {"pads": [1, 1, 1, 1]}, True),                          # blocks of 8
    ((1, 6, 13, 13), (12, 6, 1, 1), {}, True),                                              # 4, masked chunk
    ((2, 4, 9, 10), (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 1]}, True),         # 2, batch 2
    ((1, 7, 14, 14), (7, 1, 3, 3), {"group": 7, "pads": [1, 1, 1, 1]}, True),               # depthwise
    ((1, 4, 7, 8), (132, 2, 1, 1), {"group": 2}, False),                                    # 66 per group: padded
    # 7x7 planes, 128 channels: the channel-vectorised tile (sf_conv_tile32; 49 = 3 x 14 + 7 positions)
    ((1, 16, 7, 7), (128, 16, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ((2, 8, 7, 7), (128, 8, 1, 1), {}, True),
]


def _graph():
    ts, nodes, outs = {}, [], []
    for i, (shape, kernel, attrs, _) in enumerate(CASES):
        ts[f"x{i}"] = {"shape": list(shape)}
        ts[f"w{i}"] = {"shape": list(kernel), "constant": True}
        ts[f"b{i}"] = {"shape": [kernel[0]], "constant": True}
        nodes.append((f"c{i}", "Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"h{i}"], attrs))
        nodes.append((f"r{i}", "Relu", [f"h{i}"], [f"y{i}"]))
        outs.append(f"y{i}")
    return graph(ts, [f"x{i}" for i in range(len(CASES))], outs, nodes), [[f"c{i}", f"r{i}"] for i in range(len(CASES))]


def test_bias_starts_the_tile(cache):
    g, groups = _graph()
    plan, _, _ = check(g, groups, cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=2)
    src = render(plan, g, threads=2)["model.c"]
    kernels = src.split("/* group ")[1:]
    for (_, kernel, _, in_tile), text in zip(CASES, kernels):
        call = next(ln for ln in text.splitlines() if "sf_conv_tile" in ln and "(&T" in ln)
        bias = call[call.index("(") + 1:call.rindex(")")].split(", ")[8]  # the bias pointer, or 0: none
        assert (bias != "0") == in_tile, call
        assert ("] += " in text) != in_tile  # the separate bias pass only where the tile has none
        assert ("sf_conv_tile32(" in call) == (kernel[0] == 128), call  # 7x7 planes, 128 channels
    check(g, groups, cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("extra", [
    pytest.param("-mno-avx512f", marks=pytest.mark.skipif(
        not {"avx2", "fma"} <= host_flags(), reason="the host cannot run AVX2+FMA code")),
    pytest.param("", marks=pytest.mark.skipif(
        "avx512f" not in host_flags(), reason="the host cannot run AVX-512 code"))])
def test_bias_starts_the_simd_tiles(extra, tmp_path):
    """The AVX2 form (intrinsics; built for this host without AVX-512) and the AVX-512 form; the
    wrapper's log shows the -march=native build succeeded (a failed one falls back to the
    portable form, which would pass)."""
    log, cc = tmp_path / "cc.log", tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\ncc "$@" {extra}\nrc=$?\necho "$rc $*" >> {log}\nexit $rc\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    g, groups = _graph()
    plan = build_plan(g, HW, groups, strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path / "cache", cc=str(cc))
    assert any("-march=native" in ln for ln in log.read_text().splitlines())
    assert all(ln.startswith("0 ") for ln in log.read_text().splitlines() if "-march=native" in ln)
    x, cs = random_inputs(g, seed=3), constants(g, seed=3)
    got, want = prog.run(x, cs), reference_outputs(g, x, cs, engine="onnxruntime")
    for t in g.outputs:
        np.testing.assert_allclose(got[t], want[t], rtol=1e-4, atol=1e-5)
