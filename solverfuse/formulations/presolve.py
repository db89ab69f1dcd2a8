"""Safe presolve shared by the formulations: which pairs of ops can ever share a group, which
independent parts the problem splits into, and which representatives each op may be assigned to.

Everything here removes only choices that *no optimal plan needs*; the argument for each step is
in ``formulations/set-partitioning.md`` (section "Presolve and decomposition"):

* **connected groups suffice.** Call two ops *affine* when one reads a tensor the other produces
  (a DAG edge) or both read the same tensor (siblings). If a legal group is not connected under
  affinity, splitting it into its affine components keeps every part legal (the rules and the
  capacity -- additive but for a streaming reduction's row, which only shrinks with the group --
  are monotone under taking subsets; a component of a convex group is convex) and does not raise
  the traffic (no tensor is shared between the components, so each gather-aware read is decided
  in one of them; a component of views only may become free). So some optimal plan has only
  affine-connected groups, and we search only those (``formulations/reality.md``).
* **pair legality.** Two ops ``u`` (earlier) and ``v`` can be in one convex group only if the group
  holds their *hull* -- every op on a path ``u -> v`` -- so the pair is *compatible* only if
  ``cost.group_violation(hull)`` is None. Affinity edges between incompatible pairs are dropped.
* **parts.** Connected components of the compatible-affinity graph; components whose quotient
  graph has a cycle are merged (strongly connected components), so no path leaves a part and
  re-enters it. Then a plan legal inside every part is legal globally (parts run in topological
  order) and the traffic is the sum over parts: each part is solved on its own, exactly.
* **candidates.** A group's representative is its earliest op; ``v`` may join ``r``'s group only
  if ``(r, v)`` is compatible and an affine path inside the part joins them whose registers
  (+ the kernel's base registers) fit the budget.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> g = load_graph({"tensors": {"x": {"shape": [64, 64]}, "w": {"shape": [64, 64], "constant": True}},
...     "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "m", "op": "MatMul", "inputs": ["h", "w"], "outputs": ["z"]},
...               {"name": "b", "op": "Exp", "inputs": ["z"], "outputs": ["y"]}]})
>>> pre = presolve(g, load_hardware("nvidia-h100"))
>>> pre.parts, pre.cand["b"]
([['a'], ['m', 'b']], ['m', 'b'])
"""
from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field
from typing import Optional, Sequence

from .. import cost, dag
from ..graph import Graph
from ..hardware import Hardware
from ..mapping import op_footprint
from ..rules import facts, hull_violation, masks


@dataclass
class Presolve:
    """What the formulations need about one (graph, hardware) pair."""
    order: list[str]
    pos: dict[str, int]
    parts: list[list[str]]                      # in an executable order, ops in graph order
    cand: dict[str, list[str]]                  # representatives v may join (graph order, incl. v)
    part_of: dict[str, int] = field(default_factory=dict)
    compatible_pairs: int = 0
    reach: "_Reach | None" = None
    convex: bool = True                         # groups must be convex (False: coverings)

    def between(self, r: str, v: str) -> list[str]:
        """Ops strictly between ``r`` and ``v`` on some path ``r -> v`` (a convex group holding
        both holds all of them)."""
        i, j = self.pos[r], self.pos[v]
        return [self.order[k] for k in dag.bits(self.reach.desc[i] & self.reach.anc[j])]


class _Reach:
    """Descendant / ancestor bitsets over topological positions, and cheap hull legality."""

    def __init__(self, graph: Graph, hw: Hardware, order: list[str], violation=cost.group_violation,
                 convex: bool = True):
        self.graph, self.hw, self.violation, self.convex = graph, hw, violation, convex
        self.order = order
        self.pos = {v: i for i, v in enumerate(order)}
        pos = self.pos
        self.succs = [[pos[w] for w in graph.index.succs[v] if w in pos] for v in order]
        if len(order) == len(graph.index.order):
            self.desc, self.anc = graph.index.desc, graph.index.anc  # the whole graph: built once
        else:
            # a subset no path leaves and re-enters: reachability inside it is the graph's, restricted
            self.desc = dag.descendants(self.succs)
            self.anc = dag.ancestors([[pos[u] for u in graph.index.preds[v] if u in pos] for v in order])
        self.masks = masks(graph, order)
        # the same masks without the gather data edges, for the hulls holding no gather (most):
        # the rules then skip a scan of every gather of the graph
        self.gathers = 0
        for g, _ in self.masks.data_edges:
            self.gathers |= g
        self.plain = dataclasses.replace(self.masks, data_edges=())
        fps = [op_footprint(graph, v, hw) for v in order]
        self.regs = [f.registers for f in fps]
        self.l1 = [f.l1_bytes for f in fps]
        self.cache: dict[tuple[int, int], bool] = {}
        # dead[i]: later ops whose hull with i is known illegal without a look -- every
        # descendant of a descendant j of i whose hull with i is illegal (hull(i, j) is a subset
        # of theirs, and legality is monotone under subsets). A wide tensor's readers (a bias
        # read by thousands of ops) are mostly such pairs.
        self.dead: list[int] = [0] * len(order)

    def compatible(self, i: int, j: int) -> bool:
        """Can ops at positions i < j share a convex legal group (is their hull legal)? Without
        convexity (coverings): is the pair alone a legal group?"""
        key = (i, j)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        if not self.convex:  # the pair alone: a direct edge is the only path inside it
            ends = (1 << i) | (1 << j)
            ok = not hull_violation(self.masks if ends & self.gathers else self.plain, ends, i, j in self.succs[i]) \
                and self.violation(self.graph, [self.order[i], self.order[j]], self.hw) is None
            self.cache[key] = ok
            return ok
        if self.dead[i] >> j & 1:
            return False
        ends = (1 << i) | (1 << j)
        path = bool(self.desc[i] >> j & 1)
        hull = (self.desc[i] & self.anc[j]) | ends
        ok = not hull_violation(self.masks if hull & self.gathers else self.plain, hull, i, path)
        if ok:  # capacity (and the rules once more: the masks are only a fast path)
            nodes = [self.order[k] for k in dag.bits(hull)]
            ok = self.violation(self.graph, nodes, self.hw) is None
        if not ok and path:
            self.dead[i] |= (1 << j) | self.desc[j]
        self.cache[key] = ok
        return ok

    def compatible_later(self, i: int, later: int) -> list[int]:
        """The positions in the bitset ``later`` (all after ``i``) compatible with ``i``, lowest
        first: :meth:`compatible` on each, skipping the ones :attr:`dead` rules out as it grows."""
        out = []
        rest = later & ~self.dead[i]
        while rest:
            low = rest & -rest
            j = low.bit_length() - 1
            rest ^= low
            if self.compatible(i, j):
                out.append(j)
            elif self.convex and self.desc[i] >> j & 1:
                rest &= ~self.desc[j]
        return out


def presolve(graph: Graph, hw: Hardware, nodes: Optional[Sequence[str]] = None,
             max_part: Optional[int] = None, violation=cost.group_violation, convex: bool = True) -> Presolve:
    """Compatible affinities, independent parts and candidate representatives (see module doc).

    ``nodes`` restricts everything to a subset of the ops that no path leaves and re-enters (e.g.
    a contiguous window of a topological order); groups then never reach outside it. Parts of
    more than ``max_part`` ops get no candidates (``cand`` lacks their ops). ``violation`` is the
    legality of a group (any predicate monotone under subsets): the covering formulation passes
    ``cost.looped_violation``, which also admits looped kernels. ``convex=False`` (coverings,
    whose kernels need not be convex: ``formulations/covering.md``): a pair is compatible when it
    alone is a legal group (not its hull), and a candidate needs no op between it and its
    representative -- the parts, candidates and floors then hold for non-convex kernels too.
    """
    if nodes is None:
        order = list(graph.index.order)
    else:
        keep = set(nodes)
        order = [v for v in graph.index.order if v in keep]
    reach = _Reach(graph, hw, order, violation, convex)
    pos = reach.pos
    n = len(order)
    adj: list[set[int]] = [set() for _ in range(n)]

    def link(a: int, b: int) -> None:
        i, j = (a, b) if a < b else (b, a)
        if i != j and j not in adj[i] and reach.compatible(i, j):
            adj[i].add(j)
            adj[j].add(i)

    for i in range(n):
        for j in reach.succs[i]:
            link(i, j)
    consumers = graph.index.consumers
    # a window's presolve looks at the tensors its own ops read, not at every tensor of the graph
    read = consumers if nodes is None else dict.fromkeys(t for v in order for t in graph.index.node[v].inputs if t)
    for t in read:
        idx = sorted({pos[c] for c in consumers[t] if c in pos})
        if len(idx) < 2:
            continue
        later = sum(1 << i for i in idx)
        for i in idx:
            later ^= 1 << i
            for j in reach.compatible_later(i, later):
                if j not in adj[i]:
                    adj[i].add(j)
                    adj[j].add(i)

    # components of the compatible-affinity graph (union-find; each root the least position)
    uf = dag.UnionFind(range(n))
    for i in range(n):
        for j in adj[i]:
            ri, rj = uf.find(i), uf.find(j)
            if ri != rj:
                uf.union(max(ri, rj), min(ri, rj))
    comp = [uf.find(i) for i in range(n)]
    parts_idx = _merge_cycles(graph, reach, comp)

    # candidates: compatible earlier ops reachable by an affine path that fits the register budget
    limit = hw.register_budget - hw.kernel_base_registers
    cand: dict[str, list[str]] = {}
    part_of: dict[str, int] = {}
    pairs = 0
    for p, members in enumerate(parts_idx):
        for i in members:
            part_of[order[i]] = p
        if len(members) == 1:
            cand[order[members[0]]] = [order[members[0]]]
            continue
        if max_part is not None and len(members) > max_part:
            continue  # the caller plans this part in windows; no candidates needed
        later: dict[int, list[int]] = {i: [i] for i in members}
        for i in members:
            for j in _within_budget(i, adj, reach.regs, limit):
                if j > i and reach.compatible(i, j):
                    later[j].append(i)
        # (r, v) needs every op between them in r's group too: drop it when one of those cannot be
        changed = convex
        while changed:
            changed = False
            for j in members:
                keep = [i for i in later[j] if i == j or
                        all(i in later[k] for k in dag.bits(reach.desc[i] & reach.anc[j]))]
                if len(keep) != len(later[j]):
                    later[j], changed = keep, True
        for j in members:
            later[j] = sorted(later[j])
            cand[order[j]] = [order[i] for i in later[j]]
            pairs += len(later[j]) - 1
    parts = [[order[i] for i in m] for m in parts_idx]
    return Presolve(order=order, pos=pos, parts=parts, cand=cand, part_of=part_of, compatible_pairs=pairs,
                    reach=reach, convex=convex)


def _within_budget(src: int, adj: list[set[int]], regs: list[int], limit: int) -> list[int]:
    """Ops joined to ``src`` by an affine path whose summed registers fit ``limit`` (Dijkstra)."""
    best = {src: regs[src]}
    heap = [(regs[src], src)]
    out = []
    while heap:
        d, i = heapq.heappop(heap)
        if d > best.get(i, d):
            continue
        out.append(i)
        for j in adj[i]:
            nd = d + regs[j]
            if nd <= limit and nd < best.get(j, limit + 1):
                best[j] = nd
                heapq.heappush(heap, (nd, j))
    return out


def _merge_cycles(graph: Graph, reach: _Reach, comp: list[int]) -> list[list[int]]:
    """Merge components into parts so that the parts' quotient graph is acyclic; parts come in a
    topological order, each part's ops in graph order."""
    import networkx as nx
    order = reach.order
    q = nx.DiGraph()
    q.add_nodes_from(set(comp))
    for i in range(len(order)):
        for j in reach.succs[i]:
            a, b = comp[i], comp[j]
            if a != b:
                q.add_edge(a, b)
    cond = nx.condensation(q)
    members: dict[int, list[int]] = {}
    for i, c in enumerate(comp):
        members.setdefault(cond.graph["mapping"][c], []).append(i)
    # a deterministic topological order of the parts: by their earliest op
    first = {s: min(m) for s, m in members.items()}
    ordered = list(nx.lexicographical_topological_sort(cond, key=lambda s: first[s]))
    return [sorted(members[s]) for s in ordered]


def traffic_floor(graph: Graph, pre: Presolve, nodes: Sequence[str], recompute: bool = False) -> int:
    """A lower bound on the traffic of every legal plan of the part ``nodes`` (of ``pre``),
    from pairs that can never share a group (incompatible hulls):

    * a tensor read by non-view ops of which ``k`` are pairwise incompatible is read by at least
      ``k`` groups, each paying at least its own reader's share (the size, or for a gather-data
      reader ``min(size, its output bytes)``), less the largest share the producer may absorb
      (it is in the part and may join one of them); view readers count nothing (their group may
      be free);
    * a tensor produced by a non-view op (or any graph output) is written if it is an output, is
      read outside the part, or is read by an op that can never share a group with its producer.

    At least :func:`cost.plan_floor` of the part (its one-kernel traffic when it has no view op),
    and much tighter when anchors (which never fuse their inputs) abound.

    ``recompute``: a floor for plans with recomputation (coverings), where the producer may be
    computed again in *every* group of a reader it is compatible with, so all their shares are
    absorbed, not only the largest (``formulations/covering.md``).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [64, 64]}, "w": {"shape": [64, 64], "constant": True}},
    ...     "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "m", "op": "MatMul", "inputs": ["h", "w"], "outputs": ["y"]}]})
    >>> pre = presolve(g, load_hardware("nvidia-h100"))
    >>> traffic_floor(g, pre, ["a", "m"]) == 5 * 16384   # x, h, w read; h, y written
    True
    """
    members = set(nodes)
    reach, pos = pre.reach, pre.pos
    idx = graph.index

    def never(a: str, b: str) -> bool:
        i, j = sorted((pos[a], pos[b]))
        return i != j and not reach.compatible(i, j)

    total = 0
    read: dict[str, None] = {}
    for v in nodes:
        for t in idx.node[v].inputs:
            if t:
                read[t] = None
    for t in read:
        size = graph.nbytes(t)
        indep: list[str] = []
        for c in idx.consumers[t]:
            if c in members and not facts(graph, c).view and all(never(c, d) for d in indep):
                indep.append(c)
        share = {c: min(size, graph.nbytes(idx.node[c].outputs[0])) if cost.partial_reader(graph, c, t)
                 else size for c in indep}
        prod = idx.producer.get(t)
        joins = [share[c] for c in indep if prod in members and not never(prod, c)]
        absorbed = sum(joins) if recompute else max(joins, default=0)
        total += sum(share.values()) - absorbed
    outputs = set(graph.outputs)
    for u in nodes:
        view = facts(graph, u).view
        for t in idx.node[u].outputs:
            if not t or (view and t not in outputs):
                continue  # a free view group writes nothing
            cons = idx.consumers.get(t, [])
            if t in outputs or any(c not in members or never(u, c) for c in cons):
                total += graph.nbytes(t)
    return max(total, cost.plan_floor(graph, list(nodes)))
