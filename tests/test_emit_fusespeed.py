"""Fused kernels that keep the unfused anchor's fast path (issue 15: fusion never slower than no
fusion): each shape of group against ONNX Runtime / the reference evaluator, the instrumented byte
counters against the cost model, and the C form the speed depends on."""
from __future__ import annotations

import pytest

from solverfuse.emit.program import render
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, graph, model_counts


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-fusespeed")


def _scalar(v, dtype="float32"):
    return {"shape": [1], "constant": True, "value": [v], "dtype": dtype}


def _masked_scores(causal_cast: bool):
    """GPT-2's attention scores: Q.K^T + Where(mask, 0, -inf), Softmax, NaN rows (fully masked) to
    0; ``causal_cast``: the mask is built in the group too (Cast, And, Expand) and written out."""
    t = {"q": [1, 2, 8, 8], "k": [1, 2, 8, 8], "m": {"shape": [1, 1, 8, 8], "dtype": "bool"},
         "zero": _scalar(0.0), "ninf": _scalar(float("-inf")),
         "pad": {"shape": [1, 1, 1, 8], "dtype": "int64"},
         "es": {"shape": [4], "dtype": "int64", "constant": True, "value": [1, 1, 8, 8]}}
    nodes = []
    mask = "m"
    outs = ["p"]
    if causal_cast:
        nodes += [("cast", "Cast", ["pad"], ["padb"], {"to": 9}), ("and", "And", ["m", "padb"], ["mk"]),
                  ("exp", "Expand", ["mk", "es"], ["mask"])]
        mask = "mask"
        outs.append("mk")
    nodes += [("mm", "MatMul", ["q", "k"], ["s"]), ("wh", "Where", [mask, "zero", "ninf"], ["bias"]),
              ("add", "Add", ["s", "bias"], ["a"]), ("sm", "Softmax", ["a"], ["pr"], {"axis": -1}),
              ("nan", "IsNaN", ["pr"], ["isn"]), ("fix", "Where", ["isn", "zero", "pr"], ["p"])]
    inputs = ["q", "k", "m"] + (["pad"] if causal_cast else [])
    return graph(t, inputs, outs, nodes, name="masked_scores")


@pytest.mark.parametrize("causal_cast", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_masked_attention_scores_run_as_one_row_loop(causal_cast, threads, cache):
    """The whole masked-score group is one row loop on the blocked MatMul tile: the byte mask's
    Where is computed once per row into a float row by a branch-free bit select, the pure mask
    chain written beside it (another shape, a byte type) in a pass of its own."""
    g = _masked_scores(causal_cast)
    groups = [list(g.index.order)]
    plan, prog, out = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    assert "one row loop" in src and "sf_mm_tile8(" in src
    assert "-(uint32_t)(" in src  # the bit select
    assert ("computed from global reads" in src) == causal_cast
    if threads == 1:
        plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
        assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
        check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


def test_masked_scores_with_double_values(cache):
    """The bit select on 8-byte values (a double Where)."""
    t = {"x": {"shape": [3, 6], "dtype": "float64"}, "m": {"shape": [1, 6], "dtype": "bool"},
         "zero": _scalar(0.0, "float64"), "big": _scalar(-1e300, "float64")}
    g = graph(t, ["x", "m"], ["y"], [("wh", "Where", ["m", "zero", "big"], ["b"]), ("add", "Add", ["x", "b"], ["a"]),
                                     ("sm", "Softmax", ["a"], ["y"], {"axis": -1})])
    plan, prog, _ = check(g, [list(g.index.order)], cache, rtol=1e-6, atol=1e-9, counters=True)
    src = render(plan, g)["model.c"]
    assert "one row loop" in src and "-(uint64_t)(" in src
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
