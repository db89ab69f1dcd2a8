"""Plain reference transcriptions of the greedy baselines, independent of ``solverfuse.greedy``.

Each baseline's documented rules, written the slow, obvious way: the partition is a dict of
member lists recounted at every step, the quotient-cycle test a plain search, traffic and
roofline time computed here from the tensors' shapes and dtypes. From the package they use only
the graph's data (nodes, tensors, inputs, outputs, ``graph.flops``), the op table's roles and
registers (``solverfuse.ops.OPS``: the spec), the hardware profile's numbers, and the legality
rule every plan obeys (``cost.group_violation``: the fusion rules + capacity, the spec of a legal
group). Nothing from ``solverfuse.greedy``, nor the cost model's traffic/time functions.

Adaptations every baseline documents are transcribed too: a merge is made only if the merged
group is legal and no path leaves it and re-enters it; ops are visited in the graph's node order
(a checked graph lists its nodes in a topological order).
"""
from __future__ import annotations

import math
from typing import Iterable, Optional

import numpy as np

from solverfuse import cost
from solverfuse.ops import OPS

# ---------------------------------------------------------------- graph data, from the JSON


def itemsize(dtype: str) -> int:
    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize


class Plain:
    """A partition of a graph's ops into groups, recounted from its members every time.

    A group's id is the position of its first op in the node list (merges keep the smallest)."""

    def __init__(self, graph, hw):
        self.graph, self.hw = graph, hw
        self.order = [n.name for n in graph.nodes]
        self.pos = {v: i for i, v in enumerate(self.order)}
        self.node = {n.name: n for n in graph.nodes}
        self.producer = {t: n.name for n in graph.nodes for t in n.outputs if t}
        self.consumers: dict[str, list[str]] = {}
        for n in graph.nodes:
            for t in dict.fromkeys(t for t in n.inputs if t):
                self.consumers.setdefault(t, []).append(n.name)
        self.outputs = set(graph.outputs)
        self.gid = {v: i for i, v in enumerate(self.order)}
        self.members = {i: [v] for i, v in enumerate(self.order)}

    # ---- tensors and groups of ops
    def nbytes(self, t: str) -> int:
        spec = self.graph.tensors[t]
        return math.prod(spec.shape) * itemsize(spec.dtype)

    def role(self, v: str) -> str:
        info = OPS.get(self.node[v].op)
        return info.role if info else "opaque"

    def reads(self, nodes: Iterable[str]) -> list[str]:
        nodes = list(nodes)
        inside = set(nodes)
        return list(dict.fromkeys(t for v in nodes for t in self.node[v].inputs
                                  if t and self.producer.get(t) not in inside))

    def writes(self, nodes: Iterable[str]) -> list[str]:
        nodes = list(nodes)
        inside = set(nodes)
        return [t for v in nodes for t in self.node[v].outputs
                if t and (t in self.outputs or any(c not in inside for c in self.consumers.get(t, [])))]

    def free_views(self, nodes: Iterable[str]) -> bool:
        """Only view ops (op table ``view``), no graph output written: metadata, no kernel."""
        return all(self.node[v].op in OPS and OPS[self.node[v].op].view and
                   not any(t in self.outputs for t in self.node[v].outputs) for v in nodes)

    def read_cost(self, nodes: list[str], t: str) -> int:
        """A tensor read only as the data operand (input 0, not also another input) of member
        gathers costs the gathered rows: those gathers' output bytes, capped at its size."""
        gathered = 0
        for v in nodes:
            ins = self.node[v].inputs
            if t not in ins:
                continue
            info = OPS.get(self.node[v].op)
            if info is None or not info.gather_data_input or ins[0] != t or t in ins[1:]:
                return self.nbytes(t)
            gathered += self.nbytes(self.node[v].outputs[0])
        return min(self.nbytes(t), gathered)

    def traffic(self, nodes: Iterable[str]) -> int:
        nodes = list(nodes)
        if self.free_views(nodes):
            return 0
        return sum(self.read_cost(nodes, t) for t in self.reads(nodes)) + \
            sum(map(self.nbytes, self.writes(nodes)))

    def seconds(self, nodes: list[str], hw) -> float:
        """Roofline: max(bytes / bandwidth, flops / peak of the first output's dtype) + launch;
        0 for a free view group (no kernel)."""
        if self.free_views(nodes):
            return 0.0
        dtype = self.graph.tensors[self.node[nodes[0]].outputs[0]].dtype
        return max(self.traffic(nodes) / hw.dram_bandwidth,
                   sum(self.graph.flops(v) for v in nodes) / hw.peak(dtype)) + hw.launch_overhead_s

    def registers(self, nodes: Iterable[str], hw) -> int:
        """Kernel base registers + each op's (an anchor's: its accumulator tile)."""
        total = hw.kernel_base_registers
        for v in nodes:
            info = OPS.get(self.node[v].op)
            total += 0 if info is None else \
                hw.gemm_tile.accumulator_registers if info.role == "anchor" else info.registers
        return total

    # ---- the partition
    def nodes(self, gs: Iterable[int]) -> list[str]:
        return sorted((v for g in set(gs) for v in self.members[g]), key=self.pos.__getitem__)

    def succ(self, g: int) -> set[int]:
        return {self.gid[w] for v in self.members[g] for t in self.node[v].outputs if t
                for w in self.consumers.get(t, [])} - {g}

    def pred(self, g: int) -> set[int]:
        return {self.gid[self.producer[t]] for v in self.members[g] for t in self.node[v].inputs
                if t in self.producer} - {g}

    def closes_cycle(self, gs: Iterable[int]) -> bool:
        """Whether some path leaves the union of ``gs`` and comes back (a plain search)."""
        union = set(gs)
        stack = [h for g in union for h in self.succ(g) if h not in union]
        seen = set(stack)
        while stack:
            for k in self.succ(stack.pop()):
                if k in union:
                    return True
                if k not in seen:
                    seen.add(k)
                    stack.append(k)
        return False

    def legal(self, gs: Iterable[int]) -> bool:
        gs = list(gs)
        return cost.group_violation(self.graph, self.nodes(gs), self.hw) is None and not self.closes_cycle(gs)

    def merge(self, gs: Iterable[int]) -> int:
        gs = sorted(set(gs))
        nodes = self.nodes(gs)
        for g in gs[1:]:
            del self.members[g]
        for v in nodes:
            self.gid[v] = gs[0]
        self.members[gs[0]] = nodes
        return gs[0]

    def has_role(self, g: int, role: str) -> bool:
        return any(self.role(v) == role for v in self.members[g])

    def groups(self) -> list[list[str]]:
        return [self.members[g] for g in sorted(self.members)]


# ---------------------------------------------------------------- TVM Relax FuseOps

ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, OPAQUE = 0, 1, 2, 3, 4, 8
# The kinds Relax's AnnotateTIROpPattern gives the legalized PrimFunc of each op (TVM 0.27): binary
# broadcast ops are elemwise whatever their shapes; ``take`` (gather) is opaque.
ROLE_KIND = {"elementwise": ELEMWISE, "broadcast": ELEMWISE, "injective": INJECTIVE,
             "reduction": COMM_REDUCE, "anchor": OUT_EWISE_FUSABLE, "window": OUT_EWISE_FUSABLE,
             "gather": OPAQUE, "opaque": OPAQUE}
# A reduction followed by elementwise work (mean, softmax, layer_norm, LRN) is out-elemwise-
# fusable; batch_norm (a tuple) and pad injective; expand broadcast; the n-ary reductions reduce.
OP_KIND = {"Softmax": OUT_EWISE_FUSABLE, "LogSoftmax": OUT_EWISE_FUSABLE,
           "LayerNormalization": OUT_EWISE_FUSABLE, "ReduceMean": OUT_EWISE_FUSABLE,
           "GlobalAveragePool": OUT_EWISE_FUSABLE, "LRN": OUT_EWISE_FUSABLE, "Mean": OUT_EWISE_FUSABLE,
           "GlobalMaxPool": COMM_REDUCE, "Sum": COMM_REDUCE, "Max": COMM_REDUCE, "Min": COMM_REDUCE,
           "BatchNormalization": INJECTIVE, "Pad": INJECTIVE, "Expand": BROADCAST,
           "CumSum": OPAQUE, "GatherElements": OPAQUE, "IsNaN": ELEMWISE, "Trilu": ELEMWISE}
# N-ary ops lowered to broadcast_to per input + stack + reduction: edges into them are elemwise.
STACKED = {"Sum", "Max", "Min", "Mean"}
MAX_FUSED_OPS = 256


def tvm(graph, hw) -> list[list[str]]:
    """Relax ``FuseOps`` (``src/relax/transform/fuse_ops.cc`` on relay's graph partitioner), from
    its rules, after FoldConstant.

    Nodes computed from constants only are folded before fusion (opaque here: they fuse with
    nothing). The immediate post-dominator of a node is computed as a dominator of the reversed
    graph with one virtual exit that every graph output's producer and every node without
    consumers feeds (a graph output has no post-dominator: TVM's ``extern_ref``). The pattern
    towards it is the largest edge pattern on any path from the node to it (an edge's pattern is
    its consumer's kind; elemwise for a broadcast op reading an input of its own output shape, and
    for every edge into a stacked op). Then three phases over the nodes in order, each node's
    *own* group record's pattern deciding (as TVM reads ``groups_[nid]->pattern``); a fusion
    merges every node on the paths into the sink's group, the sink's root keeping its pattern
    unless the child brings an anchor (master). In phase 0 a stacked op nothing was merged into
    still looks elemwise to the path check (its broadcast_to copies come first).
    """
    import networkx as nx
    p = Plain(graph, hw)
    const = {t for t, info in graph.tensors.items() if info.constant}
    folded = set()
    for v in p.order:
        ins = p.node[v].inputs
        if ins and all(not t or t in const for t in ins):
            folded.add(v)
            const.update(t for t in p.node[v].outputs if t)
    kind = {v: OPAQUE if v in folded else OP_KIND.get(p.node[v].op, ROLE_KIND[p.role(v)]) for v in p.order}
    stacked = {v for v in p.order if p.node[v].op in STACKED}
    edges: dict[str, list[tuple[str, int]]] = {v: [] for v in p.order}
    for w in p.order:
        out_shape = graph.tensors[p.node[w].outputs[0]].shape
        for t in p.node[w].inputs:
            if t in p.producer:
                same = graph.tensors[t].shape == out_shape
                elem = (kind[w] == BROADCAST and same) or w in stacked
                edges[p.producer[t]].append((w, ELEMWISE if elem else kind[w]))
    exit_ = object()
    rev = nx.DiGraph()
    rev.add_node(exit_)
    for v in p.order:
        rev.add_node(v)
        for w, _ in edges[v]:
            rev.add_edge(w, v)
        if not edges[v] or any(t in p.outputs for t in p.node[v].outputs):
            rev.add_edge(exit_, v)
    idom = nx.immediate_dominators(rev, exit_)
    dom: dict[str, Optional[str]] = {}
    dom_pattern: dict[str, int] = {}
    for v in p.order:
        extern = any(t in p.outputs for t in p.node[v].outputs)
        d = idom.get(v)
        dom[v] = None if extern or d is exit_ or d is None else d
        if dom[v] is None:
            continue
        pat, seen, stack = ELEMWISE, {v}, [v]
        while stack:  # every edge on a path from v to its post-dominator
            x = stack.pop()
            for w, e in edges[x]:
                pat = max(pat, e)
                if w != dom[v] and w not in seen:
                    seen.add(w)
                    stack.append(w)
        dom_pattern[v] = pat

    parent: dict[str, str] = {}      # TVM's Group records: union-find links, pattern, anchor
    pattern = dict(kind)
    master = {v: kind[v] == OUT_EWISE_FUSABLE for v in p.order}
    size = {v: 1 for v in p.order}

    def root(v: str) -> str:
        while v in parent:
            v = parent[v]
        return v

    def path_ok(src: str, sink: str, fcond, phase: int) -> Optional[list[str]]:
        """CheckPath: every node reached from src up to sink satisfies fcond; the inner nodes."""
        inner, seen, stack = [], set(), [w for w, _ in edges[src]]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            untouched = x not in parent and size[x] == 1
            k = ELEMWISE if phase == 0 and x in stacked and untouched else pattern[root(x)]
            if not fcond(k, x == sink):
                return None
            if x != sink:
                inner.append(x)
                stack.extend(w for w, _ in edges[x])
        return inner

    def commit(src: str, sink: str, inner: list[str]) -> None:
        gs = {p.gid[x] for x in [src, sink, *inner]}
        if not p.legal(gs):
            return  # adaptation: our rules, capacity and convexity refuse the fusion
        p.merge(gs)
        target = root(sink)
        for x in [src, *inner]:
            child = root(x)
            if child == target:
                continue
            parent[child] = target
            size[target] += size[child]
            if master[child]:
                master[target] = True
                pattern[target] = max(pattern[child], pattern[target])

    for phase in range(3):
        for v in p.order:
            sink = dom[v]
            if pattern[v] == OPAQUE or sink is None or phase == 2:
                continue
            if root(v) == root(sink) or size[root(v)] + size[root(sink)] > MAX_FUSED_OPS:
                continue
            own = pattern[v]
            if own == OUT_EWISE_FUSABLE:
                fcond, ok = (lambda k, at_sink: k <= BROADCAST), phase == 0 and dom_pattern[v] == ELEMWISE
            elif own <= BROADCAST:
                fcond = lambda k, at_sink: k <= INJECTIVE if not at_sink else \
                    k in (ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE)
                ok = dom_pattern[v] <= INJECTIVE or dom_pattern[v] == COMM_REDUCE
            elif own == INJECTIVE:
                fcond, ok = (lambda k, at_sink: k <= INJECTIVE), phase == 1
            else:
                continue  # comm-reduce: never fused into its consumers
            inner = path_ok(v, sink, fcond, phase) if ok else None
            if inner is not None:
                commit(v, sink, inner)
    return p.groups()


# ---------------------------------------------------------------- XLA

XLA_MAX_OPERANDS_AND_OUTPUTS = 96
XLA_LAUNCH_OVERHEAD_S = 1e-6


def _epilogues(p: Plain) -> None:
    """Each anchor absorbs the ops that alone consume its result: broadcast ops whose other
    inputs are graph inputs/constants (a convolution also one residual Add/Sum), then at most one
    elementwise activation with no other input, which ends it."""
    for v in p.order:
        if p.role(v) != "anchor":
            continue
        tail, side_input = v, p.node[v].op == "Conv"
        while True:
            out = p.node[tail].outputs[0]
            users = p.consumers.get(out, [])
            if out in p.outputs or len(users) != 1 or len({w for t in p.node[tail].outputs if t
                                                           for w in p.consumers.get(t, [])}) != 1:
                break
            w = users[0]
            others = [t for t in p.node[w].inputs if t and t != out]
            if p.role(w) == "broadcast":
                computed = [t for t in others if t in p.producer]
                if len(computed) > 1 or (computed and not (side_input and p.node[w].op in ("Add", "Sum"))):
                    break
                side_input = side_input and not computed
            elif p.role(w) != "elementwise" or others:
                break
            gs = [p.gid[v], p.gid[w]]
            if not p.legal(gs):
                break
            p.merge(gs)
            tail = w
            if p.role(w) == "elementwise":
                break


def _hero(p: Plain, nodes: list[str]) -> int:
    red = [v for v in nodes if p.role(v) == "reduction"]
    if red:
        return math.prod(p.graph.tensors[p.node[red[0]].inputs[0]].shape)
    return max(math.prod(p.graph.tensors[t].shape) for v in nodes for t in p.node[v].outputs if t)


def xla(graph, hw) -> list[list[str]]:
    """Priority fusion (every priority recomputed after every fusion; highest saved time, then
    latest producer, first), then sibling multi-output fusion restarting from the first tensor."""
    hw1 = hw.model_copy(update={"launch_overhead_s": XLA_LAUNCH_OVERHEAD_S})
    p = Plain(graph, hw)
    _epilogues(p)
    operands = lambda nodes: len(p.reads(nodes)) + len(p.writes(nodes))

    def candidate(g):
        consumers = sorted(p.succ(g))
        if not consumers or any(t in p.outputs for v in p.members[g] for t in p.node[v].outputs):
            return None
        if p.has_role(g, "anchor") or any(p.has_role(c, "anchor") for c in consumers):
            return None
        if p.has_role(g, "reduction") and any(p.has_role(c, "reduction") for c in consumers):
            return None
        gs = [g, *consumers]
        nodes = p.nodes(gs)
        if operands(nodes) > XLA_MAX_OPERANDS_AND_OUTPUTS:
            return None
        saved = sum(p.seconds(p.members[h], hw1) for h in gs) - p.seconds(nodes, hw1)
        return (saved, g, gs) if saved >= 0 else None

    while True:
        ranked = sorted((c for c in map(candidate, list(p.members)) if c), key=lambda c: c[:2], reverse=True)
        gs = next((c[2] for c in ranked if p.legal(c[2])), None)
        if gs is None:
            break
        p.merge(gs)
    changed = True
    while changed:
        changed = False
        for t in graph.tensors:
            users = sorted({p.gid[c] for c in p.consumers.get(t, [])})
            for i, a in enumerate(users):
                for b in users[i + 1:]:
                    if a not in p.members or b not in p.members or b in p.succ(a):
                        continue
                    if p.has_role(a, "anchor") or p.has_role(b, "anchor") or \
                            _hero(p, p.members[a]) != _hero(p, p.members[b]):
                        continue
                    if operands(p.nodes([a, b])) > XLA_MAX_OPERANDS_AND_OUTPUTS:
                        continue
                    if p.legal([a, b]):
                        p.merge([a, b])
                        changed = True
            if changed:
                break
    return p.groups()


# ---------------------------------------------------------------- Inductor

INDUCTOR_MAX_FUSION_SIZE = 64
INDUCTOR_ROUNDS = 10
INDUCTOR_PAIRWISE_ATTEMPTS = 64


def _users_through_views(p: Plain, v: str) -> list[tuple[str, str]]:
    """(consumer, tensor) pairs reading ``v``'s value, a view's consumers standing for it; ('', '')
    for a graph output or an op nobody reads."""
    out = []
    if any(t in p.outputs for t in p.node[v].outputs) or not any(
            p.consumers.get(t) for t in p.node[v].outputs if t):
        out.append(("", ""))
    for w in dict.fromkeys(w for t in p.node[v].outputs if t for w in p.consumers.get(t, [])):
        if p.node[w].op in INDUCTOR_VIEWS:
            out += _users_through_views(p, w)
        else:
            out += [(w, t) for t in p.node[w].inputs if t in p.node[v].outputs]
    return list(dict.fromkeys(out))


def _needs_buffer(p: Plain, w: str, t: str) -> bool:
    """An extern call, a ConcatKernel, a window op or a gather's data reads ``t`` from memory."""
    info = OPS.get(p.node[w].op)
    if p.node[w].op == "Concat" or info is None or info.materialised_inputs:
        return True
    return info.gather_data_input and p.node[w].inputs[0] == t


def inductor_lowering(p: Plain) -> tuple[set, dict]:
    """(ops stored to a buffer, op -> the stored op whose loop computes it): stored are
    reductions, extern/window calls, Concat, graph outputs, ops some consumer (through views)
    reads from memory, and ops with several consumers whose expression reads more than 4
    buffers; any other op (a view with an in-loop consumer too) runs in its first in-loop
    consumer's loop."""
    stored, reads = set(), {}
    for v in p.order:
        if p.node[v].op in INDUCTOR_VIEWS:
            src = p.node[v].inputs[0] if p.node[v].inputs else ""
            q = p.producer.get(src)
            reads[v] = reads[q] if q is not None and q not in stored else ({src} - {""})
            continue
        mine = set()
        for t in p.node[v].inputs:
            q = p.producer.get(t) if t else None
            if q is not None and q not in stored:
                mine |= reads[q]
            elif t and p.graph.tensors[t].shape:
                mine.add(t)
        reads[v] = mine
        users = _users_through_views(p, v)
        if p.node[v].op == "Concat" or p.role(v) in ("reduction", "anchor", "opaque", "window") \
                or any(w == "" or _needs_buffer(p, w, t) for w, t in users) \
                or (len({w for w, _ in users}) > 1 and len(mine) > 4):
            stored.add(v)
    home = {}
    for v in reversed(p.order):
        users = _users_through_views(p, v)
        if p.node[v].op in INDUCTOR_VIEWS:
            ins = [w for w, t in users if w and not _needs_buffer(p, w, t)]
            if ins:
                home[v] = home[min(ins, key=p.pos.__getitem__)]
        elif v in stored:
            home[v] = v
        else:
            ins = [w for w, _ in users if w]
            home[v] = home[min(ins, key=p.pos.__getitem__)] if ins else v
    return stored, home


def inductor(graph, hw) -> list[list[str]]:
    """Lowering first: every inlined op joins the kernel of the stored op whose loop computes it
    (latest op first, when legal and within 64 ops). Then ``fuse_nodes``: rounds of candidate
    pairs among users of a common buffer, ranked by (same reduction-ness and sharing, shared
    bytes, proximity), fused while still fusible -- both groups' stored ops running one loop size
    (a reduction's: its input's); extern calls (anchors) and Concat (a ConcatKernel on CPU) never
    fuse."""
    p = Plain(graph, hw)
    stored, home = inductor_lowering(p)
    for v in reversed(p.order):
        if v in home and home[v] != v:
            a, b = p.gid[v], p.gid[home[v]]
            if a != b and len(p.members[a]) + len(p.members[b]) <= INDUCTOR_MAX_FUSION_SIZE and p.legal([a, b]):
                p.merge([a, b])

    def loop(v):
        n = p.node[v]
        t = n.inputs[0] if p.role(v) == "reduction" and n.inputs and n.inputs[0] else n.outputs[0]
        return math.prod(graph.tensors[t].shape)
    loops = lambda g: {loop(v) for v in p.members[g] if v in stored}  # noqa: E731
    accessed = lambda g: set(p.reads(p.members[g])) | set(p.writes(p.members[g]))
    shared = lambda a, b: sum(p.nbytes(t) for t in accessed(a) & accessed(b))

    def extern(g):  # an extern call (anchor) or a CPU ConcatKernel
        return p.has_role(g, "anchor") or any(p.node[v].op == "Concat" for v in p.members[g])

    def can_fuse(a, b):
        if a == b or extern(a) or extern(b):
            return False
        if len(p.members[a]) + len(p.members[b]) > INDUCTOR_MAX_FUSION_SIZE:
            return False
        if len(loops(a) | loops(b)) > 1:
            return False
        return shared(a, b) >= 1 and cost.group_violation(graph, p.nodes([a, b]), hw) is None

    for _ in range(INDUCTOR_ROUNDS):
        before = len(p.members)
        users: dict[str, list[int]] = {}
        for g in sorted(p.members):
            for t in sorted(accessed(g)):
                users.setdefault(t, []).append(g)
        pairs = {}
        for gs in users.values():
            for i, a in enumerate(gs):
                for b in gs[i + 1:i + 1 + INDUCTOR_PAIRWISE_ATTEMPTS]:
                    if (a, b) not in pairs and can_fuse(a, b):
                        pairs[(a, b)] = None

        def score(pair):
            a, b = pair
            lo_a, hi_a = a, p.pos[p.members[a][-1]]
            lo_b, hi_b = b, p.pos[p.members[b][-1]]
            return (p.has_role(a, "reduction") == p.has_role(b, "reduction") and shared(a, b) > 0,
                    shared(a, b), -max(abs(lo_a - hi_b), abs(lo_b - hi_a)))
        heads = [(p.members[a][0], p.members[b][0]) for a, b in sorted(pairs, key=score, reverse=True)]
        for va, vb in heads:
            a, b = p.gid[va], p.gid[vb]
            if b not in p.pred(a) and can_fuse(a, b) and not p.closes_cycle([a, b]):
                p.merge([a, b])
        if len(p.members) == before:
            break
    return inductor_views(p, p.groups())


# Ops Inductor lowers to index expressions and never makes a kernel of.
INDUCTOR_VIEWS = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Identity", "Flatten",
                  "Slice", "Select", "Split"}


def inductor_views(p: Plain, groups: list[list[str]]) -> list[list[str]]:
    """Views placed as Inductor's lowering does, latest view first: a view joins the group of its
    earliest consumer that computes in-kernel (not an op reading its inputs from memory -- an
    anchor, a gather -- and not a view already sitting in such a view-only group); a view read
    only by memory-reading ops (or views grouped with them) forms a view-only group with them
    (each memory-reading op's views their own group); in such a group that reshapes after a
    transpose, the views before the transpose reading a memory-reading op's output are each a
    kernel of their own (a copy). A view with no consumer, or a graph output
    read by nobody, stays alone -- except a view (not a clone) nobody reads of an in-loop op's
    value, which that op's kernel writes; a view read only by Concats (or by such views) is
    alone (each ConcatKernel input a kernel of its own) -- a view read only by such views is in the
    first one's kernel (that loop computes it); a clone between the transpose and the
    reshape is the copy (no head is copied then). A group our rules then reject loses its views (each alone); a
    view that makes its group non-convex stays alone; if the plan stays cyclic, nothing moves."""
    views = [v for v in p.order if p.node[v].op in INDUCTOR_VIEWS]
    if not views:
        return groups
    label = {v: ("g", i) for i, g in enumerate(groups) for v in g}
    mem_group: set = set()
    to_concat: set = set()
    for v in reversed(views):
        cons = [w for t in p.node[v].outputs if t for w in p.consumers.get(t, [])]
        cons = list(dict.fromkeys(cons))
        src = p.producer.get(p.node[v].inputs[0]) if p.node[v].inputs else None
        if not cons and p.node[v].op != "Identity" and src is not None and src not in views \
                and OPS.get(p.node[src].op) is not None and not OPS[p.node[src].op].materialised_inputs:
            label[v] = label[src]
            continue
        if not cons:
            label[v] = ("v", v)
            continue
        if all(w in to_concat for w in cons):  # computed in the loop writing that slice
            to_concat.add(v)
            label[v] = label[min(cons, key=p.pos.__getitem__)]
            continue
        if all(p.node[w].op == "Concat" or w in to_concat for w in cons):
            to_concat.add(v)
            label[v] = ("v", v)
            continue
        in_kernel = [w for w in cons if not (OPS.get(p.node[w].op) and OPS[p.node[w].op].materialised_inputs)
                     and not (w in views and label[w] in mem_group)]
        if in_kernel:
            label[v] = label[min(in_kernel, key=p.pos.__getitem__)]
        else:
            viewish = [label[w] for w in cons if w in views and label[w] in mem_group]
            if viewish:
                label[v] = viewish[0]
            else:
                label[v] = ("v", v)
                mem_group.add(label[v])
    for lab in list(mem_group):  # a reshape after a transpose: the head before it is copied
        members = [v for v in views if label[v] == lab]
        t = [p.pos[v] for v in members if p.node[v].op == "Transpose"]
        clones = [p.pos[v] for v in members if p.node[v].op == "Identity"]
        if not t or not any(p.node[v].op in ("Reshape", "Flatten") and p.pos[v] > min(t)
                            and not any(min(t) < c < p.pos[v] for c in clones) for v in members):
            continue
        for v in members:
            src = p.producer.get(p.node[v].inputs[0])
            info = OPS.get(p.node[src].op) if src is not None else None
            if src is not None and (info is None or info.materialised_inputs) and p.pos[v] < min(t):
                label[v] = ("copy", v)
    by_label: dict = {}
    for v in p.order:
        by_label.setdefault(label[v], []).append(v)
    out = list(by_label.values())
    vs = set(views)
    for k, g in enumerate(list(out)):
        if len(g) > 1 and vs & set(g) and cost.group_violation(p.graph, g, p.hw) is not None:
            out[k] = [v for v in g if v not in vs]
            out += [[v] for v in g if v in vs]
    out = [g for g in out if g]
    for _ in range(len(views) + 1):
        bad = _nonconvex_view(p, out, vs)
        if bad is None:
            if _quotient_cyclic(p, out):
                return groups
            return sorted(out, key=lambda g: p.pos[g[0]])
        g, v = bad
        g.remove(v)
        out.append([v])
    return groups


def _nonconvex_view(p: Plain, groups: list[list[str]], views: set):
    """(group, view) for the first group (earliest first op) some path leaves and re-enters, and
    the first view (in graph order) on that group whose removal is tried; None if all convex."""
    for g in sorted(groups, key=lambda g: p.pos[g[0]]):
        inside = set(g)
        stack = [w for v in g for t in p.node[v].outputs if t for w in p.consumers.get(t, []) if w not in inside]
        seen = set(stack)
        back = False
        while stack and not back:
            x = stack.pop()
            for t in p.node[x].outputs:
                for w in p.consumers.get(t, []) if t else []:
                    if w in inside:
                        back = True
                    elif w not in seen:
                        seen.add(w)
                        stack.append(w)
        if back:
            cand = [v for v in g if v in views]
            if cand:
                return g, cand[0]
    return None


def _quotient_cyclic(p: Plain, groups: list[list[str]]) -> bool:
    gid = {v: i for i, g in enumerate(groups) for v in g}
    succ = {i: {gid[w] for v in g for t in p.node[v].outputs if t for w in p.consumers.get(t, [])} - {i}
            for i, g in enumerate(groups)}
    state: dict = {}
    for s in succ:
        if s in state:
            continue
        stack = [(s, iter(succ[s]))]
        state[s] = 1
        while stack:
            n, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[n] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return True
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
    return False


# ---------------------------------------------------------------- the fusion-strategy guide

def guide(graph, hw) -> list[list[str]]:
    """Vertical pairs first when the unfused graph is bandwidth-bound (else horizontal first),
    most bytes saved first; the register budget gates first; repeat until nothing fuses."""
    p = Plain(graph, hw)
    dtype = graph.tensors[p.node[p.order[0]].outputs[0]].dtype
    unfused = sum(p.traffic([v]) for v in p.order)
    bandwidth_bound = unfused / hw.dram_bandwidth >= sum(graph.flops(v) for v in p.order) / hw.peak(dtype)

    def memory_bound(v):
        d = graph.tensors[p.node[v].outputs[0]].dtype
        return p.traffic([v]) / hw.dram_bandwidth >= graph.flops(v) / hw.peak(d)
    mb = {v: memory_bound(v) for v in p.order}
    saved = lambda gs: sum(p.traffic(p.members[g]) for g in gs) - p.traffic(p.nodes(gs))

    def pairs(kind):
        out = set()
        for g in p.members:
            if kind == "vertical":
                others = p.succ(g)
            else:
                others = {p.gid[c] for t in p.reads(p.members[g]) for c in p.consumers[t]} - {g}
            for h in others:
                both = p.members[g] + p.members[h]
                if any(map(mb.get, both)) if kind == "vertical" else all(map(mb.get, both)):
                    out.add((g, h) if kind == "vertical" else (min(g, h), max(g, h)))
        return sorted(out, key=lambda q: (-saved(list(q)), q[0], q[1]))

    progress = True
    while progress:
        progress = False
        for kind in ["vertical", "horizontal"] if bandwidth_bound else ["horizontal", "vertical"]:
            for va, vb in [(p.members[a][0], p.members[b][0]) for a, b in pairs(kind)]:
                a, b = p.gid[va], p.gid[vb]
                if a == b or saved([a, b]) <= 0 or p.registers(p.nodes([a, b]), hw) > hw.register_budget:
                    continue
                if p.legal([a, b]):
                    p.merge([a, b])
                    progress = True
    return p.groups()


REFERENCES = {"tvm": tvm, "xla": xla, "inductor": inductor, "guide": guide}
