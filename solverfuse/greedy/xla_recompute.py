"""XLA's priority fusion as XLA runs it: a producer *duplicated* into each of its consumer fusions.

:func:`solverfuse.greedy.xla` adapts priority fusion to partitions: fusing a producer into all
its consumers merges them all into one kernel, and a producer whose consumers cannot share one
kernel is not fused. XLA instead clones the producer into every consumer fusion
(``FuseProducerIntoConsumer`` per user; the producer goes away once it has no users) and its
priority charges each clone's reads and flops. :func:`xla_kernels` does that, giving a covering
plan (``solverfuse-plan/2``: an op may be computed by several kernels) that the validator checks
like any other:

* the fusions start as :func:`xla`'s do (one op each, library-call epilogues folded into their
  anchor: :func:`~solverfuse.greedy.xla_priority.library_epilogues`);
* a producer fusion ``P`` is a candidate when it writes no graph output, holds no library call,
  no consumer fusion ``C`` (a fusion reading from memory a tensor of ``P``) is a library call,
  ``P`` and ``C`` do not both reduce, and every ``C + P`` is a legal kernel (fusion rules and
  capacity: :func:`solverfuse.cost.group_violation`; convex: our plans require it) within the 96
  operands + outputs budget;
* its priority is ``time(P) + sum time(C) - sum time(C + P)`` (:func:`solverfuse.cost.kernel_time_ps`
  on the profile with XLA's 1 us launch overhead; each ``C + P`` pays ``P``'s reads and flops
  again); the highest non-negative priority is fused first -- ``P`` into every consumer, after
  which no kernel reads ``P``'s tensors from memory -- and the priorities it changed are
  recomputed, until none is left; a fusion that would make the kernels wait on each other is
  dropped;
* then sibling multi-output fusion as in :func:`xla` (kernels reading a common tensor from
  memory, not connected, same iteration space, legal, within budget), pass after pass until
  nothing merges.

A tensor is written by the one kernel that computes it whenever some kernel needs it from memory
(a kernel reading it without computing it) or it is a graph output.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
>>> h100 = load_hardware("nvidia-h100")
>>> tight = h100.model_copy(update={"register_budget": h100.kernel_base_registers + 3})  # 2 ops a kernel
>>> sorted((k.nodes, k.writes) for k in xla_kernels(g, tight))
[(('a', 'b'), ('y',)), (('a', 'c'), ('z',))]
>>> [k.nodes for k in xla_kernels(g, h100)]  # the two clones then fuse as siblings (both read x)
[('a', 'b', 'c')]
"""
from __future__ import annotations

import heapq
from typing import Optional

from .. import cost, dag
from ..graph import Graph
from ..hardware import Hardware
from ..plans import convexity_violation
from .merging import Partition, has_role
from .xla_priority import XLA_LAUNCH_OVERHEAD_S, XLA_MAX_OPERANDS_AND_OUTPUTS, hero_elements, \
    library_epilogues, operands_and_outputs


class Kernels:
    """Fusions that may share ops: ``ops[k]`` (a kernel's ops) and ``holders[v]`` (the kernels
    computing op ``v``), with what each kernel reads from and writes to memory.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> ks = Kernels(g, {0: ["a"], 1: ["b"], 2: ["c"]})
    >>> sorted(ks.readers(0)), ks.writes(0)
    ([1, 2], ['h'])
    >>> ks.replace(1, frozenset({"a", "b"})); ks.writes(0), ks.writes(1), ks.acyclic()
    (['h'], ['y'], True)
    """

    def __init__(self, graph: Graph, groups: dict[int, list[str]]):
        self.graph = graph
        self.ops: dict[int, frozenset] = {k: frozenset(m) for k, m in groups.items()}
        self.holders: dict[str, set[int]] = {v: {k} for k, m in self.ops.items() for v in m}
        self.version: dict[int, int] = {k: 0 for k in self.ops}

    def nodes(self, ops) -> list[str]:
        """``ops`` in graph order."""
        return sorted(ops, key=self.graph.index.position.__getitem__)

    def readers(self, k: int) -> set[int]:
        """Kernels that read from memory a tensor an op of ``k`` produces (``k``'s consumers)."""
        idx, mine, out = self.graph.index, self.ops[k], set()
        for v in mine:
            for t in idx.node[v].outputs:
                for w in idx.consumers.get(t, []) if t else []:
                    out.update(j for j in self.holders[w] if j != k and v not in self.ops[j])
        return out

    def sources(self, k: int) -> set[int]:
        """Kernels computing a tensor that ``k`` reads from memory (``k``'s producers)."""
        idx, mine, out = self.graph.index, self.ops[k], set()
        for v in mine:
            for t in idx.node[v].inputs:
                u = idx.producer.get(t) if t else None
                if u is not None and u not in mine:
                    out.update(self.holders[u])
        return out

    def writer(self, v: str) -> int:
        """The kernel writing ``v``'s results when some kernel reads them: the first (lowest id)
        computing it."""
        return min(self.holders[v])

    def writes(self, k: int) -> list[str]:
        """Tensors kernel ``k`` writes: those of its ops some kernel reads from memory, or graph
        outputs -- each by its :meth:`writer`."""
        idx, outputs, out = self.graph.index, self.graph.index.outputs, []
        for v in self.nodes(self.ops[k]):
            if self.writer(v) != k:
                continue
            for t in idx.node[v].outputs:
                if t and (t in outputs or any(v not in self.ops[j] for w in idx.consumers.get(t, [])
                                              for j in self.holders[w])):
                    out.append(t)
        return out

    def replace(self, k: int, ops: frozenset) -> None:
        """Kernel ``k`` computes ``ops`` from now on."""
        for v in self.ops[k] - ops:
            self.holders[v].discard(k)
        for v in ops - self.ops[k]:
            self.holders[v].add(k)
        self.ops[k] = ops
        self.version[k] += 1

    def drop(self, k: int) -> None:
        """Kernel ``k`` is gone (its ops live on in other kernels)."""
        for v in self.ops.pop(k):
            self.holders[v].discard(k)
        del self.version[k]

    def acyclic(self) -> bool:
        """Whether the kernels can run in some order (none waits, through memory, on itself)."""
        ids = sorted(self.ops)
        at = {k: i for i, k in enumerate(ids)}
        succ: list[list[int]] = [[] for _ in ids]
        idx = self.graph.index
        for k in ids:
            mine = self.ops[k]
            for v in mine:
                for t in idx.node[v].inputs:
                    u = idx.producer.get(t) if t else None
                    if u is not None and u not in mine:
                        succ[at[self.writer(u)]].append(at[k])  # its writer runs first
        return len(dag.topological_order(succ, key=lambda i: i)) == len(ids)

    def kernels(self) -> list[cost.Kernel]:
        """The final kernels with their writes."""
        return [cost.Kernel(tuple(self.nodes(self.ops[k])), tuple(self.writes(k))) for k in sorted(self.ops)]


def xla_kernels(graph: Graph, hw: Hardware) -> list[cost.Kernel]:
    """XLA's priority fusion with producer duplication, then sibling multi-output fusion (see the
    module doc); a covering whose kernels all run in one pass."""
    hw1 = hw.model_copy(update={"launch_overhead_s": XLA_LAUNCH_OVERHEAD_S})
    part = Partition(graph, hw)
    library_epilogues(graph, part)
    ks = Kernels(graph, part.members)
    library = {k for k, m in ks.ops.items() if any(cost.role(graph, v) == "anchor" for v in m)}
    outputs = graph.index.outputs

    def time(k: int, ops=None) -> int:
        nodes = ks.nodes(ks.ops[k] if ops is None else ops)
        return cost.kernel_time_ps(graph, nodes, ks.writes(k), hw1)

    def legal(ops: frozenset) -> bool:
        nodes = ks.nodes(ops)
        return cost.group_violation(graph, nodes, hw) is None and convexity_violation(graph, nodes) is None \
            and operands_and_outputs(graph, nodes) <= XLA_MAX_OPERANDS_AND_OUTPUTS

    def candidate(p: int) -> Optional[tuple[int, list[int]]]:
        mine = ks.ops[p]
        cons = sorted(ks.readers(p))
        if not cons or p in library or any(c in library for c in cons):
            return None
        if any(t in outputs for v in mine for t in graph.index.node[v].outputs):
            return None
        if has_role(graph, mine, "reduction") and any(has_role(graph, ks.ops[c], "reduction") for c in cons):
            return None
        merged = {c: ks.ops[c] | mine for c in cons}
        if not all(legal(ops) for ops in merged.values()):
            return None
        # after the fusion no kernel reads p's tensors: each C + P writes what C wrote
        saved = time(p) + sum(time(c) for c in cons) - sum(time(c, merged[c]) for c in cons)
        return (saved, cons) if saved >= 0 else None

    cache: dict[int, Optional[tuple]] = {}
    heap: list[tuple] = []

    def queue(p: int) -> None:
        c = candidate(p)
        first = graph.index.position[ks.nodes(ks.ops[p])[0]]
        entry = None if c is None else (-c[0], -first, p, ks.version[p], c[1])
        cache[p] = entry
        if entry is not None:
            heapq.heappush(heap, entry)

    for p in sorted(ks.ops):
        queue(p)
    while heap:
        entry = heapq.heappop(heap)
        p, cons = entry[2], entry[4]
        if p not in ks.ops or cache.get(p) is not entry:
            continue
        cache[p] = None
        if any(c not in ks.ops for c in cons) or sorted(ks.readers(p)) != cons:
            queue(p)
            continue
        before = {c: ks.ops[c] for c in cons}
        mine = ks.ops[p]
        for c in cons:
            ks.replace(c, ks.ops[c] | mine)
        saved_p = (p, mine, ks.version[p])
        ks.drop(p)
        if not ks.acyclic():  # undo: the kernels would wait on each other
            ks.ops[p], ks.version[p] = saved_p[1], saved_p[2]
            for v in saved_p[1]:
                ks.holders[v].add(p)
            for c in cons:
                ks.replace(c, before[c])
            continue
        cache.pop(p, None)
        touched = set(cons)
        for c in cons:
            touched |= ks.sources(c)
        for k in sorted(touched):
            if k in ks.ops:
                queue(k)
    _siblings(graph, hw, ks, library)
    return ks.kernels()


def _siblings(graph: Graph, hw: Hardware, ks: Kernels, library: set[int]) -> None:
    """Sibling multi-output fusion over kernels (as :func:`xla`'s): pairs of kernels reading a
    common tensor from memory, in order of their first op, pass after pass until none merges."""
    pos = graph.index.position

    def first(k: int) -> int:
        return min(pos[v] for v in ks.ops[k])

    changed = True
    while changed:
        changed = False
        for t in graph.tensors:
            u = graph.index.producer.get(t)
            users = {j for w in graph.index.consumers.get(t, []) for j in ks.holders[w]
                     if u is None or u not in ks.ops[j]}
            users = sorted((j for j in users if j in ks.ops), key=first)
            for i, a in enumerate(users):
                for b in users[i + 1:]:
                    if a not in ks.ops or b not in ks.ops or a in library or b in library:
                        continue
                    if b in ks.readers(a) or a in ks.readers(b):
                        continue
                    ops = ks.ops[a] | ks.ops[b]
                    nodes = ks.nodes(ops)
                    if hero_elements(graph, ks.nodes(ks.ops[a])) != hero_elements(graph, ks.nodes(ks.ops[b])):
                        continue
                    if operands_and_outputs(graph, nodes) > XLA_MAX_OPERANDS_AND_OUTPUTS \
                            or cost.group_violation(graph, nodes, hw) or convexity_violation(graph, nodes):
                        continue
                    old_a, old_b = ks.ops[a], ks.ops[b]
                    ks.replace(a, ops)
                    ks.drop(b)
                    if ks.acyclic():
                        changed = True
                        continue
                    ks.ops[b], ks.version[b] = old_b, 0
                    for v in old_b:
                        ks.holders[v].add(b)
                    ks.replace(a, old_a)
