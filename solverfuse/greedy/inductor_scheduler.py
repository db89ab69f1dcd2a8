"""PyTorch Inductor's scheduler fusion as a baseline (see :func:`inductor`)."""
from __future__ import annotations

import re

from .. import cost
from ..errors import PlanError
from ..graph import Graph
from ..hardware import Hardware
from ..ops import MATERIALISED_INPUT_ROLES
from ..plans import order_groups
from .merging import Partition, has_role


INDUCTOR_MAX_FUSION_SIZE = 64
INDUCTOR_ROUNDS = 10
INDUCTOR_PAIRWISE_ATTEMPTS = 64
#: Ops Inductor never makes a kernel of: views and no-op copies, lowered as index expressions.
INDUCTOR_VIEW_OPS = frozenset({"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Identity",
                               "Flatten", "Slice", "Select"})


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
    mode (no ``max_autotune`` templates) and so never fused; so is a Concat (on CPU ``aten.cat``
    lowers to a ``ConcatKernel``: each input's kernel writes its slice of the output buffer, and
    the consumers read that buffer -- llama's rotary ``cat``, vit's class-token ``cat``). Inductor's backend checks
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
            extern_memo[g] = any(cost.role(graph, v) == "anchor" or graph.index.node[v].op == "Concat"
                                 for v in part.members[g])
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
    return fold_views(graph, hw, part.groups())


def fold_views(graph: Graph, hw: Hardware, groups: list[list[str]]) -> list[list[str]]:
    """Place view ops as Inductor's lowering does: a view is never a kernel of its own.

    Inductor inlines a view (reshape, permute, unsqueeze, expand, slice, select, a no-op clone)
    into the index expressions of the kernels that read it, and folds a view feeding an extern
    call (mm, conv, attention) into the call's operand strides. Reproduced, in reverse
    topological order: a view joins the group of its consumers (the earliest consumer's group
    when they run in several -- Inductor recomputes it in each); a view read only by ops that take
    their inputs from memory (extern calls, gathers) or by such views forms a view-only group with
    them (one per call) -- except that when such a chain reshapes after a transpose (the attention
    output's ``view -> permute -> view`` into the output projection), no stride expresses it and
    Inductor copies the extern call's output first: the chain's views before the transpose that
    read an extern call's output form a kernel of their own. A placement our rules reject (capacity, convexity) leaves the view alone.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 8]}, "w": {"shape": [8, 8], "constant": True},
    ...     "s": {"shape": [2], "dtype": "int64", "constant": True, "value": [8, 4]}},
    ...     "inputs": ["x"], "outputs": ["z"],
    ...     "nodes": [{"name": "t", "op": "Transpose", "inputs": ["w"], "outputs": ["wt"]},
    ...               {"name": "mm", "op": "MatMul", "inputs": ["x", "wt"], "outputs": ["y"]},
    ...               {"name": "r", "op": "Reshape", "inputs": ["y", "s"], "outputs": ["y2"]},
    ...               {"name": "e", "op": "Exp", "inputs": ["y2"], "outputs": ["z"]}]})
    >>> fold_views(g, load_hardware("nvidia-h100"), [["t"], ["mm"], ["r"], ["e"]])
    [['t'], ['mm'], ['r', 'e']]
    """
    node, succs, pos = graph.index.node, graph.index.succs, graph.index.position
    views = [v for v in graph.index.order if node[v].op in INDUCTOR_VIEW_OPS]
    if not views:
        return groups
    where: dict[str, int] = {v: i for i, g in enumerate(groups) for v in g}
    is_view = set(views)
    view_group: set[int] = set()
    fresh = len(groups)
    for v in reversed(views):
        cons = succs[v]
        if not cons or any(w not in where for w in cons):
            where[v], fresh = fresh, fresh + 1
            continue
        plain = [w for w in cons if cost.role(graph, w) not in MATERIALISED_INPUT_ROLES
                 and not (w in is_view and where[w] in view_group)]
        if plain:
            first = min(plain, key=pos.__getitem__)
            where[v] = where[first]
        else:
            into = [where[w] for w in cons if w in is_view and where[w] in view_group]
            if into:
                where[v] = into[0]
            else:
                where[v], fresh = fresh, fresh + 1
                view_group.add(where[v])
    for gid in view_group:
        members = [v for v in views if where[v] == gid]
        first_t = min((pos[v] for v in members if node[v].op == "Transpose"), default=None)
        if first_t is None or not any(node[v].op in ("Reshape", "Flatten") and pos[v] > first_t for v in members):
            continue
        for v in members:  # a reshape after a transpose is no stride: the chain's head is copied
            p = graph.index.producer.get(node[v].inputs[0]) if node[v].inputs else None
            if p is not None and cost.role(graph, p) in MATERIALISED_INPUT_ROLES and pos[v] < first_t:
                where[v], fresh = fresh, fresh + 1
    out: dict[int, list[str]] = {}
    for v in graph.index.order:
        out.setdefault(where[v], []).append(v)
    folded = list(out.values())
    for k, g in enumerate(folded):
        if len(g) > 1 and any(v in is_view for v in g) and cost.group_violation(graph, g, hw):
            folded[k] = [v for v in g if v not in is_view]
            folded += [[v] for v in g if v in is_view]
    folded = [g for g in folded if g]
    for _ in range(len(views) + 1):
        try:
            order_groups(graph, folded)
            return folded
        except PlanError as e:  # a view that makes its group non-convex stays alone
            names = re.findall(r"'([^']+)'", str(e))
            grp = next((g for g in folded if names and names[0] in g), None)
            moved = next((v for v in names if grp is not None and v in grp and v in is_view), None)
            if moved is None:
                break
            grp.remove(moved)
            folded.append([moved])
    return groups  # the placements made the groups cyclic: keep the scheduler's partition
