"""Read the real torch.compile (Inductor, CPU) fusion decisions as a solverfuse Plan.

:func:`inductor_kernels` lowers the graph :func:`~solverfuse.torch.fx_import.export_for_inductor`
produced with Inductor's own ``compile_fx_inner`` (the same post-grad passes, lowering and
scheduler torch.compile runs), records the scheduler's final nodes -- one per generated kernel --
and stops before code generation (no C++ build: planning needs the decisions, not the code).

:func:`real_partition` maps those kernels onto our node names (the FX node names of the same
graph): an FX node belongs to the kernel that writes the buffer it is the ``origin_node`` of;
a node Inductor inlined (a pointwise op or view computed inside its consumers' loops, a view
folded into an extern GEMM's strides) belongs to the first non-extern kernel whose origins list
it, or is alone (a view-only group moves no bytes). Extern kernels (mm, conv, SDPA) are groups
of their own; a ConcatKernel's inputs are written into its buffer by the kernels its input
buffers name. :func:`inductor_plan` validates the partition with :func:`solverfuse.plans.build_plan`
and reports every group our rules reject instead of dropping it.

:func:`real_covering` reads the same kernels as a covering (``RealPlan.covering``, a
``solverfuse-plan/2`` plan when Inductor recomputes something): an op Inductor computes inside the
loops of several kernels (an unstored pointwise value or view) is in each of them -- also in a
loop that reads a value computed from it (a non-convex kernel, legal in a ``/2`` plan) -- told
apart from a stored value by the loads each scheduler node records (``Kernel.reads``).
"""
from __future__ import annotations

import copy
import re
import time
from dataclasses import dataclass, field
from typing import Optional
from unittest import mock

import torch

from ..cost import Kernel as CostKernel
from ..cost import group_violation
from ..errors import PlanError
from ..graph import Graph
from ..hardware import load_hardware
from ..plans import Plan, build_covering_plan, build_plan, order_groups, returns_to
from .fx_import import exported_constants, export_for_inductor, from_exported_program


@dataclass
class Kernel:
    """One scheduler node of Inductor: a generated kernel, an extern call, or a no-op."""
    name: str
    kind: str                      # "fused" (generated loop nest), "extern" (library call), "nop"
    writes: list[str]              # FX nodes whose result this kernel writes (origin_node)
    origins: list[str]             # every FX node Inductor lists as computed here
    buffers: list[str] = field(default_factory=list)      # buffers it writes without an origin_node
    extern_inputs: list[str] = field(default_factory=list)  # an extern call's input buffers, in order
    #: what it loads from memory: for each buffer another kernel wrote, that buffer's origin FX
    #: node (its buffer name when it has none); graph inputs by their buffer name
    reads: list[str] = field(default_factory=list)


@dataclass
class RealPlan:
    """The real plan, the kernels it came from and what did not map onto our rules."""
    plan: Plan
    kernels: list[Kernel]
    graph: Graph
    illegal: list[str] = field(default_factory=list)   # "kernel: rule" for each rejected group
    unmapped: list[str] = field(default_factory=list)  # origins naming no node of our graph
    #: inlined ops moved out of a kernel's group so that our rules accept it ("kernel: op (rule)")
    repaired: list[str] = field(default_factory=list)
    seconds: float = 0.0                                # lowering + scheduling wall time
    #: the same kernels read as a covering (``solverfuse-plan/2``): an op Inductor computes in the
    #: loops of several kernels is in each (:func:`real_covering`); None if it could not be built
    covering: Optional[Plan] = None
    #: ops dropped from a kernel of the covering (each read from memory instead), with the rule,
    #: and ops written by a kernel of their own
    covering_repaired: list[str] = field(default_factory=list)


class _Stop(Exception):
    """Raised inside the scheduler once its decisions are recorded (skips code generation)."""


def _kind(snode) -> str:
    from torch._inductor import ir
    from torch._inductor import scheduler as S
    subs = snode.get_nodes()
    # A MultiOutput only names one result of a multi-output extern call: it launches nothing.
    if all(isinstance(s, S.NopKernelSchedulerNode) or isinstance(getattr(s, "node", None), ir.MultiOutput)
           for s in subs):
        return "nop"
    if any(isinstance(s, S.ExternKernelSchedulerNode) for s in subs):
        return "extern"
    return "fused"


def _buffer_name(x) -> Optional[str]:
    try:
        return x.get_name()
    except Exception:  # an input without a buffer (a constant, a symbolic size)
        return None


def record_kernels(nodes) -> list[Kernel]:
    """The scheduler's (fused) nodes as :class:`Kernel` records, in execution order."""
    origin_of: dict[str, str] = {}  # buffer -> the FX node it is the result of
    for sn in nodes:
        for s in sn.get_nodes():
            ir = getattr(s, "node", None)
            o = ir.get_origin_node() if ir is not None and hasattr(ir, "get_origin_node") else None
            for b in map(_buffer_name, s.get_outputs()):
                if b:
                    origin_of[b] = o.name if o is not None else b
    out = []
    for sn in nodes:
        own = {b for s in sn.get_nodes() for b in map(_buffer_name, s.get_outputs()) if b}
        loads: list[str] = []
        for s in sn.get_nodes():
            rw = getattr(s, "read_writes", None)
            for dep in (rw.reads if rw is not None else ()):
                name = getattr(dep, "name", None)
                if name and name not in own:
                    loads.append(origin_of.get(name, name))
        writes, origins, buffers, ext = [], [], [], []
        for s in sn.get_nodes():
            ir = getattr(s, "node", None)
            o = ir.get_origin_node() if ir is not None and hasattr(ir, "get_origin_node") else None
            if o is not None and o.name not in writes:
                writes.append(o.name)
            elif o is None and ir is not None:
                buffers += [b for b in map(_buffer_name, s.get_outputs()) if b]
            for x in (getattr(ir, "origins", None) or ()):
                if x.name not in origins:
                    origins.append(x.name)
            if ir is not None and getattr(ir, "inputs", None) is not None and (
                    _kind(sn) == "extern" or type(ir).__name__ == "ConcatKernel"):
                ext += [_buffer_name(x) or "" for x in ir.inputs]
        out.append(Kernel(sn.get_name(), _kind(sn), writes, sorted(origins), buffers, ext,
                          sorted(set(loads))))
    return out


def capture_kernels(gm: "torch.fx.GraphModule", example_inputs: list) -> list[Kernel]:
    """Run Inductor's ``compile_fx_inner`` on an ATen graph up to its scheduler; its kernels."""
    from torch._inductor import config
    from torch._inductor import scheduler as S
    from torch._inductor.compile_fx import compile_fx_inner
    seen: list[list[Kernel]] = []
    original = S.Scheduler.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(record_kernels(self.nodes))
        raise _Stop()

    gm = copy.deepcopy(gm)
    with mock.patch.object(S.Scheduler, "__init__", init), \
            config.patch(fx_graph_cache=False, fx_graph_remote_cache=False), torch.no_grad():
        try:
            compile_fx_inner(gm, example_inputs)
        except Exception:  # _Stop arrives wrapped in Inductor's own error type
            if not seen:
                raise
    if not seen:
        raise PlanError("Inductor produced no scheduler (nothing to compile?)")
    return seen[-1]


def real_partition(graph: Graph, kernels: list[Kernel], hw=None, repairs: Optional[list[str]] = None,
                   strong_out: Optional[set] = None) -> tuple[list[list[str]], list[str], list[str]]:
    """Our nodes grouped by Inductor kernel: (groups, kernel name per group, unmapped origins).

    Strong members of a kernel: the nodes whose result it writes (``origin_node``; for a buffer
    an extern call's lowering realised, the producer of that call argument), and for an extern
    kernel the compute op it calls. The other nodes were inlined by Inductor (views, pointwise
    ops computed inside their consumers' loops): one joins the generated kernel its consumers run
    in when that kernel lists it among its origins (the first such consumer kernel when they run
    in several: Inductor recomputes it in each); views folded into an extern call's strides form
    one view group per call. A weak member that breaks convexity or our rules leaves its group."""
    from ..cost import role
    known = graph.index.node
    producer = graph.index.producer

    def node_of(name: str) -> Optional[str]:  # getitem results name a tensor of the producer
        return name if name in known else producer.get(name)

    home: dict[str, int] = {}
    strong: set[str] = set()

    def claim(v: Optional[str], i: int) -> None:
        if v and v not in home:
            home[v] = i
            strong.add(v)

    for i, k in enumerate(kernels):
        for v in map(node_of, k.writes):
            claim(v, i)
    by_buffer = {b: i for i, k in enumerate(kernels) for b in k.buffers}
    for i, k in enumerate(kernels):
        if k.kind != "extern":
            continue
        calls = [v for v in map(node_of, k.origins) if v and role(graph, v) in ("anchor", "opaque")]
        for v in calls:
            claim(v, i)
        if len(calls) == 1:
            args = [t for t in known[calls[0]].inputs if t]
            if len(args) == len(k.extern_inputs):
                for t, b in zip(args, k.extern_inputs):
                    if b in by_buffer:
                        claim(producer.get(t), by_buffer[b])
    for k in kernels:  # a ConcatKernel's inputs: each written into its slice by a kernel
        cats = [v for v in map(node_of, k.writes) if v and known[v].op == "Concat"]
        if k.kind == "nop" and len(cats) == 1 and len(known[cats[0]].inputs) == len(k.extern_inputs):
            for t, b in zip(known[cats[0]].inputs, k.extern_inputs):
                if b in by_buffer:
                    claim(producer.get(t), by_buffer[b])
    origins = [set(map(node_of, k.origins)) for k in kernels]
    fused = [i for i, k in enumerate(kernels) if k.kind == "fused"]
    pos = graph.index.position
    for v in reversed(graph.index.order):
        if v in home or role(graph, v) in ("anchor", "opaque"):
            continue
        cons = sorted({home[w] for w in graph.index.succs[v] if w in home},
                      key=lambda i: min(pos[w] for w in graph.index.succs[v] if home.get(w) == i))
        # listed among the kernel's origins, or a no-op Inductor removed (no kernel lists it)
        named = any(v in o for o in origins)
        if named:
            listed = [i for i in cons if i in fused and v in origins[i]]
        else:  # a no-op Inductor removed: it goes where its first consumer runs
            listed = [i for i in cons if i in fused]
        if listed:
            home[v] = listed[0]
    # Views folded into an extern call's operands: one (view-only) group per call.
    folded: dict[str, int] = {}
    for v in graph.index.order:
        if v not in home:
            ext = [i for i, k in enumerate(kernels) if k.kind == "extern" and v in origins[i]]
            if ext and role(graph, v) == "injective":
                folded[v] = ext[0]
    extra = len(kernels)
    for v in graph.index.order:
        if v in folded and v not in home:
            same = [u for u in graph.index.preds[v] + graph.index.succs[v]
                    if folded.get(u) == folded[v] and u in home]
            if same:
                home[v] = home[same[0]]
            else:
                home[v], extra = extra, extra + 1
    unmapped = sorted({v for k in kernels for v in k.origins if node_of(v) is None})
    if strong_out is not None:
        strong_out |= strong
    groups: dict[int, list[str]] = {}
    for v in graph.index.order:
        if v in home:
            groups.setdefault(home[v], []).append(v)
    for i, g in groups.items():
        if not _problem(graph, g, hw):
            continue
        trial = list(g)
        why = _problem(graph, trial, hw)
        while why:  # first drop the weak members the problem names
            quoted = re.findall(r"'([^']+)'", why)
            # a path leaving and re-entering the group: the op where it leaves was recomputed
            # elsewhere too; otherwise the last op the rule names
            order = quoted[1:] if "not convex" in why else quoted[::-1]
            named = [v for v in order if v in trial and v not in strong]
            if not named or len(trial) < 2:
                break
            trial.remove(named[0])
            if repairs is not None:
                repairs.append(f"{kernels[i].name}: {named[0]!r} moved out ({why})")
            why = _problem(graph, trial, hw)
        weak = sorted((v for v in trial if v not in strong),
                      key=lambda v: (role(graph, v) == "injective", graph.index.position[v]))
        while weak and len(trial) > 1 and _problem(graph, trial, hw):
            v = weak.pop()
            trial.remove(v)
            if repairs is not None:
                repairs.append(f"{kernels[i].name}: {v!r} moved out ({_problem(graph, trial + [v], hw)})")
        if not _problem(graph, trial, hw):
            for v in set(g) - set(trial):
                del home[v]
            groups[i] = trial
    out, names = [], []
    for i in sorted(groups, key=lambda i: graph.index.position[groups[i][0]]):
        out.append(groups[i])
        names.append(kernels[i].name if i < len(kernels) else "(views folded into an extern call)")
    for v in graph.index.order:
        if v not in home:
            out.append([v])
            names.append(f"(no kernel: {v})")
    return out, names, unmapped


def real_covering(graph: Graph, kernels: list[Kernel], hw, repairs: Optional[list[str]] = None
                  ) -> tuple[list[CostKernel], list[str]]:
    """Inductor's kernels as a covering: (kernels with the tensors each writes, kernel name per
    kernel).

    Strong members as in :func:`real_partition`. A generated kernel also computes every other op
    it lists among its origins that has a consumer in it and whose result it does not load from
    memory (the scheduler node's reads: Inductor lists a superset of origins, e.g. an extern
    call's whole argument expression on each copy kernel feeding it) -- an inlined op is in every
    kernel whose loop computes it, a realised one only in its own. Views folded into extern calls,
    ops no kernel computes, and groups our rules reject are handled as :func:`real_partition`
    does; a kernel need not be convex (Inductor recomputes the residual stream in the loop adding
    the MLP's output); an op dropped from a kernel (a rule or capacity) is read from memory there.
    A result some kernel reads from memory is written by the kernel that stores it, or, when it is
    stored nowhere, by the first other kernel computing it that can run before its readers, or by
    a kernel of its own (:func:`_with_writes`).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 4]}}, "inputs": ["x"], "outputs": ["s", "y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "r", "op": "ReduceSum", "inputs": ["h"], "outputs": ["s"],
    ...                "attributes": {"axes": [1], "keepdims": 1}},
    ...               {"name": "b", "op": "Neg", "inputs": ["h"], "outputs": ["y"]}]})
    >>> ks = [Kernel("op0", "fused", ["r"], ["a", "r"], reads=["x"]),
    ...       Kernel("op1", "fused", ["b"], ["a", "b"], reads=["x"])]  # relu computed in both loops
    >>> [(k.nodes, k.writes) for k in real_covering(g, ks, None)[0]]
    [(('a', 'r'), ('s',)), (('a', 'b'), ('y',))]
    """
    from ..cost import role
    from ..rules import facts
    strong: set[str] = set()
    groups, names, _ = real_partition(graph, kernels, hw, strong_out=strong)  # homes, views, no-kernel ops
    known, producer, pos = graph.index.node, graph.index.producer, graph.index.position

    def node_of(name: str) -> Optional[str]:
        return name if name in known else producer.get(name)

    by_name = {k.name: i for i, k in enumerate(kernels)}
    named = {node_of(o) for k in kernels for o in k.origins}
    # an op real_partition left alone is placed again below (in every kernel computing it)
    members: list[set[str]] = [set() if n.startswith("(no kernel") else set(g) for g, n in zip(groups, names)]
    kernel_of = [by_name.get(n) for n in names]
    strong_in: dict[str, int] = {}
    for gi, m in enumerate(members):
        for v in m & strong:
            strong_in.setdefault(v, gi)
    for gi, ki in enumerate(kernel_of):
        if ki is None or kernels[ki].kind != "fused":
            continue
        origins = {node_of(o) for o in kernels[ki].origins}
        loads = {node_of(r) for r in kernels[ki].reads}
        mine = members[gi]
        for v in reversed(graph.index.order):
            if v in mine or v in loads or role(graph, v) in ("anchor", "opaque") \
                    or (v not in origins and v in named):  # a no-op Inductor removed: listed nowhere
                continue
            if any(w in mine for w in graph.index.succs[v]):
                mine.add(v)
    written = {v for k in kernels for v in map(node_of, k.writes) if v}
    for gi, n in enumerate(names):  # views folded into a call's strides: the whole index chain
        if not n.startswith("(views folded"):
            continue
        mine = members[gi]
        for v in reversed(graph.index.order):
            if v not in mine and v not in written and (role(graph, v) == "injective" or facts(graph, v).view) \
                    and any(w in mine for w in graph.index.succs[v]) \
                    and not _problem(graph, sorted(mine | {v}, key=pos.__getitem__), hw, convex=False):
                mine.add(v)
    for gi, g in enumerate(members):
        trial = sorted(g, key=pos.__getitem__)
        why = _problem(graph, trial, hw, convex=False)
        while why and len(trial) > 1:
            quoted = re.findall(r"'([^']+)'", why)
            order = quoted[1:] if "not convex" in why else quoted[::-1]
            named = [v for v in order if v in trial and strong_in.get(v) != gi]
            if not named:
                break
            trial.remove(named[0])
            if repairs is not None:
                repairs.append(f"{names[gi]}: {named[0]!r} read from memory ({why})")
            keep = set(trial)  # ops left without a consumer in the kernel are not computed there
            for v in reversed(list(trial)):
                if strong_in.get(v) != gi and v in keep and graph.index.succs[v] \
                        and not any(w in keep for w in graph.index.succs[v]) \
                        and not any(t in graph.index.outputs for t in known[v].outputs):
                    keep.discard(v)
            trial = [v for v in trial if v in keep]
            why = _problem(graph, trial, hw, convex=False)
        members[gi] = set(trial)
    for v in graph.index.order:
        if not any(v in m for m in members):
            members.append({v})
            names.append(f"(no kernel: {v})")
    kernels_out = _with_writes(graph, members, strong_in, names, repairs)
    return kernels_out, [n for n, m in zip(names, members) if m]


def _with_writes(graph: Graph, members: list[set[str]], strong_in: dict[str, int],
                 names: Optional[list[str]] = None, repairs: Optional[list[str]] = None) -> list[CostKernel]:
    """Each tensor some kernel reads from memory (or a graph output) written once: by the kernel
    storing its op, else by the first kernel computing it that no path from the op leaves and
    re-enters (:func:`~solverfuse.plans.returns_to`: that kernel would have to run before and after
    the path). When every kernel computing it is such a kernel (a view Inductor folds into an
    extern call's strides and also recomputes in a later loop), the op gets a kernel of its own."""
    pos, outputs = graph.index.position, graph.index.outputs

    def holders() -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, m in enumerate(members):
            for v in m:
                out.setdefault(v, []).append(i)
        return out

    def needed(hold: dict[str, list[int]]) -> list[tuple[str, str, list[int]]]:
        out = []
        for v in graph.index.order:
            hs = hold.get(v, [])
            for t in graph.index.node[v].outputs if hs else []:
                if t and (t in outputs or any(v not in members[j] for w in graph.index.consumers.get(t, [])
                                              for j in hold.get(w, []))):
                    out.append((v, t, hs))
        return out

    def writer(v: str, hs: list[int]) -> Optional[int]:
        if strong_in.get(v) in hs:
            return strong_in[v]
        return next((h for h in hs if not returns_to(graph, v, members[h])), None)

    while True:
        hold = holders()
        alone = [v for v, _, hs in needed(hold) if writer(v, hs) is None]
        if not alone:
            break
        for v in dict.fromkeys(alone):
            members.append({v})
            if names is not None:
                names.append(f"(written alone: {v})")
            if repairs is not None:
                repairs.append(f"{v!r} written by a kernel of its own (every kernel computing it also "
                               f"reads a value computed from it)")
    writes: list[list[str]] = [[] for _ in members]
    for v, t, hs in needed(hold):
        writes[writer(v, hs)].append(t)
    return [CostKernel(tuple(sorted(m, key=pos.__getitem__)), tuple(w)) for m, w in zip(members, writes) if m]


def _problem(graph: Graph, g: list[str], hw, convex: bool = True) -> Optional[str]:
    """Why ``g`` cannot be one group: our rules and capacity; for a partition also convexity (a
    covering's kernel need not be convex: what it reads is checked when the plan is ordered)."""
    why = group_violation(graph, g, hw) if hw is not None else None
    if why is None and convex and len(g) > 1:
        try:
            order_groups(graph, [g])
        except PlanError as e:
            why = str(e)
    return why


def _legal_chunks(graph: Graph, g: list[str], hw) -> list[list[str]]:
    """An illegal group cut into consecutive (topological order) pieces our rules accept."""
    chunks: list[list[str]] = []
    for v in g:
        if chunks and not _problem(graph, chunks[-1] + [v], hw):
            chunks[-1].append(v)
        else:
            chunks.append([v])
    return chunks


def _why_illegal(graph: Graph, groups: list[list[str]], hw) -> list[tuple[int, str]]:
    return [(i, why) for i, g in enumerate(groups) for why in [_problem(graph, g, hw)] if why]


def plan_from_kernels(graph: Graph, kernels: list[Kernel], hardware="detect") -> RealPlan:
    """The ``inductor-real`` Plan of ``kernels`` on ``graph``, scored by the one cost model.

    A group our rules reject is split into single ops and named in ``illegal`` (with the rule),
    so the plan stays valid and the disagreement is reported, never hidden."""
    hw = load_hardware(hardware)
    repairs: list[str] = []
    groups, names, unmapped = real_partition(graph, kernels, hw, repairs)
    problems = _why_illegal(graph, groups, hw)
    illegal = [f"{names[i]} {groups[i]}: {why}" for i, why in problems]
    bad = {i for i, _ in problems}
    final = [g for i, g in enumerate(groups) if i not in bad]
    for i in sorted(bad):
        final += _legal_chunks(graph, groups[i], hw)
    try:
        plan = build_plan(graph, hw, final, strategy="inductor-real", status="heuristic")
    except PlanError as e:  # groups legal one by one but cyclic together
        illegal.append(f"whole plan: {e}")
        plan = build_plan(graph, hw, [[v] for v in graph.index.order], strategy="inductor-real",
                          status="heuristic")
    real = RealPlan(plan, kernels, graph, illegal, unmapped, repairs)
    try:
        cover, _ = real_covering(graph, kernels, hw, real.covering_repaired)
        real.covering = build_covering_plan(graph, hw, cover, strategy="inductor-real", status="heuristic")
    except PlanError as e:
        real.covering_repaired.append(f"no covering reading: {e}")
    return real


def inductor_plan(model, example_inputs: tuple, hardware="detect", *, name: Optional[str] = None) -> RealPlan:
    """Compile ``model`` with Inductor (CPU) and return its real fusion as a ``RealPlan``.

    ``.plan`` is a Plan with strategy ``inductor-real`` over the Graph
    :func:`~solverfuse.torch.fx_import.from_module` produces (``.graph``), ``.kernels`` the
    scheduler's nodes, ``.illegal`` any group our rules reject (a bug in our rules).
    """
    ep = export_for_inductor(model, example_inputs)
    return plan_from_exported(ep, example_inputs, hardware, name=name or type(model).__name__)


def plan_from_exported(ep, example_inputs: tuple, hardware="detect", *, name: str = "model") -> RealPlan:
    """:func:`inductor_plan` for an already exported (and Inductor-decomposed) program."""
    graph = from_exported_program(ep, name)
    consts = exported_constants(ep)
    user = iter(example_inputs)
    args = [consts[s.arg.name] if s.arg.name in consts else next(user) for s in ep.graph_signature.input_specs]
    start = time.perf_counter()
    kernels = capture_kernels(ep.graph_module, args)
    real = plan_from_kernels(graph, kernels, hardware)
    real.seconds = time.perf_counter() - start
    return real


def edge_agreement(graph: Graph, a: list[list[str]], b: list[list[str]]) -> tuple[int, int]:
    """Producer->consumer edges on which plans ``a`` and ``b`` agree, and the number of edges.

    For partitions: same group in both or different groups in both. For coverings (an op in
    several groups) the state of an edge ``u -> w`` is, over the groups computing ``w``, whether
    each computes ``u`` too (the set of answers: {True} when every kernel computing ``w``
    recomputes or holds ``u``, {False} when every one reads ``u``'s result from memory); on
    partitions this is the same count.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["y"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["y"], "outputs": ["z"]}]})
    >>> edge_agreement(g, [["a", "b"]], [["a"], ["b"]])
    (0, 1)
    >>> edge_agreement(g, [["a", "b"]], [["a", "b"], ["a"]])  # a covering: b never reads y
    (1, 1)
    """
    def states(groups: list[list[str]]) -> dict[tuple[str, str], frozenset]:
        sets = [set(g) for g in groups]
        holding: dict[str, list[int]] = {}
        for i, g in enumerate(sets):
            for v in g:
                holding.setdefault(v, []).append(i)
        return {(u, w): frozenset(u in sets[i] for i in holding.get(w, []))
                for u in graph.index.order for w in graph.index.succs[u]}
    sa, sb = states(a), states(b)
    return sum(sa[e] == sb[e] for e in sa), len(sa)
