"""PyTorch Inductor's scheduler fusion as a baseline (see :func:`inductor`)."""
from __future__ import annotations

from .. import cost
from ..graph import Graph
from ..hardware import Hardware
from .merging import Partition, has_role


INDUCTOR_MAX_FUSION_SIZE = 64
INDUCTOR_ROUNDS = 10
INDUCTOR_PAIRWISE_ATTEMPTS = 64


def _accessed(graph: Graph, nodes: list[str]) -> set[str]:
    return set(cost.group_reads(graph, nodes)) | set(cost.group_writes(graph, nodes))


def inductor(graph: Graph, hw: Hardware) -> list[list[str]]:
    """PyTorch Inductor's scheduler fusion (``torch/_inductor/scheduler.py``, ``fuse_nodes``).

    Reproduced rules: up to 10 rounds of ``fuse_nodes_once`` until the number of nodes stops
    changing. Each round collects candidate pairs among nodes that use a common buffer (within
    each buffer's user list, in order, at most 64 pairwise attempts per node --
    ``max_fusion_buffer_group_pairwise_attempts``), keeps the pairs ``can_fuse`` accepts, sorts
    them by ``score_fusion``: (both or neither a reduction and sharing data, shared bytes,
    proximity in the original order), best first, and fuses each pair whose (current) nodes
    still ``can_fuse`` and where ``will_fusion_create_cycle`` is false. ``can_fuse`` refuses a
    node with itself, extern kernels, more than ``max_fusion_size`` = 64 ops, a pair sharing no
    data (``score_fusion_memory_threshold`` = 1 byte: horizontal fusion needs a common buffer),
    a pair whose first node reads the second; vertical fusions (the second reads the first)
    and horizontal ones (common reads) are both allowed.

    Shared bytes (``score_fusion_memory``) are the bytes of the tensors both groups access in
    global memory (:func:`cost.group_reads` / :func:`cost.group_writes` of each).

    Adaptations: Conv/MatMul/Gemm are extern kernels (aten/cuBLAS/cuDNN) in Inductor's default
    mode (no ``max_autotune`` templates) and so never fused. Inductor's backend checks
    (``can_fuse_vertical``: compatible loop sizes) are replaced by our op table's rules and
    capacity model, :func:`cost.group_violation`.
    """
    part = Partition(graph, hw)
    accessed_memo, reduction_memo, extern_memo = part.memo(), part.memo(), part.memo()

    def accessed(g: int) -> set[str]:
        if g not in accessed_memo:
            accessed_memo[g] = _accessed(graph, part.members[g])
        return accessed_memo[g]

    def is_reduction(g: int) -> bool:
        if g not in reduction_memo:
            reduction_memo[g] = has_role(graph, part.members[g], "reduction")
        return reduction_memo[g]

    def extern(g: int) -> bool:
        if g not in extern_memo:
            extern_memo[g] = any(cost.role(graph, v) == "anchor" for v in part.members[g])
        return extern_memo[g]

    def shared(a: int, b: int) -> int:
        sa, sb = accessed(a), accessed(b)
        common = sa & sb if len(sa) <= len(sb) else sb & sa
        return sum(graph.nbytes(t) for t in common)

    fusible: dict[tuple[int, int], tuple[int, int, bool]] = {}

    def can_fuse(a: int, b: int) -> bool:
        if a == b or extern(a) or extern(b):
            return False
        if len(part.members[a]) + len(part.members[b]) > INDUCTOR_MAX_FUSION_SIZE:
            return False
        # The answer depends on the two groups only: kept until either changes (most pairs
        # are asked again, unchanged, in every round).
        va, vb = part.version.get(a, 0), part.version.get(b, 0)
        hit = fusible.get((a, b))
        if hit is None or hit[0] != va or hit[1] != vb:
            ok = shared(a, b) >= 1 and cost.group_violation(graph, part.nodes([a, b]), hw) is None
            hit = fusible[(a, b)] = (va, vb, ok)
        return hit[2]

    for _ in range(INDUCTOR_ROUNDS):
        before = len(part.members)
        users: dict[str, list[int]] = {}
        for g in sorted(part.members, key=part.first.__getitem__):
            for t in sorted(accessed(g)):
                users.setdefault(t, []).append(g)
        pairs: dict[tuple[int, int], None] = {}
        tried: set[tuple[int, int]] = set()  # no group changes while the pairs are collected
        for gs in users.values():
            for i, a in enumerate(gs):
                for b in gs[i + 1:i + 1 + INDUCTOR_PAIRWISE_ATTEMPTS]:
                    if (a, b) not in tried:
                        tried.add((a, b))
                        if can_fuse(a, b):
                            pairs[(a, b)] = None

        def score(pair):
            a, b = pair
            mem = shared(a, b)
            lo_a, hi_a = part.first[a], part.pos[part.members[a][-1]]
            lo_b, hi_b = part.first[b], part.pos[part.members[b][-1]]
            return (is_reduction(a) == is_reduction(b) and mem > 0, mem,
                    -max(abs(lo_a - hi_b), abs(lo_b - hi_a)))
        ranked = sorted(pairs, key=score, reverse=True)
        # Pairs name the groups by their first op, resolved to the current group when fused.
        heads = [(part.members[a][0], part.members[b][0]) for a, b in ranked]
        for va, vb in heads:
            a, b = part.gid[va], part.gid[vb]
            if b in part.pred(a):
                continue  # can_fuse: node1 may not depend on node2 (node2 would have to run first)
            if can_fuse(a, b) and part.cycle_through([a, b]) is None:
                part.merge([a, b])
        if len(part.members) == before:
            break
    return part.groups()
