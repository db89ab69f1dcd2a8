"""Covering formulation: choose kernels that cover every op, recomputing ops where that pays.

The math, with these names, is in ``formulations/covering.md``:

* ``columns`` -- every affine-connected group of the part, convex or not (a path may leave a
  kernel and come back: the availability order below keeps that legal), legal as one pass or as
  a looped kernel (``cost.looped_violation``; enumerated as set partitioning does, from a presolve
  made with ``convex=False``), each in the variants
  the cost model tells apart: one pass (``cost.group_violation`` is None) or ``loop_passes``
  passes (when only the looped kernel is legal); for a group of views only, ``free`` (writes no
  graph output: 0 bytes) and ``copy`` (writes at least one graph output: charged);
* ``pick[c]`` -- column ``c`` is a kernel of the plan; ``write[c, t]`` -- it writes tensor ``t``
  (which it produces); ``pos[c]`` -- its place in the execution order;
* cover: every op in at least one picked column;
* availability: a tensor of the part that some picked column reads from memory, that is a graph
  output or that a later part reads, is written by exactly one picked column, which runs earlier:
  ``when[t] >= pos[writer]`` enforced by ``write[writer, t]`` and ``pos[reader] >= when[t] + 1``
  by ``pick[reader]`` (one constraint per writer and per reader, not per pair); nothing else is
  written;
* objective: ``sum(read[c] * pick[c]) + sum(bytes(t) * write[c, t])`` with ``read[c]`` every
  pass's gather-aware reads (0 for a free view column) -- ``cost.kernel_traffic`` of the decoded
  kernel, for every solution;
* or, with ``score`` (the time objective passes ``cost.kernel_time_ps``), ``sum(score[c, s] *
  level[c, s])``: a kernel's time is not additive in its writes, so each column gets one boolean
  ``level[c, s]`` per distinct total ``s`` of bytes its possible write sets have (exactly one when
  picked: ``sum(level[c, s]) == pick[c]``, and ``sum(s * level[c, s]) == sum(bytes(t) *
  write[c, t])``), scored by ``score`` of a write set of that total -- exact whenever ``score``
  depends on the writes only through their total bytes and whether the kernel is free
  (``formulations/covering.md``, section "The time objective").

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> from solverfuse import cost
>>> from solverfuse.formulations.presolve import presolve
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
>>> hw = load_hardware("nvidia-h100")
>>> hw = hw.model_copy(update={"register_budget": hw.kernel_base_registers + 3})
>>> pre = presolve(g, hw, violation=cost.looped_violation, convex=False)
>>> f = build(g, hw, pre, pre.parts[0])
>>> from ortools.sat.python import cp_model
>>> s = cp_model.CpSolver(); s.parameters.num_workers = 1
>>> s.Solve(f.model) == cp_model.OPTIMAL, f.kernels(s.Value), f.objective_value(s.Value)
(True, [Kernel(nodes=('a', 'b'), writes=('y',), passes=1), Kernel(nodes=('a', 'c'), writes=('z',), passes=1)], 4096)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ortools.sat.python import cp_model

from .. import cost
from ..graph import Graph
from ..hardware import Hardware
from ..mapping import loop_passes
from ..rules import facts, gather_data_reader, view_only
from .presolve import Presolve
from .set_partition import enumerate_groups

NAME = "covering"


@dataclass(frozen=True)
class Column:
    """One candidate kernel: its ops (graph order), passes, and for views only whether it is free."""
    nodes: tuple
    passes: int = 1
    free: bool = False
    copy: bool = False


@dataclass
class Covering:
    """A built covering model of one part (a :class:`~.protocol.Formulation`, decoding to kernels)."""
    model: cp_model.CpModel
    nodes: list[str]
    columns: list[Column]
    pick: list[cp_model.IntVar]
    write: dict  # (column index, tensor) -> BoolVar
    pos: list[cp_model.IntVar]
    read: list[int]
    wbytes: dict  # (column index, tensor) -> bytes
    graph: Optional[Graph] = None
    name: str = NAME
    key: dict = field(default_factory=dict)
    #: the objective as (coefficient, variable) terms: what :meth:`objective_value` sums
    terms: list = field(default_factory=list)
    #: with ``score``: column index -> {total write bytes: level variable}
    levels: dict = field(default_factory=dict)

    def kernels(self, value: Callable[[cp_model.IntVar], int]) -> list[cost.Kernel]:
        """The picked kernels with their writes, in the model's execution order."""
        out = []
        for i, c in enumerate(self.columns):
            if value(self.pick[i]):
                ws = tuple(t for (j, t), w in self.write.items() if j == i and value(w))
                out.append((value(self.pos[i]), i, cost.Kernel(c.nodes, ws, c.passes)))
        return [k for _, _, k in sorted(out)]

    def decode(self, value: Callable[[cp_model.IntVar], int]) -> list[list[str]]:
        return [list(k.nodes) for k in self.kernels(value)]

    def objective_value(self, value: Callable[[cp_model.IntVar], int]) -> int:
        return sum(c * value(x) for c, x in self.terms)

    def hint(self, groups: Sequence[Sequence[str]]) -> None:
        """Hint a solution: a partition of the part (executable order), or kernels."""
        self.model.ClearHints()
        chosen: dict[int, tuple] = {}
        for n, g in enumerate(groups):
            if isinstance(g, cost.Kernel):
                nodes, writes, passes = tuple(g.nodes), set(g.writes), g.passes
            else:
                nodes, passes = tuple(g), 1
                writes = set(cost.group_writes(self.graph, nodes))
            free = cost.kernel_free(self.graph, nodes, writes) and view_only(self.graph, nodes)
            i = self.key.get((nodes, passes, free))
            if i is None:
                raise ValueError(f"bug: hint kernel {list(nodes)} is not a column")
            chosen[i] = (n, writes)
        for i, y in enumerate(self.pick):
            self.model.AddHint(y, int(i in chosen))
            if i in chosen:
                self.model.AddHint(self.pos[i], chosen[i][0])
        for (i, t), w in self.write.items():
            self.model.AddHint(w, int(i in chosen and t in chosen[i][1]))
        for i, lv in self.levels.items():
            total = sum(self.wbytes[j, t] for (j, t) in self.write if j == i and t in chosen[i][1]) \
                if i in chosen else None
            for s, z in lv.items():
                self.model.AddHint(z, int(s == total))

    def forbid(self, cycle: Sequence[Sequence[str]]) -> None:
        raise ValueError("bug: a covering model orders its kernels exactly; it has no cycles to cut")


def columns_of(graph: Graph, hw: Hardware, groups: Sequence[Sequence[str]]) -> list[Column]:
    """The variants of each enumerated group the cost model charges differently."""
    out = []
    outputs = graph.index.outputs
    for g in groups:
        nodes = tuple(g)
        if cost.group_violation(graph, nodes, hw) is None:
            if len(nodes) and view_only(graph, nodes):
                out.append(Column(nodes, free=True))
                if any(t in outputs for t in cost.produced(graph, nodes)):
                    out.append(Column(nodes, copy=True))
            else:
                out.append(Column(nodes))
        else:
            k = loop_passes(graph, nodes)
            if k > 1 and cost.kernel_violation(graph, nodes, hw, k) is None:
                out.append(Column(nodes, passes=k))
    return out


#: A column whose write sets have more distinct byte totals than this makes :func:`build` with
#: ``score`` give up (None: the caller keeps its hint).
MAX_LEVELS = 256

Score = Callable[[tuple, tuple, int], int]


def write_levels(graph: Graph, col: Column, writable: Sequence[str]) -> Optional[dict[int, tuple]]:
    """Every distinct total of bytes a kernel of ``col`` may write (subsets of ``writable``; for a
    copy column only those holding a graph output), each with one write set reaching it; None when
    there are over :data:`MAX_LEVELS`.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> write_levels(g, Column(("a", "b")), ["h", "y"])
    {0: (), 16: ('h',), 32: ('h', 'y')}
    """
    outputs = graph.index.outputs
    states: dict[tuple[int, bool], tuple] = {(0, False): ()}
    for t in writable:
        for (s, out), ws in list(states.items()):
            key = (s + (0 if col.free else cost.write_bytes(graph, col.nodes, t, col.passes)), out or t in outputs)
            states.setdefault(key, ws + (t,))
        if len({s for s, _ in states}) > MAX_LEVELS:
            return None
    found: dict[int, tuple] = {}
    for (s, out), ws in sorted(states.items()):
        if out or not col.copy:
            found.setdefault(s, ws)
    return found


def dominated(graph: Graph, hw: Hardware, nodes: Sequence[str]) -> bool:
    """Whether some optimal covering never needs the non-convex one-pass kernel ``nodes``: it
    recomputes an op ``u`` whose result ``t`` an op ``w`` outside it must read from memory (an
    anchor's input, a gather's data) on a path that comes back into it, and it reads no fewer
    bytes than the kernel without ``u``. Then ``t`` is written before this kernel runs (``w``'s
    kernels read it, and they run before this one: they feed it through that path), so the
    kernel without ``u`` -- legal, a subset; its affine components are columns -- reading ``t``
    instead of ``u``'s inputs, with the same writes, replaces it at no more traffic
    (``formulations/covering.md``, *Non-convex kernels*). A ResNet block's ``relu -> conv ... ->
    add``: recomputing the relu in the add's kernel is never better than reading it.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [8, 8]}, "w": {"shape": [8, 8], "constant": True}},
    ...     "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "m", "op": "MatMul", "inputs": ["h", "w"], "outputs": ["p"]},
    ...               {"name": "c", "op": "Add", "inputs": ["p", "h"], "outputs": ["y"]}]})
    >>> h100 = load_hardware("nvidia-h100")
    >>> dominated(g, h100, ["a", "c"]), dominated(g, h100, ["m", "c"]), dominated(g, h100, ["a"])
    (True, False, False)
    """
    if len(nodes) < 2 or view_only(graph, nodes) or cost.group_violation(graph, nodes, hw) is not None:
        return False  # views may be free, a looped kernel reads per pass: kept
    idx = graph.index
    pos, desc = idx.position, idx.desc
    inside = set(nodes)
    mask = sum(1 << pos[v] for v in inside)
    reads = sum(b for _, b in cost.kernel_reads(graph, nodes))
    for u in nodes:
        outs = [t for t in idx.node[u].outputs if t]
        if len(outs) != 1 or not any(
                w not in inside and desc[pos[w]] & mask and
                (facts(graph, w).materialised_inputs or gather_data_reader(graph, w, outs[0]))
                for w in idx.consumers.get(outs[0], [])):
            continue
        rest = [v for v in nodes if v != u]
        if sum(b for _, b in cost.kernel_reads(graph, rest)) <= reads:
            return True
    return False


def build(graph: Graph, hw: Hardware, pre: Presolve, part: Sequence[str], *,
          max_groups: int = 20000, score: Optional[Score] = None,
          deadline: Optional[float] = None) -> Optional[Covering]:
    """The covering model of one part of a presolve made with ``cost.looped_violation`` (and
    ``convex=False``, so that parts and candidates admit non-convex kernels), or None when the
    part has over ``max_groups`` candidate groups. ``score(nodes, writes, passes)``
    replaces a kernel's cost (default ``cost.kernel_traffic``; the time objective passes
    ``cost.kernel_time_ps``); it must depend on the writes only through their total bytes and
    whether the kernel is free. None too when a column has over :data:`MAX_LEVELS` write totals,
    or when building passes ``deadline`` (``time.monotonic()``: the caller keeps its hint)."""
    def late() -> bool:
        return deadline is not None and time.monotonic() > deadline

    groups = enumerate_groups(graph, hw, pre, part, max_groups, violation=cost.looped_violation, convex=False)
    if groups is None:
        return None
    if late():
        return None
    cols = columns_of(graph, hw, [g for g in groups if not dominated(graph, hw, g)])
    model = cp_model.CpModel()
    nodes = list(part)
    members = set(nodes)
    outputs = graph.index.outputs
    n = len(cols)
    pick = [model.NewBoolVar(f"pick[{i}]") for i in range(n)]
    # a chain of kernels each reading what the previous one wrote writes a distinct tensor per
    # step, so places 0..(tensors the part produces) order every plan; unpicked columns sit at 0
    last = len([t for v in nodes for t in graph.index.node[v].outputs if t])
    pos = [model.NewIntVar(0, last, f"pos[{i}]") for i in range(n)]
    for i in range(n):
        model.Add(pos[i] == 0).OnlyEnforceIf(pick[i].Not())
    # tensors of the part that must be written whatever the plan: graph outputs, read by later parts
    must = {t for v in nodes for t in graph.index.node[v].outputs
            if t and (t in outputs or any(c not in members for c in graph.index.consumers.get(t, [])))}
    write: dict = {}
    wbytes: dict = {}
    writers: dict[str, list] = {}
    readers: dict[str, list[int]] = {}
    read = []
    for i, c in enumerate(cols):
        if i % 256 == 0 and late():
            return None
        reads = cost.kernel_reads(graph, c.nodes, c.passes)
        read.append(0 if c.free else sum(b for _, b in reads))
        for t in cost.group_reads(graph, c.nodes):
            if graph.index.producer.get(t) in members:
                readers.setdefault(t, []).append(i)
        outs = []
        for t in cost.produced(graph, c.nodes):
            if not (t in must or graph.index.consumers.get(t)):
                continue
            if c.free and t in outputs:
                continue
            w = model.NewBoolVar(f"write[{i},{t}]")
            model.AddImplication(w, pick[i])
            write[(i, t)] = w
            wbytes[(i, t)] = 0 if c.free else cost.write_bytes(graph, c.nodes, t, c.passes)
            writers.setdefault(t, []).append((i, w))
            if t in outputs:
                outs.append(w)
        if c.copy:
            model.AddBoolOr(outs).OnlyEnforceIf(pick[i])
    for v in nodes:
        model.AddBoolOr([pick[i] for i, c in enumerate(cols) if v in c.nodes])
    for t in set(writers) | set(readers) | must:
        ws = writers.get(t, [])
        rs = readers.get(t, [])
        total = model.NewIntVar(1 if t in must else 0, 1, f"written[{t}]")
        model.Add(total == sum(w for _, w in ws))
        if t not in must:
            model.Add(total <= sum(pick[h] for h in rs))
        # when[t]: the place of t's writer; its readers come later (linear in writers + readers)
        when = model.NewIntVar(0, last, f"when[{t}]")
        for i, w in ws:
            model.Add(when >= pos[i]).OnlyEnforceIf(w)
        for h in rs:
            model.Add(total >= pick[h])
            model.Add(pos[h] >= when + 1).OnlyEnforceIf(pick[h])
    levels: dict[int, dict] = {}
    if score is None:
        terms = [(r, y) for r, y in zip(read, pick) if r] + [(b, write[k]) for k, b in wbytes.items() if b]
    else:
        terms = []
        mine: dict[int, list[str]] = {}
        for (i, t) in write:
            mine.setdefault(i, []).append(t)
        for i, c in enumerate(cols):
            if i % 64 == 0 and late():
                return None
            found = write_levels(graph, c, mine.get(i, []))
            if found is None:
                return None
            if len(found) == 1:  # one write total: the cost sits on the pick
                (ws,) = found.values()
                terms.append((score(c.nodes, ws, c.passes), pick[i]))
                continue
            lv = {s: model.NewBoolVar(f"level[{i},{s}]") for s in found}
            model.Add(sum(lv.values()) == pick[i])
            model.Add(sum(s * z for s, z in lv.items()) == sum(wbytes[(i, t)] * write[(i, t)] for t in mine[i]))
            terms += [(score(c.nodes, found[s], c.passes), z) for s, z in lv.items()]
            levels[i] = lv
        terms = [(k, x) for k, x in terms if k]
    model.Minimize(sum(k * x for k, x in terms))
    f = Covering(model=model, nodes=nodes, columns=cols, pick=pick, write=write, pos=pos, read=read,
                 wbytes=wbytes, graph=graph, key={(c.nodes, c.passes, c.free): i for i, c in enumerate(cols)},
                 terms=terms, levels=levels)
    return f
