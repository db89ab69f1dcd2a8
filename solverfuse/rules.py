"""The fusion rules, stated once: every form the planner needs is derived here from the op table's
rule data (:class:`solverfuse.ops.OpInfo`: ``materialised_inputs``, ``exclusive``, ``opaque``,
``streaming``, ``view``, ``gather_data_input``).

* :func:`rule_violation` -- the predicate on a group (``cost.group_violation`` adds capacity);
* :func:`edge_fusable` -- whether a producer -> consumer edge may lie inside a group at all;
* :func:`masks` / :func:`hull_violation` -- the same rules as bitsets over topological positions,
  for presolve's cheap legality test of a path hull;
* :func:`assign_data` -- the same rules as the data of the assignment formulation's constraints
  (exclusive ops, non-fusable edges, ops that have no partner);
* :func:`rule_note` / :data:`RULE_TEXT` -- the same rules in words, for ``explain``;
* :func:`needs_row` -- the one non-additive capacity rule: a streaming reduction keeps its row
  resident only when an op of its group is downstream of it.

The rules, as the op table states them:

1. an ``opaque`` op runs alone;
2. an op with ``materialised_inputs`` reads every input from global memory, so no producer of its
   inputs is in its group; a gather (``gather_data_input``) reads its data operand (input 0) from
   global memory, possibly through index remaps (views, transpose, expand, slice: Inductor composes
   their indices), so no op that computes that data (:func:`data_sources`) is in its group -- its
   indices may be computed there;
3. a group holds at most one ``exclusive`` op (compute anchors), and none if it holds a gather
   (gathers fuse with each other and with elementwise/reduction work, never into a GEMM's kernel).

Every rule is monotone: a subset of a legal group is legal (1 and 3 count members; 2 looks at
edges inside the group; :func:`needs_row` only loses downstream ops when the group shrinks).

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [4, 4]}, "w": {"shape": [4, 4], "constant": True}},
...     "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "m", "op": "MatMul", "inputs": ["h", "w"], "outputs": ["y"]}]})
>>> rule_violation(g, ["a", "m"])
"node 'm' (anchor) must read 'h' from global memory, but 'a' is in its group"
>>> edge_fusable(g, "a", "m"), rule_note(g, ["m"])
(False, 'holds its one compute anchor; reads its inputs from memory')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Sequence

from .graph import Graph
from .ops import INDEX_REMAP_OPS, OPS, ROLE_RULES

#: The rules in words, keyed by the rule data they come from (explain prints these).
RULE_TEXT = {
    "opaque": "opaque op: runs alone",
    "anchor": "holds its one compute anchor; reads its inputs from memory",
    "gather": "gathered data read from memory; no compute anchor in its group",
    "exclusive": "holds its one exclusive op; reads its inputs from memory",
    "materialised": "{role} op reads its input from memory",
    "view": "view ops only: metadata, no kernel and no bytes",
    "streaming": "streaming reduction ends its group: no resident row",
}


@dataclass(frozen=True)
class Facts:
    """The rule data of one node (an op the table does not know is opaque)."""
    role: str
    materialised_inputs: bool
    exclusive: bool
    opaque: bool
    streaming: bool = False
    view: bool = False
    gather_data_input: bool = False
    #: Never shares a group with an exclusive op (a gather: not fused into a GEMM's kernel).
    apart: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "apart", self.role == "gather")  # asked for at every group check


_OPAQUE = Facts("opaque", *ROLE_RULES["opaque"])


def facts(graph: Graph, node: str) -> Facts:
    """The op table's rule data for ``node``."""
    return _op_facts(graph.index.node[node].op)


@lru_cache(maxsize=None)
def _op_facts(op: str) -> Facts:
    info = OPS.get(op)
    if info is None:
        return _OPAQUE
    return Facts(info.role, info.materialised_inputs, info.exclusive, info.opaque, info.streaming,
                 info.view, info.gather_data_input)


def edge_fusable(graph: Graph, producer: str, consumer: str) -> bool:
    """Whether the rules allow ``producer -> consumer`` inside one group at all."""
    if facts(graph, consumer).materialised_inputs or facts(graph, producer).opaque:
        return False
    return producer not in data_sources(graph, consumer)


def data_sources(graph: Graph, node: str) -> frozenset[str]:
    """For a gather: the ops that compute its data operand (input 0) -- its producer, or, through
    index remaps (:data:`~solverfuse.ops.INDEX_REMAP_OPS`), the first ops that compute a value.
    None of them may share the gather's group. Empty for other ops (cached on the graph).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"w": {"shape": [4, 2]}, "i": {"shape": [3], "dtype": "int64"}},
    ...     "inputs": ["w", "i"], "outputs": ["y"],
    ...     "nodes": [{"name": "n", "op": "Neg", "inputs": ["w"], "outputs": ["a"]},
    ...               {"name": "t", "op": "Transpose", "inputs": ["a"], "outputs": ["b"]},
    ...               {"name": "q", "op": "Gather", "inputs": ["b", "i"], "outputs": ["y"]}]})
    >>> sorted(data_sources(g, "q")), sorted(data_sources(g, "t"))
    (['n'], [])
    """
    hit = graph.__dict__.get("_data_sources")
    if hit is None or hit[0] is not graph.nodes:
        hit = graph.__dict__["_data_sources"] = (graph.nodes, {})
    memo = hit[1]
    if node not in memo:
        out: set[str] = set()
        ins = graph.index.node[node].inputs
        if facts(graph, node).gather_data_input and ins and ins[0]:
            stack, seen = [graph.index.producer.get(ins[0])], set()
            while stack:
                p = stack.pop()
                if p is None or p in seen:
                    continue
                seen.add(p)
                n = graph.index.node[p]
                if n.op in INDEX_REMAP_OPS and n.inputs and n.inputs[0]:
                    stack.append(graph.index.producer.get(n.inputs[0]))  # the remapped operand
                else:
                    out.add(p)
        memo[node] = frozenset(out)
    return memo[node]


def rule_violation(graph: Graph, nodes: Sequence[str]) -> str | None:
    """Why a group breaks an op-table rule (capacity aside); None when it keeps them all."""
    if len(nodes) < 2:
        return None
    members = set(nodes)
    fs = _node_facts(graph)
    index = graph.index
    ex, apart = [], []
    for v in nodes:  # one pass: the first op breaking rule 1 or 2 is named, then rule 3
        f = fs[v]
        if f.opaque:
            return f"node {v!r} is opaque to fusion and must run alone"
        if f.materialised_inputs:
            for t in index.node[v].inputs:
                p = index.producer.get(t) if t else None
                if p in members:
                    return f"node {v!r} ({f.role}) must read {t!r} from global memory, but {p!r} is in its group"
        elif f.gather_data_input:
            for p in sorted(data_sources(graph, v) & members):
                t = index.node[v].inputs[0]
                return f"node {v!r} ({f.role}) must read its data {t!r} from global memory, but {p!r} computes it in its group"
        if f.exclusive:
            ex.append(v)
        if f.apart:
            apart.append(v)
    if len(ex) > 1:
        a, b = ex[0], ex[1]
        if fs[a].role == fs[b].role == "anchor":
            return f"more than one compute-intensive anchor ({a!r}, {b!r})"
        return f"more than one exclusive op ({a!r}, {b!r})"
    if ex and apart:
        return f"{fs[apart[0]].role} node {apart[0]!r} cannot share a kernel with {fs[ex[0]].role} {ex[0]!r}"
    return None


def _node_facts(graph: Graph) -> dict[str, Facts]:
    """Every op's :func:`facts`, derived once per graph index."""
    hit = graph.index.memo.get("rules.facts")
    if hit is None:
        hit = graph.index.memo["rules.facts"] = {n.name: _op_facts(n.op) for n in graph.nodes}
    return hit


def needs_row(graph: Graph, node: str, members: Iterable[str]) -> bool:
    """Whether a row-keeping op keeps its row resident in a group of ``members``: always, unless it
    is a streaming reduction and no other op of the group is downstream of it (reachable from it
    through ops of the group)."""
    if not facts(graph, node).streaming:
        return True
    inside = set(members)
    # a path through ops of the group starts with a direct successor in the group
    return any(w in inside for w in graph.index.succs[node])


def view_only(graph: Graph, nodes: Iterable[str]) -> bool:
    """Whether every op of the group is a view op (metadata only)."""
    return all(facts(graph, v).view for v in nodes)


def gather_data_reader(graph: Graph, node: str, tensor: str) -> bool:
    """Whether ``node`` reads ``tensor`` only as its gather data operand (input 0)."""
    ins = graph.index.node[node].inputs
    return facts(graph, node).gather_data_input and ins[0] == tensor and tensor not in ins[1:]


# ---- the same rules as bitsets (presolve) ---------------------------------------------------------

@dataclass(frozen=True)
class Masks:
    """Bit ``i`` set for the op at position ``i`` of ``order`` with that rule datum."""
    materialised: int
    exclusive: int
    opaque: int
    apart: int = 0
    #: (gather bit, bits of its :func:`data_sources` in ``order``) for each gather with some: the
    #: gather and one of them in a group break rule 2.
    data_edges: tuple[tuple[int, int], ...] = ()


def masks(graph: Graph, order: Sequence[str]) -> Masks:
    """The rule data of ``order`` as bitsets."""
    fs = [facts(graph, v) for v in order]
    pos = {v: i for i, v in enumerate(order)}
    data = []
    for i, (v, f) in enumerate(zip(order, fs)):
        src = sum(1 << pos[p] for p in data_sources(graph, v) if p in pos) if not f.materialised_inputs else 0
        if src:
            data.append((1 << i, src))
    return Masks(materialised=sum(1 << i for i, f in enumerate(fs) if f.materialised_inputs),
                 exclusive=sum(1 << i for i, f in enumerate(fs) if f.exclusive),
                 opaque=sum(1 << i for i, f in enumerate(fs) if f.opaque),
                 apart=sum(1 << i for i, f in enumerate(fs) if f.apart), data_edges=tuple(data))


def hull_violation(m: Masks, hull: int, first: int, path: bool) -> bool:
    """The rules on a *hull*: the ops of every path from position ``first`` to another op (``path``
    True), or two ops with no path between them (``path`` False; they read nothing from each other).

    On a path hull every op but ``first`` reads a tensor produced inside the hull (its predecessor on
    the path), and ``first`` reads nothing from inside (it is the earliest), so rule 2 is exactly
    "no materialised op other than ``first``". Agrees with :func:`rule_violation` on hulls (a property
    test checks it).
    """
    if not hull & (hull - 1):
        return False  # one op alone keeps every rule
    if hull & m.opaque:
        return True
    if path and hull & m.materialised & ~(1 << first):
        return True
    if any(hull & g and hull & p for g, p in m.data_edges):
        return True
    ex = hull & m.exclusive
    return bin(ex).count("1") > 1 or bool(ex and hull & m.apart)


# ---- the same rules as constraint data (assignment formulation) ---------------------------------

@dataclass(frozen=True)
class AssignData:
    """What the assignment formulation states: at most one of ``exclusive`` per group, and none with
    an op of ``apart``; an edge not in ``fusable`` never lies inside a group; an op in ``alone`` has
    no partner; the two ops of a pair in ``separate`` (a gather and an op computing its data) never
    share a group."""
    exclusive: frozenset[str]
    fusable: frozenset[tuple[str, str]]
    alone: frozenset[str]
    apart: frozenset[str] = frozenset()
    separate: frozenset[tuple[str, str]] = frozenset()


def assign_data(graph: Graph, nodes: Sequence[str]) -> AssignData:
    """The rules restricted to ``nodes`` as the assignment formulation's constraint data."""
    members = set(nodes)
    fs = {v: facts(graph, v) for v in nodes}
    fusable = frozenset((u, v) for u in nodes for v in graph.index.succs[u]
                        if v in members and edge_fusable(graph, u, v))
    return AssignData(exclusive=frozenset(v for v in nodes if fs[v].exclusive), fusable=fusable,
                      alone=frozenset(v for v in nodes if fs[v].opaque),
                      apart=frozenset(v for v in nodes if fs[v].apart),
                      separate=frozenset((v, p) for v in nodes if not fs[v].materialised_inputs
                                         for p in data_sources(graph, v) if p in members))


def assign_violation(graph: Graph, data: AssignData, nodes: Sequence[str]) -> bool:
    """Whether ``nodes`` breaks the assignment formulation's rule constraints (for the property test
    that they agree with :func:`rule_violation`)."""
    if len(nodes) < 2:
        return False
    members = set(nodes)
    ex = members & data.exclusive
    if members & data.alone or len(ex) > 1 or (ex and members & data.apart):
        return True
    if any(a in members and b in members for a, b in data.separate):
        return True
    return any(w in members and (u, w) not in data.fusable for u in nodes for w in graph.index.succs[u])


# ---- the same rules in words (explain) ------------------------------------------------------------

def rule_note(graph: Graph, nodes: Sequence[str]) -> str | None:
    """The op-table rule a group sits against, in words (None when none binds it)."""
    fs = [facts(graph, v) for v in nodes]
    if any(f.opaque for f in fs):
        return RULE_TEXT["opaque"]
    for f in fs:
        if f.exclusive or f.apart:
            return RULE_TEXT[f.role] if f.role in RULE_TEXT else RULE_TEXT["exclusive"]
    for f in fs:
        if f.materialised_inputs:
            return RULE_TEXT["materialised"].format(role=f.role)
    if fs and all(f.view for f in fs):
        return RULE_TEXT["view"]
    members = list(nodes)
    if any(f.streaming and not needs_row(graph, v, members) for v, f in zip(nodes, fs)) and len(nodes) > 1:
        return RULE_TEXT["streaming"]
    return None
