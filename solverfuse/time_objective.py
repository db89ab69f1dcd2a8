"""The run-time objective: a partition of least predicted time (``cost.plan_time_ps``), with a
proven bound on every legal partition (``formulations/time.md``).

Stages: the traffic optimum (:func:`solverfuse.solve.solve_report`) hints one set-partitioning model
per part whose columns cost ``cost.group_time_ps``; :func:`merge_pieces` then merges groups that
may share a kernel while that saves time (a launch, or overlapping memory- and compute-bound
work); :mod:`solverfuse.time_bound` gives the bound. CP-SAT runs through
:func:`solverfuse.solve.run_model`, so ``solve.py`` stays the only module running ``CpSolver``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from . import cost, cover_stage, time_bound
from .errors import InternalError, PlanError
from .formulations import set_partition
from .formulations.presolve import presolve
from .graph import Graph
from .hardware import Hardware, load_hardware
from .plans import Plan, build_covering_plan, build_plan, order_groups, plan_kernels
from .cover_stage import COVERING_SHARE
from .solve import (MAX_PAIRS, MAX_PART_OPS, IncumbentLog, normalise, quotient_cycle,
                    run_covering, run_model, solve_report)


@dataclass
class TimeReport:
    """A time-objective plan and what is proven about it (integer picoseconds): ``time_ps`` its
    predicted time (``cost.plan_time_ps``), ``bound_ps`` a lower bound on every legal partition's,
    from ``floor_ps`` (:func:`solverfuse.time_bound.time_floor_ps`, any plan) and, when no two
    pieces may share a kernel (``merge_pair`` None), ``connected_ps`` (the connected optimum's
    CP-SAT bound, then a bound on every partition: ``formulations/time.md``);
    ``connected_time_ps`` the time of the best connected plan found, before :func:`merge_pieces`."""
    plan: Plan
    time_ps: int
    bound_ps: int
    floor_ps: int
    connected_ps: int
    connected_time_ps: int
    merge_pair: Optional[tuple]

    @property
    def gap(self) -> float:
        """(time - bound) / time."""
        return 0.0 if self.time_ps == 0 else (self.time_ps - self.bound_ps) / self.time_ps


def solve_time(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0, workers: int = 2,
               seed: int = 0, hints: Optional[Sequence[Sequence[Sequence[str]]]] = None) -> Plan:
    """A partition of least predicted run time (``cost.plan_time_ps``, integer picoseconds).

    The traffic-optimal plan comes first (half the time limit) and hints, part by part, a
    set-partitioning model whose columns (connected groups) cost ``cost.group_time_ps``; a part
    keeps its traffic-optimal groups unless the model finds a faster partition. Then groups that
    may share a kernel are merged while that saves time (:func:`merge_pieces`). Status
    ``optimal`` only when the time equals a proven lower bound on every legal partition, connected
    groups or not (:func:`solve_time_report`, ``formulations/time.md``); else ``feasible`` and the
    bound and gap are in ``reason``.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [1024]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> p = solve_time(g, "nvidia-h100", workers=1)
    >>> p.strategy, p.status, [grp.nodes for grp in p.groups]
    ('optimal-time', 'optimal', [['a', 'b']])
    """
    return solve_time_report(graph, hw, time_limit=time_limit, workers=workers, seed=seed, hints=hints).plan


def solve_time_report(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0, workers: int = 2,
                      seed: int = 0, hints: Optional[Sequence[Sequence[Sequence[str]]]] = None) -> TimeReport:
    """:func:`solve_time` with its bound: a :class:`TimeReport`."""
    hw = load_hardware(hw)
    start = time.monotonic()
    base = solve_report(graph, hw, time_limit=COVERING_SHARE * time_limit, workers=workers, seed=seed,
                        hints=hints).plan
    pre = presolve(graph, hw, max_part=MAX_PART_OPS)
    part_of = {v: k for k, part in enumerate(pre.parts) for v in part}
    inside: dict[int, list[list[str]]] = {}
    for g in normalise(graph, base.group_nodes()):
        inside.setdefault(part_of[g[0]], []).append(g)
    score = lambda g: cost.group_time_ps(graph, g, hw)  # noqa: E731
    # per part: a lower bound on the time of every connected plan of its ops
    bounds = {k: (cost.plan_time_ps(graph, inside[k], hw) if len(part) == 1 else time_bound.part_floor_ps(graph, hw, part))
              for k, part in enumerate(pre.parts)}
    todo = sorted((k for k, part in enumerate(pre.parts) if 1 < len(part) <= MAX_PART_OPS),
                  key=lambda k: (len(pre.parts[k]), k))
    left = sum(len(pre.parts[k]) for k in todo)
    for k in todo:
        part = pre.parts[k]
        share = max(0.0, (1 - MERGE_SHARE) * time_limit - (time.monotonic() - start)) * len(part) / max(left, 1)
        left -= len(part)
        if share <= 0 or sum(len(pre.cand[v]) - 1 for v in part) > MAX_PAIRS:
            continue
        deadline = time.monotonic() + share
        f = set_partition.build(graph, hw, pre, part, score=score)
        if f is None:
            continue
        groups = order_groups(graph, inside[k])
        f.hint(groups)
        log = IncumbentLog(graph, f, lambda v, b: None)
        while time.monotonic() < deadline:
            # every model of the loop is a relaxation of the acyclic plans (cuts only remove
            # cyclic ones), so each one's bound holds
            status, bnd = run_model(f, deadline - time.monotonic(), workers, seed, log)
            bounds[k] = max(bounds[k], bnd)
            cycle = quotient_cycle(graph, log.last) if log.last is not None else None
            if cycle is None:
                break
            f.forbid(cycle)
        if log.best is not None and log.best[0] < cost.plan_time_ps(graph, groups, hw):
            inside[k] = log.best[1]
    groups = [g for k in range(len(pre.parts)) for g in inside.get(k, [])]
    connected_time = cost.plan_time_ps(graph, groups, hw)
    pair = time_bound.merge_pair(graph, hw)
    if pair is not None:  # (None: no two pieces may share a kernel)
        groups = merge_pieces(graph, hw, groups, deadline=max(start + time_limit, time.monotonic() + MERGE_MIN))
    spent = cost.plan_time_ps(graph, groups, hw)
    connected = sum(min(bounds[k], cost.plan_time_ps(graph, inside.get(k, []), hw)) for k in range(len(pre.parts)))
    traffic_bound = base.bound_bytes if base.bound_bytes is not None else cost.q_min(graph)
    floor = time_bound.time_floor_ps(graph, hw, traffic_bound)
    bound = min(spent, max(floor, connected if pair is None else 0))
    status = "optimal" if bound == spent else "feasible"
    plan = build_plan(graph, hw, groups, strategy="optimal-time", status=status,
                      solve_seconds=time.monotonic() - start)
    why = ("no two ops without a path or tensor between them may share a kernel, so the connected "
           "optimum's bound holds for every partition" if pair is None else None)
    plan.reason = bound_reason("time objective", spent, bound, pair, why, "traffic bound")
    return TimeReport(plan=plan, time_ps=spent, bound_ps=bound, floor_ps=floor, connected_ps=connected,
                      connected_time_ps=connected_time, merge_pair=pair)


#: Shares of :func:`solve_covering_time`'s limit: the traffic covering (itself half partition,
#: half covering), then the time partition; the time covering gets the rest.
TRAFFIC_COVER_SHARE = 0.3
TIME_PARTITION_SHARE = 0.2


def solve_covering_time(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0, workers: int = 2,
                        seed: int = 0, hints: Optional[Sequence[Sequence[Sequence[str]]]] = None) -> Plan:
    """A covering (recomputation and looped reductions allowed) of least predicted run time
    (``cost.covering_time_ps``, integer picoseconds): strategy ``covering-time``.

    Stages: the traffic covering (:func:`solverfuse.solve.solve_report` with ``covering``: its
    kernels and its proven traffic bound over every covering), the time partition
    (:func:`solve_time_report`), then the covering stage (:func:`solverfuse.cover_stage.cover`) with
    columns scored by ``cost.kernel_time_ps`` (each write total its own level:
    ``formulations/covering.md``), hinted per part with the fastest of those two plans and the
    ``xla-recompute`` and ``inductor-recompute`` kernels, so never slower than any of them. Status
    ``optimal`` only when the time equals a proven lower bound on every covering
    (:func:`solve_covering_time_report`, ``formulations/time.md``); else ``feasible``, bound and gap
    in ``reason``.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [1024]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> p = solve_covering_time(g, "nvidia-h100", workers=1)
    >>> p.strategy, p.status, [grp.nodes for grp in p.groups]
    ('covering-time', 'optimal', [['a', 'b']])
    """
    return solve_covering_time_report(graph, hw, time_limit=time_limit, workers=workers, seed=seed,
                                      hints=hints).plan


def solve_covering_time_report(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0,
                               workers: int = 2, seed: int = 0,
                               hints: Optional[Sequence[Sequence[Sequence[str]]]] = None,
                               traffic_plan: Optional[Plan] = None) -> TimeReport:
    """:func:`solve_covering_time` with its bound: a :class:`TimeReport` (``connected_ps``: the sum
    of the parts' bounds over coverings of connected kernels; ``connected_time_ps``: the plan's
    own time; ``merge_pair`` under ``cost.looped_violation``).

    The bound is ``max(floor, connected)`` when no two ops without a path or tensor between them
    may share a kernel (``merge_pair(convex=False)`` None: every legal kernel is connected, so the
    connected covering optimum is the optimum of every covering), else the floor
    (:func:`solverfuse.time_bound.time_floor_ps` with the traffic covering's proven bound, valid
    for coverings: every op's flops count at least once, every output is written and every source
    read by some kernel). ``traffic_plan``: a traffic covering made already (with its bound), used
    instead of solving one (then the time objective's stages share the whole limit)."""
    hw = load_hardware(hw)
    start = time.monotonic()
    traffic = traffic_plan or solve_report(graph, hw, time_limit=TRAFFIC_COVER_SHARE * time_limit, workers=workers,
                                           seed=seed, hints=hints, covering=True).plan
    left = max(0.0, start + time_limit - time.monotonic())
    timed = solve_time_report(graph, hw, time_limit=min(left, TIME_PARTITION_SHARE * time_limit), workers=workers,
                              seed=seed, hints=hints).plan
    named = {"covering": plan_kernels(traffic),
             "optimal-time": cover_stage.partition_kernels(graph, timed.group_nodes()),
             **cover_stage.baseline_kernels(graph, hw)}
    r = cover_stage.cover(graph, hw, list(named.values()), lambda f, s: run_covering(f, s, workers, seed),
                          deadline=start + time_limit, names=list(named),
                          score=lambda nodes, writes, passes: cost.kernel_time_ps(graph, nodes, writes, hw, passes),
                          floor=lambda pre, part: time_bound.part_floor_ps(graph, hw, part),
                          max_pairs=MAX_PAIRS, max_part_ops=MAX_PART_OPS)
    spent = cost.covering_time_ps(graph, r.kernels, hw)
    if spent != r.value:
        raise InternalError(f"bug: covering time objective {r.value} != cost model time {spent}")
    pair = time_bound.merge_pair(graph, hw, violation=cost.looped_violation, convex=False)
    traffic_bound = traffic.bound_bytes
    if traffic_bound is None:
        traffic_bound = cost.plan_floor(graph, list(graph.index.order))
    floor = time_bound.time_floor_ps(graph, hw, traffic_bound, violation=cost.looped_violation, convex=False)
    bound = min(spent, max(floor, r.bound if pair is None else 0))
    status = "optimal" if bound == spent else "feasible"
    plan = build_covering_plan(graph, hw, r.kernels, strategy="covering-time", status=status,
                               solve_seconds=time.monotonic() - start)
    why = ("no two ops without a tensor in common may share a kernel (a path between them does not "
           "join them: kernels may be non-convex), so the connected covering optimum's bound holds for "
           "every covering" if pair is None else None)
    plan.reason = (bound_reason("time objective with recomputation", spent, bound, pair, why, "covering traffic bound")
                   + (f"; the {r.whole} plan whole was fastest" if r.whole else ""))
    return TimeReport(plan=plan, time_ps=spent, bound_ps=bound, floor_ps=floor, connected_ps=r.bound,
                      connected_time_ps=spent, merge_pair=pair)


def bound_reason(what: str, spent: int, bound: int, pair: Optional[tuple], why: Optional[str], traffic: str) -> str:
    """A time plan's ``reason``: its predicted time, the proven bound and gap, and why that bound
    holds -- ``why`` when the connected optimum's bound does (``pair`` None), else the floor's
    parts (``traffic``: which traffic bound), naming the two ops that may share a kernel.

    >>> bound_reason("time objective", 100, 90, ("a", "b"), None, "traffic bound")[:60]
    'time objective: predicted 100 ps, lower bound 90 ps (gap 10.'
    """
    if why is None:
        floor = f"the bound is the floor ({traffic}, flops, fewest kernels)"
        why = f"ops {pair[0]!r} and {pair[1]!r} share no tensor but may share a kernel, so {floor}" if pair else floor
    return (f"{what}: predicted {spent:,} ps, lower bound {bound:,} ps (gap "
            f"{100 * (spent - bound) / max(spent, 1):.1f}%; {why}); traffic is not this objective"
            + ("" if bound != spent else ", bound_bytes is this plan's own traffic"))


#: Share of :func:`solve_time`'s limit kept for its merge pass (which gets at least
#: ``MERGE_MIN`` seconds: a small plan's pass takes milliseconds).
MERGE_SHARE = 0.1
MERGE_MIN = 0.2
#: Plans with more groups than this skip the merge pass (it looks at every pair).
MERGE_MAX_GROUPS = 300


def merge_pieces(graph: Graph, hw: Hardware, groups: Sequence[Sequence[str]], deadline: float = math.inf) -> list[list[str]]:
    """Groups of a partition merged greedily, the largest time saving (``cost.group_time_ps``)
    first, while a merge saves time and keeps the plan legal (rules, capacity, acyclic quotient):
    under the time objective a kernel of two pieces that share no tensor saves a launch and
    overlaps one's memory time with the other's compute. Never slower than ``groups``.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}, "y": {"shape": [4]}}, "inputs": ["x", "y"],
    ...     "outputs": ["a", "b"], "nodes": [{"name": "p", "op": "Relu", "inputs": ["x"], "outputs": ["a"]},
    ...                                     {"name": "q", "op": "Relu", "inputs": ["y"], "outputs": ["b"]}]})
    >>> merge_pieces(g, load_hardware("nvidia-h100"), [["p"], ["q"]])
    [['p', 'q']]
    """
    out = [list(g) for g in groups]
    if len(out) > MERGE_MAX_GROUPS:
        return out
    pos = graph.index.position
    t = [cost.group_time_ps(graph, g, hw) for g in out]

    def saving(i: int, j: int) -> int:
        u = sorted(out[i] + out[j], key=pos.__getitem__)
        if cost.group_violation(graph, u, hw) is not None:
            return 0
        return t[i] + t[j] - cost.group_time_ps(graph, u, hw)

    gain = {(i, j): saving(i, j) for i in range(len(out)) for j in range(i + 1, len(out))
            if time.monotonic() < deadline}
    while time.monotonic() < deadline:
        best = sorted(((v, k) for k, v in gain.items() if v > 0), reverse=True)
        done = False
        for v, (i, j) in best:
            trial = [g for k, g in enumerate(out) if k not in (i, j) and g] + \
                [sorted(out[i] + out[j], key=pos.__getitem__)]
            try:
                order_groups(graph, trial)
            except PlanError:
                gain[(i, j)] = 0
                continue
            out[i], out[j], t[i], t[j] = trial[-1], [], t[i] + t[j] - v, 0
            for k in range(len(out)):
                if k not in (i, j) and out[k]:
                    gain[(min(i, k), max(i, k))] = saving(min(i, k), max(i, k))
                gain[(min(j, k), max(j, k))] = 0
            done = True
            break
        if not done:
            break
    return order_groups(graph, [g for g in out if g])


__all__ = ["TimeReport", "solve_time", "solve_time_report", "solve_covering_time", "solve_covering_time_report",
           "merge_pieces"]
