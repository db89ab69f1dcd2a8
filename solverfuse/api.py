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
from typing import Any, Callable, Optional, Sequence, Union

from .arguments import check_seed, check_time_limit, check_workers
from .distribute import check_jobs, check_ray
from .errors import SolverfuseError
from .graph import Graph
from .sources import load_graph
from .hardware import Hardware, load_hardware
from .plans import Plan


def plan(graph: Union[Graph, str, dict, Any], hardware: Union[str, Hardware] = "nvidia-h100", *,
         strategy: str = "optimal", time_limit: float = 10.0, workers: int = 2, seed: int = 0,
         progress: Optional[Callable[..., None]] = None, objective: str = "traffic", jobs: int = 1,
         ray: Optional[str] = None) -> Plan:
    """Plan fusion for ``graph`` on ``hardware`` with ``strategy``: ``optimal`` (the best
    partition), ``covering`` (the best plan with recomputation and looped reductions, a
    ``solverfuse-plan/2`` plan when it duplicates an op or loops; see ``formulations/covering.md``)
    or a greedy name. ``objective``: ``traffic`` (default) or ``time`` (least predicted run time,
    ``cost.covering_time_ps``, for ``optimal`` and ``covering``; ``optimal`` only when a proven bound on
    every partition (covering) is met, else the bound and gap in ``reason``:
    :func:`solverfuse.time_objective.solve_time`, :func:`~solverfuse.time_objective.solve_covering_time`).

    ``optimal`` solves in a worker process (:mod:`solverfuse.worker`): the call returns within
    ``time_limit`` plus a small overhead, counted from entry, and a solver crash or hang gives the
    best plan found (status ``feasible``, ``plan.reason`` says why) instead of killing the caller.
    ``jobs`` (0: one per core) > 1 solves the graph's independent parts in that many parallel
    processes, ``ray`` (``"auto"`` or a cluster address; ``solverfuse[ray]``) on a Ray cluster
    (:mod:`solverfuse.distribute`); proven-optimal plans have the same traffic either way.
    """
    from . import greedy
    start = time.monotonic()
    time_limit = check_time_limit(time_limit)
    seed, workers = check_seed(seed), check_workers(workers)
    jobs, ray = check_jobs(jobs), check_ray(ray)
    if objective not in ("traffic", "time"):
        raise SolverfuseError(f"unknown objective {objective!r} (traffic or time)")
    if objective == "time" and strategy not in ("optimal", "covering"):
        raise SolverfuseError("objective 'time' is supported by strategies 'optimal' and 'covering' only")
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
                                   objective=objective, worker=child, source_stamp=stamp, jobs=jobs,
                                   ray=ray).plan
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


#: Seconds a sweep allows each plan past its time limit (start-up, hints, validation) before it
#: stops the plans still running.
SWEEP_SLACK = 30.0


def sweep(graphs: Sequence[Union[Graph, str, dict, Any]], hardwares: Sequence[Union[str, Hardware]], *,
          strategy: str = "optimal", time_limit: float = 10.0, workers: int = 1, seed: int = 0,
          jobs: int = 0, ray: Optional[str] = None) -> list[Plan]:
    """Plan every graph on every hardware profile (models x hardware), each pair a task of one
    executor (:mod:`solverfuse.distribute`): ``jobs`` local processes (0, default: one per core) or the Ray
    cluster ``ray``. Each task is :func:`plan` (``time_limit`` each); one whose process dies
    gets the best greedy plan, status ``feasible``, and the reason. Returns the plans in the order
    ``[(g, h) for g in graphs for h in hardwares]``.

    >>> g = {"tensors": {"x": {"shape": [1024]}}, "inputs": ["x"], "outputs": ["y"],
    ...      "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...                {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]}
    >>> [(p.hardware, p.status, len(p.groups)) for p in sweep([g], ["nvidia-h100", "intel-xeon-8480"], time_limit=10)]
    [('nvidia-h100', 'optimal', 1), ('intel-xeon-8480', 'optimal', 1)]
    """
    from .distribute import open_executor
    time_limit = check_time_limit(time_limit)
    seed, workers = check_seed(seed), check_workers(workers)
    jobs, ray = check_jobs(jobs), check_ray(ray)
    from . import greedy
    if strategy not in ("optimal", "covering", *greedy.STRATEGIES):
        raise SolverfuseError(f"unknown strategy {strategy!r} (optimal, covering, {', '.join(greedy.STRATEGIES)})"[:300])
    loaded = [load_graph(g) for g in graphs]
    hws = [load_hardware(h) for h in hardwares]
    if not loaded or not hws:
        raise SolverfuseError("a sweep needs at least one graph and one hardware profile")
    tasks = [(i, hw) for i in range(len(loaded)) for hw in hws]
    ex = open_executor([g.structure_copy() for g in loaded], jobs=min(jobs, len(tasks)), ray=ray, workers=workers)
    rounds = -(-len(tasks) // ex.slots)
    plans: dict[int, Plan] = {}
    try:
        todo = list(range(len(tasks)))
        end = time.monotonic() + rounds * (time_limit + SWEEP_SLACK)
        failed: list = []
        while todo or ex.idle() < ex.slots:
            while todo and ex.idle() > 0:
                k = todo.pop(0)
                ex.submit(k, "solverfuse.api:sweep_task",
                          (tasks[k][0], tasks[k][1], strategy, time_limit, ex.task_workers, seed))
            wait = end - time.monotonic()
            for o in (ex.wait(wait) if wait > 0 else ex.cancel_all("the sweep ran out of time; stopped")):
                if o.ok:
                    o.value.graph = loaded[tasks[o.key][0]]
                    plans[o.key] = o.value
                else:
                    failed.append(o)
        for o in failed:
            plans[o.key] = _best_greedy(loaded[tasks[o.key][0]], tasks[o.key][1], o.reason)
    finally:
        ex.close()
    return [plans[k] for k in range(len(tasks))]


def sweep_task(graphs: list, index: int, hw: Hardware, strategy: str, time_limit: float, workers: int,
               seed: int) -> Plan:
    """One sweep task (run by an executor's worker): :func:`plan` of ``graphs[index]``, returned
    without its graph (the caller has it)."""
    p = plan(graphs[index], hw, strategy=strategy, time_limit=time_limit, workers=workers, seed=seed)
    p.graph = None
    return p


def _best_greedy(graph: Graph, hw: Hardware, why: str) -> Plan:
    from . import greedy
    from .worker import fallback_plan
    best = min(((name, greedy.greedy_plan(graph, hw, name)) for name in greedy.STRATEGIES),
               key=lambda item: item[1].traffic_bytes)
    p = fallback_plan(graph, hw, best[1].group_nodes())
    p.reason = f"{why}; returned the best greedy plan ({best[0]})"
    return p
