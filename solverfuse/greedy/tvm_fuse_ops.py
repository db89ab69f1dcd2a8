"""TVM's relay FuseOps as a baseline (see :func:`tvm`)."""
from __future__ import annotations

from typing import Optional

from .. import cost, dag
from ..graph import Graph
from ..hardware import Hardware
from .merging import Partition


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
    # TVM's union-find Group records, one per node: parent link, pattern, master (anchor) flag;
    # the pattern and flag that count are the root's.
    uf = dag.UnionFind(order)
    uf_pattern = dict(kind)
    uf_master = {v: kind[v] == OUT_EWISE_FUSABLE for v in order}
    root = uf.find

    def merge_from_to(child: str, parent: str) -> None:
        child, parent = root(child), root(parent)
        if child == parent:
            return
        uf.union(child, parent)
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
