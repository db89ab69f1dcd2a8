"""Graph summaries for ``solverfuse inspect``: ops by category, bytes, Q_min, unfused traffic.

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [64]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
>>> s = inspect_graph(g)
>>> s["ops_by_category"], s["q_min_bytes"], s["unfused_traffic_bytes"]
({'memory': {'Relu': 1}}, 512, 512)
"""
from __future__ import annotations

from collections import Counter

from . import cost
from .graph import Graph
from .ops import OPS


def category(graph: Graph, node: str) -> str:
    """The op table's category, or the node's declared one for an unknown op."""
    n = graph.index.node[node]
    return OPS[n.op].category if n.op in OPS else (n.category or "memory")


def inspect_graph(graph: Graph, top: int = 10) -> dict:
    """A JSON-ready summary of a graph."""
    by_cat: dict[str, Counter] = {}
    for n in graph.nodes:
        by_cat.setdefault(category(graph, n.name), Counter())[n.op] += 1
    sizes = sorted(((graph.nbytes(t), t) for t in graph.tensors), reverse=True)
    consts = sum(b for b, t in sizes if graph.tensors[t].constant)
    return {
        "name": graph.name,
        "nodes": len(graph.nodes),
        "tensors": len(graph.tensors),
        "ops_by_category": {c: dict(sorted(v.items())) for c, v in sorted(by_cat.items())},
        "input_bytes": sum(graph.nbytes(t) for t in graph.inputs),
        "constant_bytes": consts,
        "output_bytes": sum(graph.nbytes(t) for t in graph.outputs),
        "intermediate_bytes": sum(b for b, t in sizes if t in graph.index.producer and t not in graph.outputs),
        "flops": sum(graph.flops(n.name) for n in graph.nodes),
        "q_min_bytes": cost.q_min(graph),
        "unfused_traffic_bytes": cost.unfused_traffic(graph),
        "largest_tensors": [{"tensor": t, "bytes": b, "shape": graph.tensors[t].shape,
                             "dtype": graph.tensors[t].dtype} for b, t in sizes[:top]],
    }


def human_bytes(n: float) -> str:
    """Bytes with a binary unit.

    >>> human_bytes(1536), human_bytes(3 * 2**20)
    ('1.50 KiB', '3.00 MiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def format_inspect(s: dict) -> str:
    """The human-readable form of :func:`inspect_graph`."""
    lines = [f"graph {s['name']!r}: {s['nodes']} nodes, {s['tensors']} tensors, {s['flops']:,} flops"]
    for cat, ops in s["ops_by_category"].items():
        lines.append(f"  {cat:8s} {sum(ops.values()):5d}  " + ", ".join(f"{k} x{v}" for k, v in ops.items()))
    lines += [f"inputs {human_bytes(s['input_bytes'])}, constants {human_bytes(s['constant_bytes'])}, "
              f"outputs {human_bytes(s['output_bytes'])}, intermediates {human_bytes(s['intermediate_bytes'])}",
              f"Q_min (lower bound) {human_bytes(s['q_min_bytes'])} ({s['q_min_bytes']:,} B)",
              f"unfused traffic     {human_bytes(s['unfused_traffic_bytes'])} ({s['unfused_traffic_bytes']:,} B)",
              "largest tensors:"]
    lines += [f"  {human_bytes(t['bytes']):>12s}  {t['tensor']}  {t['shape']} {t['dtype']}" for t in s["largest_tensors"]]
    return "\n".join(lines)


def format_plan(plan, max_ops: int = 8) -> str:
    """The human-readable summary of a plan: groups with their ops, traffic vs unfused vs Q_min,
    status, bound, gap and solve time (``solverfuse plan``).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.plans import build_plan
    >>> g = load_graph({"tensors": {"x": {"shape": [64]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    >>> print(format_plan(build_plan(g, "nvidia-h100", [["r"]], strategy="manual")).splitlines()[0])
    plan for 'graph' on nvidia-h100: 1 kernel(s), strategy manual
    """
    lines = [f"plan for {plan.graph_name!r} on {plan.hardware}: {len(plan.groups)} kernel(s), "
             f"strategy {plan.strategy}"]
    seen: dict[str, int] = {}
    for g in plan.groups:
        for v in g.nodes:
            seen[v] = seen.get(v, 0) + 1
    for g in plan.groups:
        # an op computed in several kernels (recomputation) is marked with a star
        names = [v + ("*" if seen[v] > 1 else "") for v in g.nodes]
        ops = ", ".join(names[:max_ops]) + (f", ... (+{len(g.nodes) - max_ops})" if len(g.nodes) > max_ops else "")
        loop = f"  {g.passes} passes" if g.passes > 1 else ""
        lines.append(f"  {g.name:>5s} {human_bytes(g.traffic_bytes):>11s}  regs {g.registers:3d}  "
                     f"L1 {human_bytes(g.l1_bytes):>10s}  [{ops}]{loop}")
    if any(n > 1 for n in seen.values()):
        lines.append("  * computed in several kernels (recomputed)")
    t, u, q = plan.traffic_bytes, plan.unfused_traffic_bytes, plan.lower_bound_bytes
    lines += [f"traffic  {human_bytes(t):>11s} ({t:,} B)",
              f"unfused  {human_bytes(u):>11s} ({u:,} B)  -> {u / t if t else 1:.2f}x less with this plan",
              f"Q_min    {human_bytes(q):>11s} ({q:,} B)  (every input read once, every output written once)"]
    if plan.bound_bytes is not None:
        lines.append(f"bound    {human_bytes(plan.bound_bytes):>11s} ({plan.bound_bytes:,} B)  "
                     f"gap {100 * (plan.gap or 0):.2f}%")
    lines.append(f"status {plan.status}, solved in {plan.solve_seconds:.2f} s")
    return "\n".join(lines)
