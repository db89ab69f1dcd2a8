"""XLA's GPU priority fusion + sibling multi-output fusion as a baseline (see :func:`xla`)."""
from __future__ import annotations

from typing import Optional

from .. import cost
from ..graph import Graph
from ..hardware import Hardware
from ..ops import numel
from .partition import Partition, has_role


XLA_MAX_OPERANDS_AND_OUTPUTS = 96
XLA_LAUNCH_OVERHEAD_S = 1e-6
_RESIDUAL_OPS = frozenset({"Add", "Sum"})


def _operands_and_outputs(graph: Graph, nodes: list[str]) -> int:
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

    def has_anchor(g: int) -> bool:
        return any(cost.role(graph, v) == "anchor" for v in part.members[g])

    _library_epilogues(graph, part)

    def candidate(p: int) -> Optional[tuple[float, list[int]]]:
        consumers = sorted(part.succ(p))
        members = part.members[p]
        if not consumers or any(t in outputs for v in members for t in graph.index.node[v].outputs):
            return None
        if has_anchor(p) or any(has_anchor(c) for c in consumers):
            return None  # library calls are not fusible
        if has_role(graph, members, "reduction") and any(has_role(graph, part.members[c], "reduction") for c in consumers):
            return None
        gs = [p, *consumers]
        nodes = part.nodes(gs)
        if _operands_and_outputs(graph, nodes) > XLA_MAX_OPERANDS_AND_OUTPUTS:
            return None
        saved = sum(cost.group_time(graph, part.members[g], hw1) for g in gs) - \
            cost.group_time(graph, nodes, hw1)
        return (saved, gs) if saved >= 0 else None

    # A producer's priority depends on its group and its consumers' groups only, so after a
    # merge only the new group and its producers are recomputed (XLA's UpdatePriorities).
    cache = {p: candidate(p) for p in part.members}
    while True:
        ranked = sorted(((c[0], part.first[p], c[1]) for p, c in cache.items() if c is not None),
                        key=lambda r: (r[0], r[1]), reverse=True)
        for _, _, gs in ranked:
            if part.why_not(gs) is None:
                k = part.merge(gs)
                for g in gs:
                    cache.pop(g, None)
                for g in [k, *part.pred(k)]:
                    cache[g] = candidate(g)
                break
        else:
            break
    _xla_sibling_fusion(graph, part)
    return part.groups()


def _library_epilogues(graph: Graph, part: Partition) -> None:
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


def _xla_hero_elements(graph: Graph, nodes: list[str]) -> int:
    """Elements of a fusion's iteration space: a reduction's input, else its largest output."""
    red = [v for v in nodes if cost.role(graph, v) == "reduction"]
    if red:
        return numel(graph.tensors[graph.index.node[red[0]].inputs[0]].shape)
    return max(numel(graph.tensors[t].shape) for v in nodes for t in graph.index.node[v].outputs if t)


def _xla_sibling_fusion(graph: Graph, part: Partition) -> None:
    """Sibling multi-output fusion: fuse consumers of a common operand (see :func:`xla`)."""
    changed = True
    while changed:
        changed = False
        for t in graph.tensors:
            users = sorted({part.gid[c] for c in graph.index.consumers.get(t, [])},
                           key=part.first.__getitem__)
            for i, a in enumerate(users):
                for b in users[i + 1:]:
                    if a not in part.members or b not in part.members or a == b:
                        continue
                    if b in part.succ(a):
                        continue  # connected siblings are not multi-output fused (IsConnected)
                    if any(cost.role(graph, v) == "anchor" for v in part.members[a] + part.members[b]):
                        continue  # library calls are never multi-output fusion roots
                    if _xla_hero_elements(graph, part.members[a]) != _xla_hero_elements(graph, part.members[b]):
                        continue
                    nodes = part.nodes([a, b])
                    if _operands_and_outputs(graph, nodes) > XLA_MAX_OPERANDS_AND_OUTPUTS:
                        continue
                    if part.why_not([a, b]) is None:
                        part.merge([a, b])
                        changed = True
            if changed:
                break
