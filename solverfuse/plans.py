"""Plans (``solverfuse-plan/1`` and ``/2``): the Plan/Group models, the independent validator, JSON in/out.

A ``/1`` plan partitions the graph's ops into groups listed in an executable order. A ``/2`` plan
is a *covering* (``formulations/covering.md``): an op may be computed in several groups
(recomputation), each group states what it reads and writes, a tensor a group reads from memory is
written by exactly one earlier group (or is a graph input or constant), every graph output is
written once, and a group may run as several passes (a looped reduction). A partition is a ``/2``
plan with no duplicated op and one pass per group; :func:`build_covering_plan` writes it as ``/1``
so that every reader of ``/1`` keeps working. :func:`build_plan`
turns any list of groups (from a solver, a greedy baseline or a user) into a filled, ordered and
validated Plan; :func:`validate` re-checks a plan from scratch using only the graph, the hardware
profile and the cost model -- it trusts no number written in the plan.

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> p = build_plan(g, "nvidia-h100", [["b", "a"]], strategy="manual")
>>> [grp.nodes for grp in p.groups], p.traffic_bytes, p.unfused_traffic_bytes
([['a', 'b']], 2048, 4096)
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from . import cost, dag, jsontext
from .errors import PlanError
from .files import read_text, write_atomic
from .gcpause import paused
from .graph import Graph
from .hardware import Hardware, load_hardware
from .mapping import group_footprint, loop_footprint

FORMAT = "solverfuse-plan/1"
#: Plans with recomputation or looped reductions.
FORMAT_COVERING = "solverfuse-plan/2"
FORMATS = (FORMAT, FORMAT_COVERING)
Status = Literal["optimal", "feasible", "heuristic", "infeasible", "unknown"]


class Group(BaseModel):
    """One kernel: its ops (in a topological order), what it reads and writes, its cost."""
    model_config = ConfigDict(extra="forbid")
    name: str
    nodes: list[str]
    reads: list[str]
    writes: list[str]
    traffic_bytes: int
    registers: int
    l1_bytes: int
    passes: int = 1


class Plan(BaseModel):
    """A fusion plan; ``groups`` are in execution order. ``traffic_bytes`` is the sum over groups,
    ``bound_bytes`` the solver's proven lower bound on the optimum (equal to ``traffic_bytes`` when
    ``status`` is ``optimal``), ``lower_bound_bytes`` is Q_min (:func:`solverfuse.cost.q_min`)."""
    model_config = ConfigDict(extra="forbid")
    format: Literal["solverfuse-plan/1", "solverfuse-plan/2"] = FORMAT
    strategy: str
    hardware: str
    status: Status
    traffic_bytes: int
    bound_bytes: Optional[int] = None
    lower_bound_bytes: int
    unfused_traffic_bytes: int
    solve_seconds: float = 0.0
    reason: Optional[str] = None
    graph_name: str
    graph_sha256: str
    groups: list[Group]
    graph: Optional[Graph] = None
    graph_path: Optional[str] = None
    hardware_profile: Optional[Hardware] = None

    @property
    def gap(self) -> Optional[float]:
        """Relative gap (traffic - bound) / traffic, or None without a bound."""
        if self.bound_bytes is None:
            return None
        return 0.0 if self.traffic_bytes == 0 else (self.traffic_bytes - self.bound_bytes) / self.traffic_bytes

    def group_nodes(self) -> list[list[str]]:
        return [g.nodes for g in self.groups]


def order_groups(graph: Graph, groups: Sequence[Sequence[str]]) -> list[list[str]]:
    """Groups in an executable order (quotient graph topologically sorted, ready groups by their
    first op), ops inside each group in graph order. Raises PlanError if a group is not convex or
    the quotient graph has a cycle.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> order_groups(g, [["b"], ["a"]])
    [['a'], ['b']]
    """
    pos = graph.index.position
    for v in (v for g in groups for v in g if v not in pos):
        raise PlanError(f"group names unknown node {v!r}")
    groups = [sorted(g, key=pos.__getitem__) for g in groups if g]
    for g in groups:
        bad = convexity_violation(graph, g) if len(g) > 1 else None
        if bad:
            raise PlanError(f"group of {g[0]!r} is not convex: {bad}")
    succ = dag.quotient(groups, graph.index.succs)
    order = dag.topological_order(succ, key=lambda i: pos[groups[i][0]])
    if len(order) != len(groups):
        done = set(order)
        stuck = next(g[0] for i, g in enumerate(groups) if i not in done)
        raise PlanError(f"groups form a cycle (the group of {stuck!r} depends on itself)")
    return [groups[i] for i in order]


@paused()
def build_plan(graph: Graph, hardware: Union[str, Hardware], groups: Sequence[Sequence[str]], *,
               strategy: str, status: Status = "heuristic", bound_bytes: Optional[int] = None,
               solve_seconds: float = 0.0, embed_graph: bool = True) -> Plan:
    """Order, fill in and validate a plan from a partition of the graph's ops."""
    hw = load_hardware(hardware)
    ordered = order_groups(graph, groups)
    out = []
    for i, nodes in enumerate(ordered):
        fp = group_footprint(graph, nodes, hw)
        c = cost.group_cost(graph, nodes)
        out.append(Group(name=f"k{i}", nodes=nodes, reads=c.reads, writes=c.writes, traffic_bytes=c.traffic,
                         registers=fp.registers, l1_bytes=fp.l1_bytes))
    traffic = sum(g.traffic_bytes for g in out)
    if status == "optimal" and bound_bytes is None:
        bound_bytes = traffic
    plan = Plan(strategy=strategy, hardware=hw.name, status=status, traffic_bytes=traffic,
                bound_bytes=bound_bytes, lower_bound_bytes=cost.q_min(graph),
                unfused_traffic_bytes=cost.unfused_traffic(graph), solve_seconds=round(solve_seconds, 6),
                graph_name=graph.name, graph_sha256=graph.digest(), groups=out,
                graph=graph if embed_graph else None, hardware_profile=hw)
    validate(plan, graph, hw)
    return plan


@paused()
def validate(plan: Plan, graph: Optional[Graph] = None, hardware: Union[str, Hardware, None] = None) -> None:
    """Check a plan independently of whoever made it; raise PlanError naming the first problem.

    Checks: the graph matches (sha256); the groups partition the ops; in the listed order every
    edge between groups goes forward (so every group is convex and the quotient is acyclic);
    every group obeys the fusion rules and fits capacity; every recorded number equals the cost
    model's; the bound is not above the traffic (equal when status is ``optimal``).
    """
    graph = graph or plan.graph
    if graph is None:
        raise PlanError("plan has no embedded graph and none was given")
    hw = load_hardware(hardware or plan.hardware_profile or plan.hardware)
    if plan.graph_sha256 != graph.digest():
        raise PlanError(f"plan was made for another graph (sha256 {plan.graph_sha256[:12]}... "
                        f"!= {graph.digest()[:12]}...)")
    if plan.format == FORMAT_COVERING:
        validate_covering(plan, graph, hw)
        _check_totals(plan, graph)
        return
    for g in plan.groups:
        if g.passes != 1:
            raise PlanError(f"group {g.name!r} makes {g.passes} passes: looped kernels need {FORMAT_COVERING}")
    where: dict[str, int] = {}
    for i, g in enumerate(plan.groups):
        if not g.nodes:
            raise PlanError(f"group {g.name!r} is empty")
        for v in g.nodes:
            if v not in graph.index.node:
                raise PlanError(f"group {g.name!r} names unknown node {v!r}")
            if v in where:
                raise PlanError(f"node {v!r} is in groups {plan.groups[where[v]].name!r} and {g.name!r}")
            where[v] = i
    missing = [v for v in graph.index.order if v not in where]
    if missing:
        raise PlanError(f"node {missing[0]!r} is in no group")
    for i, g in enumerate(plan.groups):
        bad = convexity_violation(graph, g.nodes) if len(g.nodes) > 1 else None  # one op: no path back
        if bad:
            raise PlanError(f"group {g.name!r} is not convex: {bad}")
    for u in graph.index.order:
        for w in graph.index.succs[u]:
            if where[u] > where[w]:
                raise PlanError(f"groups out of order: {plan.groups[where[u]].name!r} (node {u!r}) must run "
                                f"before {plan.groups[where[w]].name!r} (node {w!r}) -- cyclic or misordered")
    for g in plan.groups:
        why = cost.group_violation(graph, g.nodes, hw)
        if why:
            raise PlanError(f"group {g.name!r} is illegal: {why}")
        fp = group_footprint(graph, g.nodes, hw)
        c = cost.group_cost(graph, g.nodes)
        expect = dict(reads=c.reads, writes=c.writes, traffic_bytes=c.traffic, registers=fp.registers,
                      l1_bytes=fp.l1_bytes)
        for key, val in expect.items():
            have = getattr(g, key)
            if (sorted(have) if isinstance(val, list) else have) != (sorted(val) if isinstance(val, list) else val):
                raise PlanError(f"group {g.name!r}: {key} is {have}, the cost model says {val}")
    _check_totals(plan, graph)


def _check_totals(plan: Plan, graph: Graph) -> None:
    total = sum(g.traffic_bytes for g in plan.groups)
    checks = [("traffic_bytes", plan.traffic_bytes, total),
              ("lower_bound_bytes", plan.lower_bound_bytes, cost.q_min(graph)),
              ("unfused_traffic_bytes", plan.unfused_traffic_bytes, cost.unfused_traffic(graph))]
    for key, have, want in checks:
        if have != want:
            raise PlanError(f"plan {key} is {have}, the cost model says {want}")
    if plan.bound_bytes is not None and plan.bound_bytes > plan.traffic_bytes:
        raise PlanError(f"bound_bytes {plan.bound_bytes} exceeds traffic_bytes {plan.traffic_bytes}")
    if plan.status == "optimal" and plan.bound_bytes != plan.traffic_bytes:
        raise PlanError("status is optimal but bound_bytes != traffic_bytes")


def order_kernels(graph: Graph, kernels: Sequence[cost.Kernel]) -> list[cost.Kernel]:
    """Kernels of a covering in an executable order: every kernel after the one writing each
    tensor it reads from memory (ready kernels by their first op); ops in graph order. Raises
    PlanError when a tensor read has no writer or the kernels wait on each other.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.cost import Kernel
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> [k.nodes for k in order_kernels(g, [Kernel(("a", "c"), ("z",)), Kernel(("a", "b"), ("y",))])]
    [('a', 'b'), ('a', 'c')]
    """
    pos = graph.index.position
    ks = []
    for k in kernels:
        for v in k.nodes:
            if v not in pos:
                raise PlanError(f"group names unknown node {v!r}")
        ks.append(cost.Kernel(tuple(sorted(set(k.nodes), key=pos.__getitem__)), tuple(k.writes), k.passes))
    writer: dict[str, int] = {}
    for i, k in enumerate(ks):
        for t in k.writes:
            if t in writer:
                raise PlanError(f"tensor {t!r} is written by two groups (of {ks[writer[t]].nodes[0]!r} and {k.nodes[0]!r})")
            writer[t] = i
    succ: list[list[int]] = [[] for _ in ks]
    for i, k in enumerate(ks):
        for t in cost.group_reads(graph, k.nodes):
            if graph.is_source(t):
                continue
            if t not in writer:
                raise PlanError(f"tensor {t!r} is read by the group of {k.nodes[0]!r} but written by no group")
            succ[writer[t]].append(i)
    order = dag.topological_order(succ, key=lambda i: (tuple(pos[v] for v in ks[i].nodes), i))
    if len(order) != len(ks):
        stuck = next(ks[i].nodes[0] for i in range(len(ks)) if i not in set(order))
        raise PlanError(f"groups form a cycle (the group of {stuck!r} waits on itself)")
    return [ks[i] for i in order]


def is_partition(graph: Graph, kernels: Sequence[cost.Kernel]) -> bool:
    """Whether a covering is a partition: every op in exactly one kernel, one pass each."""
    seen = [v for k in kernels for v in k.nodes]
    return len(seen) == len(set(seen)) and all(k.passes == 1 for k in kernels)


@paused()
def build_covering_plan(graph: Graph, hardware: Union[str, Hardware], kernels: Sequence[cost.Kernel], *,
                        strategy: str, status: Status = "heuristic", bound_bytes: Optional[int] = None,
                        solve_seconds: float = 0.0, embed_graph: bool = True) -> Plan:
    """Order, fill in and validate a covering plan; a partition becomes a ``/1`` plan
    (:func:`build_plan`), anything else a ``/2`` plan.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.cost import Kernel
    >>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> p = build_covering_plan(g, "nvidia-h100", [Kernel(("a", "b"), ("y",)), Kernel(("a", "c"), ("z",))],
    ...                         strategy="manual")
    >>> p.format, [(k.nodes, k.reads, k.writes) for k in p.groups], p.traffic_bytes
    ('solverfuse-plan/2', [(['a', 'b'], ['x'], ['y']), (['a', 'c'], ['x'], ['z'])], 4096)
    """
    hw = load_hardware(hardware)
    if is_partition(graph, kernels):
        return build_plan(graph, hw, [list(k.nodes) for k in kernels], strategy=strategy, status=status,
                          bound_bytes=bound_bytes, solve_seconds=solve_seconds, embed_graph=embed_graph)
    out = []
    for i, k in enumerate(order_kernels(graph, kernels)):
        fp = group_footprint(graph, k.nodes, hw) if k.passes == 1 else loop_footprint(graph, k.nodes, hw)
        out.append(Group(name=f"k{i}", nodes=list(k.nodes), reads=cost.group_reads(graph, k.nodes),
                         writes=list(k.writes), passes=k.passes,
                         traffic_bytes=cost.kernel_traffic(graph, k.nodes, k.writes, k.passes),
                         registers=fp.registers, l1_bytes=fp.l1_bytes))
    traffic = sum(g.traffic_bytes for g in out)
    if status == "optimal" and bound_bytes is None:
        bound_bytes = traffic
    plan = Plan(format=FORMAT_COVERING, strategy=strategy, hardware=hw.name, status=status,
                traffic_bytes=traffic, bound_bytes=bound_bytes, lower_bound_bytes=cost.q_min(graph),
                unfused_traffic_bytes=cost.unfused_traffic(graph), solve_seconds=round(solve_seconds, 6),
                graph_name=graph.name, graph_sha256=graph.digest(), groups=out,
                graph=graph if embed_graph else None, hardware_profile=hw)
    validate(plan, graph, hw)
    return plan


def plan_kernels(plan: Plan) -> list[cost.Kernel]:
    """A plan's groups as kernels (nodes, writes, passes), in its order."""
    return [cost.Kernel(tuple(g.nodes), tuple(g.writes), g.passes) for g in plan.groups]


def validate_covering(plan: Plan, graph: Graph, hw: Hardware) -> None:
    """The ``/2`` rules (see the module doc), independently of any solver: every op in some group;
    each group's ops listed in an order it can compute them (every op after the ops of the group
    producing its inputs), legal for its passes, reading exactly its ops' inputs from outside and
    writing only tensors it produces; in the listed order every tensor read from memory is written
    by exactly one earlier group, every graph output once, nothing nobody reads; every recorded
    number equal to the cost model's. A group need not be convex: a path may leave it and come
    back (Inductor recomputes a residual add in the kernel that adds it to the MLP's output) as
    long as what it reads from memory is written before it runs."""
    covered: set[str] = set()
    writer: dict[str, str] = {}
    read_later: set[str] = set()
    later_writer = {t: g.name for g in reversed(plan.groups) for t in g.writes}
    for g in plan.groups:
        if not g.nodes:
            raise PlanError(f"group {g.name!r} is empty")
        for v in g.nodes:
            if v not in graph.index.node:
                raise PlanError(f"group {g.name!r} names unknown node {v!r}")
        if len(set(g.nodes)) != len(g.nodes):
            raise PlanError(f"group {g.name!r} lists a node twice")
        covered.update(g.nodes)
        done: set[str] = set()
        members = set(g.nodes)
        for v in g.nodes:
            for t in graph.index.node[v].inputs:
                p = graph.index.producer.get(t) if t else None
                if p in members and p not in done:
                    raise PlanError(f"group {g.name!r} computes {v!r} before {p!r}, whose {t!r} it reads")
            done.add(v)
        if g.passes < 1:
            raise PlanError(f"group {g.name!r} makes {g.passes} passes")
        why = cost.kernel_violation(graph, g.nodes, hw, g.passes)
        if why:
            raise PlanError(f"group {g.name!r} is illegal: {why}")
        reads = cost.group_reads(graph, g.nodes)
        if sorted(g.reads) != sorted(reads):
            raise PlanError(f"group {g.name!r}: reads is {g.reads}, its ops read {reads} from outside")
        mine = set(cost.produced(graph, g.nodes))
        for t in g.writes:
            if t not in mine:
                raise PlanError(f"group {g.name!r} writes {t!r}, which none of its ops produces")
            if t in writer:
                raise PlanError(f"tensor {t!r} is written by groups {writer[t]!r} and {g.name!r}")
        for t in reads:
            if not graph.is_source(t) and t not in writer:
                if later_writer.get(t, g.name) != g.name:
                    raise PlanError(f"group {g.name!r} reads {t!r} from memory, but no earlier group writes it "
                                    f"(the later group {later_writer[t]!r} does: cyclic or misordered)")
                raise PlanError(f"group {g.name!r} reads {t!r} from memory, but no earlier group writes it")
            read_later.add(t)
        for t in g.writes:
            writer[t] = g.name
        fp = group_footprint(graph, g.nodes, hw) if g.passes == 1 else loop_footprint(graph, g.nodes, hw)
        expect = dict(traffic_bytes=cost.kernel_traffic(graph, g.nodes, g.writes, g.passes),
                      registers=fp.registers, l1_bytes=fp.l1_bytes)
        for key, val in expect.items():
            if getattr(g, key) != val:
                raise PlanError(f"group {g.name!r}: {key} is {getattr(g, key)}, the cost model says {val}")
    missing = [v for v in graph.index.order if v not in covered]
    if missing:
        raise PlanError(f"node {missing[0]!r} is in no group")
    for t in dict.fromkeys(graph.outputs):
        if not graph.is_source(t) and t not in writer:
            raise PlanError(f"graph output {t!r} is written by no group")
    outputs = graph.index.outputs
    for t, name in writer.items():
        if t not in read_later and t not in outputs:
            raise PlanError(f"group {name!r} writes {t!r}, which no later group reads and is no graph output")


def convexity_violation(graph: Graph, nodes: Sequence[str]) -> Optional[str]:
    """A path that leaves the group ``nodes`` and re-enters it, as text, or None if it is convex.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["k"]},
    ...               {"name": "c", "op": "Neg", "inputs": ["k"], "outputs": ["y"]}]})
    >>> convexity_violation(g, ["a", "c"]), convexity_violation(g, ["a", "b"])
    ("'a' -> 'b' -> 'c'", None)
    """
    path = dag.path_back(nodes, graph.index.succs, graph.index.position)
    return None if path is None else " -> ".join(repr(p) for p in path)


def returns_to(graph: Graph, v: str, nodes: Sequence[str]) -> bool:
    """Whether a path from op ``v`` leaves the group ``nodes`` and comes back into it: then the
    group cannot be the one writing ``v``'s result for the ops on that path (it would have to run
    both before and after them) -- they need ``v`` recomputed or written by another kernel.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["k"]},
    ...               {"name": "c", "op": "Add", "inputs": ["k", "h"], "outputs": ["y"]}]})
    >>> returns_to(g, "a", ["a", "c"]), returns_to(g, "a", ["a", "b", "c"])
    (True, False)
    """
    idx = graph.index
    pos, desc = idx.position, idx.desc
    inside = set(nodes)
    mask = sum(1 << pos[u] for u in inside)
    return any(w not in inside and (desc[pos[w]] & mask)
               for w in idx.succs[v])


@paused()
def plan_to_json(plan: Plan) -> str:
    """The plan as JSON; a group's ``passes`` is left out when it is 1 (so a ``/1`` plan's JSON is
    what it was before looped kernels existed)."""
    data = plan.model_dump(mode="json", exclude_none=True)
    for g in data.get("groups", []):
        if g.get("passes") == 1:
            del g["passes"]
    return jsontext.dumps(data, indent=1)  # = json.dumps(data, indent=1, ensure_ascii=False)


def save_plan(plan: Plan, path: Union[str, os.PathLike]) -> None:
    """Validate, then write the plan JSON atomically."""
    validate(plan)
    write_atomic(path, plan_to_json(plan) + "\n")


@paused()
def load_plan(path: Union[str, os.PathLike], graph: Optional[Graph] = None) -> Plan:
    """Read a plan JSON; the graph comes embedded, via ``graph_path``, or from ``graph``. Validated."""
    path = Path(path)
    text = read_text(path, PlanError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}: malformed JSON at line {e.lineno}: {e.msg}") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise PlanError(f"{path}: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise PlanError(f"{path}: JSON nested too deeply") from None
    if not isinstance(data, dict) or data.get("format") not in FORMATS:
        raise PlanError(f"{path}: not a {FORMAT} or {FORMAT_COVERING} file")
    embedded = None
    if graph is None and "graph" in data:
        from .errors import GraphError
        from .graph import parse_graph
        try:  # weights files of the embedded graph resolve beside the plan
            embedded = parse_graph(data["graph"], base_dir=path.parent)
        except GraphError as e:
            raise PlanError(f"{path}: embedded graph: {e}") from None
        data["graph"] = embedded.model_dump(mode="json")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise PlanError(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if embedded is not None:
        plan.graph = embedded
    if graph is None and plan.graph is None and plan.graph_path:
        from .sources import load_graph
        graph = load_graph((path.parent / plan.graph_path) if not os.path.isabs(plan.graph_path) else plan.graph_path)
    if graph is not None:
        plan.graph = graph
    validate(plan)
    return plan
