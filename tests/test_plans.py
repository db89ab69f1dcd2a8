"""The validator rejects every kind of illegal plan; plans round-trip through JSON."""
from __future__ import annotations

import json

import pytest

from solverfuse.errors import PlanError
from solverfuse.graph import load_graph, parse_graph
from solverfuse.hardware import load_hardware
from solverfuse.plans import build_plan, load_plan, order_groups, plan_to_json, save_plan, validate

from .conftest import EXAMPLES


def op(name, kind, ins, outs):
    return {"name": name, "op": kind, "inputs": ins, "outputs": outs}


@pytest.fixture
def diamond():  # x -> a -> b -> d, a -> c -> d
    return parse_graph({"format": "solverfuse-graph/1", "tensors": {"x": {"shape": [64]}},
                        "inputs": ["x"], "outputs": ["y"],
                        "nodes": [op("a", "Relu", ["x"], ["h"]), op("b", "Exp", ["h"], ["p"]),
                                  op("c", "Neg", ["h"], ["q"]), op("d", "Add", ["p", "q"], ["y"])]})


def test_build_orders_groups_and_fills_numbers(diamond):
    p = build_plan(diamond, "nvidia-h100", [["d"], ["b", "c"], ["a"]], strategy="manual")
    assert [g.nodes for g in p.groups] == [["a"], ["b", "c"], ["d"]]
    assert p.groups[1].reads == ["h"] and p.groups[1].writes == ["p", "q"]
    assert p.traffic_bytes == sum(g.traffic_bytes for g in p.groups)


def test_rejects_non_convex_group(diamond):
    with pytest.raises(PlanError, match="not convex"):
        build_plan(diamond, "nvidia-h100", [["a", "d"], ["b"], ["c"]], strategy="manual")


def test_rejects_cyclic_or_misordered_plan(diamond):
    p = build_plan(diamond, "nvidia-h100", [["a"], ["b"], ["c"], ["d"]], strategy="manual")
    bad = p.model_copy(update={"groups": list(reversed(p.groups))})
    with pytest.raises(PlanError, match="out of order"):
        validate(bad)
    # two convex horizontal groups that depend on each other: {a, c2} and {b, c1} with a->b, c1->c2
    g = parse_graph({"format": "solverfuse-graph/1", "tensors": {"x": {"shape": [8]}, "z": {"shape": [8]}},
                     "inputs": ["x", "z"], "outputs": ["y1", "y2"],
                     "nodes": [op("a", "Relu", ["x"], ["h"]), op("b", "Exp", ["h"], ["y1"]),
                               op("c1", "Neg", ["z"], ["k"]), op("c2", "Abs", ["k"], ["y2"])]})
    with pytest.raises(PlanError, match="cycle"):
        order_groups(g, [["a", "c2"], ["b", "c1"]])


def test_rejects_partition_errors(diamond):
    p = build_plan(diamond, "nvidia-h100", [["a"], ["b", "c", "d"]], strategy="manual")
    missing = p.model_copy(update={"groups": p.groups[1:]})
    with pytest.raises(PlanError, match="node 'a' is in no group"):
        validate(missing)
    dup = p.model_copy(update={"groups": [p.groups[0], p.groups[0], p.groups[1]]})
    with pytest.raises(PlanError, match="node 'a' is in groups"):
        validate(dup)


def test_rejects_over_capacity():
    g = load_graph(EXAMPLES / "layernorm_gelu.json")
    hw = load_hardware("nvidia-h100")
    tiny = hw.model_copy(update={"l1_bytes": 1024})   # a 768-float row (3 KiB) does not fit
    with pytest.raises(PlanError, match="L1"):
        build_plan(g, tiny, [[n.name for n in g.nodes]], strategy="manual")
    few_regs = hw.model_copy(update={"register_budget": hw.kernel_base_registers + 3})
    chain = ["gelu_div", "gelu_erf", "gelu_add", "gelu_mul"]
    rest = [[n.name] for n in g.nodes if n.name not in chain]
    with pytest.raises(PlanError, match="registers"):
        build_plan(g, few_regs, [chain] + rest, strategy="manual")


def test_rejects_tampered_numbers_and_wrong_graph(diamond, tmp_path):
    p = build_plan(diamond, "nvidia-h100", [["a", "b", "c", "d"]], strategy="manual")
    with pytest.raises(PlanError, match="traffic_bytes"):
        validate(p.model_copy(update={"traffic_bytes": 1}))
    with pytest.raises(PlanError, match="bound_bytes"):
        validate(p.model_copy(update={"bound_bytes": p.traffic_bytes + 1}))
    other = load_graph(EXAMPLES / "mlp.json")
    with pytest.raises(PlanError, match="another graph"):
        validate(p, other)


def test_json_round_trip_and_atomic_save(tmp_path):
    g = load_graph(EXAMPLES / "attention.json")
    p = build_plan(g, "nvidia-a100", [[n.name] for n in g.nodes], strategy="unfused")
    path = tmp_path / "plan.json"
    save_plan(p, path)
    q = load_plan(path)
    assert q.model_dump() == p.model_dump()
    data = json.loads(path.read_text())
    assert data["format"] == "solverfuse-plan/1" and data["hardware"] == "nvidia-a100"
    data["groups"][0]["nodes"].append("ghost")
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="unknown node 'ghost'"):
        load_plan(path)
    assert [f.name for f in tmp_path.iterdir()] == ["plan.json"]   # no temp files left behind


def test_hostile_names_survive_plan_json(tmp_path):
    names = ['gpu_0/conv1_w_0', 'q"uote', "ünï*/"]
    g = parse_graph({"format": "solverfuse-graph/1", "tensors": {"in put": {"shape": [4]}},
                     "inputs": ["in put"], "outputs": [names[-1] + "!"],
                     "nodes": [op(names[0], "Relu", ["in put"], ["t/0"]), op(names[1], "Exp", ["t/0"], ["t\n1"]),
                               op(names[2], "Neg", ["t\n1"], [names[-1] + "!"])]})
    p = build_plan(g, "nvidia-h100", [names], strategy="manual")
    path = tmp_path / "p.json"
    path.write_text(plan_to_json(p))
    assert load_plan(path).groups[0].nodes == names
