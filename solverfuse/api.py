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

import os
import time
from typing import Any, Callable, Optional, Union

from .arguments import check_seed, check_time_limit, check_workers
from .errors import SolverfuseError
from .graph import Graph
from .sources import load_graph
from .hardware import Hardware, load_hardware
from .plans import Plan


def plan(graph: Union[Graph, str, dict, Any], hardware: Union[str, Hardware] = "nvidia-h100", *,
         strategy: str = "optimal", time_limit: float = 10.0, workers: int = 2, seed: int = 0,
         progress: Optional[Callable[..., None]] = None, objective: str = "traffic") -> Plan:
    """Plan fusion for ``graph`` on ``hardware`` with ``strategy``: ``optimal`` (the best
    partition), ``covering`` (the best plan with recomputation and looped reductions, a
    ``solverfuse-plan/2`` plan when it duplicates an op or loops; see ``formulations/covering.md``)
    or a greedy name. ``objective``: ``traffic`` (default) or ``time`` (least predicted run time,
    ``cost.plan_time_ps``, for ``optimal``; no optimality claimed, see :func:`solverfuse.solve.solve_time`).

    ``optimal`` solves in a worker process (:mod:`solverfuse.worker`): the call returns within
    ``time_limit`` plus a small overhead, counted from entry, and a solver crash or hang gives the
    best plan found (status ``feasible``, ``plan.reason`` says why) instead of killing the caller.
    """
    from . import greedy
    start = time.monotonic()
    time_limit = check_time_limit(time_limit)
    seed, workers = check_seed(seed), check_workers(workers)
    if objective not in ("traffic", "time"):
        raise SolverfuseError(f"unknown objective {objective!r} (traffic or time)")
    if objective == "time" and strategy != "optimal":
        raise SolverfuseError("objective 'time' is supported by strategy 'optimal' only")
    if not isinstance(strategy, str):
        raise SolverfuseError(f"strategy must be a string, got {type(strategy).__name__}")
    if strategy in ("optimal", "covering"):
        from .worker import file_stamp, prestart, solve_in_worker
        path = graph if isinstance(graph, (str, os.PathLike)) else None
        child = prestart(path)  # its start-up (and its own load of a JSON file) overlaps the graph's loading
        try:
            g = load_graph(graph)
            stamp = file_stamp(path) if path is not None else None
            hw = load_hardware(hardware)
            return solve_in_worker(g, hw, time_limit=time_limit, workers=workers, seed=seed,
                                   progress=progress, started=start, covering=strategy == "covering",
                                   objective=objective, worker=child, source_stamp=stamp).plan
        finally:
            child.close()
    g = load_graph(graph)
    hw = load_hardware(hardware)
    if strategy not in greedy.STRATEGIES:
        raise SolverfuseError(f"unknown strategy {strategy!r} (optimal, covering, {', '.join(greedy.STRATEGIES)})")
    return greedy.greedy_plan(g, hw, strategy)


def greedy_hints(graph: Graph, hw: Hardware) -> list[list[list[str]]]:
    """Every greedy baseline's partition, to seed CP-SAT.

    All of them, always: the solver keeps the best legal hint when it cannot prove optimality,
    so the optimal row is never worse than a baseline, and a fixed seed gives the same plan.
    (Every baseline plans a 10,000-op graph in seconds; see benchmarks/RESULTS.md.)
    """
    from . import greedy
    return [make(graph, hw) for make in greedy.STRATEGIES.values()]
