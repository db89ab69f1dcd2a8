"""Greedy baselines: the fusion plans production compilers would make, scored by our cost model.

Each strategy is a function ``(graph, hw) -> list of groups`` registered in :data:`STRATEGIES`;
:func:`greedy_plan` turns its partition into a validated :class:`~solverfuse.plans.Plan`. Every
baseline accepts a merge only if :func:`solverfuse.cost.group_violation` allows the merged group
(the op table's rules + capacity: the same legality as the optimal planner) and the merge keeps
every group convex with an acyclic quotient graph (:meth:`Partition.why_not`).

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> unfused(g, None)
[['a'], ['b']]
>>> greedy_plan(g, "nvidia-h100", "unfused").traffic_bytes
4096
"""
from __future__ import annotations

from typing import Callable, Collection, Iterable, Optional, Union

from . import cost
from .graph import Graph
from .hardware import Hardware, load_hardware
from .plans import Plan, build_plan


class Partition:
    """A mutable partition of a graph's ops into groups, with the checks every baseline shares.

    Groups are identified by integers; ``members[g]`` lists a group's ops in graph order.
    The quotient graph stays acyclic because :meth:`merge` is only called after :meth:`why_not`.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [8]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Add", "inputs": ["h", "y"], "outputs": ["z"]}]})
    >>> p = Partition(g, load_hardware("nvidia-h100"))
    >>> p.why_not([p.gid["a"], p.gid["c"]])
    "merging would create a cycle through 'b'"
    >>> p.merge([p.gid["a"], p.gid["b"]]) == p.gid["b"], p.groups()
    (True, [['a', 'b'], ['c']])
    """

    def __init__(self, graph: Graph, hw: Hardware):
        self.graph, self.hw = graph, hw
        self.pos = graph.index.position
        self.gid: dict[str, int] = {v: i for i, v in enumerate(graph.index.order)}
        self.members: dict[int, list[str]] = {i: [v] for i, v in enumerate(graph.index.order)}
        self.first: dict[int, int] = {i: i for i in self.members}  # smallest topological position

    def nodes(self, gs: Iterable[int]) -> list[str]:
        """The ops of several groups together, in graph order."""
        return sorted((v for g in set(gs) for v in self.members[g]), key=self.pos.__getitem__)

    def succ(self, g: int) -> set[int]:
        """Groups that read a tensor group ``g`` writes."""
        return {self.gid[w] for v in self.members[g] for w in self.graph.index.succs[v]} - {g}

    def pred(self, g: int) -> set[int]:
        """Groups that write a tensor group ``g`` reads."""
        return {self.gid[u] for v in self.members[g] for u in self.graph.index.preds[v]} - {g}

    def cycle_through(self, gs: Collection[int]) -> Optional[str]:
        """An op on a path that leaves the union of ``gs`` and re-enters it, if any.

        Such a path makes the merged group non-convex (and the quotient graph cyclic). Every
        edge goes forward in topological order, so a group whose first op comes after the last
        op of the union cannot lead back into it; the search prunes those.
        """
        union = set(gs)
        last = max(self.pos[self.members[g][-1]] for g in union)
        stack = [h for g in union for h in self.succ(g) if h not in union]
        seen = set(stack)
        while stack:
            h = stack.pop()
            if self.first[h] >= last:
                continue
            for k in self.succ(h):
                if k in union:
                    return self.members[h][0]
                if k not in seen:
                    seen.add(k)
                    stack.append(k)
        return None

    def why_not(self, gs: Collection[int]) -> Optional[str]:
        """Why merging the groups ``gs`` is illegal (fusion rule, capacity, cycle); None if legal."""
        why = cost.group_violation(self.graph, self.nodes(gs), self.hw)
        if why:
            return why
        via = self.cycle_through(gs)
        return f"merging would create a cycle through {via!r}" if via else None

    def merge(self, gs: Collection[int]) -> int:
        """Merge the groups ``gs`` (already checked with :meth:`why_not`); returns the new id."""
        gs = sorted(set(gs))
        keep = gs[0]
        nodes = self.nodes(gs)
        for g in gs[1:]:
            del self.members[g], self.first[g]
        for v in nodes:
            self.gid[v] = keep
        self.members[keep] = nodes
        self.first[keep] = self.pos[nodes[0]]
        return keep

    def groups(self) -> list[list[str]]:
        """The partition as lists of op names, groups ordered by their first op."""
        return [self.members[g] for g in sorted(self.members, key=self.first.__getitem__)]


def unfused(graph: Graph, hw: Optional[Hardware]) -> list[list[str]]:
    """No fusion: one op per kernel (what an eager framework launches)."""
    return [[v] for v in graph.index.order]


# --------------------------------------------------------------------------------------------
# TVM: relay FuseOps
# --------------------------------------------------------------------------------------------

# TVM's OpPatternKind values (include/tvm/relay/op_attr_types.h).
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, OPAQUE = 0, 1, 2, 3, 4, 8
#: Our fusion roles as TVM pattern kinds. TVM's ``take`` (our Gather) is kInjective; our op table
#: additionally forbids fusing a gather's inputs, which the legality check enforces.
TVM_KIND = {"elementwise": ELEMWISE, "broadcast": BROADCAST, "injective": INJECTIVE,
            "reduction": COMM_REDUCE, "anchor": OUT_EWISE_FUSABLE, "window": OUT_EWISE_FUSABLE,
            "gather": INJECTIVE, "opaque": OPAQUE}
#: Ops whose TVM registration differs from their role's kind: ``nn.softmax``/``nn.log_softmax``
#: are registered kOpaque, ``nn.global_avg_pool2d``/``global_max_pool2d`` kOutEWiseFusable.
TVM_KIND_OVERRIDE = {"Softmax": OPAQUE, "LogSoftmax": OPAQUE,
                     "GlobalAveragePool": OUT_EWISE_FUSABLE, "GlobalMaxPool": OUT_EWISE_FUSABLE}
TVM_MAX_FUSED_OPS = 256


def tvm_kind(graph: Graph, node: str) -> int:
    """TVM's op-pattern kind of a node (see :data:`TVM_KIND`)."""
    return TVM_KIND_OVERRIDE.get(graph.index.node[node].op, TVM_KIND[cost.role(graph, node)])


def _tvm_post_dominators(graph: Graph, kind: dict[str, int]):
    """TVM's IndexedForwardGraph edges and post-dominator tree (``DominatorTree::PostDom``).

    Returns ``(out_edges, parent, pattern)``: each node's (consumer, edge pattern) links; its
    immediate post-dominator (None for a node whose output leaves the graph); the combined
    pattern of the edges between the node and that post-dominator.
    """
    outputs = set(graph.outputs)
    out_edges: dict[str, list[tuple[str, int]]] = {v: [] for v in graph.index.order}
    for w in graph.index.order:
        node = graph.index.node[w]
        out_shape = graph.tensors[node.outputs[0]].shape
        for t in node.inputs:
            p = graph.index.producer.get(t) if t else None
            if p is None:
                continue
            # A broadcast op reading an input of its own output shape is elementwise on that edge.
            pat = ELEMWISE if kind[w] == BROADCAST and graph.tensors[t].shape == out_shape else kind[w]
            out_edges[p].append((w, pat))
    parent: dict[str, Optional[str]] = {}
    depth: dict[str, int] = {}
    pattern: dict[str, int] = {}

    def lca(a: Optional[str], b: Optional[str], pat: list[int]) -> Optional[str]:
        while a != b:
            if a is None or b is None:
                return None
            if depth[a] < depth[b]:
                pat[0] = max(pat[0], pattern[b]); b = parent[b]
            elif depth[b] < depth[a]:
                pat[0] = max(pat[0], pattern[a]); a = parent[a]
            else:
                pat[0] = max(pat[0], pattern[a], pattern[b]); a, b = parent[a], parent[b]
        return a

    for v in reversed(graph.index.order):
        extern = any(t in outputs for t in graph.index.node[v].outputs)
        if extern or not out_edges[v]:
            parent[v], depth[v], pattern[v] = None, 1, OPAQUE
            continue
        pat = [ELEMWISE]
        (first, p0), rest = out_edges[v][0], out_edges[v][1:]
        anc: Optional[str] = first
        pat[0] = max(pat[0], p0)
        for w, p in rest:
            anc = lca(anc, w, pat)
            pat[0] = max(pat[0], p)
        parent[v], pattern[v] = anc, pat[0]
        depth[v] = depth[anc] + 1 if anc is not None else 1
    return out_edges, parent, pattern


def tvm(graph: Graph, hw: Hardware) -> list[list[str]]:
    """TVM's operator fusion, relay ``FuseOps`` (``src/relay/transforms/fuse_ops.cc``).

    Reproduced rules: every op gets an OpPatternKind (elemwise < broadcast < injective <
    comm-reduce < out-elemwise-fusable < opaque; :data:`TVM_KIND`); an edge into a broadcast op
    whose input has the output's shape counts as elemwise. The post-dominator tree is built in
    reverse topological order by least common ancestors of each node's consumers; a node whose
    output is a graph output has none. ``GraphPartitioner`` then visits the nodes in topological
    order in three phases and tries to fuse each node's group into its immediate post-dominator:

    * out-elemwise-fusable (Conv, MatMul, pooling), phase 0 only: if the combined edge pattern to
      the post-dominator is elemwise and every group on the paths is at most broadcast;
    * elemwise/broadcast, any phase: if the edge pattern is at most injective or comm-reduce and
      every intermediate group is at most injective, the sink's group at most broadcast,
      injective, comm-reduce or out-elemwise-fusable;
    * injective, phase 1 only: if every group on the paths is at most injective;
    * comm-reduce and opaque: nothing -- a reduction ends its group, so its consumers are never
      fused with it (elementwise producers do fuse *into* a reduction);
    * phase 2 only fuses injective ops into tuples, which our graphs do not have (no-op here).

    A fusion merges every node on every path from the node to its post-dominator into the
    post-dominator's group; the group takes the out-elemwise-fusable kind of a master it absorbs.
    At most ``kMaxFusedOps`` = 256 ops per group.

    Adaptations: each commit is also checked with :func:`cost.group_violation` (our op table's
    rules and the register/L1 capacity) and for cycles, and skipped if illegal -- TVM has no
    capacity model; it refuses only on depth and argument count. Softmax is kOpaque and global
    pooling kOutEWiseFusable, as TVM registers them (:data:`TVM_KIND_OVERRIDE`).
    ``LayerNormalization``, which TVM decomposes before fusion, is one comm-reduce op here.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [1, 4, 8, 8]}, "w": {"shape": [4, 4, 1, 1], "constant": True},
    ...     "c": {"shape": [4], "constant": True}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "conv", "op": "Conv", "inputs": ["x", "w"], "outputs": ["a"]},
    ...               {"name": "bn", "op": "BatchNormalization", "inputs": ["a", "c", "c", "c", "c"], "outputs": ["b"]},
    ...               {"name": "relu", "op": "Relu", "inputs": ["b"], "outputs": ["y"]}]})
    >>> tvm(g, load_hardware("nvidia-h100"))
    [['conv', 'bn', 'relu']]
    """
    order = graph.index.order
    kind = {v: tvm_kind(graph, v) for v in order}
    out_edges, dom, dom_pattern = _tvm_post_dominators(graph, kind)
    part = Partition(graph, hw)
    # TVM's union-find Group records, one per node: parent link, pattern, master (anchor) flag.
    uf_parent: dict[str, Optional[str]] = {v: None for v in order}
    uf_pattern = dict(kind)
    uf_master = {v: kind[v] == OUT_EWISE_FUSABLE for v in order}

    def root(v: str) -> str:
        while uf_parent[v] is not None:
            v = uf_parent[v]
        return v

    def merge_from_to(child: str, parent: str) -> None:
        child, parent = root(child), root(parent)
        if child == parent:
            return
        uf_parent[child] = parent
        if uf_master[child]:
            uf_master[parent] = True
            uf_pattern[parent] = max(uf_pattern[child], uf_pattern[parent])

    def check_path(src: str, sink: str, fcond) -> Optional[list[str]]:
        """Nodes strictly between src and sink if every group there satisfies fcond, else None."""
        seen: set[str] = set()
        stack = [w for w, _ in out_edges[src]]
        inner = []
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            if not fcond(uf_pattern[root(x)], x == sink):
                return None
            if x != sink:
                inner.append(x)
                stack.extend(w for w, _ in out_edges[x])
        return inner

    def commit(src: str, sink: str, inner: list[str]) -> None:
        gs = {part.gid[x] for x in [src, sink, *inner]}
        if len(part.nodes(gs)) > TVM_MAX_FUSED_OPS or part.why_not(gs):
            return  # adaptation: our legality (rules, capacity, convexity) refuses the commit
        part.merge(gs)
        for x in [src, *inner]:
            merge_from_to(x, sink)

    for phase in range(3):
        for v in order:
            pat = uf_pattern[v]  # TVM reads the node's own Group record here, not its root's
            sink = dom[v]
            if pat == OPAQUE or sink is None or phase == 2:
                continue  # phase 2 only fuses into tuples
            if root(v) == root(sink):
                continue
            if pat == OUT_EWISE_FUSABLE:
                if phase == 0 and dom_pattern[v] == ELEMWISE:
                    inner = check_path(v, sink, lambda k, is_sink: k <= BROADCAST)
                    if inner is not None:
                        commit(v, sink, inner)
            elif pat <= BROADCAST:
                if dom_pattern[v] <= INJECTIVE or dom_pattern[v] == COMM_REDUCE:
                    inner = check_path(v, sink, lambda k, is_sink: k <= INJECTIVE if not is_sink
                                       else k <= OUT_EWISE_FUSABLE)
                    if inner is not None:
                        commit(v, sink, inner)
            elif pat == INJECTIVE:
                if phase == 1:
                    inner = check_path(v, sink, lambda k, is_sink: k <= INJECTIVE)
                    if inner is not None:
                        commit(v, sink, inner)
            # COMM_REDUCE: TVM does nothing -- a reduction never fuses into its consumers.
    return part.groups()


# --------------------------------------------------------------------------------------------
# XLA: GPU PriorityFusion + multi-output (sibling) fusion
# --------------------------------------------------------------------------------------------

XLA_MAX_OPERANDS_AND_OUTPUTS = 96
XLA_LAUNCH_OVERHEAD_S = 1e-6
_EPILOGUE_ROLES = frozenset({"elementwise", "broadcast"})


def _has_reduction(graph: Graph, nodes: Iterable[str]) -> bool:
    return any(cost.role(graph, v) == "reduction" for v in nodes)


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

    Adaptations: XLA *duplicates* a producer into each consumer fusion; we have no
    recomputation, so fusing a producer into all its consumers merges the producer and all its
    consumer groups into one kernel (its output then never reaches memory, which is the effect
    duplication buys), and the priority is computed for that merged kernel. Conv/MatMul/Gemm
    are cuDNN/cuBLAS library calls in XLA, which ``cudnn_fused_conv_rewriter`` and
    ``gemm_rewriter`` give bias/activation epilogues: a group holding an anchor fuses only as a
    producer and only into consumers made of elementwise/broadcast ops. Every merge must also
    pass :func:`cost.group_violation` and the cycle check.
    """
    hw1 = hw.model_copy(update={"launch_overhead_s": XLA_LAUNCH_OVERHEAD_S})
    part = Partition(graph, hw)
    outputs = set(graph.outputs)

    def has_anchor(g: int) -> bool:
        return any(cost.role(graph, v) == "anchor" for v in part.members[g])

    def candidate(p: int) -> Optional[tuple[float, list[int]]]:
        consumers = sorted(part.succ(p))
        members = part.members[p]
        if not consumers or any(t in outputs for v in members for t in graph.index.node[v].outputs):
            return None
        if any(has_anchor(c) for c in consumers):
            return None  # library calls are not fusible as consumers
        if has_anchor(p) and any(cost.role(graph, v) not in _EPILOGUE_ROLES
                                 for c in consumers for v in part.members[c]):
            return None
        if _has_reduction(graph, members) and any(_has_reduction(graph, part.members[c]) for c in consumers):
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


def _xla_hero_elements(graph: Graph, nodes: list[str]) -> int:
    """Elements of a fusion's iteration space: a reduction's input, else its largest output."""
    from .ops import numel
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


# --------------------------------------------------------------------------------------------
# Inductor: Scheduler.fuse_nodes
# --------------------------------------------------------------------------------------------

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

    def is_reduction(g: int) -> bool:
        return _has_reduction(graph, part.members[g])

    def extern(g: int) -> bool:
        return any(cost.role(graph, v) == "anchor" for v in part.members[g])

    def shared(a: int, b: int) -> int:
        common = _accessed(graph, part.members[a]) & _accessed(graph, part.members[b])
        return sum(graph.nbytes(t) for t in common)

    def can_fuse(a: int, b: int) -> bool:
        if a == b or extern(a) or extern(b):
            return False
        if len(part.members[a]) + len(part.members[b]) > INDUCTOR_MAX_FUSION_SIZE:
            return False
        return shared(a, b) >= 1 and cost.group_violation(graph, part.nodes([a, b]), hw) is None

    for _ in range(INDUCTOR_ROUNDS):
        before = len(part.members)
        users: dict[str, list[int]] = {}
        for g in sorted(part.members, key=part.first.__getitem__):
            for t in sorted(_accessed(graph, part.members[g])):
                users.setdefault(t, []).append(g)
        pairs: dict[tuple[int, int], None] = {}
        for gs in users.values():
            for i, a in enumerate(gs):
                for b in gs[i + 1:i + 1 + INDUCTOR_PAIRWISE_ATTEMPTS]:
                    if (a, b) not in pairs and can_fuse(a, b):
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


# --------------------------------------------------------------------------------------------
# The fusion-strategy guide's decision flow
# --------------------------------------------------------------------------------------------

def memory_bound(graph: Graph, nodes: list[str], hw: Hardware) -> bool:
    """Whether a kernel's roofline time is set by bandwidth (bytes/bw >= flops/peak)."""
    dtype = graph.tensors[graph.index.node[nodes[0]].outputs[0]].dtype
    return cost.group_traffic(graph, nodes) / hw.dram_bandwidth >= cost.group_flops(graph, nodes) / hw.peak(dtype)


def guide(graph: Graph, hw: Hardware) -> list[list[str]]:
    """The decision flow of the fusion-strategy guide (DESIGN section 8).

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
    from .mapping import group_footprint
    part = Partition(graph, hw)
    order = graph.index.order
    dtype = graph.tensors[graph.index.node[order[0]].outputs[0]].dtype if order else "float32"
    bandwidth_bound = cost.unfused_traffic(graph) / hw.dram_bandwidth >= \
        sum(graph.flops(v) for v in order) / hw.peak(dtype)
    mb = {v: memory_bound(graph, [v], hw) for v in order}

    def saved(gs: list[int]) -> int:
        return sum(cost.group_traffic(graph, part.members[g]) for g in gs) - \
            cost.group_traffic(graph, part.nodes(gs))

    def pairs(kind: str) -> list[tuple[int, int]]:
        out = set()
        for g in part.members:
            if kind == "vertical":
                for h in part.succ(g):
                    if any(mb[v] for v in part.members[g] + part.members[h]):
                        out.add((g, h))
            else:
                readers: dict[str, list[int]] = {}
                for t in cost.group_reads(graph, part.members[g]):
                    readers.setdefault(t, [])
                for t in readers:
                    for c in graph.index.consumers.get(t, []):
                        h = part.gid[c]
                        if h != g and all(mb[v] for v in part.members[g] + part.members[h]):
                            out.add((min(g, h), max(g, h)))
        return sorted(out, key=lambda p: (-saved(list(p)), part.first[p[0]], part.first[p[1]]))

    kinds = ["vertical", "horizontal"] if bandwidth_bound else ["horizontal", "vertical"]
    progress = True
    while progress:
        progress = False
        for kind in kinds:
            # Pairs name groups by their first op, resolved to the current group when tried.
            for va, vb in [(part.members[a][0], part.members[b][0]) for a, b in pairs(kind)]:
                a, b = part.gid[va], part.gid[vb]
                if a == b or saved([a, b]) <= 0:
                    continue
                if group_footprint(graph, part.nodes([a, b]), hw).registers > hw.register_budget:
                    continue  # the guide's first gate: the register budget
                if part.why_not([a, b]) is None:
                    part.merge([a, b])
                    progress = True
    return part.groups()


#: Every baseline by name, in the order reports list them.
STRATEGIES: dict[str, Callable[[Graph, Hardware], list[list[str]]]] = {
    "unfused": unfused,
    "tvm": tvm,
    "xla": xla,
    "inductor": inductor,
    "guide": guide,
}


def greedy_plan(graph: Graph, hardware: Union[str, Hardware], name: str) -> Plan:
    """Run the baseline ``name`` and return its validated plan (status ``heuristic``)."""
    from .errors import PlanError
    if name not in STRATEGIES:
        raise PlanError(f"unknown greedy strategy {name!r} ({', '.join(STRATEGIES)})")
    hw = load_hardware(hardware)
    return build_plan(graph, hw, STRATEGIES[name](graph, hw), strategy=name, status="heuristic")
