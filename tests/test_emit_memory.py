"""Memory set up once: one 64-byte-aligned arena for intermediates and scratch (slots with disjoint
lifetimes share it), weights packed once per set of constants, 1x1 convolutions read in place."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from solverfuse.emit.arena import ALIGN, SLACK, Slot, layout
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.program import render
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, graph, unfused


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-cache")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 9), st.integers(0, 4)), min_size=1, max_size=25))
def test_layout_never_overlaps_live_slots(spec):
    slots = [Slot(i, n, a, a + d) for i, (n, a, d) in enumerate(spec)]
    total, off = layout(slots)
    for i, s in enumerate(slots):
        assert off[i] % ALIGN == 0 and off[i] + s.nbytes + SLACK <= total
        for j, o in enumerate(slots[:i]):
            if s.first <= o.last and o.first <= s.last:  # alive together: disjoint bytes
                assert off[i] + s.nbytes + SLACK <= off[j] or off[j] + o.nbytes + SLACK <= off[i]
    assert total <= sum(-(-(s.nbytes + SLACK) // ALIGN) * ALIGN for s in slots)


def _chain(n=6, size=(64, 64)):
    ops = ["Relu", "Neg", "Exp", "Abs", "Sigmoid", "Tanh"]
    nodes = [(f"n{i}", ops[i % len(ops)], [f"t{i}" if i else "x"], [f"t{i + 1}" if i < n - 1 else "y"])
             for i in range(n)]
    return graph({"x": list(size)}, ["x"], ["y"], nodes)


def test_intermediates_share_the_arena_and_nothing_is_allocated_per_run(cache):
    g = _chain()
    plan, prog, out = check(g, unfused(g), cache, engine="onnxruntime")
    src = render(plan, g)["model.c"]
    arena = int(re.search(r"#define SF_ARENA_BYTES (\d+)LL", src).group(1))
    one = 64 * 64 * 4
    # 5 intermediates of 16 KiB in a chain: t_i dies when t_{i+1} is written, so two slots suffice
    assert arena == 2 * (one + SLACK + (-(one + SLACK)) % ALIGN)
    assert "malloc(" not in src and src.count("aligned_alloc(64") == 1
    # run twice: the arena is reused, results stay right
    again = prog.run(random_inputs(g, seed=1), constants(g, seed=1))
    np.testing.assert_array_equal(again["y"], out["y"])


def _conv_graph(cin=16, cout=32, hw=14):
    t = {"x": [1, cin, hw, hw], "w1": {"shape": [cin, cin, 3, 3], "constant": True},
         "w2": {"shape": [cout, cin, 1, 1], "constant": True}, "b2": {"shape": [cout], "constant": True}}
    return graph(t, ["x"], ["y"], [("c1", "Conv", ["x", "w1"], ["h"], {"pads": [1, 1, 1, 1]}),
                                   ("r", "Relu", ["h"], ["a"]),
                                   ("c2", "Conv", ["a", "w2", "b2"], ["y"])])


def test_a_1x1_convolution_reads_its_arena_input_in_place(cache):
    g = _conv_graph()
    groups = [["c1", "r"], ["c2"]]
    plan, _, _ = check(g, groups, cache, engine="onnxruntime", rtol=1e-4, atol=1e-5)
    src = render(plan, g)["model.c"]
    assert src.count("reads its input in place") == 1  # c2; c1 (3x3, padded) copies
    check(g, groups, cache, engine="onnxruntime", rtol=1e-4, atol=1e-5, sanitize=True)  # slack covers the over-read


def test_packed_weights_follow_the_constants_given(cache):
    """Weights are packed once per set of constants: a run with other weight arrays packs again,
    also when two Programs share one compiled library."""
    g = _conv_graph()
    plan = build_plan(g, HW, [["c1", "r"], ["c2"]], strategy="t")
    p1 = compile_plan(plan, g, cache_dir=cache)
    p2 = compile_plan(plan, g, cache_dir=cache)
    assert p1.path == p2.path
    x = random_inputs(g, seed=0)
    ws = [constants(g, seed=s) for s in (1, 2)]
    want = [reference_outputs(g, x, w, engine="onnxruntime")["y"] for w in ws]
    for prog, w, ref in [(p1, 0, 0), (p1, 1, 1), (p1, 0, 0), (p2, 1, 1), (p1, 1, 1), (p1, 0, 0), (p2, 0, 0)]:
        got = prog.run(x, ws[w])["y"]
        np.testing.assert_allclose(got, want[ref], rtol=1e-4, atol=1e-5)
    assert not np.allclose(want[0], want[1])


def test_a_program_released_while_another_shares_its_library(cache):
    """Deleting a Program gives its library's arena back; a Program still using that library
    allocates and packs again at its next run."""
    import gc
    g = _conv_graph()
    plan = build_plan(g, HW, [["c1", "r"], ["c2"]], strategy="t")
    a, b = compile_plan(plan, g, cache_dir=cache), compile_plan(plan, g, cache_dir=cache)
    x, cs = random_inputs(g, seed=4), constants(g, seed=4)
    want = reference_outputs(g, x, cs, engine="onnxruntime")["y"]
    np.testing.assert_allclose(a.run(x, cs)["y"], want, rtol=1e-4, atol=1e-5)
    del a
    gc.collect()
    np.testing.assert_allclose(b.run(x, cs)["y"], want, rtol=1e-4, atol=1e-5)


def _anon_huge_kib() -> int:
    text = open("/proc/self/smaps_rollup").read()
    return int(re.search(r"^AnonHugePages:\s+(\d+) kB", text, re.M).group(1))


def _thp_mode() -> str:
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        return "none"
    return re.search(r"\[(\w+)\]", text).group(1)


@pytest.mark.skipif(_thp_mode() != "madvise", reason="transparent huge pages not in madvise mode here: "
                    "nothing else would take huge pages only when asked (always), or none are given (never)")
def test_an_arena_of_4_mib_and_more_asks_for_huge_pages(cache):
    """With transparent huge pages in madvise mode, only memory a program asks for gets 2 MiB
    pages: the process's huge pages grow once a program with a 16 MiB+ arena runs (its
    intermediates: 8 MiB tensors). NumPy asks for huge pages for its own large arrays too (the
    output): that is turned off here, so what grows is the arena's (a page at least: a
    fragmented machine may not have them all)."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _set_madvise_hugepage
    g = _chain(n=6, size=(1024, 2048))
    plan = build_plan(g, HW, unfused(g), strategy="t")
    src = render(plan, g)["model.c"]
    assert int(re.search(r"#define SF_ARENA_BYTES (\d+)LL", src).group(1)) >= 16 << 20
    prog = compile_plan(plan, g, cache_dir=cache)
    ins, cs = random_inputs(g, seed=0), constants(g, seed=0)
    was = _set_madvise_hugepage(False)
    try:
        before = _anon_huge_kib()
        out = prog.run(ins, cs)
        grown = _anon_huge_kib() - before
    finally:
        _set_madvise_hugepage(was)
    assert grown >= 2048, grown
    ref = reference_outputs(g, ins, cs, engine="onnxruntime")
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-5, atol=1e-6)
