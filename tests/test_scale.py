"""The speed-ups behind large graphs give the same answers as plain searches: the greedy
partition's ranked cycle check, and the presolve's skipping of pairs known illegal."""
from __future__ import annotations

import itertools
import json
import random

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solverfuse import cost
from solverfuse.formulations.presolve import presolve
from solverfuse.greedy import Partition
from solverfuse.hardware import load_hardware
from solverfuse.zoo import synthetic_graph

H100 = load_hardware("nvidia-h100")


def quotient_acyclic(graph, groups) -> bool:
    """Reference: the quotient graph of ``groups`` built with networkx, no solverfuse code."""
    where = {v: k for k, g in enumerate(groups) for v in g}
    q = nx.DiGraph()
    q.add_nodes_from(range(len(groups)))
    for n in graph.nodes:
        for t in n.outputs:
            for m in graph.nodes:
                if t and t in m.inputs and where[n.name] != where[m.name]:
                    q.add_edge(where[n.name], where[m.name])
    return nx.is_directed_acyclic_graph(q)


@pytest.mark.parametrize("seed", range(6))
def test_partition_cycle_check_matches_a_plain_quotient_search(seed):
    """Random merges of random groups (legality rules ignored, only the cycle check): the ranked
    search says "cycle" exactly when the merged partition's quotient graph has one."""
    graph = synthetic_graph(70, seed=seed)
    part = Partition(graph, H100)
    rng = random.Random(seed)
    said = set()
    for _ in range(150):
        ids = sorted(part.members)
        if len(ids) < 3:
            break
        gs = rng.sample(ids, rng.choice((2, 2, 2, 3)))
        if rng.random() < 0.7:  # mostly neighbours, the merges baselines try
            a = rng.choice(ids)
            near = sorted(part.succ(a) | part.pred(a))
            if near:
                gs = [a, rng.choice(near)]
        merged = [v for g in gs for v in part.members[g]]
        others = [part.members[g] for g in ids if g not in gs]
        expect = quotient_acyclic(graph, others + [merged])
        got = part.cycle_through(gs) is None
        assert got == expect, (seed, gs)
        said.add(got)
        if got:
            part.merge(gs)
    assert said == {True, False}  # both answers occurred


@pytest.mark.parametrize("seed", range(3))
def test_presolve_compatibility_matches_the_hull_rule(seed):
    """Every pair of ops the presolve links as siblings or neighbours is one whose hull (every op
    on a path between them, found by networkx) is a legal group, and every affine pair with a
    legal hull is linked: the pairs skipped without a look are all illegal."""
    graph = synthetic_graph(200, seed=seed)
    pre = presolve(graph, H100)
    g = nx.DiGraph()
    for n in graph.nodes:
        g.add_node(n.name)
        for t in n.inputs:
            p = graph.index.producer.get(t)
            if p:
                g.add_edge(p, n.name)
    pos = pre.pos
    checked = 0
    for t, cons in graph.index.consumers.items():
        for a in cons:
            for b in cons:
                if pos[a] < pos[b]:
                    hull = {a, b} | (nx.descendants(g, a) & nx.ancestors(g, b))
                    order = sorted(hull, key=pos.__getitem__)
                    legal = cost.group_violation(graph, order, H100) is None
                    assert pre.reach.compatible(pos[a], pos[b]) == legal, (a, b)
                    checked += 1
    assert checked > 50


# ---- the cost model's one-pass group cost (cost.group_cost and its per-graph tables) -------------

def reference_cost(graph, nodes):
    """(reads, writes, traffic) of a group from the definition in ``cost``'s module doc, from the
    graph's node and tensor lists and the op table only (no graph index, no cost code)."""
    from solverfuse.ops import DTYPE_SIZES, OPS, numel
    node = {n.name: n for n in graph.nodes}
    producer = {t: n.name for n in graph.nodes for t in n.outputs if t}
    members = set(nodes)
    size = lambda t: numel(graph.tensors[t].shape) * DTYPE_SIZES[graph.tensors[t].dtype]
    info = lambda v: OPS.get(node[v].op)
    reads = []
    for v in nodes:
        for t in node[v].inputs:
            if t and producer.get(t) not in members and t not in reads:
                reads.append(t)
    writes = [t for v in nodes for t in node[v].outputs
              if t and (t in graph.outputs or any(t in n.inputs for n in graph.nodes if n.name not in members))]
    if all(info(v) is not None and info(v).view and not set(node[v].outputs) & set(graph.outputs) for v in nodes):
        return reads, writes, 0

    def read_cost(t):
        readers = [v for v in nodes if t in node[v].inputs]
        # gathers and windows (Slice, Select) read only what their output picks of their data
        if not all(info(v) is not None and (info(v).gather_data_input or node[v].op in ("Slice", "Select"))
                   and node[v].inputs[0] == t and t not in node[v].inputs[1:] for v in readers):
            return size(t)
        return min(size(t), sum(size(node[v].outputs[0]) for v in readers))
    return reads, writes, sum(read_cost(t) for t in reads) + sum(size(t) for t in writes)


def embedding_graph():
    """Two gathers from one table (each reads 4 of its 100 rows), a Neg reading all of it, a
    Reshape of a gathered row set and a view writing a graph output."""
    from solverfuse.graph import load_graph
    return load_graph({"tensors": {"w": {"shape": [100, 16]}, "i": {"shape": [4], "dtype": "int64"},
                                   "j": {"shape": [4], "dtype": "int64"},
                                   "s": {"shape": [2], "dtype": "int64", "constant": True, "value": [8, 8]}},
                       "inputs": ["w", "i", "j"], "outputs": ["y", "z", "n", "r"],
                       "nodes": [{"name": "g1", "op": "Gather", "inputs": ["w", "i"], "outputs": ["a"]},
                                 {"name": "g2", "op": "Gather", "inputs": ["w", "j"], "outputs": ["b"]},
                                 {"name": "add", "op": "Add", "inputs": ["a", "b"], "outputs": ["y"]},
                                 {"name": "neg", "op": "Neg", "inputs": ["w"], "outputs": ["n"]},
                                 {"name": "rs", "op": "Reshape", "inputs": ["a", "s"], "outputs": ["q"]},
                                 {"name": "ex", "op": "Exp", "inputs": ["q"], "outputs": ["z"]},
                                 {"name": "id", "op": "Identity", "inputs": ["b"], "outputs": ["r"]}]})


def cost_graphs():
    from solverfuse.zoo import gpt2_block
    return [synthetic_graph(160, seed=s) for s in range(2)] + \
        [gpt2_block(layers=1, hidden=32, seq=8, heads=2), embedding_graph()]


@pytest.mark.parametrize("k", range(4))
def test_group_cost_matches_the_definition(k):
    """Random groups (windows of the topological order, random subsets, every op alone, the
    greedy baselines' groups, views together): cost.group_cost and the functions built on its
    table equal a from-the-definition computation, gathers, views and graph outputs included."""
    from solverfuse import greedy
    graph = cost_graphs()[k]
    order = graph.index.order
    rng = random.Random(k)
    groups = [[v] for v in order]
    groups += [order[i:i + rng.randint(2, 12)] for i in range(0, len(order), 5)]
    groups += [rng.sample(order, rng.randint(2, min(20, len(order)))) for _ in range(60)]
    groups += [g for name in ("tvm", "guide") for g in greedy.STRATEGIES[name](graph, H100)]
    views = [v for v in order if cost.facts(graph, v).view]
    groups += [views[i:i + 3] for i in range(0, len(views), 3)]
    groups += [list(c) for r in range(2, 4) for c in itertools.combinations(order, r)] if len(order) < 10 else []
    seen = {"gather": 0, "free": 0}
    for g in groups:
        reads, writes, traffic = reference_cost(graph, g)
        got = cost.group_cost(graph, g)
        assert (got.reads, got.writes, got.traffic) == (reads, writes, traffic), g
        assert (cost.group_reads(graph, g), cost.group_writes(graph, g), cost.group_traffic(graph, g)) == \
            (reads, writes, traffic)
        seen["free"] += traffic == 0
        seen["gather"] += any(cost.read_bytes(graph, set(g), t) < graph.nbytes(t) for t in reads)
    assert cost.unfused_traffic(graph) == sum(reference_cost(graph, [v])[2] for v in order)
    assert cost.plan_traffic(graph, groups[:len(order)]) == cost.unfused_traffic(graph)
    if k >= 2:
        assert seen["free"] > 0  # the view rule was exercised
    if k == 3:
        assert seen["gather"] > 0  # a gather read less than its data's size


def test_cost_tables_follow_a_changed_graph():
    """The per-graph tables and totals live on the graph index: a copy with other tensor sizes
    costs what the definition says for it, not what the original cost."""
    graph = synthetic_graph(80, seed=5)
    before = cost.unfused_traffic(graph), cost.q_min(graph)
    bigger = {k: t.model_copy(update={"shape": [2 * d for d in t.shape]}) if t.shape and not t.constant else t
              for k, t in graph.tensors.items()}
    other = graph.model_copy(update={"tensors": bigger})
    order = other.index.order
    assert cost.unfused_traffic(other) == sum(reference_cost(other, [v])[2] for v in order) != before[0]
    assert cost.q_min(other) != before[1]
    assert (cost.unfused_traffic(graph), cost.q_min(graph)) == before


# ---- indented JSON text (jsontext.dumps: what plans and graphs are written with) ----------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 80, max_value=2 ** 80) |
    st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) |
    st.dictionaries(st.text(max_size=4) | st.integers(-9, 9) | st.floats(allow_nan=False) | st.booleans() | st.none(),
                    inner, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(value=_json_values, indent=st.integers(0, 3))
def test_jsontext_writes_what_json_dumps_writes(value, indent):
    """Character for character json.dumps(indent=n, ensure_ascii=False): escapes, unicode, big
    ints, NaN/Infinity, non-string keys, tuples, empty and nested containers."""
    from solverfuse import jsontext
    assert jsontext.dumps(value, indent) == json.dumps(value, indent=indent, ensure_ascii=False)


def test_plan_and_graph_json_are_json_dumps_text():
    """A plan (embedded graph, hardware profile, a reason) and a graph written by our encoder
    equal the standard library's text of the same data."""
    from solverfuse import greedy, plans
    graph = cost_graphs()[2]
    plan = greedy.greedy_plan(graph, H100, "tvm")
    plan.reason = 'a "quoted" reason \u00e9\n'
    data = plan.model_dump(mode="json", exclude_none=True)
    for g in data["groups"]:
        del g["passes"]
    assert plans.plan_to_json(plan) == json.dumps(data, indent=1, ensure_ascii=False)
    assert graph.to_json() == json.dumps(graph.model_dump(mode="json"), indent=1, ensure_ascii=False)
    assert graph.to_json(indent=None) == json.dumps(graph.model_dump(mode="json"), ensure_ascii=False)
