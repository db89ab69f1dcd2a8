"""A Concat fused with the conv that produces one of its inputs (SqueezeNet's fire module: expand
1x1 + ReLU in the group, expand 3x3's output from another group): each input is stored straight
into its slice of the Concat output -- the conv's epilogue from its tile, the outside input by a
copy -- with no scratch copy of the conv's output. Against ONNX Runtime at 1 and 2 threads, a
Concat along the last axis too (the general pass), and the byte counters against the cost model's rules."""
from __future__ import annotations

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph, model_counts, run_plan


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-concat-cache")



def _fire(c=16, m=48, h=21, w=23, axis=1):
    """squeeze -> (expand 1x1 + ReLU, expand 3x3 + ReLU) -> Concat; batch 1."""
    cat = [1, 2 * m, h, w] if axis == 1 else [1, m, h, 2 * w]
    t = {"x": [1, c, h, w], "w1": const((m, c, 1, 1)), "b1": const((m,)), "w3": const((m, c, 3, 3)), "b3": const((m,)),
         "e1": [1, m, h, w], "r1": [1, m, h, w], "e3": [1, m, h, w], "r3": [1, m, h, w], "y": cat}
    nodes = [("c1", "Conv", ["x", "w1", "b1"], ["e1"], {"kernel_shape": [1, 1]}),
             ("a1", "Relu", ["e1"], ["r1"]),
             ("c3", "Conv", ["x", "w3", "b3"], ["e3"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
             ("a3", "Relu", ["e3"], ["r3"]),
             ("cat", "Concat", ["r1", "r3"], ["y"], {"axis": axis})]
    return graph(t, ["x"], ["y"], nodes)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("axis", [1, 3])
def test_concat_inputs_stored_into_their_slices(threads, axis, cache):
    g = _fire(axis=axis)
    groups = [["c3", "a3"], ["c1", "a1", "cat"]]
    plan, _, _ = check(g, groups, cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    k = src[src.index("/* group 1:"):]
    if axis == 1:
        assert "Concat input 'r1' into its slice" in k and "Concat input 'r3' into its slice" in k
        assert "sf_conv_tile" in k and "kernel-local scratch, output of an anchor" not in k
    else:  # along W the conv's flat band would run past a row of the slice: the general pass
        assert "into its slice" not in k


def test_concat_counters_match_the_cost_model(cache):
    g = _fire()
    for groups in ([["c3", "a3"], ["c1", "a1", "cat"]], [["c1", "a1"], ["c3", "a3", "cat"]]):
        plan, prog, _, _, _ = run_plan(g, groups, cache, counters=True)
        assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
        assert sum(c["read_bytes"] + c["written_bytes"] for c in prog.counters) == plan.traffic_bytes


def test_concat_slices_sanitized(cache):
    """The per-input passes write inside the Concat output only (AddressSanitizer build)."""
    g = _fire(c=8, m=16, h=9, w=11)
    check(g, [["c3", "a3"], ["c1", "a1", "cat"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", sanitize=True)
