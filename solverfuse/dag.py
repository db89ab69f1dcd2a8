"""DAG utilities, the one home of each: topological order, reachability bitsets, the path that
leaves a set of nodes and re-enters it (convexity), quotient-graph cycles, union-find.

Plain functions over plain data (node lists, successor maps, integer positions): this module
knows nothing about graphs, plans or costs, so every stage can use it. The graph's
:attr:`~solverfuse.graph.Graph.index` builds its order and bitsets with it once per graph; plans,
the solver, the presolve and the greedy bookkeeping read them from there.

Reachability bitsets are Python integers over *topological positions*: bit ``j`` of
``desc[i]`` says the op at position ``j`` is reachable from the op at position ``i``.

>>> succs = [[1, 2], [3], [3], []]              # a diamond 0 -> {1, 2} -> 3, already in order
>>> desc = descendants(succs)
>>> anc = ancestors([[], [0], [0], [1, 2]])
>>> list(bits(desc[0])), list(bits(anc[3])), list(bits(desc[0] & anc[3]))
([1, 2, 3], [0, 1, 2], [1, 2])
>>> path_back([0, 3], {0: [1, 2], 1: [3], 2: [3], 3: []}, {0: 0, 1: 1, 2: 2, 3: 3})
[0, 2, 3]
"""
from __future__ import annotations

import heapq
from typing import Callable, Generic, Hashable, Iterable, Iterator, Mapping, Optional, Sequence, TypeVar

H = TypeVar("H", bound=Hashable)


def bits(mask: int) -> Iterator[int]:
    """The positions of the set bits of ``mask``, lowest first.

    >>> list(bits(0b10110))
    [1, 2, 4]
    """
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def descendants(succs: Sequence[Iterable[int]]) -> list[int]:
    """Every node's descendants as a bitset; nodes are topological positions ``0..n-1`` and
    ``succs[i]`` lists the (later) positions node ``i`` feeds.

    >>> descendants([[1], [2], []])
    [6, 4, 0]
    """
    desc = [0] * len(succs)
    for i in range(len(succs) - 1, -1, -1):
        m = 0
        for j in succs[i]:
            m |= (1 << j) | desc[j]
        desc[i] = m
    return desc


def ancestors(preds: Sequence[Iterable[int]]) -> list[int]:
    """Every node's ancestors as a bitset; ``preds[i]`` lists the (earlier) positions feeding ``i``.

    >>> ancestors([[], [0], [1]])
    [0, 1, 3]
    """
    anc = [0] * len(preds)
    for i in range(len(preds)):
        m = 0
        for j in preds[i]:
            m |= (1 << j) | anc[j]
        anc[i] = m
    return anc


def topological_order(succs: Sequence[Iterable[int]], key: Callable[[int], object]) -> list[int]:
    """Kahn's algorithm over nodes ``0..n-1``; among ready nodes the least ``key`` comes first
    (deterministic). Shorter than ``n`` exactly when the graph has a cycle: the missing nodes are
    on or after one.

    >>> topological_order([[2], [2], []], key=lambda i: -i)
    [1, 0, 2]
    >>> len(topological_order([[1], [0]], key=int))  # a cycle
    0
    """
    n = len(succs)
    indeg = [0] * n
    for i in range(n):
        for j in succs[i]:
            indeg[j] += 1
    heap = [(key(i), i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(i)
        for j in succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (key(j), j))
    return out


def path_back(nodes: Iterable[H], succs: Mapping[H, Iterable[H]],
              pos: Optional[Mapping[H, int]] = None) -> Optional[list[H]]:
    """A path that leaves the set ``nodes`` and re-enters it (first and last node in the set, the
    others not), or None: a set of nodes is *convex* exactly when there is none. The search
    starts from ``nodes`` in the order given (deterministic for a list).

    With topological positions ``pos`` the search stops at the last member's position (a path
    back into the set cannot go further); without them it searches everything reachable, which
    is what a quotient graph -- whose nodes have no positions -- needs.

    >>> path_back({"a", "c"}, {"a": ["b"], "b": ["c"], "c": []})
    ['a', 'b', 'c']
    >>> path_back({"a", "b"}, {"a": ["b"], "b": ["c"], "c": []}) is None
    True
    """
    nodes = list(nodes)
    members = set(nodes)
    parent: dict[H, H] = {}
    stack: list[H] = []
    push = stack.append
    # two copies of the search, with and without the position bound: this loop is the hot path
    # of every greedy baseline's cycle check
    if pos is not None:
        last = max(pos[v] for v in nodes)
        for v in nodes:
            for w in succs[v]:
                if w not in members and w not in parent and pos[w] < last:
                    parent[w] = v
                    push(w)
        while stack:
            x = stack.pop()
            for w in succs[x]:
                if w in members:
                    return _path(parent, x, w)
                if w not in parent and pos[w] < last:
                    parent[w] = x
                    push(w)
        return None
    for v in nodes:
        for w in succs[v]:
            if w not in members and w not in parent:
                parent[w] = v
                push(w)
    while stack:
        x = stack.pop()
        for w in succs[x]:
            if w in members:
                return _path(parent, x, w)
            if w not in parent:
                parent[w] = x
                push(w)
    return None


def _path(parent: dict, x, w) -> list:
    """The path from a member through ``x`` (last outside node) back to member ``w``."""
    path = [w, x]
    while path[-1] in parent:
        path.append(parent[path[-1]])
    return path[::-1]


def quotient(groups: Sequence[Iterable[H]], succs: Mapping[H, Iterable[H]]) -> list[dict[int, None]]:
    """The quotient graph of ``groups`` (disjoint node sets) under ``succs``: for each group, the
    other groups it feeds, in first-seen order. Edges to nodes in no group are ignored.

    >>> quotient([["a"], ["b", "c"]], {"a": ["b"], "b": ["c"], "c": ["d"]})
    [{1: None}, {}]
    """
    where = {v: k for k, g in enumerate(groups) for v in g}
    out: list[dict[int, None]] = []
    for k, g in enumerate(groups):
        nxt: dict[int, None] = {}
        for v in g:
            for w in succs[v]:
                j = where.get(w)
                if j is not None and j != k:
                    nxt[j] = None
        out.append(nxt)
    return out


def quotient_cycle(groups: Sequence[Iterable[H]], succs: Mapping[H, Iterable[H]]) -> Optional[list[int]]:
    """Indices of groups forming a cycle in the quotient graph, in cycle order, or None.

    >>> quotient_cycle([["a", "d"], ["b", "c"]], {"a": ["b"], "b": [], "c": ["d"], "d": []})
    [0, 1]
    >>> quotient_cycle([["a"], ["b"]], {"a": ["b"], "b": []}) is None
    True
    """
    import networkx as nx
    q = nx.DiGraph()
    for k, nxt in enumerate(quotient(groups, succs)):
        for j in nxt:
            q.add_edge(k, j)
    try:
        return [a for a, _ in nx.find_cycle(q)]
    except nx.NetworkXNoCycle:
        return None


class UnionFind(Generic[H]):
    """Disjoint sets with path halving. :meth:`union` is directed -- the first set joins the
    second, whose root stays the root -- so callers that keep data on roots know where it is.

    >>> uf = UnionFind("abcd")
    >>> uf.union("a", "b"), uf.union("c", "d"), uf.union("b", "d")
    ('b', 'd', 'd')
    >>> uf.find("a"), uf.same("a", "c"), uf.same("a", "e")
    ('d', True, False)
    """

    def __init__(self, items: Iterable[H] = ()):
        self.parent: dict[H, H] = {x: x for x in items}

    def add(self, x: H) -> None:
        """Make ``x`` a set of its own if it is new."""
        self.parent.setdefault(x, x)

    def find(self, x: H) -> H:
        """The root of ``x``'s set (``x`` must have been added)."""
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: H, b: H) -> H:
        """Join ``a``'s set into ``b``'s; returns the root of the joined set (``b``'s root)."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb
        return rb

    def same(self, a: H, b: H) -> bool:
        """Whether ``a`` and ``b`` are in one set (False for an unknown item)."""
        return a in self.parent and b in self.parent and self.find(a) == self.find(b)


__all__ = ["bits", "descendants", "ancestors", "topological_order", "path_back", "quotient",
           "quotient_cycle", "UnionFind"]
