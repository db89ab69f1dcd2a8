"""TVM's Relax FuseOps as a baseline (see :func:`tvm`), held against the real one in tests/test_tvm_real.py."""
from __future__ import annotations

from typing import Optional

from .. import cost, dag
from ..graph import Graph
from ..hardware import Hardware
from .merging import Partition


# TVM's OpPatternKind values (include/tvm/relay/op_attr_types.h).
ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, OPAQUE = 0, 1, 2, 3, 4, 8
#: Our fusion roles as TVM pattern kinds.
#: Relax's AnnotateTIROpPattern calls a legalized binary broadcast op (add, multiply, where, ...)
#: kElemWise whatever its operand shapes, so our broadcast role is elemwise here.
TVM_KIND = {"elementwise": ELEMWISE, "broadcast": ELEMWISE, "injective": INJECTIVE,
            "reduction": COMM_REDUCE, "anchor": OUT_EWISE_FUSABLE, "window": OUT_EWISE_FUSABLE,
            "gather": OPAQUE, "opaque": OPAQUE}
#: Ops whose kind differs from their role's: the pattern ``AnnotateTIROpPattern`` gives the PrimFunc
#: that Relax's ``LegalizeOps`` makes of the op's ONNX conversion (read from TVM 0.27). A kernel with
#: a reduction followed by elementwise work (mean = sum + divide, softmax, layer_norm) is
#: kOutEWiseFusable; batch_norm returns a tuple and is kInjective; ``take`` is kOpaque.
TVM_KIND_OVERRIDE = {"Softmax": OUT_EWISE_FUSABLE, "LogSoftmax": OUT_EWISE_FUSABLE,
                     "LayerNormalization": OUT_EWISE_FUSABLE, "ReduceMean": OUT_EWISE_FUSABLE,
                     "GlobalAveragePool": OUT_EWISE_FUSABLE, "GlobalMaxPool": COMM_REDUCE,
                     "LRN": OUT_EWISE_FUSABLE, "BatchNormalization": INJECTIVE, "Expand": BROADCAST,
                     "Sum": COMM_REDUCE, "Max": COMM_REDUCE, "Min": COMM_REDUCE,
                     "Mean": OUT_EWISE_FUSABLE,
                     # ops the transformer exports use (read from TVM 0.27 the same way)
                     "CumSum": OPAQUE, "GatherElements": OPAQUE, "Pad": INJECTIVE, "IsNaN": ELEMWISE,
                     "Trilu": ELEMWISE}
#: N-ary ops the Relax frontend lowers to broadcast_to per input + stack + a reduction (even with
#: two inputs): the edges into them are elemwise (into a broadcast_to), the node itself reduces.
TVM_STACKED = {"Sum", "Max", "Min", "Mean"}
TVM_MAX_FUSED_OPS = 256


def tvm_kind(graph: Graph, node: str) -> int:
    """TVM's op-pattern kind of a node (see :data:`TVM_KIND`)."""
    return TVM_KIND_OVERRIDE.get(graph.index.node[node].op, TVM_KIND[cost.role(graph, node)])


def constant_only(graph: Graph) -> set[str]:
    """Nodes whose inputs are all constants or outputs of such nodes: TVM's FoldConstant
    evaluates them at compile time, before FuseOps, so they take part in no fusion."""
    return set(graph.index.constant_only)


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
            # A broadcast op reading an input of its own output shape is elementwise on that edge;
            # so is every edge into a stacked n-ary op (it enters a broadcast_to).
            same = kind[w] == BROADCAST and graph.tensors[t].shape == out_shape
            pat = ELEMWISE if same or node.op in TVM_STACKED else kind[w]
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
    """TVM's operator fusion: Relax ``FuseOps`` (``src/relax/transform/fuse_ops.cc`` on the
    ``GraphPartitioner`` of ``src/relay/analysis/graph_partitioner.cc``), as TVM 0.27 runs it after
    LegalizeOps, AnnotateTIROpPattern and FoldConstant on an ONNX import.

    Reproduced rules: every op gets the OpPatternKind its legalized PrimFunc gets (elemwise <
    broadcast < injective < comm-reduce < out-elemwise-fusable < opaque; :data:`TVM_KIND`,
    :data:`TVM_KIND_OVERRIDE`): binary broadcast ops are elemwise; batch_norm is injective; mean,
    softmax, layer_norm and pooling are out-elemwise-fusable; ``take`` (Gather) is opaque. N-ary
    Sum/Max/Min/Mean (:data:`TVM_STACKED`) are broadcast_to + stack + a reduction: edges into them
    are elemwise. Nodes computed from constants only are folded before fusion and fuse with
    nothing (:func:`constant_only`). The post-dominator tree is built in reverse topological order
    by least common ancestors of each node's consumers; a node whose output is a graph output has
    none. The partitioner then visits the nodes in topological order in three phases and tries to
    fuse each node's group into its immediate post-dominator:

    * out-elemwise-fusable (Conv, MatMul, pooling, mean), phase 0 only: if the combined edge
      pattern to the post-dominator is elemwise and every group on the paths is at most broadcast;
    * elemwise/broadcast, any phase: if the edge pattern is at most injective or comm-reduce and
      every intermediate group is at most injective, the sink's group at most out-elemwise-fusable;
    * injective, phase 1 only: if every group on the paths is at most injective;
    * comm-reduce and opaque: nothing -- a reduction ends its group;
    * phase 2 only fuses injective ops into tuples, which our graphs do not have (no-op here).

    A fusion merges every node on every path from the node to its post-dominator into the
    post-dominator's group; the group takes the out-elemwise-fusable kind of a master it absorbs,
    and a node's own group record (not its root's) decides which rule applies. At most
    ``kMaxFusedOps`` = 256 ops per group. Against the real FuseOps (mapped back to ONNX node
    names by :mod:`solverfuse.tvm`) this agrees on 100% of producer->consumer edges of the nine
    ONNX light models and the transformer exports measured in ``benchmarks/results/tvm.md``.

    Adaptations: each commit is also checked with :func:`cost.group_violation` (our op table's
    rules and the register/L1 capacity) and for cycles, and skipped if illegal -- TVM has no
    capacity model. An ONNX op TVM lowers to several kernels (LRN, ReduceL2, a Gather's index
    normalisation) is one node here, with the kind of the kernel that computes its output.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [1, 4, 8, 8]}, "w": {"shape": [4, 4, 1, 1], "constant": True},
    ...     "c": {"shape": [4], "constant": True}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "conv", "op": "Conv", "inputs": ["x", "w"], "outputs": ["a"]},
    ...               {"name": "bn", "op": "BatchNormalization", "inputs": ["a", "c", "c", "c", "c"], "outputs": ["b"]},
    ...               {"name": "relu", "op": "Relu", "inputs": ["b"], "outputs": ["y"]}]})
    >>> tvm(g, load_hardware("nvidia-h100"))
    [['conv'], ['bn', 'relu']]
    """
    order = graph.index.order
    folded = constant_only(graph)
    kind = {v: OPAQUE if v in folded else tvm_kind(graph, v) for v in order}
    stacked = {v for v in order if graph.index.node[v].op in TVM_STACKED}
    out_edges, dom, dom_pattern = _tvm_post_dominators(graph, kind)
    part = Partition(graph, hw)
    # TVM's union-find Group records, one per node: parent link, pattern, master (anchor) flag;
    # the pattern and flag that count are the root's.
    uf = dag.UnionFind(order)
    uf_pattern = dict(kind)
    uf_master = {v: kind[v] == OUT_EWISE_FUSABLE for v in order}
    uf_parent_count = {v: 0 for v in order}  # how many groups were merged into v's
    root = uf.find

    def merge_from_to(child: str, parent: str) -> None:
        child, parent = root(child), root(parent)
        if child == parent:
            return
        uf.union(child, parent)
        uf_parent_count[parent] += 1
        if uf_master[child]:
            uf_master[parent] = True
            uf_pattern[parent] = max(uf_pattern[child], uf_pattern[parent])

    def check_path(src: str, sink: str, fcond, phase: int) -> Optional[list[str]]:
        """Nodes strictly between src and sink if every group there satisfies fcond, else None."""
        seen: set[str] = set()
        stack = [w for w, _ in out_edges[src]]
        inner = []
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            # In phase 0 a stacked op's producers fuse into its broadcast_to copies, which are
            # visited before the stack + reduction joins them: elemwise, unless already merged.
            pat = ELEMWISE if phase == 0 and x in stacked and root(x) == x and uf_parent_count[x] == 0 \
                else uf_pattern[root(x)]
            if not fcond(pat, x == sink):
                return None
            if x != sink:
                inner.append(x)
                stack.extend(w for w, _ in out_edges[x])
        return inner

    def commit(src: str, sink: str, inner: list[str]) -> None:
        gs = {part.gid[x] for x in [src, sink, *inner]}
        if sum(len(part.members[g]) for g in gs) > TVM_MAX_FUSED_OPS or part.why_not(gs):
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
                    inner = check_path(v, sink, lambda k, is_sink: k <= BROADCAST, phase)
                    if inner is not None:
                        commit(v, sink, inner)
            elif pat <= BROADCAST:
                if dom_pattern[v] <= INJECTIVE or dom_pattern[v] == COMM_REDUCE:
                    inner = check_path(v, sink, lambda k, is_sink: k <= INJECTIVE if not is_sink
                                       else k <= OUT_EWISE_FUSABLE, phase)
                    if inner is not None:
                        commit(v, sink, inner)
            elif pat == INJECTIVE:
                if phase == 1:
                    inner = check_path(v, sink, lambda k, is_sink: k <= INJECTIVE, phase)
                    if inner is not None:
                        commit(v, sink, inner)
            # COMM_REDUCE: TVM does nothing -- a reduction never fuses into its consumers.
    return part.groups()
