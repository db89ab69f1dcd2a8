"""Set-partitioning formulation: enumerate every candidate group of a part, choose a partition.

The math, with these names, is in ``formulations/set-partitioning.md``:

* ``groups`` -- every affine-connected, legal (``cost.group_violation`` is None), convex set of ops
  of the part (connected suffices; see :mod:`solverfuse.formulations.presolve`), enumerated once
  each, every single op included;
* ``pick[g]`` -- group ``g`` is a kernel of the plan; each op is covered by exactly one pick;
* acyclic quotient -- every enumerated group is convex already; a cycle through several groups
  (possible only through horizontal groups) is excluded *lazily*: the caller solves, and when the
  picked groups' quotient has a cycle it adds ``sum(pick[g] for g in cycle) <= len(cycle) - 1``
  (:meth:`SetPartitioning.forbid`) and solves again. Without the cuts the model is a relaxation, so its
  bound stays valid, and an acyclic optimum of the relaxation is optimal;
* objective: ``sum(traffic[g] * pick[g])`` with ``traffic[g] = cost.group_traffic(graph, g)`` -- the
  cost model itself, so the objective of every solution is its plan's traffic, trivially.

Its LP relaxation is far stronger than the assignment formulation's (costs sit on columns, not on
big-M indicator rows), so it proves optimality quickly -- when the part has few enough candidate
groups; :func:`build` returns None beyond ``max_groups`` and the caller falls back.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> from solverfuse.formulations.presolve import presolve
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> hw = load_hardware("nvidia-h100")
>>> pre = presolve(g, hw)
>>> f = build(g, hw, pre, pre.parts[0])
>>> f.groups
[['a'], ['a', 'b'], ['b']]
>>> from ortools.sat.python import cp_model
>>> s = cp_model.CpSolver(); s.parameters.num_workers = 1
>>> s.Solve(f.model) == cp_model.OPTIMAL, f.decode(s.Value), f.objective_value(s.Value)
(True, [['a', 'b']], 2048)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ortools.sat.python import cp_model

from .. import cost
from ..graph import Graph
from ..hardware import Hardware
from ..plans import convexity_violation
from .presolve import Presolve

NAME = "set-partitioning"


@dataclass
class SetPartitioning:
    """A built set-partitioning model of one part (a :class:`~.protocol.Formulation`)."""
    model: cp_model.CpModel
    nodes: list[str]
    groups: list[list[str]]
    pick: list[cp_model.IntVar]
    traffic: list[int]
    cuts: int = 0
    name: str = NAME

    def decode(self, value: Callable[[cp_model.IntVar], int]) -> list[list[str]]:
        return [g for g, y in zip(self.groups, self.pick) if value(y)]

    def objective_value(self, value: Callable[[cp_model.IntVar], int]) -> int:
        return sum(t * value(y) for t, y in zip(self.traffic, self.pick))

    def hint(self, groups: Sequence[Sequence[str]]) -> None:
        """Hint a solution: this part's groups in an executable order (ops in graph order)."""
        self.model.ClearHints()
        chosen = {tuple(g): i for i, g in enumerate(groups)}
        missing = [g for g in chosen if g not in self._index]
        if missing:
            raise ValueError(f"bug: hint group {list(missing[0])} was not enumerated")
        for g, y in zip(self.groups, self.pick):
            self.model.AddHint(y, int(tuple(g) in chosen))

    def forbid(self, cycle: Sequence[Sequence[str]]) -> None:
        """Lazy cut: these groups form a cycle in the quotient graph, never pick all of them."""
        where = {tuple(g): y for g, y in zip(self.groups, self.pick)}
        self.model.Add(sum(where[tuple(g)] for g in cycle) <= len(cycle) - 1)
        self.cuts += 1

    @property
    def _index(self) -> set:
        return {tuple(g) for g in self.groups}


def enumerate_groups(graph: Graph, hw: Hardware, pre: Presolve, part: Sequence[str],
                     limit: int, violation=cost.group_violation, convex: bool = True) -> Optional[list[list[str]]]:
    """Every affine-connected legal convex group of ``part`` (ops in graph order), or None when
    there are more than ``limit`` connected legal sets. ``violation`` is the legality pruned on
    while a group grows (monotone under subsets; the covering formulation's admits looped kernels);
    ``convex=False`` keeps the non-convex ones too (the covering formulation's columns)."""
    pos = pre.pos
    members = set(part)
    # affinity restricted to candidate pairs: v may join u's group only if one is a candidate
    # representative of the other (presolve's pruning, which already implies compatibility)
    cand = {v: set(pre.cand[v]) for v in part}
    adj: dict[str, set[str]] = {v: set() for v in part}
    for v in part:
        for t in graph.index.node[v].inputs:
            if not t:
                continue
            p = graph.index.producer.get(t)
            others = ([p] if p in members else []) + [c for c in graph.index.consumers[t] if c in members]
            for w in others:
                if w != v and (w in cand[v] or v in cand[w]):
                    adj[v].add(w)
                    adj[w].add(v)
    found: list[list[str]] = []
    count = 0

    def grow(root: str, group: list[str], ext: list[str], banned: set[str]) -> bool:
        nonlocal count
        if not ext:
            count += 1
            if count > limit:
                return False
            g = sorted(group, key=pos.__getitem__)
            if not convex or len(g) == 1 or convexity_violation(graph, g) is None:
                found.append(g)
            return True
        w, rest = ext[0], ext[1:]
        # branch 1: w stays out of this group (and out of every extension of this branch)
        if not grow(root, group, rest, banned | {w}):
            return False
        # branch 2: w joins, if every op of the grown group may share r's group and it is legal
        grown = group + [w]
        if root in cand[w] and violation(graph, grown, hw) is None:
            seen = set(grown) | banned | set(rest)
            new = [x for x in sorted(adj[w], key=pos.__getitem__) if x not in seen and pos[x] > pos[root]]
            if not grow(root, grown, rest + new, banned):
                return False
        return True

    for r in part:
        ext = [x for x in sorted(adj[r], key=pos.__getitem__) if pos[x] > pos[r]]
        if not grow(r, [r], ext, set()):
            return None
    found.sort(key=lambda g: [pos[v] for v in g])
    return found


def build(graph: Graph, hw: Hardware, pre: Presolve, part: Sequence[str], *,
          max_groups: int = 20000, score: Optional[Callable[[list[str]], int]] = None) -> Optional[SetPartitioning]:
    """The set-partitioning model of one part, or None if it has over ``max_groups`` groups.
    ``score`` replaces a column's cost (default ``cost.group_traffic``; the time objective passes
    ``cost.group_time_ps``)."""
    groups = enumerate_groups(graph, hw, pre, part, max_groups)
    if groups is None:
        return None
    model = cp_model.CpModel()
    nodes = list(part)
    pick = [model.NewBoolVar(f"pick[{'+'.join(g)}]") for g in groups]
    covering: dict[str, list[int]] = {v: [] for v in nodes}
    for i, g in enumerate(groups):
        for v in g:
            covering[v].append(i)
    # partition: every op in exactly one picked group
    for v in nodes:
        model.AddExactlyOne(pick[i] for i in covering[v])
    traffic = [cost.group_traffic(graph, g) if score is None else score(g) for g in groups]
    model.Minimize(sum(t * y for t, y in zip(traffic, pick)))
    return SetPartitioning(model=model, nodes=nodes, groups=groups, pick=pick, traffic=traffic)
