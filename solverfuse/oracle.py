"""Brute-force oracle: the least-traffic legal plan of a small graph, by enumerating partitions.

Independent of the CP-SAT formulations and their presolve: it walks every set partition of the
ops (ops in graph order; each op joins an existing group or opens a new one), prunes a branch as
soon as a group breaks ``cost.group_violation`` (fusion rules and capacity only get worse when a
group grows: ``formulations/reality.md``), and keeps a complete partition only if ``plans.order_groups`` finds an
execution order (an acyclic quotient, which also implies every group is convex). Exponential:
meant for graphs of up to about 10 ops, to check the solver.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> brute_force(g, load_hardware("nvidia-h100"))
(2048, [['a', 'b']], 2)
"""
from __future__ import annotations

from . import cost
from .errors import PlanError
from .graph import Graph
from .hardware import Hardware
from .plans import order_groups


def brute_force(graph: Graph, hw: Hardware, max_ops: int = 11) -> tuple[int, list[list[str]], int]:
    """(least traffic, one optimal partition, number of legal partitions seen)."""
    nodes = list(graph.index.order)
    if len(nodes) > max_ops:
        raise ValueError(f"brute force is for graphs of at most {max_ops} ops, this one has {len(nodes)}")
    best: list = [None, None]
    legal = 0
    groups: list[list[str]] = []

    def rec(i: int) -> None:
        nonlocal legal
        if i == len(nodes):
            try:
                order_groups(graph, groups)
            except PlanError:
                return
            legal += 1
            t = cost.plan_traffic(graph, groups)
            if best[0] is None or t < best[0]:
                best[0], best[1] = t, [list(g) for g in groups]
            return
        v = nodes[i]
        for g in groups:
            g.append(v)
            if cost.group_violation(graph, g, hw) is None:
                rec(i + 1)
            g.pop()
        groups.append([v])
        rec(i + 1)
        groups.pop()

    rec(0)
    return best[0], best[1], legal
