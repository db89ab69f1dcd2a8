"""The one cost model: traffic, legality (fusion rules + capacity), roofline time, Q_min.

Everything that scores or checks a plan -- the CP-SAT objective, the greedy baselines, reports,
benchmarks and the emitter's byte counters -- calls these functions.

* ``group_traffic(G)`` = bytes of every tensor ``G`` reads from outside (each tensor counted once
  per group, so horizontal fusion de-duplicates a shared input) + bytes of every tensor produced in
  ``G`` that a node outside ``G`` reads or that is a graph output.
* ``q_min`` = every graph input / constant that some node reads, once + every graph output, once.

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> group_traffic(g, ["a"]), group_traffic(g, ["a", "b"]), unfused_traffic(g), q_min(g)
(2048, 2048, 4096, 2048)
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .graph import Graph
from .hardware import Hardware
from .mapping import capacity_violation
from .ops import MATERIALISED_INPUT_ROLES, OPS


def role(graph: Graph, node: str) -> str:
    """Fusion role of a node (``opaque`` for ops the table does not know)."""
    info = OPS.get(graph.index.node[node].op)
    return info.role if info else "opaque"


def group_reads(graph: Graph, nodes: Iterable[str]) -> list[str]:
    """Tensors a group reads from global memory, each once, in first-use order."""
    members = set(nodes)
    out: dict[str, None] = {}
    for v in nodes:
        for t in graph.index.node[v].inputs:
            if t and graph.index.producer.get(t) not in members:
                out[t] = None
    return list(out)


def group_writes(graph: Graph, nodes: Iterable[str]) -> list[str]:
    """Tensors a group must write to global memory: read outside it, or graph outputs."""
    members = set(nodes)
    outputs = graph.index.outputs
    out = []
    for v in nodes:
        for t in graph.index.node[v].outputs:
            if t and (t in outputs or any(c not in members for c in graph.index.consumers.get(t, []))):
                out.append(t)
    return out


def group_traffic(graph: Graph, nodes: Sequence[str]) -> int:
    """Global-memory bytes of one group's kernel (reads + writes)."""
    return sum(graph.nbytes(t) for t in group_reads(graph, nodes)) + \
        sum(graph.nbytes(t) for t in group_writes(graph, nodes))


def plan_traffic(graph: Graph, groups: Iterable[Sequence[str]]) -> int:
    """Traffic of a plan: the sum over its groups."""
    return sum(group_traffic(graph, g) for g in groups)


def unfused_traffic(graph: Graph) -> int:
    """Traffic with one op per kernel."""
    return plan_traffic(graph, [[n] for n in graph.index.order])


def q_min(graph: Graph) -> int:
    """Lower bound: every source tensor some node reads, once, plus every graph output, once."""
    read = {t for n in graph.nodes for t in n.inputs if t and graph.is_source(t)}
    return sum(graph.nbytes(t) for t in read) + \
        sum(graph.nbytes(t) for t in dict.fromkeys(graph.outputs) if not graph.is_source(t))


def edge_fusable(graph: Graph, producer: str, consumer: str) -> bool:
    """Whether the op table's rules allow producer -> consumer inside one group at all."""
    rp, rc = role(graph, producer), role(graph, consumer)
    return rc not in MATERIALISED_INPUT_ROLES and rp != "opaque"


def group_violation(graph: Graph, nodes: Sequence[str], hw: Hardware) -> str | None:
    """Why a group breaks a fusion rule or a capacity limit; None when it is legal.

    Convexity needs the rest of the plan and is checked by :func:`solverfuse.plans.validate`.
    """
    if len(nodes) < 2:
        return None
    members = set(nodes)
    roles = {v: role(graph, v) for v in nodes}
    for v in nodes:
        if roles[v] == "opaque":
            return f"node {v!r} is opaque to fusion and must run alone"
        if roles[v] in MATERIALISED_INPUT_ROLES:
            for t in graph.index.node[v].inputs:
                p = graph.index.producer.get(t)
                if p in members:
                    return f"node {v!r} ({roles[v]}) must read {t!r} from global memory, but {p!r} is in its group"
    anchors = [v for v in nodes if roles[v] == "anchor"]
    gathers = [v for v in nodes if roles[v] == "gather"]
    if len(anchors) > 1:
        return f"more than one compute-intensive anchor ({anchors[0]!r}, {anchors[1]!r})"
    if len(gathers) > 1 or (gathers and anchors):
        other = gathers[1] if len(gathers) > 1 else anchors[0]
        return f"data-dependent node {gathers[0]!r} cannot share a kernel with {other!r}"
    return capacity_violation(graph, list(nodes), hw)


def group_flops(graph: Graph, nodes: Iterable[str]) -> int:
    return sum(graph.flops(v) for v in nodes)


def group_time(graph: Graph, nodes: Sequence[str], hw: Hardware) -> float:
    """Roofline time of a group: max(bytes / bandwidth, flops / peak) + launch overhead."""
    dtype = graph.tensors[graph.index.node[nodes[0]].outputs[0]].dtype
    return max(group_traffic(graph, nodes) / hw.dram_bandwidth,
               group_flops(graph, nodes) / hw.peak(dtype)) + hw.launch_overhead_s


def plan_time(graph: Graph, groups: Iterable[Sequence[str]], hw: Hardware) -> float:
    """Predicted time of a plan: its groups run one after another."""
    return sum(group_time(graph, g, hw) for g in groups)
