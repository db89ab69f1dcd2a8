"""The optimal planner: presolve, one CP-SAT model per independent part, solve, decode, validate.

This is the only module that runs ``CpSolver``. It maps CP-SAT's statuses to plan statuses in one
place (:data:`STATUS`), honours the time limit over the whole solve, seeds the search, hints the
best legal greedy partition (or the unfused one), logs every incumbent (time, traffic, bound) and
reports them to a ``progress`` callback, and checks that the objective equals
``cost.plan_traffic`` of the decoded plan exactly. Every plan goes through ``plans.build_plan``,
which validates it.

Parts (see :mod:`solverfuse.formulations.presolve`) are solved one after another, smallest first
(or, with ``jobs``/``ray``, in parallel batches: :func:`solve_parts`, :mod:`solverfuse.distribute`),
each with a share of the remaining time proportional to its size, by the set-partitioning
formulation (lazy cycle cuts added here) or, when a part has too many candidate groups, the
representative-assignment one. The plan is ``optimal`` only if every part is proven optimal, and
its bound is the sum of the parts' bounds. Parts too large to prove anything about, and graphs
over :data:`EXACT_OPS` ops (or with too little time for the whole presolve), are planned in
topological windows and reported ``feasible`` with their traffic floor as bound
(``formulations/set-partitioning.md``, section "Solving, and what happens at scale"). A window is
a run of whole hint groups in an executable order, presolved only when its turn comes, so it
starts at the hint's traffic and running out of time costs nothing; a part whose model would
take longer to build than its share of the time keeps its hint too. The log's first incumbent is
the hint. Each part's model comes from the first of :data:`FORMULATIONS` that accepts it,
driven through the :class:`~solverfuse.formulations.protocol.Formulation` protocol.

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [1024]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> p = solve(g, "nvidia-h100", workers=1)
>>> p.status, p.traffic_bytes, p.bound_bytes, [grp.nodes for grp in p.groups]
('optimal', 8192, 8192, [['a', 'b']])
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

from ortools.sat.python import cp_model

from . import cost, dag, distribute
from .errors import InternalError, PlanError
from .graph import Graph
from .hardware import Hardware, load_hardware
from .plans import Plan, build_covering_plan, build_plan, order_groups
from .formulations import assign, covering, set_partition
from .formulations.protocol import Formulation
from .formulations.presolve import Presolve, presolve, traffic_floor


#: CP-SAT status -> what it means for one part (the only place statuses are mapped).
STATUS = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.UNKNOWN: "no-solution",
          cp_model.INFEASIBLE: "infeasible", cp_model.MODEL_INVALID: "invalid"}


@dataclass
class Incumbent:
    """One improvement seen while solving: whole-plan traffic and bound at ``seconds``."""
    seconds: float
    traffic_bytes: int
    bound_bytes: int


@dataclass
class SolveReport:
    """The plan plus how it was found."""
    plan: Plan
    log: list[Incumbent] = field(default_factory=list)
    parts: int = 0
    largest_part: int = 0
    variables: int = 0
    presolve_seconds: float = 0.0
    formulations: dict = field(default_factory=dict)


def solve(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0, workers: int = 2,
          seed: int = 0, hints: Optional[Sequence[Sequence[Sequence[str]]]] = None,
          progress: Optional[Callable[[float, int, int], None]] = None, covering: bool = False) -> Plan:
    """An optimal (or, when time runs out, the best found + its bound) fusion plan.

    ``hints`` are partitions (lists of groups of op names), e.g. greedy plans; the best legal one
    seeds the search. ``progress(seconds, traffic_bytes, bound_bytes)`` is called on every new
    incumbent of the whole plan. ``covering``: also allow recomputation and looped reductions
    (``formulations/covering.md``); the partition optimum is found first and hints the covering.
    """
    return solve_report(graph, hw, time_limit=time_limit, workers=workers, seed=seed, hints=hints,
                        progress=progress, covering=covering).plan


#: Graphs with more ops skip the exact presolve and are planned in windows (no optimality claim).
EXACT_OPS = 20000
#: Seconds of presolve per op, about (random DAGs of 5,000-20,000 ops on a busy machine): with
#: less than twice that left, the graph is planned in windows without the whole presolve.
PRESOLVE_PER_OP = 150e-6
#: A part with more candidate pairs than this is planned in windows too (its model would be too
#: weak to prove anything); the plan is then ``feasible`` and its bound the part's traffic floor.
MAX_PAIRS = 6000
#: Parts of more ops than this are planned in windows without computing their candidates.
MAX_PART_OPS = 400
#: Ops per window: contiguous runs of a topological order, so every edge between windows goes
#: forward and plans made window by window are legal together.
WINDOW = 30


@dataclass
class _Unit:
    """One model to solve: a part of the presolve, or a window (``pre`` None until it is due:
    a window is presolved only when its turn comes, so running out of time costs nothing)."""
    pre: Optional[Presolve]
    part: list[str]
    region: int
    groups: list[list[str]] = field(default_factory=list)
    value: int = 0


def solve_report(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0, workers: int = 2,
                 seed: int = 0, hints: Optional[Sequence[Sequence[Sequence[str]]]] = None,
                 progress: Optional[Callable[[float, int, int], None]] = None,
                 max_groups: int = 20000, exact_ops: int = EXACT_OPS, max_pairs: int = MAX_PAIRS,
                 window: int = WINDOW, covering: bool = False, jobs: int = 1,
                 ray: Optional[str] = None) -> SolveReport:
    """:func:`solve`, also returning the incumbent log and the size of the decomposition.

    ``jobs`` (0: one per core) > 1 or a Ray cluster address ``ray`` solve the parts and windows
    in parallel (:mod:`solverfuse.distribute`, :func:`_solve_parallel`); a part whose worker dies
    keeps its hint and the plan says why (``plan.reason``)."""
    hw = load_hardware(hw)
    start = time.monotonic()
    if ray is None and distribute.check_jobs(jobs) > 1:
        distribute.prestart()  # the workers' interpreter starts while the presolve runs
    full_limit = time_limit
    if covering:  # the partition optimum first, with half the time; it hints the covering models
        time_limit = COVERING_SHARE * time_limit
    start_groups = best_hint(graph, hw, hints)
    units: list[_Unit] = []
    # per region: [bound, exact]; an exact region is one part solved whole (its CP-SAT bound is
    # valid), an inexact one is planned in windows and keeps its traffic floor as bound
    regions: list[list] = []

    def add_windows(nodes: Sequence[str], floor: Optional[int] = None) -> None:
        # windows are runs of whole hint groups in an executable order (a topological order of the
        # ops in which every group is contiguous), so no window cuts a hint group: each starts
        # at the hint's traffic and solving it can only improve on it
        regions.append([cost.plan_floor(graph, list(nodes)) if floor is None else floor, False])
        inside = set(nodes)
        run: list[str] = []
        for g in order_groups(graph, [g for g in start_groups if g[0] in inside]):
            if run and len(run) + len(g) > window:
                units.append(_Unit(None, run, len(regions) - 1))
                run = []
            run = run + list(g)
        if run:
            units.append(_Unit(None, run, len(regions) - 1))

    if len(graph.nodes) > exact_ops or time_limit < 2 * PRESOLVE_PER_OP * len(graph.nodes):
        add_windows(list(graph.index.order))  # (too large, or no time for the whole presolve)
    else:
        pre = presolve(graph, hw, max_part=MAX_PART_OPS)
        for part in pre.parts:
            if len(part) > MAX_PART_OPS or (len(part) > 1 and sum(len(pre.cand[v]) - 1 for v in part) > max_pairs):
                add_windows(part, traffic_floor(graph, pre, part))
            else:
                regions.append([traffic_floor(graph, pre, part), True])
                units.append(_Unit(pre, part, len(regions) - 1))
    report = SolveReport(plan=None, parts=len(units),  # type: ignore[arg-type]
                         largest_part=max((len(u.part) for u in units), default=0),
                         presolve_seconds=time.monotonic() - start)
    pieces = _split(start_groups, {v: k for k, u in enumerate(units) for v in u.part})
    for k, u in enumerate(units):
        u.groups = order_groups(graph, normalise(graph, pieces.get(k, [])))
        u.value = cost.plan_traffic(graph, u.groups)
        if len(u.part) == 1 and regions[u.region][1]:
            regions[u.region][0] = u.value
    status_all = "optimal" if all(exact for _, exact in regions) else "feasible"
    # (a window of one hint group larger than a window is left as it is)
    todo = sorted((k for k, u in enumerate(units) if len(u.part) > 1 and not (u.pre is None and len(u.groups) < 2)),
                  key=lambda k: (len(units[k].part), k))
    left = sum(len(units[k].part) for k in todo)

    def totals(k: int = -1, val: int = 0, bnd: int = 0) -> tuple[int, int]:
        tot_v = sum(u.value for u in units) + (val - units[k].value if k >= 0 else 0)
        tot_b = sum(b for b, _ in regions)
        if k >= 0 and regions[units[k].region][1]:
            tot_b += bnd - regions[units[k].region][0]
        return tot_v, tot_b

    def notify(k: int, val: int, bnd: int) -> None:
        tot_v, tot_b = totals(k, val, max(bnd, regions[units[k].region][0]))
        report.log.append(Incumbent(round(time.monotonic() - start, 6), tot_v, min(tot_b, tot_v)))
        if progress:
            progress(time.monotonic() - start, tot_v, min(tot_b, tot_v))

    start_v, start_b = totals()  # the first incumbent: the hint
    report.log.append(Incumbent(round(time.monotonic() - start, 6), start_v, min(start_b, start_v)))
    if progress:
        progress(time.monotonic() - start, start_v, min(start_b, start_v))
    rate = {"pair": BUILD_PER_PAIR}
    reasons: list[str] = []
    parallel = ((ray is not None or distribute.check_jobs(jobs) > 1) and len(todo) > 1
                and time_limit - (time.monotonic() - start) >= PARALLEL_MIN_SECONDS)
    if parallel:
        if not _solve_parallel(graph, hw, units, regions, todo, start + time_limit, workers, seed, max_groups,
                               report, notify, rate, reasons, jobs, ray):
            status_all = "feasible"
        todo = []
    for k in todo:
        u = units[k]
        remaining = max(0.0, time_limit - (time.monotonic() - start))
        if remaining <= 0:  # out of time: the rest keep their hint (building a model takes time too)
            status_all = "feasible"
            continue
        deadline = time.monotonic() + (remaining * len(u.part) / left if left else remaining)
        left -= len(u.part)
        if u.pre is None:  # a window: presolved now, its parts solved in turn within its share
            _solve_window(graph, hw, u, deadline, workers, seed, max_groups, report,
                          lambda v, b, k=k: notify(k, v, b), rate)
            continue
        if not _worth(u, deadline, rate):  # no time to even build its model: it keeps its hint
            status_all = "feasible"
            continue
        status, bnd = _solve_unit(graph, hw, u, deadline, workers, seed, max_groups, report,
                                  lambda v, b, k=k: notify(k, v, b), rate)
        region = regions[u.region]
        if region[1]:
            region[0] = min(max(bnd, region[0]), u.value)
        if status != "optimal":
            status_all = "feasible"
    # a region planned in windows keeps the whole hint instead when that is better (windows
    # cannot fuse across their boundaries)
    region_of = {v: u.region for u in units for v in u.part}
    hint_in: dict[int, list[list[str]]] = {}
    for g in start_groups:
        hint_in.setdefault(region_of[g[0]], []).append(g)
    groups, expect = [], 0
    for r, (_, exact) in enumerate(regions):
        mine = [u for u in units if u.region == r]
        val = sum(u.value for u in mine)
        if not exact and cost.plan_traffic(graph, hint_in.get(r, [])) < val:
            groups += hint_in[r]
            expect += cost.plan_traffic(graph, hint_in[r])
        else:
            groups += [g for u in mine for g in u.groups]
            expect += val
    traffic = cost.plan_traffic(graph, groups)
    if traffic != expect:
        raise InternalError(f"bug: CP-SAT objective {expect} != cost model traffic {traffic}")
    if covering:
        report.plan = _cover(graph, hw, groups, start, full_limit, workers, seed, min(max_groups, COVER_MAX_GROUPS),
                             max_pairs, report)
        return report
    total_bound = min(sum(b for b, _ in regions), traffic)
    if status_all == "optimal" and total_bound != traffic:
        raise InternalError(f"bug: every part optimal but bound {total_bound} != traffic {traffic}")
    report.plan = build_plan(graph, hw, groups, strategy="optimal", status=status_all,
                             bound_bytes=total_bound, solve_seconds=time.monotonic() - start)
    if reasons:
        more = f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else ""
        report.plan.reason = "; ".join(reasons[:3]) + more
    return report


def _split(groups: Sequence[Sequence[str]], unit_of: dict) -> dict[int, list[list[str]]]:
    """The pieces of ``groups`` inside each unit (ops of no unit are left out)."""
    pieces: dict[int, list[list[str]]] = {}
    for g in groups:
        by: dict[int, list[str]] = {}
        for v in g:
            k = unit_of.get(v)
            if k is not None:
                by.setdefault(k, []).append(v)
        for k, piece in by.items():
            pieces.setdefault(k, []).append(piece)
    return pieces


#: Seconds to build a model per candidate pair at first (then as measured): a part whose model
#: would take longer to build than its share of the time is not started and keeps its hint.
BUILD_PER_PAIR = 50e-6
#: Candidate groups the set-partitioning enumeration may reach per second of a part's share
#: (beyond, the assignment formulation is built): the enumeration must not eat the share.
GROUPS_PER_SECOND = 5000


def _pairs(u: _Unit) -> int:
    return sum(len(u.pre.cand[v]) - 1 for v in u.part)


def _worth(u: _Unit, deadline: float, rate: dict) -> bool:
    """Whether building ``u``'s model fits well inside the time until ``deadline``."""
    return 2 * _pairs(u) * rate["pair"] < deadline - time.monotonic()


def _solve_unit(graph: Graph, hw: Hardware, u: _Unit, deadline: float, workers: int, seed: int,
                max_groups: int, report: SolveReport, notify: Callable[[int, int], None],
                rate: dict) -> tuple[str, int]:
    """One part's model solved until ``deadline`` (lazy cycle cuts); ``u`` keeps the better of
    its groups and the solver's. Returns (status, bound). ``rate`` learns the build time per pair."""
    built = time.monotonic()
    max_groups = min(max_groups, max(500, int((deadline - built) * GROUPS_PER_SECOND)))
    f = _formulate(graph, hw, u.pre, u.part, max_groups)
    pairs = _pairs(u)
    if pairs >= 50:
        rate["pair"] = 0.5 * rate["pair"] + 0.5 * (time.monotonic() - built) / pairs
    report.formulations[f.name] = report.formulations.get(f.name, 0) + 1
    report.variables += len(f.model.Proto().variables)
    f.hint(u.groups)
    log = IncumbentLog(graph, f, notify)
    while True:
        status, bnd = run_model(f, deadline - time.monotonic(), workers, seed, log)
        cycle = quotient_cycle(graph, log.last) if log.last is not None else None
        if cycle is None or time.monotonic() >= deadline:
            break
        f.forbid(cycle)  # the relaxation picked a cyclic set of groups: cut it, solve again
    if status == "optimal" and cycle is not None:
        status = "feasible"  # optimum of the relaxation only; its bound still holds
    if log.best is not None and log.best[0] < u.value:
        u.value, u.groups = log.best
    return status, bnd


def _solve_window(graph: Graph, hw: Hardware, w: _Unit, deadline: float, workers: int, seed: int,
                  max_groups: int, report: SolveReport, notify: Callable[[int, int], None], rate: dict) -> None:
    """A window presolved and its parts solved one by one until ``deadline``; ``w`` (its groups
    so far: the hint's pieces) takes their groups when together they are better."""
    pre_w = presolve(graph, hw, nodes=w.part)
    subs = [_Unit(pre_w, part, w.region) for part in pre_w.parts]
    pieces = _split(w.groups, {v: k for k, sub in enumerate(subs) for v in sub.part})
    for k, sub in enumerate(subs):
        sub.groups = order_groups(graph, normalise(graph, pieces.get(k, [])))
        sub.value = cost.plan_traffic(graph, sub.groups)
    left = sum(len(sub.part) for sub in subs if len(sub.part) > 1)
    for k, sub in enumerate(subs):
        remaining = deadline - time.monotonic()
        if len(sub.part) < 2 or remaining <= 0:
            continue
        end = time.monotonic() + remaining * len(sub.part) / max(left, 1)
        left -= len(sub.part)
        if not _worth(sub, end, rate):
            continue
        others = sum(o.value for o in subs) - sub.value
        _solve_unit(graph, hw, sub, end, workers, seed, max_groups, report,
                    lambda v, b, others=others: notify(others + v, b), rate)
    value = sum(sub.value for sub in subs)
    if value < w.value:
        w.value, w.groups = value, [g for sub in subs for g in sub.groups]


#: Seconds past the time limit the parallel solve waits for its last tasks before it stops them.
PART_GRACE = 0.3
#: Seconds a task needs to start in a worker (unpickle, presolve its part): kept out of its share.
TASK_OVERHEAD = 0.05
#: Tasks per parallel slot the parts are batched into (see ``_batches``).
BATCHES_PER_SLOT = 4
#: With less time than this left for the parts, they are solved in this process even when
#: ``jobs``/``ray`` ask for parallel workers (starting them would take most of it).
PARALLEL_MIN_SECONDS = 2.0


@dataclass
class PartResult:
    """What a worker sends back for one part or window: its best groups (every op of the part,
    in an executable order) with their traffic, CP-SAT's status and bound, and model sizes."""
    groups: list[list[str]]
    value: int
    status: str
    bound: int
    variables: int = 0
    formulations: dict = field(default_factory=dict)


def solve_part(context: tuple, part: list[str], groups: list[list[str]], window: bool, seconds: float,
               workers: int, seed: int, max_groups: int) -> PartResult:
    """One unit of :func:`solve_report` solved on its own (the target of a parallel task):
    ``context`` is ``(graph, hardware)``; ``part`` an exact part of the presolve (its model is the
    one the sequential solve builds: the presolve of the part alone has the same candidates) or a
    window (``window``); ``groups`` its hint. Solved for ``seconds`` at most.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [1024]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> r = solve_part((g, load_hardware("nvidia-h100")), ["a", "b"], [["a"], ["b"]], False, 5, 1, 0, 20000)
    >>> r.groups, r.value, r.status
    ([['a', 'b']], 8192, 'optimal')
    """
    graph, hw = context
    deadline = time.monotonic() + seconds
    u = _Unit(None, list(part), 0, [list(g) for g in groups], cost.plan_traffic(graph, groups))
    report = SolveReport(plan=None)  # type: ignore[arg-type]
    rate = {"pair": BUILD_PER_PAIR}
    if window:
        _solve_window(graph, hw, u, deadline, workers, seed, max_groups, report, lambda v, b: None, rate)
        status, bound = "feasible", 0
    else:
        u.pre = presolve(graph, hw, nodes=part)
        if _worth(u, deadline, rate):
            status, bound = _solve_unit(graph, hw, u, deadline, workers, seed, max_groups, report,
                                        lambda v, b: None, rate)
        else:
            status, bound = "feasible", 0
    return PartResult(u.groups, u.value, status, bound, report.variables, report.formulations)


def warm_part_worker(context: tuple) -> None:
    """A part worker's warm-up (:func:`solve_part`'s lazy imports and caches: networkx, the
    graph's index; 0.4 s on a busy machine), run before its first task's clock starts."""
    graph, hw = context
    presolve(graph, hw, nodes=graph.index.order[:2])


def solve_parts(context: tuple, items: list[tuple], seconds: float, workers: int, seed: int,
                max_groups: int, until: Optional[tuple] = None) -> list[PartResult]:
    """A batch of units (``items``: ``(part, groups, window)``) solved one after another, smallest
    first, each with a share of the batch's ``seconds`` proportional to its size, as the
    sequential solve does (:func:`solve_part` each); results in the order of ``items``. ``until``:
    the caller's deadline (:func:`solverfuse.distribute.deadline_token`), kept on its machine."""
    deadline = distribute.task_deadline(seconds, until)
    left = sum(len(part) for part, _, _ in items)
    out: dict[int, PartResult] = {}
    for k in sorted(range(len(items)), key=lambda k: (len(items[k][0]), k)):
        part, groups, window = items[k]
        remaining = max(0.0, deadline - time.monotonic())
        share = remaining * len(part) / max(left, 1)
        left -= len(part)
        out[k] = solve_part(context, part, groups, window, share, workers, seed, max_groups)
    return [out[k] for k in range(len(items))]


def _batches(units: list, todo: list[int], slots: int) -> list[list[int]]:
    """``todo`` in batches for :func:`solve_parts`, largest first: a unit of at least
    1/(``BATCHES_PER_SLOT`` x ``slots``) of the ops alone, smaller ones together up to that size
    (a task per tiny part would cost more in start-up than its solve)."""
    target = sum(len(units[k].part) for k in todo) / (BATCHES_PER_SLOT * slots)
    out: list[list[int]] = []
    run: list[int] = []
    size = 0
    for k in sorted(todo, key=lambda k: (-len(units[k].part), k)):
        if len(units[k].part) >= target:
            out.append([k])
            continue
        run.append(k)
        size += len(units[k].part)
        if size >= target:
            out.append(run)
            run, size = [], 0
    return out + ([run] if run else [])


def _solve_parallel(graph: Graph, hw: Hardware, units: list, regions: list, todo: list[int], deadline: float,
                    workers: int, seed: int, max_groups: int, report: SolveReport, notify: Callable,
                    rate: dict, reasons: list[str], jobs: int, ray: Optional[str]) -> bool:
    """The units ``todo`` solved as parallel tasks (:func:`solve_parts` on :func:`_batches`),
    largest first, each batch with a share of the time left proportional to its size times the
    slots, until ``deadline`` (+ :data:`PART_GRACE`, then the rest are stopped). Units and regions
    are updated as results come; the units of a task that failed keep their hints and ``reasons``
    says why. Returns whether every exact part was proven optimal."""
    ex = distribute.open_executor((graph.structure_copy(), hw), jobs=jobs, ray=ray, workers=workers,
                                  warm="solverfuse.solve:warm_part_worker")
    all_optimal = True
    pending = _batches(units, todo, ex.slots)
    left = sum(len(units[k].part) for k in todo)
    try:
        while pending or ex.idle() < ex.slots:
            while pending and ex.idle() > 0:
                batch = pending.pop(0)
                size = sum(len(units[k].part) for k in batch)
                remaining = deadline - time.monotonic() - TASK_OVERHEAD
                share = min(remaining, remaining * ex.slots * size / max(left, 1))
                left -= size
                if share <= 0 or any(units[k].pre is not None and not _worth(units[k], time.monotonic() + share, rate)
                                     for k in batch):
                    all_optimal = False  # no time to build its models: they keep their hints
                    continue
                ex.submit(tuple(batch), "solverfuse.solve:solve_parts",
                          ([(units[k].part, units[k].groups, units[k].pre is None) for k in batch], share,
                           ex.task_workers, seed, max_groups, distribute.deadline_token(deadline)))
            wait = deadline + PART_GRACE - time.monotonic()
            outcomes = ex.wait(wait) if wait > 0 else ex.cancel_all("did not stop within the time limit; stopped")
            for o in outcomes:
                if not o.ok:
                    all_optimal = False
                    u = units[o.key[0]]
                    what = (f"the part of {u.part[0]!r} ({len(u.part)} ops) kept its hint" if len(o.key) == 1 else
                            f"{len(o.key)} parts ({sum(len(units[k].part) for k in o.key)} ops, the largest "
                            f"that of {u.part[0]!r}) kept their hints")
                    reasons.append(f"{what}: {o.reason}")
                    continue
                for k, r in zip(o.key, o.value):
                    u = units[k]
                    if sorted(v for g in r.groups for v in g) != sorted(u.part):
                        raise InternalError(f"bug: a worker's groups for the part of {u.part[0]!r} do not cover it")
                    report.variables += r.variables
                    for name, n in r.formulations.items():
                        report.formulations[name] = report.formulations.get(name, 0) + n
                    if r.value < u.value:
                        u.groups, u.value = r.groups, r.value
                    if u.pre is not None:
                        region = regions[u.region]
                        region[0] = min(max(r.bound, region[0]), u.value)
                        all_optimal = all_optimal and r.status == "optimal"
                    notify(k, u.value, r.bound)
    finally:
        ex.close()
    return all_optimal


#: Share of the time limit the partition stage gets when recomputation is allowed.
COVERING_SHARE = 0.5
#: A part with more candidate groups than this keeps its partition in the covering stage.
COVER_MAX_GROUPS = 5000
#: Kernels may be non-convex (``formulations/covering.md``), so the covering presolve's parts are
#: joined by every legal pair, not only by legal hulls; a residual stream then joins a whole
#: transformer into one part. When a part of that presolve has more ops than this, the covering
#: stage solves the convex presolve's parts instead (as good a plan as before non-convex kernels)
#: and bounds it by the non-convex floors only, so it claims no optimum it has not proven.
COVER_NONCONVEX_OPS = 24


def _cover(graph: Graph, hw: Hardware, partition: list, start: float, time_limit: float, workers: int,
           seed: int, max_groups: int, max_pairs: int, report: SolveReport) -> Plan:
    """The covering stage: the graph is presolved again with ``cost.looped_violation`` (its parts
    are unions of the partition's parts), and every part of two or more ops that is small enough is
    solved by the covering formulation, hinted with the partition's groups inside it; a part left
    unsolved keeps them. So the result is never worse than ``partition``. The bound of a part is
    CP-SAT's covering bound, at least the part's covering floor (``traffic_floor(recompute=True)``;
    ``cost.plan_floor`` for a part too large for candidates). When a part of the non-convex
    presolve exceeds :data:`COVER_NONCONVEX_OPS`, the parts solved are the convex presolve's and
    the bound is at most the non-convex presolve's floors (valid for every covering)."""
    pre = presolve(graph, hw, max_part=MAX_PART_OPS, violation=cost.looped_violation, convex=False)
    nonconvex_floor = None  # a bound valid for non-convex kernels when the parts solved are convex
    if any(len(part) > COVER_NONCONVEX_OPS for part in pre.parts):
        nonconvex_floor = sum(traffic_floor(graph, pre, part, recompute=True) if len(part) <= MAX_PART_OPS
                              else cost.plan_floor(graph, part) for part in pre.parts)
        pre = presolve(graph, hw, max_part=MAX_PART_OPS, violation=cost.looped_violation)
    part_of = {v: k for k, part in enumerate(pre.parts) for v in part}
    inside: dict[int, list[list[str]]] = {}
    for g in partition:
        inside.setdefault(part_of[g[0]], []).append(g)
    result: dict[int, list[cost.Kernel]] = {}
    bound, exact = 0, True
    todo = sorted(range(len(pre.parts)), key=lambda k: (len(pre.parts[k]), k))
    left = sum(len(pre.parts[k]) for k in todo)
    for k in todo:
        part = pre.parts[k]
        groups = order_groups(graph, inside.get(k, []))
        best = [cost.Kernel(tuple(g), tuple(cost.group_writes(graph, g))) for g in groups]
        value = cost.covering_traffic(graph, best)
        share = max(0.0, time_limit - (time.monotonic() - start)) * len(part) / max(left, 1)
        left -= len(part)
        bnd, status = cost.plan_floor(graph, part), "feasible"
        if len(part) == 1:
            pass
        elif len(part) <= MAX_PART_OPS:
            bnd = traffic_floor(graph, pre, part, recompute=True)
        if len(part) == 1:
            bnd, status = value, "optimal"
        elif len(part) <= MAX_PART_OPS and sum(len(pre.cand[v]) - 1 for v in part) <= max_pairs and share > 0:
            deadline = time.monotonic() + share
            f = covering.build(graph, hw, pre, part, max_groups=max_groups)
            if f is not None and time.monotonic() < deadline:
                report.formulations[f.name] = report.formulations.get(f.name, 0) + 1
                report.variables += len(f.model.Proto().variables)
                f.hint(groups)
                log = _CoverLog(f)
                status, cp_bound = run_model(f, deadline - time.monotonic(), workers, seed, log)
                if log.best is not None and log.best[0] < value:
                    value, best = log.best
                bnd = value if status == "optimal" else max(bnd, cp_bound)
        result[k] = best
        bound += min(bnd, value)
        exact = exact and status == "optimal"
    kernels = [kern for k in range(len(pre.parts)) for kern in result[k]]
    traffic = cost.covering_traffic(graph, kernels)
    bound = min(bound if nonconvex_floor is None else nonconvex_floor, traffic)
    status_all = "optimal" if (exact or nonconvex_floor is not None) and bound == traffic else "feasible"
    return build_covering_plan(graph, hw, kernels, strategy="covering", status=status_all, bound_bytes=bound,
                               solve_seconds=time.monotonic() - start)


class _CoverLog(cp_model.CpSolverSolutionCallback):
    """Incumbent log of one covering model: keeps the best kernels (no cycles to check)."""

    def __init__(self, f: "covering.Covering"):
        super().__init__()
        self.f = f
        self.best: Optional[tuple[int, list]] = None
        self.last = None

    def on_solution_callback(self) -> None:
        val = self.f.objective_value(self.Value)
        if self.best is None or val < self.best[0]:
            self.best = (val, self.f.kernels(self.Value))


#: Formulation modules, tried in this order on every part: the first model built is solved.
FORMULATIONS = (set_partition, assign)


def _formulate(graph: Graph, hw: Hardware, pre: Presolve, part: Sequence[str], max_groups: int) -> Formulation:
    for module in FORMULATIONS:
        f = module.build(graph, hw, pre, part, max_groups=max_groups)
        if f is not None:
            return f
    raise PlanError(f"bug: no formulation accepted the part of {part[0]!r}")


class IncumbentLog(cp_model.CpSolverSolutionCallback):
    """Incumbent log of one part: reports every acyclic solution, keeps the best one."""

    def __init__(self, graph: Graph, f: Formulation, notify: Callable[[int, int], None]):
        super().__init__()
        self.graph, self.f, self.notify = graph, f, notify
        self.best: Optional[tuple[int, list[list[str]]]] = None
        self.last: Optional[list[list[str]]] = None

    def on_solution_callback(self) -> None:
        val = self.f.objective_value(self.Value)
        self.last = self.f.decode(self.Value)
        if quotient_cycle(self.graph, self.last) is None and (self.best is None or val < self.best[0]):
            self.best = (val, order_groups(self.graph, self.last))
            self.notify(val, _floor(self.BestObjectiveBound()))


def _floor(bound: float) -> int:
    """An integer lower bound from CP-SAT's float bound (objective values are integers)."""
    return int(math.floor(bound + 1e-6 * max(1.0, abs(bound) * 1e-9)))


#: Tasks per batch of CP-SAT's deterministic interleaved search; None: one per worker (0 is CP-SAT's
#: own default, kept for ``benchmarks/perf.py``'s before/after).
INTERLEAVE_BATCH: Optional[int] = None


def run_model(f: Formulation, seconds: float, workers: int, seed: int, log: IncumbentLog) -> tuple[str, int]:
    """Solve one part's model: (status, bound). Solutions arrive through ``log``; the final one
    is checked against CP-SAT's own objective value."""
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(seconds, 0.01)
    p.num_workers = max(1, workers)
    p.random_seed = seed
    # deterministic for a fixed seed and worker count: workers run interleaved, not racing
    p.interleave_search = workers > 1
    # one task per worker in each batch: a batch ends when its slowest task does, and CP-SAT's
    # default (6 tasks) kept finished workers idle behind LP-heavy ones -- proving bart's
    # 92-op part took 35.8 s there against 10.4 s here (benchmarks/results/perf.md)
    p.interleave_batch_size = max(1, workers) if INTERLEAVE_BATCH is None else INTERLEAVE_BATCH
    log.last = None
    code = solver.Solve(f.model, log)
    status = STATUS[code]
    if status == "infeasible":
        raise InternalError(f"bug: CP-SAT says a part ({len(f.nodes)} ops, first {f.nodes[0]!r}) is infeasible, "
                        "but every op alone is legal")
    if status == "invalid":
        raise InternalError("bug: CP-SAT rejected a model as invalid")
    if status in ("optimal", "feasible"):
        val = f.objective_value(solver.Value)
        if abs(val - solver.ObjectiveValue()) > 1e-9 * max(1.0, abs(val)):
            raise InternalError(f"bug: objective terms {val} != CP-SAT objective {solver.ObjectiveValue()}")
        log.last = f.decode(solver.Value)
        if status == "optimal":
            return status, val
    return status, _floor(solver.BestObjectiveBound())


def quotient_cycle(graph: Graph, groups: Sequence[Sequence[str]]) -> Optional[list[list[str]]]:
    """Groups forming a cycle in the quotient graph (restricted to these groups), or None."""
    cycle = dag.quotient_cycle(groups, graph.index.succs)
    return None if cycle is None else [list(groups[k]) for k in cycle]


def normalise(graph: Graph, groups: Sequence[Sequence[str]]) -> list[list[str]]:
    """Split every group into its affine-connected pieces (ops joined by a tensor one produces and
    the other reads, or both read): same traffic, still legal, and the form the formulation uses.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}, "y": {"shape": [4]}}, "inputs": ["x", "y"],
    ...     "outputs": ["a", "b"], "nodes": [{"name": "p", "op": "Relu", "inputs": ["x"], "outputs": ["a"]},
    ...                                     {"name": "q", "op": "Relu", "inputs": ["y"], "outputs": ["b"]}]})
    >>> normalise(g, [["p", "q"]])
    [['p'], ['q']]
    """
    out = []
    pos = graph.index.position
    for g in groups:
        members = set(g)
        uf = dag.UnionFind(g)
        seen: dict[str, str] = {}
        for v in g:
            for t in graph.index.node[v].inputs:
                if not t:
                    continue
                p = graph.index.producer.get(t)
                for other in ([p] if p in members else []) + ([seen[t]] if t in seen else []):
                    uf.union(v, other)
                seen.setdefault(t, v)
        pieces: dict[str, list[str]] = {}
        for v in sorted(g, key=pos.__getitem__):
            pieces.setdefault(uf.find(v), []).append(v)
        out.extend(pieces.values())
    return out


def best_hint(graph: Graph, hw: Hardware, hints: Optional[Sequence[Sequence[Sequence[str]]]]) -> list[list[str]]:
    """The legal partition of least traffic among ``hints`` and the unfused plan, normalised."""
    best = [[v] for v in graph.index.order]
    best_traffic = cost.plan_traffic(graph, best)
    for h in hints or []:
        groups = [list(g) for g in h if g]
        if sorted(v for g in groups for v in g) != sorted(graph.index.order):
            continue
        if any(cost.group_violation(graph, g, hw) for g in groups):
            continue
        try:
            order_groups(graph, groups)
        except PlanError:
            continue
        t = cost.plan_traffic(graph, groups)
        if t < best_traffic:
            best, best_traffic = groups, t
    return order_groups(graph, normalise(graph, best))


__all__ = ["solve", "solve_report", "solve_part", "solve_parts", "PartResult", "SolveReport", "Incumbent", "normalise", "best_hint", "quotient_cycle", "run_model", "IncumbentLog", "STATUS"]
