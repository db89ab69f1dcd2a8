"""The covering stage: plans with recomputation and looped reductions, part by part, hinted so
that the result is never worse than the partition optimum or the recomputing baselines.

The graph is presolved again with ``cost.looped_violation`` (its parts are unions of the
partition's parts: no legal kernel spans two), and every part of two or more ops that is small
enough is solved by the covering formulation (:mod:`solverfuse.formulations.covering`), hinted with
the best of the whole-graph hints restricted to the part (the partition optimum's groups, the
``xla-recompute`` and ``inductor-recompute`` kernels: :func:`baseline_kernels`); a part left
unsolved keeps that best restriction. A hint with a kernel spanning two parts cannot be split and
competes whole at the end (:func:`cover`). The objective is traffic (``cost.kernel_traffic``) or any
per-kernel ``score`` (the time objective's ``cost.kernel_time_ps``,
:func:`solverfuse.time_objective.solve_covering_time`).

This module runs no solver itself: CP-SAT runs through the ``run`` callable the caller passes
(:func:`solverfuse.solve.run_covering`), so ``solve.py`` stays the only module running it and
imports flow one way (``solve`` -> ``cover_stage``).

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> import time
>>> from solverfuse.solve import run_covering
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
>>> hw = load_hardware("nvidia-h100")
>>> hw = hw.model_copy(update={"register_budget": hw.kernel_base_registers + 3})
>>> r = cover(g, hw, [partition_kernels(g, [["a", "b"], ["c"]])], run_covering,
...           deadline=time.monotonic() + 10, max_pairs=6000, max_part_ops=400)
>>> r.value, r.bound, r.exact, sorted(k.nodes for k in r.kernels)
(4096, 4096, True, [('a', 'b'), ('a', 'c')])
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from . import cost, greedy
from .errors import PlanError
from .formulations import covering
from .formulations.covering import Covering, Score
from .formulations.presolve import Presolve, presolve, traffic_floor
from .graph import Graph
from .hardware import Hardware
from .plans import order_kernels, plan_kernels

#: Share of the time limit the partition stage gets when recomputation is allowed.
COVERING_SHARE = 0.5
#: A part with more candidate groups than this keeps its hint in the covering stage.
COVER_MAX_GROUPS = 5000
#: Candidate groups a covering model may have per second of its part's share (about 1 ms each to
#: build under the time objective on a busy machine, 0.6 ms under traffic; clip_vision's 1,716-column
#: part): a part with more keeps its hint, so building its model does not overrun the time limit.
COVER_GROUPS_PER_SECOND = 1000
#: Kernels may be non-convex (``formulations/covering.md``), so the covering presolve's parts are
#: joined by every legal pair, not only by legal hulls; a residual stream then joins a whole
#: transformer into one part. When a part of that presolve has more ops than this, the covering
#: stage solves the convex presolve's parts instead (as good a plan as before non-convex kernels)
#: and bounds it by the non-convex floors only, so it claims no optimum it has not proven.
COVER_NONCONVEX_OPS = 24

#: Solves one covering model within ``seconds``: (status, bound, best (value, kernels) or None).
Runner = Callable[[Covering, float], tuple]
#: A lower bound on a part's objective over every covering of its ops (given the presolve).
Floor = Callable[[Presolve, list], int]


@dataclass
class CoverResult:
    """What :func:`cover` found: the kernels (every part's, in part order), their objective
    ``value``, ``bound`` (sum over parts of CP-SAT's bound or the part's floor; a bound on every
    covering whose kernels are connected, which for traffic is every covering), ``exact`` (every
    part proven optimal), the models built (formulation name -> count) and their variables, and
    ``whole`` (the name of a whole-graph hint that beat the assembled parts, else None)."""
    kernels: list
    value: int
    bound: int
    exact: bool
    models: int = 0
    variables: int = 0
    whole: Optional[str] = None


def partition_kernels(graph: Graph, groups: Sequence[Sequence[str]]) -> list[cost.Kernel]:
    """A partition's groups as kernels (each writes its ``cost.group_writes``).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> partition_kernels(g, [["a"], ["b"]])
    [Kernel(nodes=('a',), writes=('h',), passes=1), Kernel(nodes=('b',), writes=('y',), passes=1)]
    """
    return [cost.Kernel(tuple(g), tuple(cost.group_writes(graph, g))) for g in groups]


def baseline_kernels(graph: Graph, hw: Hardware) -> dict[str, list[cost.Kernel]]:
    """The recomputing baselines' validated plans as kernels, by strategy name
    (``xla-recompute``, ``inductor-recompute``: :func:`solverfuse.greedy.recomputing_plan`), to hint
    the covering stage so that it is never worse than either. A baseline whose plan the validator
    rejects (a bug of that baseline) is left out rather than failing the solve.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> baseline_kernels(g, load_hardware("nvidia-h100"))["xla-recompute"]
    [Kernel(nodes=('a', 'b'), writes=('y',), passes=1)]
    """
    out = {}
    for name in greedy.RECOMPUTING:
        try:
            out[f"{name}-recompute"] = plan_kernels(greedy.recomputing_plan(graph, hw, name))
        except PlanError:  # a baseline bug (``compare`` shows it): the covering stage goes on without it
            continue
    return out


def covering_floor(graph: Graph, max_part_ops: int) -> Floor:
    """The traffic floor of a part over every covering: ``traffic_floor(recompute=True)``, or
    ``cost.plan_floor`` for a part of over ``max_part_ops`` ops (too large for candidates).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> pre = presolve(g, load_hardware("nvidia-h100"), violation=cost.looped_violation)
    >>> covering_floor(g, 400)(pre, pre.parts[0])
    32
    """
    return lambda pre, part: (traffic_floor(graph, pre, part, recompute=True) if len(part) <= max_part_ops
                              else cost.plan_floor(graph, part))


def cover(graph: Graph, hw: Hardware, hints: Sequence[Sequence[cost.Kernel]], run: Runner, *,
          deadline: float, score: Optional[Score] = None, floor: Optional[Floor] = None,
          max_groups: int = COVER_MAX_GROUPS, max_pairs: int, max_part_ops: int,
          names: Optional[Sequence[str]] = None) -> CoverResult:
    """The least-``score`` covering found by ``deadline``, never worse than any of ``hints``
    (whole-graph coverings, e.g. :func:`partition_kernels` of the partition optimum and
    :func:`baseline_kernels`; ``names`` theirs, for :attr:`CoverResult.whole`). ``score(nodes,
    writes, passes)``: a kernel's cost (default ``cost.kernel_traffic``); ``floor``: a part's lower
    bound (default :func:`covering_floor`). Parts of over ``max_part_ops`` ops or ``max_pairs``
    candidate pairs, or more candidate groups than :data:`COVER_GROUPS_PER_SECOND` times their
    share of the time, keep their best hint (the partition stage's limits:
    :data:`solverfuse.solve.MAX_PART_OPS`, :data:`~solverfuse.solve.MAX_PAIRS`). Parts are solved
    smallest first, each with a share of the time left proportional to its ops. The parts are the
    ``convex=False`` presolve's (kernels may be non-convex), unless one has over
    :data:`COVER_NONCONVEX_OPS` ops: then the convex presolve's parts are solved and the bound is
    the sum of ``floor`` over the non-convex parts."""
    model_score = score  # None: the covering model's own linear traffic objective (no write levels)
    if score is None:
        score = lambda nodes, writes, passes: cost.kernel_traffic(graph, nodes, writes, passes)  # noqa: E731
    floor = floor or covering_floor(graph, max_part_ops)

    def value(kernels: Sequence[cost.Kernel]) -> int:
        return sum(score(k.nodes, k.writes, k.passes) for k in kernels)

    pre = presolve(graph, hw, max_part=max_part_ops, violation=cost.looped_violation, convex=False)
    nonconvex_floor = None  # a bound valid for non-convex kernels when the parts solved are convex
    if any(len(part) > COVER_NONCONVEX_OPS for part in pre.parts):
        nonconvex_floor = sum(floor(pre, part) for part in pre.parts)
        pre = presolve(graph, hw, max_part=max_part_ops, violation=cost.looped_violation)
    part_of = {v: k for k, part in enumerate(pre.parts) for v in part}
    # each hint restricted to every part (None: a kernel spans two parts, the hint competes whole)
    split: list[Optional[dict[int, list[cost.Kernel]]]] = []
    hints = [order_kernels(graph, h) for h in hints]  # (so each part's kernels are in an executable order)
    for h in hints:
        per: Optional[dict[int, list[cost.Kernel]]] = {}
        for kern in h:
            ks = {part_of[v] for v in kern.nodes}
            if len(ks) > 1:
                per = None
                break
            per.setdefault(ks.pop(), []).append(kern)
        split.append(per)
    result: dict[int, list[cost.Kernel]] = {}
    out = CoverResult(kernels=[], value=0, bound=0, exact=True)
    todo = sorted(range(len(pre.parts)), key=lambda k: (len(pre.parts[k]), k))
    left = sum(len(pre.parts[k]) for k in todo)
    for k in todo:
        part = pre.parts[k]
        options = sorted(((value(per.get(k, [])), n, per.get(k, [])) for n, per in enumerate(split) if per is not None),
                         key=lambda o: (o[0], o[1]))
        if not options:
            raise ValueError("bug: no hint splits into the covering stage's parts (the partition always does)")
        val, _, best = options[0]
        share = max(0.0, deadline - time.monotonic()) * len(part) / max(left, 1)
        left -= len(part)
        bnd, status = floor(pre, part), "feasible"
        if len(part) == 1:
            bnd, status = val, "optimal"
        elif len(part) <= max_part_ops and sum(len(pre.cand[v]) - 1 for v in part) <= max_pairs and share > 0:
            stop = time.monotonic() + share
            limit = min(max_groups, int(share * COVER_GROUPS_PER_SECOND))
            f = (covering.build(graph, hw, pre, part, max_groups=limit, score=model_score, deadline=stop)
                 if limit > 0 else None)
            if f is not None and time.monotonic() < stop:
                out.models += 1
                out.variables += len(f.model.Proto().variables)
                for _, _, kernels in options:  # the best hint that is a covering of the model's columns
                    try:
                        f.hint(kernels)
                        break
                    except ValueError:
                        continue
                status, cp_bound, found = run(f, stop - time.monotonic())
                if found is not None and found[0] < val:
                    val, best = found
                bnd = val if status == "optimal" else max(bnd, cp_bound)
        result[k] = best
        out.bound += min(bnd, val)
        out.exact = out.exact and status == "optimal"
    out.kernels = [kern for k in range(len(pre.parts)) for kern in result[k]]
    out.value = value(out.kernels)
    for n, h in enumerate(hints):
        if split[n] is None and value(h) < out.value:
            out.kernels, out.value, out.exact = list(h), value(h), False
            out.whole = names[n] if names else f"hint {n}"
    if nonconvex_floor is None:
        out.bound = min(out.bound, out.value)
    else:  # the convex parts' CP-SAT bounds do not hold for non-convex kernels across them
        out.bound = min(nonconvex_floor, out.value)
        out.exact = out.bound == out.value
    return out


__all__ = ["cover", "CoverResult", "partition_kernels", "baseline_kernels", "covering_floor",
           "COVERING_SHARE", "COVER_MAX_GROUPS", "COVER_GROUPS_PER_SECOND", "COVER_NONCONVEX_OPS", "Runner", "Floor"]
