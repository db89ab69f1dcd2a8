"""Every strategy on one graph: optimal vs each greedy baseline vs no fusion, as rows.

:func:`compare` plans the graph with the optimal planner, every baseline of
:data:`solverfuse.greedy.STRATEGIES` and every recomputing baseline of
:data:`solverfuse.greedy.RECOMPUTING` (``xla-recompute``: XLA's producer duplication, a
``solverfuse-plan/2`` plan), scores each plan with the one cost model (traffic, roofline time of its
kernels: :func:`solverfuse.cost.covering_time_ps`) and returns one :class:`Row` per strategy;
:func:`format_table`, :func:`format_markdown` and :func:`rows_json` render them.

No plan may beat an optimum of a space it lies in; if one does, that is a bug in the planner and
:func:`rows_for` raises instead of printing a table that hides it. A partition row is checked
against ``optimal`` (the partition optimum). A row that recomputes lies outside that space and may
legitimately move fewer bytes (its ``gap %`` is then negative): it is checked against the proven
bound of the ``covering`` row (the optimum with recomputation) when ``plan_all(covering=True)``
computed one, and otherwise is not checked at all -- the row says so (``checked_against`` is None)
and the table adds a footnote. ``objective="time"`` adds the time objective's rows
(``optimal-time``, and ``covering-time`` with ``covering``): their ``pred. time`` is what they
minimise; their traffic is checked against the proven bounds only (they do not minimise traffic),
and ``covering-time`` may not be slower than a recomputing baseline (it is hinted with them).

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> rows = compare(g, "nvidia-h100", time_limit=5, workers=1)
>>> [(r.strategy, r.groups, r.traffic_bytes, r.x_unfused, r.x_qmin) for r in rows][:2]
[('optimal', 1, 2048, 2.0, 1.0), ('unfused', 2, 4096, 1.0, 2.0)]
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import time
from typing import Optional, Union

from pydantic import BaseModel

from . import cost, greedy
from .errors import GraphError, InternalError
from .graph import Graph
from .hardware import Hardware, load_hardware
from .plans import FORMAT_COVERING, Plan, plan_kernels
from .summary import human_bytes


class Row(BaseModel):
    """One strategy's plan, scored by the cost model."""
    strategy: str
    status: str
    groups: int
    traffic_bytes: int
    x_unfused: float            # unfused traffic / this traffic (how many times less traffic)
    gap_to_optimal_pct: float   # (traffic - optimal traffic) / optimal traffic, in percent; < 0 only for a recomputing row or the covering row
    x_qmin: float               # this traffic / Q_min (1.0 = the lower bound)
    predicted_seconds: float    # cost.covering_time_ps / 1e12: roofline time of the kernels run in sequence
    planning_seconds: float     # wall time to make the plan
    bound_bytes: Optional[int] = None
    predicted_ps: Optional[int] = None  # the same time in exact integer picoseconds (the time objective's unit)
    recomputes: bool = False    # a solverfuse-plan/2 plan: some op in several kernels, or a looped kernel
    checked_against: Optional[str] = None  # the row whose optimum this one may not beat; None: not checked


#: Real-compiler rows: strategy -> (package it needs, module with ``real_plan(source, graph, hw)``).
#: Listed only for an ONNX source and when the optional extra is installed.
REAL_COMPILERS = {"tvm-real": ("tvm", "solverfuse.tvm")}


def real_plans(source: Union[str, os.PathLike], graph: Graph, hw: Hardware) -> dict[str, tuple[Plan, float]]:
    """The partitions real compilers make of the ONNX model ``source`` (imported as ``graph``), for
    :func:`plan_all`'s ``extra``; empty for other sources or without the compiler installed. A model
    the compiler cannot import (GraphError) gets no row; a real partition our rules reject raises
    PlanError naming the group and rule."""
    out: dict[str, tuple[Plan, float]] = {}
    if not os.fspath(source).endswith(".onnx"):
        return out
    for name, (package, module) in REAL_COMPILERS.items():
        if importlib.util.find_spec(package) is None:
            continue
        start = time.perf_counter()
        try:
            plan = importlib.import_module(module).real_plan(source, graph, hw)
        except GraphError:
            continue
        out[name] = (plan, time.perf_counter() - start)
    return out


def plan_all(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0, workers: int = 2,
             seed: int = 0, extra: Optional[dict[str, tuple[Plan, float]]] = None, covering: bool = False,
             objective: str = "traffic") -> dict[str, tuple[Plan, float]]:
    """Every strategy's plan and its planning wall time, optimal first.

    Each recomputing baseline (``xla-recompute``) is listed right after the partition baseline
    it refines. ``covering`` also solves for the optimum with recomputation (a ``covering`` row
    after ``optimal``, with its own ``time_limit``), against which recomputing rows are checked.
    ``objective="time"`` adds ``optimal-time`` (and ``covering-time`` with ``covering``) right
    after them, each with its own ``time_limit``.
    ``extra`` adds plans made elsewhere (``inductor-real``: the partition real torch.compile
    chose); each is listed right after the baseline its name starts with."""
    from .api import plan as make_plan
    hw = load_hardware(hw)
    out: dict[str, tuple[Plan, float]] = {}
    made = [("optimal", "traffic")] + ([("covering", "traffic")] if covering else [])
    if objective == "time":
        made += [(name, "time") for name, _ in made]
    for name, obj in made:
        start = time.perf_counter()
        p = make_plan(graph, hw, strategy=name, time_limit=time_limit, workers=workers, seed=seed, objective=obj)
        out[p.strategy if obj == "time" else name] = (p, time.perf_counter() - start)
    for name in greedy.STRATEGIES:
        start = time.perf_counter()
        out[name] = (greedy.greedy_plan(graph, hw, name), time.perf_counter() - start)
    added = {}
    for name in greedy.RECOMPUTING:
        start = time.perf_counter()
        plan = greedy.recomputing_plan(graph, hw, name)
        added[plan.strategy] = (plan, time.perf_counter() - start)
    for name, entry in {**added, **(extra or {})}.items():
        base = name.split("-")[0]
        keys = list(out)
        at = keys.index(base) + 1 if base in keys else len(keys)
        out = dict(list(out.items())[:at] + [(name, entry)] + list(out.items())[at:])
    return out


def check_optimality(plans: dict[str, tuple[Plan, float]]) -> dict[str, Optional[str]]:
    """Raise InternalError (a bug) if a plan beats an optimum of a space it lies in; return, per
    strategy, the row it was checked against (None: not checked).

    * a partition (``/1`` plan) may not move fewer bytes than ``optimal``: the optimal planner is
      hinted with every greedy partition and keeps the best, so even out of time it is never
      worse than them (the ``covering`` row, solved separately, is held to ``optimal``'s proven
      bound instead);
    * any plan may not move fewer bytes than the ``covering`` row's proven bound (every plan is a
      covering), when that row exists: this is the only check on a plan that recomputes, which
      may legitimately beat the partition optimum -- without a ``covering`` row it is unchecked.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> h100 = load_hardware("nvidia-h100")
    >>> tight = h100.model_copy(update={"register_budget": h100.kernel_base_registers + 3})  # 2 ops a kernel
    >>> plans = {"optimal": (greedy.greedy_plan(g, tight, "xla"), 0.0),
    ...          "xla-recompute": (greedy.recomputing_plan(g, tight, "xla"), 0.0)}
    >>> [(k, p.traffic_bytes) for k, (p, _) in plans.items()]
    [('optimal', 5120), ('xla-recompute', 4096)]
    >>> check_optimality(plans)
    {'optimal': 'optimal', 'xla-recompute': None}
    """
    best = plans["optimal"][0]
    cover = plans["covering"][0] if "covering" in plans else None
    floor = cover.bound_bytes if cover is not None else None
    out: dict[str, Optional[str]] = {}
    for name, (p, _) in plans.items():
        out[name] = None
        if floor is not None:
            if p.traffic_bytes < floor:
                raise InternalError(f"bug: the covering optimum is proven to move at least {floor} bytes "
                                    f"but {name!r} moves only {p.traffic_bytes} -- the covering planner "
                                    f"missed a legal plan")
            out[name] = "covering"
        if p.format != FORMAT_COVERING:
            limit = best.traffic_bytes if name not in TIME_ROWS + ("covering",) else best.bound_bytes
            if limit is not None and p.traffic_bytes < limit:
                raise InternalError(f"bug: the optimal plan moves {best.traffic_bytes} bytes but {name!r} moves "
                                    f"only {p.traffic_bytes} -- the optimal planner missed a legal plan")
            out[name] = "optimal"
    return out


#: Rows of the time objective (they minimise predicted time, not traffic).
TIME_ROWS = ("optimal-time", "covering-time")


def rows_for(graph: Graph, hw: Union[str, Hardware], plans: dict[str, tuple[Plan, float]]) -> list[Row]:
    """Score plans (``{strategy: (plan, seconds)}``, with an ``optimal`` entry) into rows: traffic
    as the validated plan states it, predicted time :func:`solverfuse.cost.covering_time_ps` of its
    kernels (stated writes and passes; for a partition it equals ``cost.plan_time_ps``).

    Raises InternalError (a bug) if a plan beats an optimum it may not beat
    (:func:`check_optimality`); each row records what it was checked against.
    """
    hw = load_hardware(hw)
    checked = check_optimality(plans)
    best = plans["optimal"][0].traffic_bytes
    unfused, qmin = cost.unfused_traffic(graph), cost.q_min(graph)
    rows = []
    for name, (p, seconds) in plans.items():
        t = p.traffic_bytes
        ps = cost.covering_time_ps(graph, plan_kernels(p), hw)
        if name == "covering-time":
            for base in greedy.RECOMPUTING:
                other = plans.get(f"{base}-recompute")
                if other is not None and ps > cost.covering_time_ps(graph, plan_kernels(other[0]), hw):
                    raise InternalError(f"bug: covering-time is hinted with {base}-recompute but is slower")
        rows.append(Row(strategy=name, status=p.status, groups=len(p.groups), traffic_bytes=t,
                        x_unfused=round(unfused / t, 4) if t else 1.0,
                        gap_to_optimal_pct=round(100.0 * (t - best) / best, 3) if best else 0.0,
                        x_qmin=round(t / qmin, 4) if qmin else 1.0,
                        predicted_seconds=ps / cost.PS, predicted_ps=ps,
                        planning_seconds=round(seconds, 4), bound_bytes=p.bound_bytes,
                        recomputes=p.format == FORMAT_COVERING, checked_against=checked[name]))
    return rows


def compare(graph: Graph, hw: Union[str, Hardware], *, time_limit: float = 10.0, workers: int = 2,
            seed: int = 0, covering: bool = False, objective: str = "traffic") -> list[Row]:
    """Plan ``graph`` with every strategy and return the scored rows (optimal first)."""
    return rows_for(graph, hw, plan_all(graph, hw, time_limit=time_limit, workers=workers, seed=seed,
                                        covering=covering, objective=objective))


def unchecked_note(rows: list[Row]) -> str:
    """The footnote for rows no optimum was checked against ("" when there are none).

    >>> r = Row(strategy="xla-recompute", status="heuristic", groups=2, traffic_bytes=8, x_unfused=1.0,
    ...         gap_to_optimal_pct=-20.0, x_qmin=1.0, predicted_seconds=0.0, planning_seconds=0.0)
    >>> unchecked_note([r])
    'not checked against an optimum: xla-recompute (recomputes; the partition optimum is of a smaller space and no covering bound was computed: --recompute)'
    """
    names = [r.strategy for r in rows if r.checked_against is None]
    if not names:
        return ""
    return (f"not checked against an optimum: {', '.join(names)} (recomputes; the partition optimum is "
            f"of a smaller space and no covering bound was computed: --recompute)")


_HEAD = ["strategy", "status", "kernels", "traffic", "x unfused", "gap %", "x Q_min", "pred. time",
         "plan time"]


def _cells(r: Row) -> list[str]:
    return [r.strategy, r.status, str(r.groups), human_bytes(r.traffic_bytes), f"{r.x_unfused:.2f}",
            f"{r.gap_to_optimal_pct:.1f}", f"{r.x_qmin:.2f}", f"{r.predicted_seconds * 1e6:.1f} us",
            f"{r.planning_seconds:.2f} s"]


def format_table(rows: list[Row], title: str = "") -> str:
    """A plain-text table, columns aligned.

    >>> r = Row(strategy="xla", status="heuristic", groups=3, traffic_bytes=2048, x_unfused=2.0,
    ...         gap_to_optimal_pct=0.0, x_qmin=1.0, predicted_seconds=4e-6, planning_seconds=0.01)
    >>> print(format_table([r]).splitlines()[2])
    xla       heuristic        3  2.00 KiB       2.00    0.0     1.00      4.0 us     0.01 s
    """
    table = [_HEAD] + [_cells(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(_HEAD))]
    lines = [title] if title else []
    for k, row in enumerate(table):
        lines.append("  ".join(c.ljust(w) if i < 2 else c.rjust(w) if k else c.ljust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    note = unchecked_note(rows)
    return "\n".join(lines + ([note] if note else []))


def format_markdown(rows: list[Row], title: str = "") -> str:
    """A GitHub-flavoured Markdown table."""
    lines = [f"**{title}**", ""] if title else []
    lines.append("| " + " | ".join(_HEAD) + " |")
    lines.append("|" + "|".join("---" if i < 2 else "---:" for i in range(len(_HEAD))) + "|")
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    note = unchecked_note(rows)
    return "\n".join(lines + (["", note] if note else []))


def rows_json(rows: list[Row], graph: Optional[Graph] = None, hardware: str = "") -> str:
    """``{"rows": [...]}`` (plus the graph name, hardware, Q_min and unfused traffic)."""
    doc: dict = {"hardware": hardware} if hardware else {}
    if graph is not None:
        doc.update(graph=graph.name, q_min_bytes=cost.q_min(graph),
                   unfused_traffic_bytes=cost.unfused_traffic(graph))
    doc["rows"] = [r.model_dump() for r in rows]
    return json.dumps(doc, indent=1, ensure_ascii=False)
