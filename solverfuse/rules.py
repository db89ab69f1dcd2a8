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
   inputs is in its group;
3. a group holds at most one ``exclusive`` op (compute anchors, gathers).

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

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from .graph import Graph
from .ops import OPS, ROLE_RULES

#: The rules in words, keyed by the rule data they come from (explain prints these).
RULE_TEXT = {
    "opaque": "opaque op: runs alone",
    "anchor": "holds its one compute anchor; reads its inputs from memory",
    "gather": "holds its one gather; reads its inputs from memory",
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
    return not facts(graph, consumer).materialised_inputs and not facts(graph, producer).opaque


def rule_violation(graph: Graph, nodes: Sequence[str]) -> str | None:
    """Why a group breaks an op-table rule (capacity aside); None when it keeps them all."""
    if len(nodes) < 2:
        return None
    members = set(nodes)
    fs = {v: facts(graph, v) for v in nodes}
    for v in nodes:
        if fs[v].opaque:
            return f"node {v!r} is opaque to fusion and must run alone"
        if fs[v].materialised_inputs:
            for t in graph.index.node[v].inputs:
                p = graph.index.producer.get(t) if t else None
                if p in members:
                    return f"node {v!r} ({fs[v].role}) must read {t!r} from global memory, but {p!r} is in its group"
    ex = [v for v in nodes if fs[v].exclusive]
    if len(ex) > 1:
        a, b = ex[0], ex[1]
        if fs[a].role == fs[b].role == "anchor":
            return f"more than one compute-intensive anchor ({a!r}, {b!r})"
        first = a if fs[a].role == "gather" else b
        other = b if first == a else a
        return f"{fs[first].role} node {first!r} cannot share a kernel with {other!r} (one exclusive op per group)"
    return None


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


def masks(graph: Graph, order: Sequence[str]) -> Masks:
    """The rule data of ``order`` as bitsets."""
    fs = [facts(graph, v) for v in order]
    return Masks(materialised=sum(1 << i for i, f in enumerate(fs) if f.materialised_inputs),
                 exclusive=sum(1 << i for i, f in enumerate(fs) if f.exclusive),
                 opaque=sum(1 << i for i, f in enumerate(fs) if f.opaque))


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
    return bin(hull & m.exclusive).count("1") > 1


# ---- the same rules as constraint data (assignment formulation) ---------------------------------

@dataclass(frozen=True)
class AssignData:
    """What the assignment formulation states: at most one of ``exclusive`` per group; an edge not in
    ``fusable`` never lies inside a group; an op in ``alone`` has no partner."""
    exclusive: frozenset[str]
    fusable: frozenset[tuple[str, str]]
    alone: frozenset[str]


def assign_data(graph: Graph, nodes: Sequence[str]) -> AssignData:
    """The rules restricted to ``nodes`` as the assignment formulation's constraint data."""
    members = set(nodes)
    fs = {v: facts(graph, v) for v in nodes}
    fusable = frozenset((u, v) for u in nodes for v in graph.index.succs[u]
                        if v in members and edge_fusable(graph, u, v))
    return AssignData(exclusive=frozenset(v for v in nodes if fs[v].exclusive), fusable=fusable,
                      alone=frozenset(v for v in nodes if fs[v].opaque))


def assign_violation(graph: Graph, data: AssignData, nodes: Sequence[str]) -> bool:
    """Whether ``nodes`` breaks the assignment formulation's rule constraints (for the property test
    that they agree with :func:`rule_violation`)."""
    if len(nodes) < 2:
        return False
    members = set(nodes)
    if members & data.alone or len(members & data.exclusive) > 1:
        return True
    return any(w in members and (u, w) not in data.fusable for u in nodes for w in graph.index.succs[u])


# ---- the same rules in words (explain) ------------------------------------------------------------

def rule_note(graph: Graph, nodes: Sequence[str]) -> str | None:
    """The op-table rule a group sits against, in words (None when none binds it)."""
    fs = [facts(graph, v) for v in nodes]
    if any(f.opaque for f in fs):
        return RULE_TEXT["opaque"]
    for f in fs:
        if f.exclusive:
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
