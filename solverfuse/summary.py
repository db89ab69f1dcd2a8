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
