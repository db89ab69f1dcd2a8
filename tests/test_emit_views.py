"""View-only groups launch no kernel and move no bytes (their output is their input's buffer under
another shape) unless they write a graph output; Gather's data is charged the bytes gathered.
Expectations are counted by hand; numerics against ONNX Runtime."""
from __future__ import annotations

import json

import numpy as np
import pytest

from solverfuse.emit.program import render
from solverfuse.errors import EmitError
from solverfuse.plans import build_plan

from .emit_helpers import HW, check, graph, model_counts, run_plan


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-cache")


def _i64(values):
    return {"shape": [len(values)], "dtype": "int64", "constant": True, "value": list(values)}


def views_graph():
    """relu(x) -> reshape -> unsqueeze -> squeeze -> flatten -> identity -> exp, x: [4, 6] float."""
    t = {"x": [4, 6], "s": _i64([2, 12]), "ax": _i64([0])}
    nodes = [("relu", "Relu", ["x"], ["h"]),
             ("rs", "Reshape", ["h", "s"], ["r"]),
             ("us", "Unsqueeze", ["r", "ax"], ["u"]),
             ("sq", "Squeeze", ["u", "ax"], ["q"]),
             ("fl", "Flatten", ["q"], ["f"], {"axis": 0}),
             ("id", "Identity", ["f"], ["i"]),
             ("exp", "Exp", ["i"], ["y"])]
    return graph(t, ["x"], ["y"], nodes, name="views")


GROUPS = [["relu"], ["rs", "us"], ["sq"], ["fl", "id"], ["exp"]]


def test_view_groups_launch_no_kernel_and_count_zero_bytes(cache):
    g = views_graph()
    plan, prog, _ = check(g, GROUPS, cache, engine="onnxruntime", counters=True)
    counted = [(c["read_bytes"], c["written_bytes"]) for c in prog.counters]
    # by hand: relu reads and writes 4*6 floats; the three view groups nothing; exp as relu
    assert counted == [(96, 96), (0, 0), (0, 0), (0, 0), (96, 96)]
    assert counted == model_counts(g, plan)
    files = render(plan, g)
    assert files["model.c"].count("static int k") == 2  # relu and exp only
    buffers = json.loads(files["buffers.json"])
    assert [b["tensor"] for b in buffers["buffers"]] == ["x", "s", "ax", "h", "y"]
    h = [b["tensor"] for b in buffers["buffers"]].index("h")
    assert buffers["views"] == {"u": h, "q": h, "i": h}  # the tensors the view groups write


def test_view_groups_with_threads_and_under_the_sanitizers(cache):
    g = views_graph()
    check(g, GROUPS, cache, engine="onnxruntime", threads=2)
    check(g, GROUPS, cache, engine="onnxruntime", sanitize=True)


def test_a_view_of_a_graph_input_reads_the_input_buffer(cache):
    t = {"x": [3, 8], "s": _i64([24])}
    g = graph(t, ["x"], ["y"], [("rs", "Reshape", ["x", "s"], ["r"]), ("neg", "Neg", ["r"], ["y"])])
    plan, prog, out = check(g, [["rs"], ["neg"]], cache, engine="onnxruntime", counters=True)
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == [(0, 0), (96, 96)]


def test_a_view_group_writing_a_graph_output_is_a_copy(cache):
    t = {"x": [3, 8], "s": _i64([24])}
    g = graph(t, ["x"], ["y", "r"], [("neg", "Neg", ["x"], ["h"]), ("rs", "Reshape", ["h", "s"], ["r"]),
                                     ("exp", "Exp", ["r"], ["y"])])
    plan, prog, out = check(g, [["neg"], ["rs"], ["exp"]], cache, engine="onnxruntime", counters=True)
    # the copy reads h (24 floats) and the shape parameter it checks (one int64), writes r
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == [(96, 96), (96 + 8, 96), (96, 96)]
    assert render(plan, g)["model.c"].count("static int k") == 3


def test_a_view_group_still_checks_its_shape_parameter(cache):
    g = views_graph()
    plan, prog, out, ins, cs = run_plan(g, GROUPS, cache)
    bad = dict(cs, s=np.array([3, 8], dtype=np.int64))
    with pytest.raises(EmitError, match="code 1"):
        prog.run(ins, bad)


@pytest.mark.parametrize("rows, ids", [(6, 20), (11, 4)])
def test_gather_is_charged_the_rows_it_gathers_capped_at_the_table(rows, ids, cache):
    t = {"table": {"shape": [rows, 8], "constant": True}, "ids": {"shape": [ids], "dtype": "int64"}}
    g = graph(t, ["ids"], ["y"], [("emb", "Gather", ["table", "ids"], ["e"]), ("r", "Relu", ["e"], ["y"])])
    for groups in ([["emb", "r"]], [["emb"], ["r"]]):
        plan, prog, _ = check(g, groups, cache, engine="onnxruntime", counters=True)
        got = [(c["read_bytes"], c["written_bytes"]) for c in prog.counters]
        # by hand: min(ids, rows) rows of 8 floats from the table + the ids (int64)
        assert got[0][0] == min(ids, rows) * 8 * 4 + ids * 8
        assert got == model_counts(g, plan)


def test_render_of_a_view_plan_has_no_tensor_names_in_c():
    g = views_graph()
    src = render(build_plan(g, HW, GROUPS, strategy="t"), g)["model.c"]
    assert "views" not in src and "'r'" not in src
