"""XLA's GPU priority fusion + sibling multi-output fusion as a baseline (see :func:`xla`)."""
from __future__ import annotations

import bisect
import heapq
from typing import Optional

from .. import cost
from ..graph import Graph
from ..hardware import Hardware
from ..ops import numel
from .merging import Partition, has_role


XLA_MAX_OPERANDS_AND_OUTPUTS = 96
XLA_LAUNCH_OVERHEAD_S = 1e-6
_RESIDUAL_OPS = frozenset({"Add", "Sum"})


def operands_and_outputs(graph: Graph, nodes: list[str]) -> int:
    """Tensors a fusion of ``nodes`` reads plus those it writes (XLA's per-fusion budget counts both).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Add", "inputs": ["x", "x"], "outputs": ["y"]}]})
    >>> operands_and_outputs(g, ["a"])
    2
    """
    return len(cost.group_reads(graph, nodes)) + len(cost.group_writes(graph, nodes))


def xla(graph: Graph, hw: Hardware) -> list[list[str]]:
    """XLA's GPU fusion: ``PriorityFusion`` then sibling ``MultiOutputFusion``.

    Sources: ``xla/service/gpu/transforms/priority_fusion.cc`` and ``multi_output_fusion.cc``.
    Reproduced rules:

    * the priority of a producer is the time saved by fusing it into *all* its consumers,
      ``time_unfused - time_fused`` from a roofline model with a 1 us kernel launch overhead
      (``GpuPerformanceModel::kKernelLaunchOverhead``); here :func:`cost.group_time` on a copy
      of the profile whose launch overhead is 1 us;
    * producers with negative priority are not queued; the highest priority is fused first and
      the priorities are recomputed after each fusion, until the queue is empty;
    * a producer is fused only if it can be fused into every consumer
      (``CanFuseWithAllNonBitcastUsers``); a producer whose value is a graph output (a user is
      the ROOT tuple, which is not fusible) is never fused;
    * no reduce into reduce ("both the producer and the consumer contain a reduce");
    * at most 96 operands + outputs per fusion (``kMaxOperandsAndOutputsPerFusion``);
    * then sibling multi-output fusion: consumers of a common operand are fused pairwise when
      neither reaches the other, their iteration spaces match (same number of elements of the
      largest tensor written, or of the reduced input for reductions --
      ``ShapesCompatibleForMultiOutputFusion``) and the budget holds, until nothing changes.

    Before fusion, Conv/MatMul/Gemm become cuDNN/cuBLAS(Lt) library calls, and
    ``gemm_rewriter.cc`` / ``cudnn_fused_conv_rewriter.cc`` fold an epilogue into them: here each
    anchor absorbs the chain of ops that alone consume its result -- broadcast ops reading only
    constants and graph inputs besides it (scale, bias, batch norm), for a convolution also one
    residual ``Add`` (cuDNN's side input), then at most one elementwise activation, which ends
    the epilogue. Library calls are not fusible afterwards, neither as producer nor as consumer.

    Adaptations: XLA *duplicates* a producer into each consumer fusion; we have no
    recomputation, so fusing a producer into all its consumers merges the producer and all its
    consumer groups into one kernel (its output then never reaches memory, which is the effect
    duplication buys), and the priority is computed for that merged kernel. Every merge must
    also pass :func:`cost.group_violation` and the cycle check.
    """
    hw1 = hw.model_copy(update={"launch_overhead_s": XLA_LAUNCH_OVERHEAD_S})
    part = Partition(graph, hw)
    outputs = set(graph.outputs)

    anchor, reduction, time = part.memo(), part.memo(), part.memo()

    def has_anchor(g: int) -> bool:
        if g not in anchor:
            anchor[g] = any(cost.role(graph, v) == "anchor" for v in part.members[g])
        return anchor[g]

    def has_reduction(g: int) -> bool:
        if g not in reduction:
            reduction[g] = has_role(graph, part.members[g], "reduction")
        return reduction[g]

    def group_time(g: int) -> float:
        if g not in time:
            time[g] = cost.group_time(graph, part.members[g], hw1)
        return time[g]

    library_epilogues(graph, part)

    def candidate(p: int) -> Optional[tuple[float, list[int]]]:
        consumers = sorted(part.succ(p))
        members = part.members[p]
        if not consumers or any(t in outputs for v in members for t in graph.index.node[v].outputs):
            return None
        if has_anchor(p) or any(has_anchor(c) for c in consumers):
            return None  # library calls are not fusible
        if has_reduction(p) and any(has_reduction(c) for c in consumers):
            return None
        gs = [p, *consumers]
        nodes = part.nodes(gs)
        if operands_and_outputs(graph, nodes) > XLA_MAX_OPERANDS_AND_OUTPUTS:
            return None
        saved = sum(group_time(g) for g in gs) - cost.group_time(graph, nodes, hw1)
        return (saved, gs) if saved >= 0 else None

    # A producer's priority depends on its group and its consumers' groups only, so after a
    # merge only the new group and its producers are recomputed (XLA's UpdatePriorities). The
    # queue is a heap, highest (priority, first op) on top; an entry whose group was merged or
    # recomputed since is stale and skipped. A candidate that fails why_not is dropped: it
    # would fail again until recomputed (its groups are unchanged, and merges elsewhere only
    # add paths between groups), so trying it again could never change the outcome.
    cache: dict[int, Optional[tuple]] = {}
    heap: list[tuple] = []

    def queue(p: int) -> None:
        c = candidate(p)
        entry = None if c is None else (-c[0], -part.first[p], p, c[1])
        cache[p] = entry
        if entry is not None:
            heapq.heappush(heap, entry)

    for p in list(part.members):
        queue(p)
    while heap:
        entry = heapq.heappop(heap)
        p, gs = entry[2], entry[3]
        if cache.get(p) is not entry:
            continue
        cache[p] = None
        if part.why_not(gs) is None:
            k = part.merge(gs)
            for g in gs:
                cache.pop(g, None)
            for g in [k, *part.pred(k)]:
                queue(g)
    _xla_sibling_fusion(graph, part)
    return part.groups()


def library_epilogues(graph: Graph, part: Partition) -> None:
    """Fold each anchor's scale/bias/activation epilogue into its library call (see :func:`xla`)."""
    outputs = set(graph.outputs)
    for v in graph.index.order:
        if cost.role(graph, v) != "anchor":
            continue
        tail, side_input = v, graph.index.node[v].op == "Conv"
        while True:
            out = graph.index.node[tail].outputs[0]
            users = graph.index.consumers.get(out, [])
            if out in outputs or len(users) != 1 or len(graph.index.succs[tail]) != 1:
                break
            w = users[0]
            role = cost.role(graph, w)
            others = [t for t in graph.index.node[w].inputs if t and t != out]
            if role == "broadcast":
                computed = [t for t in others if not graph.is_source(t)]
                if len(computed) > 1 or (computed and not (side_input and graph.index.node[w].op in _RESIDUAL_OPS)):
                    break
                side_input = side_input and not computed
            elif role != "elementwise" or others:
                break
            gs = [part.gid[v], part.gid[w]]
            if part.why_not(gs):
                break
            part.merge(gs)
            tail = w
            if role == "elementwise":
                break  # the activation ends the epilogue


def hero_elements(graph: Graph, nodes: list[str]) -> int:
    """Elements of a fusion's iteration space: a reduction's input, else its largest output."""
    red = [v for v in nodes if cost.role(graph, v) == "reduction"]
    if red:
        return numel(graph.tensors[graph.index.node[red[0]].inputs[0]].shape)
    return max(numel(graph.tensors[t].shape) for v in nodes for t in graph.index.node[v].outputs if t)


def _xla_sibling_fusion(graph: Graph, part: Partition) -> None:
    """Sibling multi-output fusion: fuse consumers of a common operand (see :func:`xla`).

    The pass visits the tensors in order, tries every pair of a tensor's consumer groups (in
    order of their first op), and starts over from the first tensor after a tensor where
    something merged, until a whole pass merges nothing.

    Computed without the rescans: a pair refused once is refused again while neither group
    changes (merges elsewhere only add paths between groups). So only tensors read by a changed
    group are visited again -- a heap of those, smallest index first, reproduces the restarting
    pass -- and a visit tries only the pairs with a group that changed since the tensor's last
    visit (``settled`` records the groups whose pairs were all tried, at their ``version``).
    """
    index = {t: i for i, t in enumerate(graph.tensors)}
    names = list(graph.tensors)
    dirty = [i for i, t in enumerate(names) if len(graph.index.consumers.get(t, [])) > 1]
    pending = set(dirty)
    hero, anchor = part.memo(), part.memo()
    version = part.version
    settled: dict[int, dict[int, int]] = {}

    def hero_of(g: int) -> int:
        if g not in hero:
            hero[g] = hero_elements(graph, part.members[g])
        return hero[g]

    def has_anchor(g: int) -> bool:
        if g not in anchor:
            anchor[g] = any(cost.role(graph, v) == "anchor" for v in part.members[g])
        return anchor[g]

    def fusible(a: int, b: int) -> bool:
        if b in part.succ(a):
            return False  # connected siblings are not multi-output fused (IsConnected)
        if has_anchor(a) or has_anchor(b):
            return False  # library calls are never multi-output fusion roots
        if hero_of(a) != hero_of(b) or part.crosses(a, b):
            return False
        if operands_and_outputs(graph, part.nodes([a, b])) > XLA_MAX_OPERANDS_AND_OUTPUTS:
            return False
        return part.why_not([a, b]) is None

    def worth(a: int, kpos: dict[int, int], union: int) -> Optional[list[int]]:
        """Sorted positions (in ``users``) of the groups ``a`` may fuse with: a superset of those
        ``fusible`` accepts (not a's successors, nor groups it reaches or that reach it through
        other ops: :meth:`Partition.uncrossed`); None when the partition cannot tell."""
        near = part.uncrossed(a, union)
        if near is None:
            return None
        succ = part.succ(a)
        return sorted(kpos[g] for g in near if g in kpos and g not in succ)

    while dirty:
        i = heapq.heappop(dirty)
        pending.discard(i)
        users = sorted({part.gid[c] for c in graph.index.consumers.get(names[i], [])},
                       key=part.first.__getitem__)
        start = {g: version.get(g, 0) for g in users}
        old = settled.get(i, {})
        fresh = [old.get(g) != start[g] for g in users]
        fresh_at = [k for k, f in enumerate(fresh) if f]  # sorted positions of fresh groups
        changed = []
        # The groups of users only merge with each other here, so their ops stay in this union.
        kpos = {g: k for k, g in enumerate(users)}
        union = 0
        for g in users:
            union |= part.mask(g)
        for j, a in enumerate(users):
            if a in part.members and has_anchor(a):
                continue  # fusible(a, b) is False for every b: nothing to try
            k = j
            cands: Optional[list[int]] = None  # positions worth trying, for a as it is now
            version_a = version.get(a, 0)
            while a in part.members:
                if fresh[j]:
                    # every later position is visited; those not in cands would be refused
                    if cands is None or version.get(a, 0) != version_a:
                        version_a = version.get(a, 0)
                        cands = worth(a, kpos, union) if len(users) - k > 8 else None
                    if cands is not None:
                        n = bisect.bisect_right(cands, k)
                        if n == len(cands):
                            break
                        k = cands[n]
                    else:
                        k += 1
                        if k >= len(users):
                            break
                else:  # only pairs with a changed group can merge
                    n = bisect.bisect_right(fresh_at, k)
                    if n == len(fresh_at):
                        break
                    k = fresh_at[n]
                b = users[k]
                if b not in part.members or not fusible(a, b):
                    continue
                keep = part.merge([a, b])
                changed.append(keep)
                at = j if keep == a else k
                if not fresh[at]:
                    fresh[at] = True
                    bisect.insort(fresh_at, at)
        settled[i] = {g: start[g] for g in users if g in part.members and version.get(g, 0) == start[g]}
        # Every tensor read by a changed group (this one included) is visited again.
        for k in changed:
            for v in part.members.get(k, ()):
                for t in graph.index.node[v].inputs:
                    if t and index[t] not in pending:
                        pending.add(index[t])
                        heapq.heappush(dirty, index[t])
