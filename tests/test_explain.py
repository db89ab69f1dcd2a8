"""`explain`: per group limits, per cut edge the saving or the obstacle (rule, registers, L1, cycle)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from solverfuse.api import plan as make_plan
from solverfuse.cli import app
from solverfuse.explain import explain, format_explain
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.plans import build_plan, save_plan

from .conftest import EXAMPLES

H100 = load_hardware("nvidia-h100")


def graph(nodes, shape=(8, 1024), extra=None, outputs=("y",)):
    tensors = {"x": {"shape": list(shape)}, **(extra or {})}
    return load_graph({"tensors": tensors, "inputs": ["x"], "outputs": list(outputs),
                       "nodes": [{"name": n, "op": op, "inputs": i, "outputs": o} for n, op, i, o in nodes]})


def cut(e, a, b):
    return next(c for c in e["cuts"] if (c["from"], c["to"]) == (a, b))


def test_unfused_chain_every_cut_saves_the_intermediate_twice():
    g = graph([("a", "Relu", ["x"], ["h"]), ("b", "Exp", ["h"], ["i"]), ("c", "Neg", ["i"], ["y"])])
    e = explain(build_plan(g, H100, [["a"], ["b"], ["c"]], strategy="unfused"))
    # each intermediate is 8 * 1024 * 4 = 32768 bytes, written once and read once
    assert [(c["from"], c["to"], c["legal"], c["saves_bytes"]) for c in e["cuts"]] == \
        [("k0", "k1", True, 65536), ("k1", "k2", True, 65536)]
    assert e["legal_savings_bytes"] == 131072
    assert all(g_["tight"] == [] for g_ in e["groups"])


def test_rule_obstacle_names_the_anchor():
    g = graph([("a", "Relu", ["x"], ["h"]), ("m", "MatMul", ["h", "w"], ["y"])],
              shape=(64, 64), extra={"w": {"shape": [64, 64], "constant": True}})
    e = explain(build_plan(g, H100, [["a"], ["m"]], strategy="manual"))
    c = cut(e, "k0", "k1")
    assert (c["legal"], c["obstacle"]) == (False, "rule") and "'m' (anchor) must read 'h'" in c["reason"]
    assert e["groups"][1]["tight"] == ["rule"]


def test_register_obstacle():
    # kernel base 16 + Relu 1 + Tanh 3 = 20 registers > 19
    tight = H100.model_copy(update={"register_budget": 19})
    g = graph([("a", "Relu", ["x"], ["h"]), ("b", "Tanh", ["h"], ["y"])])
    e = explain(build_plan(g, tight, [["a"], ["b"]], strategy="manual"))
    c = cut(e, "k0", "k1")
    assert c["obstacle"] == "registers" and "20 registers > budget 19" in c["reason"]
    assert e["groups"][0]["registers"] == 17 and e["groups"][0]["register_budget"] == 19


def test_l1_obstacle():
    # Softmax over 1024 float32 keeps a 4096-byte row in L1; a 4000-byte L1 cannot hold it fused
    small = H100.model_copy(update={"l1_bytes": 4000})
    g = graph([("a", "Exp", ["x"], ["h"]), ("s", "Softmax", ["h"], ["y"])])
    e = explain(build_plan(g, small, [["a"], ["s"]], strategy="manual"))
    assert cut(e, "k0", "k1")["obstacle"] == "l1"
    assert e["groups"][1]["l1_bytes"] == 4096 and e["groups"][1]["l1_limit"] == 4000


def test_cycle_obstacle():
    g = graph([("a", "Relu", ["x"], ["h"]), ("b", "Exp", ["h"], ["i"]), ("c", "Add", ["h", "i"], ["y"])])
    e = explain(build_plan(g, H100, [["a"], ["b"], ["c"]], strategy="unfused"))
    c = cut(e, "k0", "k2")
    assert c["obstacle"] == "cycle" and "'b'" in c["reason"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_an_optimal_plan_leaves_no_legal_saving(path):
    g = load_graph(path)
    p = make_plan(g, H100, strategy="optimal", time_limit=5, workers=1)
    assert p.status == "optimal"
    e = explain(p)
    assert e["legal_savings_bytes"] == 0, [c for c in e["cuts"] if c["saves_bytes"]]


def test_cli_text_and_json(tmp_path):
    g = load_graph(EXAMPLES / "residual.json")
    from solverfuse.greedy import greedy_plan
    path = tmp_path / "p.json"
    save_plan(greedy_plan(g, H100, "unfused"), path)
    r = CliRunner().invoke(app, ["explain", str(path)])
    assert r.exit_code == 0, r.output
    assert "cut edges:" in r.stdout and "fusing saves" in r.stdout and "illegal (rule)" in r.stdout
    r = CliRunner().invoke(app, ["explain", str(path), "--json"])
    doc = json.loads(r.stdout)
    assert len(doc["groups"]) == len(g.nodes) and doc["cuts"]
    assert format_explain(doc) in CliRunner().invoke(app, ["explain", str(path)]).stdout


def test_cli_bad_plan_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    r = CliRunner().invoke(app, ["explain", str(bad)])
    assert r.exit_code == 2 and "malformed JSON" in r.output and "Traceback" not in r.output


def test_view_group_and_streaming_reduction_are_explained():
    # x -> Flatten (free: metadata) -> Exp -> ReduceSum that ends its group (streams its row)
    g = graph([("f", "Flatten", ["x"], ["h"]), ("e", "Exp", ["h"], ["i"]), ("s", "ReduceSum", ["i"], ["y"])])
    tiny = H100.model_copy(update={"l1_bytes": 1024})     # a 1024-float row (4096 B) does not fit
    e = explain(build_plan(g, tiny, [["f"], ["e", "s"]], strategy="manual"))
    assert e["groups"][0]["traffic_bytes"] == 0 and "no kernel" in e["groups"][0]["rule"]
    assert e["groups"][1]["l1_bytes"] == 0 and "no resident row" in e["groups"][1]["rule"]
    c = cut(e, "k0", "k1")
    # merging the view in makes the kernel read x instead of h: same bytes, so nothing saved
    assert c["legal"] and c["saves_bytes"] == 0
    text = format_explain(e)
    assert "streaming reduction" in text and "view ops only" in text
