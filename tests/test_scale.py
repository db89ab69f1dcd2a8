"""The speed-ups behind large graphs give the same answers as plain searches: the greedy
partition's ranked cycle check, and the presolve's skipping of pairs known illegal."""
from __future__ import annotations

import random

import networkx as nx
import pytest

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
