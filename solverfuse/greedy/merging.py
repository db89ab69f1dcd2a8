"""The partition every greedy baseline grows: groups of ops, merged only when the result is legal.

A merge is legal when :func:`solverfuse.cost.group_violation` accepts the merged group (the op
table's rules + register/L1 capacity: the same legality as the optimal planner) and no path
leaves the merged group and re-enters it (so every group stays convex and the quotient graph
acyclic).
"""
from __future__ import annotations

import bisect
from typing import Collection, Iterable, Optional

from .. import cost, dag
from ..graph import Graph
from ..hardware import Hardware


def has_role(graph: Graph, nodes: Iterable[str], role: str) -> bool:
    """Whether any op of ``nodes`` has fusion role ``role`` (op table)."""
    return any(cost.role(graph, v) == role for v in nodes)


#: Largest graph for which :class:`Partition` uses every op's descendants as a bitset (the graph
#: index builds them on first use; quadratic memory: 10,000 ops take about 12 MB each way).
REACH_MAX_OPS = 20_000


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
        order = graph.index.order
        self.gid: dict[str, int] = {v: i for i, v in enumerate(order)}
        self.members: dict[int, list[str]] = {i: [v] for i, v in enumerate(order)}
        self.first: dict[int, int] = {i: i for i in self.members}  # smallest topological position
        # Quotient-graph adjacency, kept up to date by merge() (a merge touches only neighbours).
        self._succ: dict[int, set[int]] = {i: {self.gid[w] for w in graph.index.succs[v]}
                                           for i, v in enumerate(order)}
        self._pred: dict[int, set[int]] = {i: {self.gid[u] for u in graph.index.preds[v]}
                                           for i, v in enumerate(order)}
        # A topological order of the quotient graph (group -> rank), kept by merge(): a path
        # leaving a set of groups and re-entering it passes only groups ranked below the set's
        # last, so the cycle search stops there instead of visiting everything downstream.
        self._rank: dict[int, int] = {i: i for i in self.members}
        self._ranked = True
        self._memos: list[dict[int, object]] = []
        #: Bumped for the surviving id at each merge: a group is unchanged while (id, version) is.
        self.version: dict[int, int] = {}
        self._merges = 0
        self._bits = self.memo()
        self._back = self.memo()

    def memo(self) -> dict[int, object]:
        """A per-group cache (group id -> value) that :meth:`merge` clears for the merged groups.

        Baselines keep group properties in it (traffic, accessed buffers, ...) instead of
        recomputing them from the ops at every candidate merge."""
        m: dict[int, object] = {}
        self._memos.append(m)
        return m

    def nodes(self, gs: Iterable[int]) -> list[str]:
        """The ops of several groups together, in graph order."""
        lists = sorted((self.members[g] for g in set(gs)), key=len)
        out = list(lists.pop())
        if sum(map(len, lists)) * 8 < len(out):  # a few ops joining a long group: insert them
            for members in lists:
                for v in members:
                    bisect.insort(out, v, key=self.pos.__getitem__)
            return out
        return sorted(out + [v for members in lists for v in members], key=self.pos.__getitem__)

    def succ(self, g: int) -> set[int]:
        """Groups that read a tensor group ``g`` writes (a live view: do not modify)."""
        return self._succ[g]

    def pred(self, g: int) -> set[int]:
        """Groups that write a tensor group ``g`` reads (a live view: do not modify)."""
        return self._pred[g]

    def cycle_through(self, gs: Collection[int]) -> Optional[str]:
        """An op on a path that leaves the union of ``gs`` and re-enters it, if any.

        Such a path makes the merged group non-convex (and the quotient graph cyclic). First a
        path of ops (:meth:`op_path_back`); failing that, a search over the quotient graph,
        which also finds paths that enter a group at one op and leave it from another it does
        not reach. No pruning by topological position: a group whose ops all come after the
        union can still reach it through a later group that also holds an early op.
        """
        union = set(gs)
        via = self.op_path_back(union)
        if via is not None:
            return via
        path = dag.path_back(union, self._succ, self._rank if self._ranked else None)
        return None if path is None else self.members[path[-2]][0]

    def op_path_back(self, gs: Collection[int]) -> Optional[str]:
        """An op outside the union of ``gs`` on a path of ops from the union back into it, if any.

        Each op's descendants and ancestors are bitsets over topological positions (the graph
        index's, for graphs up to :data:`REACH_MAX_OPS` ops; OR-ed per group and memoised):
        such an op is exactly one that is both a descendant and an ancestor of the union.
        """
        if len(self.pos) > REACH_MAX_OPS:
            return None
        gs = set(gs)
        if len(gs) == 2 and self._pair_crosses(*gs) is False:
            return None
        mask = desc = anc = 0
        for g in gs:
            m, d, a = self._group_bits(g)
            mask, desc, anc = mask | m, desc | d, anc | a
        back = desc & anc & ~mask
        return self.graph.index.order[(back & -back).bit_length() - 1] if back else None

    def crosses(self, a: int, b: int) -> bool:
        """``op_path_back([a, b]) is not None``, mostly without forming the union's bitsets.

        >>> from solverfuse.graph import load_graph
        >>> from solverfuse.hardware import load_hardware
        >>> g = load_graph({"tensors": {"x": {"shape": [8]}}, "inputs": ["x"], "outputs": ["y", "z"],
        ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
        ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
        ...               {"name": "c", "op": "Add", "inputs": ["h", "y"], "outputs": ["z"]}]})
        >>> p = Partition(g, load_hardware("nvidia-h100"))
        >>> p.crosses(p.gid["a"], p.gid["c"]), p.crosses(p.gid["b"], p.gid["c"])
        (True, False)
        """
        if len(self.pos) > REACH_MAX_OPS:
            return False
        verdict = self._pair_crosses(a, b)
        return verdict if verdict is not None else self.op_path_back([a, b]) is not None

    def mask(self, g: int) -> int:
        """Group ``g``'s ops as a bitset over topological positions (0 above :data:`REACH_MAX_OPS`).

        >>> from solverfuse.graph import load_graph
        >>> from solverfuse.hardware import load_hardware
        >>> g = load_graph({"tensors": {"x": {"shape": [8]}}, "inputs": ["x"], "outputs": ["y"],
        ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
        ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
        >>> p = Partition(g, load_hardware("nvidia-h100"))
        >>> p.mask(p.merge([p.gid["a"], p.gid["b"]]))
        3
        """
        return self._group_bits(g)[0] if len(self.pos) <= REACH_MAX_OPS else 0

    def uncrossed(self, a: int, union: int) -> Optional[set[int]]:
        """A superset of the groups ``b`` with ops in ``union`` (a bitset over positions, e.g. the
        OR of :meth:`mask` of some groups) for which ``crosses(a, b)`` is False: every such group
        is in it, found with a few bitset operations instead of a test per group. A group
        neither reaching nor reached by ``a`` is in it, and so are ``a``'s neighbours in the
        quotient graph; a group ``b`` that ``a`` reaches or that reaches ``a`` otherwise is not
        (:meth:`_pair_crosses`: a path leaves the two and re-enters them). None above
        :data:`REACH_MAX_OPS` ops (no bitsets: every group would have to be tried).

        >>> from solverfuse.graph import load_graph
        >>> from solverfuse.hardware import load_hardware
        >>> g = load_graph({"tensors": {"x": {"shape": [8]}}, "inputs": ["x"], "outputs": ["y", "z", "w"],
        ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
        ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
        ...               {"name": "c", "op": "Neg", "inputs": ["x"], "outputs": ["z"]},
        ...               {"name": "d", "op": "Add", "inputs": ["x", "y"], "outputs": ["w"]}]})
        >>> p = Partition(g, load_hardware("nvidia-h100"))
        >>> union = sum(p.mask(p.gid[v]) for v in "abcd")
        >>> sorted(g.index.order[p.first[k]] for k in p.uncrossed(p.gid["a"], union))  # d: via b
        ['b', 'c']
        """
        if len(self.pos) > REACH_MAX_OPS:
            return None
        ma, da, aa = self._group_bits(a)
        near = da | aa
        out = (self._succ[a] | self._pred[a])
        gid, order = self.gid, self.graph.index.order
        tried: set[int] = set()
        for p in dag.bits(union & ~near & ~ma):
            g = gid[order[p]]
            if g not in out and g not in tried:
                tried.add(g)
                if not self._group_bits(g)[0] & near:
                    out.add(g)
        return out

    def _pair_crosses(self, a: int, b: int) -> Optional[bool]:
        """Whether a path of ops leaves groups ``a`` + ``b`` and re-enters them, when reachability
        alone tells; None when only the union's bitsets do (:meth:`op_path_back`).

        If ``a`` reaches ``b`` and ``b`` is not a successor group of ``a``, the path from the last
        op of ``a`` on it to the first op of ``b`` after that has an op outside both: True (and
        likewise from ``b`` to ``a``). If neither reaches the other, no op outside lies between
        them, and the only paths back are those of a group into itself: True exactly when one of
        them is not convex on its own."""
        ma, da, _ = self._group_bits(a)
        mb, db, _ = self._group_bits(b)
        a_to_b, b_to_a = da & mb, db & ma
        if (a_to_b and b not in self._succ[a]) or (b_to_a and a not in self._succ[b]):
            return True
        if a_to_b or b_to_a:
            return None
        return bool(self._self_back(a) or self._self_back(b))

    def _self_back(self, g: int) -> int:
        """Ops outside group ``g`` on a path from ``g`` back into it (0 for a convex group)."""
        hit = self._back.get(g)
        if hit is None:
            mask, desc, anc = self._group_bits(g)
            hit = self._back[g] = desc & anc & ~mask
        return hit

    def _group_bits(self, g: int) -> tuple[int, int, int]:
        """(members, descendants, ancestors) of group ``g`` as bitsets, memoised until it merges."""
        hit = self._bits.get(g)
        if hit is None:
            index = self.graph.index
            desc, anc, pos = index.desc, index.anc, self.pos
            mask = d = a = 0
            for v in self.members[g]:
                i = pos[v]
                mask |= 1 << i
                d |= desc[i]
                a |= anc[i]
            hit = self._bits[g] = (mask, d, a)
        return hit

    def why_not(self, gs: Collection[int]) -> Optional[str]:
        """Why merging the groups ``gs`` is illegal (fusion rule, capacity, cycle); None if legal."""
        why = cost.group_violation(self.graph, self.nodes(gs), self.hw)
        if why:
            return why
        via = self.cycle_through(gs)
        return f"merging would create a cycle through {via!r}" if via else None

    def can_merge(self, gs: Collection[int]) -> bool:
        """``why_not(gs) is None``, with the cheap test for a path of ops back into the union first."""
        return self.op_path_back(gs) is None and self.why_not(gs) is None

    def merge(self, gs: Collection[int]) -> int:
        """Merge the groups ``gs`` (already checked with :meth:`why_not`); returns the new id."""
        gset = set(gs)
        gs = sorted(gset)
        keep = gs[0]
        nodes = self.nodes(gs)
        if self._ranked:
            self._rerank(gset, keep)
        succ = set().union(*(self._succ[g] for g in gs)) - gset
        pred = set().union(*(self._pred[g] for g in gs)) - gset
        for g in gs[1:]:
            del self.members[g], self.first[g], self._succ[g], self._pred[g]
        for h in succ:
            self._pred[h] -= gset
            self._pred[h].add(keep)
        for h in pred:
            self._succ[h] -= gset
            self._succ[h].add(keep)
        self._succ[keep], self._pred[keep] = succ, pred
        # the merged group's bitsets are the OR of its parts' (when all are known): a group
        # grown one op at a time (a chain) is not rescanned at every merge
        parts = [self._bits.get(g) for g in gs]
        for m in self._memos:
            for g in gs:
                m.pop(g, None)
        if all(b is not None for b in parts):
            mask = desc = anc = 0
            for m_, d, a in parts:
                mask, desc, anc = mask | m_, desc | d, anc | a
            self._bits[keep] = (mask, desc, anc)
        for v in nodes:
            if self.gid[v] != keep:
                self.gid[v] = keep
        self.members[keep] = nodes
        self.first[keep] = self.pos[nodes[0]]
        self._merges += 1
        self.version[keep] = self._merges
        return keep

    def _rerank(self, gset: set[int], keep: int) -> None:
        """Keep ``_rank`` a topological order when the groups ``gset`` become ``keep``
        (Pearce and Kelly's dynamic order, for a contraction): between the least and the greatest
        rank of the set, its ancestors move first, the merged group next and its descendants
        last, in the pool of their old ranks; nothing else moves. Ancestors only move earlier and
        descendants only later, so every other edge keeps its direction. A merge that closes a
        cycle (a caller that skipped :meth:`why_not`) leaves no topological order: the ranks
        are dropped and the cycle search is unbounded from then on."""
        rank = self._rank
        lo = min(rank[g] for g in gset)
        hi = max(rank[g] for g in gset)
        fwd = self._reach(gset, self._succ, lambda r: r < hi)
        back = self._reach(gset, self._pred, lambda r: r > lo)
        if not fwd.isdisjoint(back):
            self._ranked = False
            return
        pool = sorted([rank[g] for g in gset] + [rank[x] for x in fwd] + [rank[x] for x in back])
        for x, r in zip(sorted(back, key=rank.__getitem__), pool):
            rank[x] = r
        rank_keep = pool[len(back)]
        for x, r in zip(sorted(fwd, key=rank.__getitem__), pool[len(pool) - len(fwd):]):
            rank[x] = r
        for g in gset:
            del rank[g]
        rank[keep] = rank_keep

    def _reach(self, gset: set[int], adj: dict[int, set[int]], inside) -> set[int]:
        """Groups outside ``gset`` reachable from it along ``adj`` through ranks ``inside`` allows."""
        rank = self._rank
        seen: set[int] = set()
        stack = [g for g in gset]
        while stack:
            x = stack.pop()
            for y in adj[x]:
                if y not in seen and y not in gset and inside(rank[y]):
                    seen.add(y)
                    stack.append(y)
        return seen

    def groups(self) -> list[list[str]]:
        """The partition as lists of op names, groups ordered by their first op."""
        return [self.members[g] for g in sorted(self.members, key=self.first.__getitem__)]
