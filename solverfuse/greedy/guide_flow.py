"""The fusion-strategy guide's decision flow as a baseline (see :func:`guide`)."""
from __future__ import annotations

import itertools

from .. import cost
from ..graph import Graph
from ..hardware import Hardware
from ..mapping import group_footprint
from .merging import Partition


def memory_bound(graph: Graph, nodes: list[str], hw: Hardware) -> bool:
    """Whether a kernel's roofline time is set by bandwidth (bytes/bw >= flops/peak)."""
    dtype = graph.tensors[graph.index.node[nodes[0]].outputs[0]].dtype
    return cost.group_traffic(graph, nodes) / hw.dram_bandwidth >= cost.group_flops(graph, nodes) / hw.peak(dtype)


def guide(graph: Graph, hw: Hardware) -> list[list[str]]:
    """The decision flow of the fusion-strategy guide: vertical first, the register budget as the
    first gate.

    1. Classify every op by category (compute / memory / data, the op table) and as memory- or
       compute-bound on the roofline (:func:`memory_bound`).
    2. Find memory-bound pairs: vertical pairs (a producer group and a consumer group, at least
       one memory-bound) and horizontal pairs (two groups reading a common tensor, neither
       reaching the other, both memory-bound).
    3. If the whole unfused graph is bandwidth-bound (traffic / bandwidth >= flops / peak), try
       vertical pairs first, then horizontal; otherwise horizontal first. Within a kind, the pair
       saving the most bytes (:func:`cost.group_traffic` before minus after) goes first.
    4. Gate: drop any fusion whose register estimate (:func:`mapping.group_footprint`) exceeds
       the register budget -- the first check, before any other rule; then the op table's rules,
       L1 capacity (:func:`cost.group_violation`) and the cycle check.
    5. Repeat until no pair is accepted (fixpoint). Pairs that save no bytes are not fused.
    """
    part = Partition(graph, hw)
    order = graph.index.order
    dtype = graph.tensors[graph.index.node[order[0]].outputs[0]].dtype if order else "float32"
    bandwidth_bound = cost.unfused_traffic(graph) / hw.dram_bandwidth >= \
        sum(graph.flops(v) for v in order) / hw.peak(dtype)
    mb = {v: memory_bound(graph, [v], hw) for v in order}

    traffic, reads, all_mb, any_mb = part.memo(), part.memo(), part.memo(), part.memo()

    def group_traffic(g: int) -> int:
        if g not in traffic:
            traffic[g] = cost.group_traffic(graph, part.members[g])
        return traffic[g]

    def group_reads(g: int) -> frozenset[str]:
        if g not in reads:
            reads[g] = frozenset(cost.group_reads(graph, part.members[g]))
        return reads[g]

    def memory_bound_ops(g: int, every: bool) -> bool:
        memo = all_mb if every else any_mb
        if g not in memo:
            memo[g] = (all if every else any)(mb[v] for v in part.members[g])
        return memo[g]

    nbytes: dict[str, int] = {}
    savings: dict[tuple[int, int], tuple[int, int, int]] = {}

    def saved(a: int, b: int) -> int:
        """Bytes saved by merging groups a < b (kept until either changes)."""
        va, vb = part.version.get(a, 0), part.version.get(b, 0)
        hit = savings.get((a, b))
        if hit is not None and hit[0] == va and hit[1] == vb:
            return hit[2]
        if b not in part.succ(a) and a not in part.succ(b):
            # No tensor passes between the groups, so (by cost.group_traffic's definition) the
            # merged group reads the union of their reads and writes what each wrote: the saving
            # is the shared reads, counted once instead of twice.
            s = 0
            for t in group_reads(a) & group_reads(b):
                if t not in nbytes:
                    nbytes[t] = graph.nbytes(t)
                s += nbytes[t]
        else:
            s = group_traffic(a) + group_traffic(b) - cost.group_traffic(graph, part.nodes([a, b]))
        savings[(a, b)] = (va, vb, s)
        return s

    def pairs(kind: str) -> list[tuple[int, int]]:
        out: set[tuple[int, int]] = set()
        if kind == "vertical":
            for g in part.members:
                for h in part.succ(g):
                    if memory_bound_ops(g, False) or memory_bound_ops(h, False):
                        out.add((g, h))
        else:
            # Horizontal: g reads t from global memory, h also consumes t, both memory-bound.
            readers: dict[str, list[int]] = {}
            for g in part.members:
                if memory_bound_ops(g, True):
                    for t in group_reads(g):
                        readers.setdefault(t, []).append(g)
            for t, rs in readers.items():
                users = sorted({h for h in map(part.gid.__getitem__, graph.index.consumers[t])
                                if memory_bound_ops(h, True)})
                if len(users) == len(rs):  # every user reads t from memory: all pairs
                    out.update(itertools.combinations(users, 2))
                else:
                    out.update((min(g, h), max(g, h)) for g in rs for h in users if h != g)
        first = part.first
        ranked = sorted([(-saved(a, b), first[a], first[b], a, b) for a, b in out])
        return [(a, b) for _, _, _, a, b in ranked]

    # A pair refused stays refused while neither group changes (merges elsewhere only add paths
    # between groups): (group, version) pairs already refused are not tried again.
    refused: set[tuple[int, int, int, int]] = set()
    kinds = ["vertical", "horizontal"] if bandwidth_bound else ["horizontal", "vertical"]
    progress = True
    while progress:
        progress = False
        for kind in kinds:
            # Pairs name groups by their first op, resolved to the current group when tried.
            gid, version = part.gid, part.version
            for va, vb in [(part.members[a][0], part.members[b][0]) for a, b in pairs(kind)]:
                a, b = gid[va], gid[vb]
                if a == b:
                    continue
                if a > b:
                    a, b = b, a
                key = (a, version.get(a, 0), b, version.get(b, 0))
                if key in refused:
                    continue
                # The guide's tests in a cheap-first order (all must pass; none has effects):
                # a saving, the register budget (its first gate), rules + L1, no cycle.
                if part.crosses(a, b) or saved(a, b) <= 0 or \
                        group_footprint(graph, part.nodes([a, b]), hw).registers > hw.register_budget or \
                        part.why_not([a, b]) is not None:
                    refused.add(key)
                    continue
                part.merge([a, b])
                progress = True
    return part.groups()
