"""The library entry point other compilers call: ``solverfuse.plan(graph, hardware, ...)``.

It takes a Graph, a path (JSON or ONNX), a dict or a networkx DiGraph (see
:func:`solverfuse.graph.from_networkx`), and returns a validated :class:`~solverfuse.plans.Plan`.
CP-SAT never shows through this interface.

>>> import solverfuse
>>> g = {"tensors": {"x": {"shape": [1024]}}, "inputs": ["x"], "outputs": ["y"],
...      "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...                {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]}
>>> p = solverfuse.plan(g, "nvidia-h100", strategy="optimal", time_limit=10)
>>> p.status, [grp.nodes for grp in p.groups], p.traffic_bytes == p.lower_bound_bytes
('optimal', [['a', 'b']], True)
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union

from .errors import SolverfuseError
from .graph import Graph, load_graph
from .hardware import Hardware, load_hardware
from .plans import Plan


def plan(graph: Union[Graph, str, dict, Any], hardware: Union[str, Hardware] = "nvidia-h100", *,
         strategy: str = "optimal", time_limit: float = 10.0, workers: int = 2, seed: int = 0,
         progress: Optional[Callable[..., None]] = None) -> Plan:
    """Plan fusion for ``graph`` on ``hardware`` with ``strategy`` (``optimal`` or a greedy name)."""
    from . import greedy
    g = load_graph(graph)
    hw = load_hardware(hardware)
    if strategy == "optimal":
        from .solve import solve
        hints = greedy_hints(g, hw, budget_s=0.2 * time_limit)
        return solve(g, hw, time_limit=time_limit, workers=workers, seed=seed, hints=hints,
                     progress=progress)
    if strategy not in greedy.STRATEGIES:
        raise SolverfuseError(f"unknown strategy {strategy!r} (optimal, {', '.join(greedy.STRATEGIES)})")
    return greedy.greedy_plan(g, hw, strategy)


def greedy_hints(graph: Graph, hw: Hardware, budget_s: float) -> list[list[list[str]]]:
    """Partitions of the greedy baselines, to seed CP-SAT; stops starting new ones after ``budget_s``.

    Hints only speed the search up: a plan proven optimal has the same traffic whatever the hints.
    The budget keeps a huge graph's time for solving; every baseline finishes well inside it on
    the graphs we benchmark, so in practice the hint set (and so the plan for a fixed seed) is the
    same on every run.
    """
    from . import greedy
    start, hints = time.perf_counter(), []
    for name, make in greedy.STRATEGIES.items():
        if hints and time.perf_counter() - start > budget_s:
            break
        hints.append(make(graph, hw))
    return hints
