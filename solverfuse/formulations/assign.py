"""Representative-assignment formulation of fusion planning (one part of the graph at a time).

The math, with these variable names, is in ``formulations/representative-assignment.md``:

* ``assign[r, v]`` -- op ``v`` runs in the group whose representative (earliest op) is ``r``;
  ``assign[v, v]`` says ``v`` is a representative. Only presolve candidates get a variable.
* ``same[u, v]`` -- for a DAG edge ``u -> v`` that can be fused: both ops share a group.
* ``level[v]`` -- an integer ordering potential: equal inside a group, non-decreasing along every
  edge, strictly increasing along every edge that leaves a group. This makes every group convex and
  the quotient acyclic, and sorting groups by level gives an execution order.
* ``reads[t, r]`` -- group ``r`` reads tensor ``t`` from global memory (at its full size: some
  reader in ``r`` is not a gather-data reader); ``gathered[t, r]`` -- what ``r`` pays for ``t`` when
  every reader of ``t`` in ``r`` reads only part of it (``cost.partial_reader``: gather data, a Slice's
  window): ``min(size, sum of their output bytes)``;
  ``writes[t]`` -- ``t`` is written because a consumer is in another group (graph outputs / tensors
  read by other parts are written whatever the plan does).
* ``free[r]`` -- ``r``'s group is a free view group (only view ops, no graph output: 0 bytes);
  ``in_free[r, u]`` -- view op ``u`` is in ``r``'s free group; a read or write of a group that may be
  free is charged through ``paid`` indicators (``charged and not free``).
* ``resident[r, s]`` -- streaming reduction ``s`` keeps its row in ``r``'s group: forced by any
  successor of ``s`` in the same group (``rules.needs_row``), so the L1 row is exact, not additive.

The objective is ``cost.plan_traffic`` exactly, for every solution (the read/write indicators are
pinned from both sides, not just pushed down by the minimisation), so an incumbent's objective is
its plan's traffic, and the solver's bound is a bound on it.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> from solverfuse.formulations.presolve import presolve
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["y"]},
...               {"name": "b", "op": "Exp", "inputs": ["x"], "outputs": ["z"]}]})
>>> hw = load_hardware("nvidia-h100")
>>> pre = presolve(g, hw)
>>> f = build(g, hw, pre, pre.parts[0])
>>> from ortools.sat.python import cp_model
>>> s = cp_model.CpSolver(); s.parameters.num_workers = 1
>>> s.Solve(f.model) == cp_model.OPTIMAL, f.decode(s.Value), f.objective_value(s.Value)
(True, [['a', 'b']], 3072)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ortools.sat.python import cp_model

from .. import cost
from ..errors import PlanError
from ..graph import Graph
from ..hardware import Hardware
from ..mapping import op_footprint
from ..rules import assign_data, facts
from .presolve import Presolve

NAME = "representative-assignment"


@dataclass
class RepresentativeAssignment:
    """A built CP-SAT model for one part, its decoder and its exact objective terms (a
    :class:`~.protocol.Formulation`)."""
    model: cp_model.CpModel
    nodes: list[str]
    assign: dict[tuple[str, str], cp_model.IntVar]
    level: dict[str, cp_model.IntVar]
    terms: list[tuple[int, cp_model.IntVar]]
    constant: int
    same: dict[tuple[str, str], cp_model.IntVar]
    reads: dict[tuple[str, str], tuple[cp_model.IntVar, list[str], str | None]]
    writes: dict[str, tuple[cp_model.IntVar, str, list[str]]]
    free: dict[str, tuple[cp_model.IntVar, list[str]]]
    name: str = NAME

    def decode(self, value: Callable[[cp_model.IntVar], int]) -> list[list[str]]:
        """Groups (lists of op names, graph order) of a solution; ``value`` reads a variable."""
        groups: dict[str, list[str]] = {}
        for (r, v), x in self.assign.items():
            if value(x):
                groups.setdefault(r, []).append(v)
        return [groups[r] for r in self.nodes if r in groups]

    def objective_value(self, value: Callable[[cp_model.IntVar], int]) -> int:
        """The objective of a solution, in exact integer arithmetic."""
        return self.constant + sum(c * value(x) for c, x in self.terms)

    def hint(self, groups: Sequence[Sequence[str]]) -> None:
        """Hint a solution: this part's groups in an executable order, each op list in graph
        order (so its first op is the representative); the level of a group is its index."""
        self.model.ClearHints()
        rep, lev = {}, {}
        for i, g in enumerate(groups):
            for v in g:
                rep[v], lev[v] = g[0], i
        missing = [(r, v) for v, r in rep.items() if (r, v) not in self.assign]
        if missing:
            raise ValueError(f"bug: hint puts {missing[0][1]!r} with {missing[0][0]!r}, which presolve excluded")
        for (r, v), x in self.assign.items():
            self.model.AddHint(x, int(rep[v] == r))
        for v, lv in self.level.items():
            self.model.AddHint(lv, lev[v])
        for (u, v), s in self.same.items():
            self.model.AddHint(s, int(rep[u] == rep[v]))
        for (t, r), (x, cons, prod) in self.reads.items():
            self.model.AddHint(x, int(any(rep[c] == r for c in cons) and rep.get(prod) != r))
        for t, (x, u, cons) in self.writes.items():
            self.model.AddHint(x, int(any(rep[c] != rep[u] for c in cons)))
        members: dict[str, list[str]] = {}
        for v, r in rep.items():
            members.setdefault(r, []).append(v)
        for r, (x, freeable) in self.free.items():
            self.model.AddHint(x, int(rep[r] == r and all(v in freeable for v in members[r])))


    def forbid(self, cycle: Sequence[Sequence[str]]) -> None:
        """Never needed: the levels already make every solution's quotient graph acyclic."""
        raise PlanError(f"bug: the assignment model produced a quotient cycle through {cycle[0][0]!r}")

def build(graph: Graph, hw: Hardware, pre: Presolve, part: Sequence[str], *,
          max_groups: Optional[int] = None) -> RepresentativeAssignment:
    """Build the CP-SAT model of one presolve part (see the module doc and the .md document).
    Never declines a part (``max_groups`` is for formulations that enumerate groups)."""
    model = cp_model.CpModel()
    nodes = list(part)
    members = set(nodes)
    idx = graph.index
    cand = pre.cand
    assign: dict[tuple[str, str], cp_model.IntVar] = {}
    by_rep: dict[str, list[str]] = {r: [] for r in nodes}
    for v in nodes:
        for r in cand[v]:
            assign[r, v] = model.NewBoolVar(f"assign[{r},{v}]")
            by_rep[r].append(v)

    # partition: every op runs in exactly one group; only a representative's group has members
    for v in nodes:
        model.AddExactlyOne(assign[r, v] for r in cand[v])
        for r in cand[v]:
            if r != v:
                model.AddImplication(assign[r, v], assign[r, r])

    # fusion rules (rules.assign_data): at most one exclusive op per group, none beside a gather
    # ("apart"); opaque ops have no
    # candidates (presolve); non-fusable edges get no `same` variable, so the levels cut them
    rules = assign_data(graph, nodes)
    for r, vs in by_rep.items():
        ex = [assign[r, v] for v in vs if v in rules.exclusive]
        if len(ex) > 1:
            model.AddAtMostOne(ex)
        if ex:
            for v in vs:
                if v in rules.apart:
                    model.AddAtMostOne(ex + [assign[r, v]])
        inside = set(vs)
        for a, b in rules.separate:
            if a in inside and b in inside:
                model.AddAtMostOne([assign[r, a], assign[r, b]])
        if r in rules.alone and len(vs) > 1:
            raise ValueError(f"bug: opaque op {r!r} has candidates")

    # capacity, exactly mapping.group_footprint: base + sum(registers) <= budget, sum(l1) <= L1,
    # for every group of >= 2 ops (every op of a multi-op part fits alone: presolve)
    fp = {v: op_footprint(graph, v, hw) for v in nodes}
    reg_cap = hw.register_budget - hw.kernel_base_registers
    for r, vs in by_rep.items():
        if len(vs) < 2:
            continue
        regs = [(fp[v].registers, assign[r, v]) for v in vs]
        if sum(c for c, _ in regs) > reg_cap:
            model.Add(sum(c * x for c, x in regs) <= reg_cap)
        # a streaming reduction counts its row only when a successor shares its group
        # (rules.needs_row; on a convex group "downstream in the group" = "a successor in it")
        l1 = []
        for v in vs:
            if not fp[v].l1_bytes:
                continue
            if not facts(graph, v).streaming:
                l1.append((fp[v].l1_bytes, assign[r, v]))
                continue
            nxt = [w for w in idx.succs[v] if (r, w) in assign]
            if nxt:
                res = model.NewBoolVar(f"resident[{r},{v}]")
                for w in nxt:
                    model.Add(res >= assign[r, v] + assign[r, w] - 1)
                l1.append((fp[v].l1_bytes, res))
        if sum(c for c, _ in l1) > hw.l1_bytes:
            model.Add(sum(c * x for c, x in l1) <= hw.l1_bytes)

    # same[u, v] for a DAG edge inside the part whose ends share a candidate representative
    same: dict[tuple[str, str], cp_model.IntVar] = {}
    for u in nodes:
        for v in idx.succs[u]:
            if v not in members or (u, v) not in rules.fusable or not set(cand[u]) & set(cand[v]):
                continue
            s = model.NewBoolVar(f"same[{u},{v}]")
            same[u, v] = s
            for r in set(cand[u]) | set(cand[v]):
                xu, xv = assign.get((r, u)), assign.get((r, v))
                if xu is None or xv is None:
                    model.AddImplication(s, (xu if xv is None else xv).Not())
                else:
                    model.Add(xu == xv).OnlyEnforceIf(s)
                    # redundant: both in r's group means same group (levels alone imply it, the
                    # LP relaxation does not see it)
                    model.Add(s >= xu + xv - 1)

    # redundant convexity cuts: a group holding its representative r and v holds every op on a
    # path r -> v (presolve made those candidates of r); strong in the LP, unlike the levels
    for (r, v), x in assign.items():
        if r != v:
            for w in pre.between(r, v):
                model.AddImplication(x, assign[r, w])

    # convexity + acyclic quotient: level equal inside a group, +1 across every cut edge
    n = len(nodes)
    level = {v: model.NewIntVar(0, n - 1, f"level[{v}]") for v in nodes}
    for (r, v), x in assign.items():
        if r != v:
            model.Add(level[v] == level[r]).OnlyEnforceIf(x)
    for u in nodes:
        for v in idx.succs[u]:
            if v in members:
                s = same.get((u, v))
                model.Add(level[v] >= level[u] + (1 if s is None else 1 - s))

    # free view groups: free[r] <=> r represents a group of free-able views (views writing no
    # graph output) only; in_free[r, u] <=> u is in r's free group
    outputs = set(graph.outputs)
    freeable = {v for v in nodes if facts(graph, v).view and not any(t in outputs for t in idx.node[v].outputs)}
    free: dict[str, tuple[cp_model.IntVar, list[str]]] = {}
    for r in nodes:
        if r not in freeable:
            continue
        fr = model.NewBoolVar(f"free[{r}]")
        others = [assign[r, v] for v in by_rep[r] if v not in freeable]
        model.AddImplication(fr, assign[r, r])
        for x in others:
            model.AddImplication(x, fr.Not())
        model.Add(fr >= assign[r, r] - sum(others))
        free[r] = (fr, sorted(freeable))
    in_free: dict[str, list[cp_model.IntVar]] = {}
    for u in freeable:
        for r in cand[u]:
            if r in free:
                z = model.NewBoolVar(f"in_free[{r},{u}]")
                model.AddImplication(z, assign[r, u])
                model.AddImplication(z, free[r][0])
                model.Add(z >= assign[r, u] + free[r][0] - 1)
                in_free.setdefault(u, []).append(z)

    def paid(x, waived: list, name: str):
        """x and not (one of ``waived``, at most one of which is true) -- exactly."""
        if not waived:
            return x
        p = model.NewBoolVar(f"paid[{name}]")
        model.Add(p >= x - sum(waived))
        model.Add(p <= x)
        for w in waived:
            model.AddImplication(w, p.Not())
        return p

    # objective: exact traffic of this part's groups
    terms: list[tuple[int, cp_model.IntVar]] = []
    constant = 0
    reads: dict = {}
    writes: dict = {}
    tensors_read: dict[str, None] = {}
    for v in nodes:
        for t in idx.node[v].inputs:
            if t:
                tensors_read[t] = None
    for t in tensors_read:
        nb = graph.nbytes(t)
        prod = idx.producer.get(t)
        inside = [c for c in idx.consumers[t] if c in members]
        reps: dict[str, list[str]] = {}
        for c in inside:
            for r in cand[c]:
                reps.setdefault(r, []).append(c)
        for r, readers in reps.items():
            readers = list(dict.fromkeys(readers))
            cs = [c for c in readers if not cost.partial_reader(graph, c, t)]
            gs = [c for c in readers if c not in cs]
            xp = assign.get((r, prod)) if prod in members else None
            waive = [free[r][0]] if r in free else []
            rd = None
            if cs:
                xs = [assign[r, c] for c in cs]
                if xp is None and len(xs) == 1:
                    rd = xs[0]  # read iff that consumer is in r's group
                else:
                    rd = model.NewBoolVar(f"reads[{t},{r}]")
                    for x in xs:
                        model.Add(rd >= x - (xp if xp is not None else 0))
                    model.Add(rd <= sum(xs))
                    if xp is not None:
                        model.AddImplication(xp, rd.Not())
                    reads[t, r] = (rd, cs, prod)
                terms.append((nb, paid(rd, waive, f"{t},{r}")))
            if not gs:
                continue
            # partial readers only (gathers, windows: a free group holds none, no waiver needed)
            share = [(graph.nbytes(idx.node[c].outputs[0]), assign[r, c]) for c in gs]
            if len(gs) == 1 and xp is None and rd is None:
                terms.append((min(nb, share[0][0]), share[0][1]))
                continue
            total = model.NewIntVar(0, sum(b for b, _ in share), f"gsum[{t},{r}]")
            model.Add(total == sum(b * x for b, x in share))
            capped = model.NewIntVar(0, nb, f"gmin[{t},{r}]")
            model.AddMinEquality(capped, [total, nb])
            off = [x for x in (rd, xp) if x is not None]
            active = model.NewBoolVar(f"gactive[{t},{r}]")
            for x in off:
                model.AddImplication(x, active.Not())
            model.Add(active + sum(off) >= 1)
            gp = model.NewIntVar(0, nb, f"gathered[{t},{r}]")
            model.Add(gp == capped).OnlyEnforceIf(active)
            model.Add(gp == 0).OnlyEnforceIf(active.Not())
            terms.append((1, gp))
    for u in nodes:
        waive = in_free.get(u, [])
        for t in idx.node[u].outputs:
            if not t:
                continue
            nb = graph.nbytes(t)
            cons = idx.consumers.get(t, [])
            if t in outputs or any((u, c) not in same for c in cons):
                if t in outputs or cons:
                    constant += nb  # written, unless u's group is free: then refunded
                    terms.extend((-nb, z) for z in waive)
                continue
            if not cons:
                continue
            cut = [same[u, c] for c in cons]
            if len(cut) == 1 and not waive:
                # written iff the single consumer is in another group
                constant += nb
                terms.append((-nb, cut[0]))
                continue
            wr = model.NewBoolVar(f"writes[{t}]")
            for s in cut:
                model.AddImplication(s.Not(), wr)
            model.Add(wr <= sum(1 - s for s in cut))
            terms.append((nb, paid(wr, waive, t)))
            writes[t] = (wr, u, cons)
    objective = sum(c * x for c, x in terms) + constant
    # redundant bound: no plan of the part beats cost.plan_floor (its one-kernel traffic without
    # the views' reads and writes), a floor the LP relaxation cannot see through the big-M rows
    model.Add(objective >= cost.plan_floor(graph, nodes))
    model.Minimize(objective)
    return RepresentativeAssignment(model=model, nodes=nodes, assign=assign, level=level, terms=terms,
                                    constant=constant, same=same, reads=reads, writes=writes, free=free)
