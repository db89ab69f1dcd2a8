"""Why a plan looks the way it does: per group, how full it is and what stops it growing; per
cut edge, what fusing across it would save or why it is illegal.

Everything comes from the one cost model: :func:`mapping.group_footprint` for registers and L1,
:func:`cost.group_violation` for the fusion rules and capacity, :func:`rules.rule_note` for the rule
a group sits against (in words, from the same op-table rule data),
:meth:`greedy.Partition.cycle_through` for convexity, :func:`cost.group_traffic` for savings.

For every pair of groups joined by a tensor (a *cut edge*), :func:`explain` tries the merged group
and reports the first obstacle, classified as ``rule`` (op table), ``registers``, ``l1`` or
``cycle`` (a path through a third group), or, if the merge is legal, the bytes it saves. A group's
``tight`` list names the obstacles on its cut edges. On an optimal plan no legal merge saves bytes.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.greedy import greedy_plan
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> e = explain(greedy_plan(g, "nvidia-h100", "unfused"))
>>> [(c["from"], c["to"], c["legal"], c["saves_bytes"]) for c in e["cuts"]]
[('k0', 'k1', True, 2048)]
"""
from __future__ import annotations

from typing import Optional

from . import cost
from .graph import Graph
from .greedy import Partition
from .hardware import Hardware, load_hardware
from .mapping import capacity_violation, group_footprint
from .errors import PlanError
from .plans import Plan
from .rules import rule_note
from .summary import human_bytes


def obstacle(graph: Graph, hw: Hardware, part: Partition, gs: list[int]) -> tuple[Optional[str], Optional[str]]:
    """``(kind, reason)`` that forbids merging the groups ``gs``; ``(None, None)`` when legal."""
    nodes = part.nodes(gs)
    why = cost.group_violation(graph, nodes, hw)
    if why:
        cap = capacity_violation(graph, nodes, hw)
        if why != cap:
            return "rule", why
        fp = group_footprint(graph, nodes, hw)
        return ("registers" if fp.registers > hw.register_budget else "l1"), why
    via = part.cycle_through(gs)
    if via:
        return "cycle", f"a path leaves and re-enters the merged group through {via!r} (not convex)"
    return None, None


def explain(plan: Plan, graph: Optional[Graph] = None, hardware=None) -> dict:
    """A JSON-ready explanation of ``plan`` (see the module docstring)."""
    graph = graph or plan.graph
    hw = load_hardware(hardware or plan.hardware_profile or plan.hardware)
    seen: set[str] = set()
    for grp in plan.groups:
        twice = seen.intersection(grp.nodes)
        if twice:
            raise PlanError(f"explain handles partitions only: node {sorted(twice)[0]!r} is recomputed in "
                            f"several groups ({plan.format})")
        seen.update(grp.nodes)
    part = Partition(graph, hw)
    ids = []
    for grp in plan.groups:
        first = part.gid[grp.nodes[0]]
        if len(grp.nodes) > 1:
            first = part.merge([part.gid[v] for v in grp.nodes])
        ids.append(first)
    name = {gid: grp.name for gid, grp in zip(ids, plan.groups)}
    cut_tensors: dict[tuple[int, int], list[str]] = {}
    for v in graph.index.order:
        for t in graph.index.node[v].inputs:
            u = graph.index.producer.get(t) if t else None
            if u is not None and part.gid[u] != part.gid[v]:
                ts = cut_tensors.setdefault((part.gid[u], part.gid[v]), [])
                if t not in ts:
                    ts.append(t)
    cuts = []
    tight: dict[int, list[str]] = {g: [] for g in ids}
    for (a, b), tensors in cut_tensors.items():
        kind, reason = obstacle(graph, hw, part, [a, b])
        saves = None
        if kind is None:
            saves = cost.group_traffic(graph, part.members[a]) + cost.group_traffic(graph, part.members[b]) - \
                cost.group_traffic(graph, part.nodes([a, b]))
        else:
            for g in (a, b):
                if kind not in tight[g]:
                    tight[g].append(kind)
        cuts.append({"from": name[a], "to": name[b], "tensors": tensors,
                     "bytes": sum(graph.nbytes(t) for t in tensors), "legal": kind is None,
                     "obstacle": kind, "reason": reason, "saves_bytes": saves})
    order = {n: i for i, n in enumerate(grp.name for grp in plan.groups)}
    cuts.sort(key=lambda c: (order[c["from"]], order[c["to"]]))
    groups = []
    for gid, grp in zip(ids, plan.groups):
        groups.append({"group": grp.name, "nodes": grp.nodes, "traffic_bytes": grp.traffic_bytes,
                       "registers": grp.registers, "register_budget": hw.register_budget,
                       "l1_bytes": grp.l1_bytes, "l1_limit": hw.l1_bytes,
                       "rule": rule_note(graph, grp.nodes), "tight": tight[gid]})
    return {"graph": graph.name, "strategy": plan.strategy, "status": plan.status, "hardware": hw.name,
            "traffic_bytes": plan.traffic_bytes, "q_min_bytes": plan.lower_bound_bytes,
            "groups": groups, "cuts": cuts,
            "legal_savings_bytes": sum(max(c["saves_bytes"] or 0, 0) for c in cuts)}


def _pct(used: int, limit: int) -> str:
    return f"{100.0 * used / limit:.0f}%" if limit else "-"


def format_explain(e: dict) -> str:
    """The human-readable form of :func:`explain`."""
    lines = [f"plan {e['strategy']!r} ({e['status']}) of graph {e['graph']!r} on {e['hardware']}: "
             f"{len(e['groups'])} kernels, {human_bytes(e['traffic_bytes'])} "
             f"(Q_min {human_bytes(e['q_min_bytes'])})", "", "groups:"]
    for g in e["groups"]:
        ops = ", ".join(g["nodes"][:6]) + (f", ... ({len(g['nodes'])} ops)" if len(g["nodes"]) > 6 else "")
        lines.append(f"  {g['group']:>4s}  regs {g['registers']}/{g['register_budget']} "
                     f"({_pct(g['registers'], g['register_budget'])})  "
                     f"L1 {human_bytes(g['l1_bytes'])}/{human_bytes(g['l1_limit'])} "
                     f"({_pct(g['l1_bytes'], g['l1_limit'])})  "
                     f"tight: {', '.join(g['tight']) or 'nothing'}  [{ops}]")
        if g["rule"]:
            lines.append(f"        rule: {g['rule']}")
    lines += ["", "cut edges:"]
    if not e["cuts"]:
        lines.append("  none: the whole graph is one kernel")
    for c in e["cuts"]:
        what = f"{c['from']} -> {c['to']} ({', '.join(repr(t) for t in c['tensors'][:3])}"
        what += f"{', ...' if len(c['tensors']) > 3 else ''}; {human_bytes(c['bytes'])})"
        if c["legal"]:
            saves = c["saves_bytes"] or 0
            verdict = f"fusing saves {human_bytes(saves)}" if saves > 0 else \
                f"legal, costs {human_bytes(-saves)} more (a free view group would become a copy)" if saves < 0 \
                else "legal, saves nothing"
        else:
            verdict = f"illegal ({c['obstacle']}): {c['reason']}"
        lines.append(f"  {what}: {verdict}")
    if e["legal_savings_bytes"]:
        lines += ["", f"legal merges left on the table: {human_bytes(e['legal_savings_bytes'])} "
                      "(each counted alone)"]
    return "\n".join(lines)
