"""Hardware mapping: what one fused kernel needs in registers and L1/shared memory.

The model is *additive* but for one rule, so the integer program can state it exactly (a linear
sum over the ops assigned to a group, plus one indicator per streaming reduction; see
``formulations/hardware-mapping.md``)::

    registers(G) = hw.kernel_base_registers + sum(op_registers(v) for v in G)
    l1_bytes(G)  = sum(op_l1_bytes(v) for v in G if rules.needs_row(graph, v, G))

``rules.needs_row`` is true for every op except a *streaming* reduction (ReduceSum/Mean/Max/...,
GlobalAverage/MaxPool: it reads its row once) that no other op of ``G`` is downstream of: such a
reduction ends its group's row loop, so its row streams through and is never kept (this is how
torch.compile's ``[Sub, Exp, ReduceSum]`` softmax kernel runs over rows far larger than L1).
Softmax, LogSoftmax and LayerNormalization read their row several times and always keep it.

* ``op_registers`` -- the live values the op adds to the kernel's schedule: its output value plus
  the temporaries of its scalar code (op table ``registers``); an anchor (MatMul/Conv/Gemm) adds
  its output micro-tile of accumulators (``hw.gemm_tile.accumulator_registers``). Two kinds of op
  add none: a view or strided remap (op table ``registers`` 0: its consumer loads at a remapped
  index) and an op computed from constants only (``graph.index.constant_only``: a function of the
  weights, such as batch norm's per-channel scale ``weight / sqrt(var + eps)`` -- foldable ahead,
  so in the kernel it is one more load, counted by the op that reads it). Without these, the
  real Inductor kernels of resnet (two batch norms + residual add + relu) and t5 (relative
  position bias) counted 42 and 37 registers against a budget of 32, though Inductor generates
  them without spilling. The sum stays additive (one constant per op), so the assignment
  formulation states it exactly and presolve's path pruning stays sound.
* ``op_l1_bytes`` -- data the op keeps resident in L1/shared while the kernel runs:
  a reduction keeps one *row* (its reduced extent, e.g. the softmax axis or the layer-norm
  features) so that the row's producers and consumers run in the same row loop; an anchor keeps
  its operand tiles ``(m*k + k*n) * itemsize * stages`` (tile clipped to the problem size); a
  window op (pooling, LRN) keeps ``window elements * window_tile_elements * itemsize``.

A group of two or more ops is legal only if both sums are within ``hw.register_budget`` and
``hw.l1_bytes``. A single-op kernel is always schedulable (it streams from global memory), which is
why an op that alone exceeds a limit is simply never fused.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> g = load_graph({"tensors": {"x": {"shape": [8, 1024]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "e", "op": "Exp", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "s", "op": "Softmax", "inputs": ["h"], "outputs": ["y"]}]})
>>> hw = load_hardware("nvidia-h100")
>>> op_footprint(g, "s", hw), group_footprint(g, ["e", "s"], hw)
(Footprint(registers=2, l1_bytes=4096), Footprint(registers=20, l1_bytes=4096))
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

from .graph import Graph
from .hardware import Hardware
from .ops import DTYPE_SIZES, OPS, numel, reduce_axes
from .rules import facts, needs_row


class Footprint(NamedTuple):
    registers: int
    l1_bytes: int


def row_elements(graph: Graph, node: str) -> int:
    """Elements of the row a reduction op keeps resident (its reduced extent)."""
    n = graph.index.node[node]
    x = graph.tensors[n.inputs[0]].shape
    rank = len(x)
    if n.op in ("Softmax", "LogSoftmax"):
        return x[n.attributes.get("axis", -1) % rank] if rank else 1
    if n.op == "LayerNormalization":
        return numel(x[n.attributes.get("axis", -1) % rank:]) if rank else 1
    if n.op in ("GlobalAveragePool", "GlobalMaxPool"):
        return numel(x[2:])
    ins = [(tuple(graph.tensors[t].shape), graph.tensors[t].dtype) if t else (None, None) for t in n.inputs]
    values = [graph.constant_value(t) if t else None for t in n.inputs]
    return numel([x[a] for a in reduce_axes(n.attributes, ins, values)])


def gemm_dims(graph: Graph, node: str) -> tuple[int, int, int]:
    """(M, N, K) of an anchor seen as a GEMM (Conv as implicit GEMM)."""
    n = graph.index.node[node]
    a = graph.tensors[n.inputs[0]].shape
    b = graph.tensors[n.inputs[1]].shape
    out = graph.tensors[n.outputs[0]].shape
    if n.op == "Conv":
        return numel([out[0]] + out[2:]), out[1], numel(b[1:])
    if n.op == "Gemm":
        k = a[0] if n.attributes.get("transA", 0) else a[1]
        return out[0], out[1], k
    return (numel(out[:-1]) if len(out) > 1 else 1), (out[-1] if len(b) > 1 else 1), a[-1]


def op_footprint(graph: Graph, node: str, hw: Hardware) -> Footprint:
    """Registers and L1 bytes that ``node`` adds to a group containing it (a streaming reduction's
    L1 only where :func:`solverfuse.rules.needs_row` says it keeps its row)."""
    n = graph.index.node[node]
    info = OPS.get(n.op)
    if info is None:
        return Footprint(0, 0)
    itemsize = DTYPE_SIZES[graph.tensors[n.inputs[0]].dtype] if n.inputs and n.inputs[0] else 4
    if info.role == "anchor":
        regs = hw.gemm_tile.accumulator_registers
    else:
        regs = 0 if node in graph.index.constant_only else info.registers
    if info.l1 == "row":
        l1 = row_elements(graph, node) * itemsize
    elif info.l1 == "gemm":
        m, nn, k = gemm_dims(graph, node)
        t = hw.gemm_tile
        tm, tn, tk = min(t.m, m), min(t.n, nn), min(t.k, k)
        l1 = (tm * tk + tk * tn) * itemsize * t.stages
    elif info.l1 == "window":
        window = n.attributes.get("size", 1) if n.op == "LRN" else numel(n.attributes.get("kernel_shape", [1]))
        l1 = window * hw.window_tile_elements * itemsize
    else:
        l1 = 0
    return Footprint(regs, l1)


def group_footprint(graph: Graph, nodes: Iterable[str], hw: Hardware) -> Footprint:
    """Registers (including the kernel's base registers) and L1 bytes of a group's kernel."""
    nodes = list(nodes)
    members = None
    regs, l1 = hw.kernel_base_registers, 0
    # Per-op footprints are cached on the graph for the last profile used (the entry holds
    # the profile itself, so `is` identifies it): planners ask for many overlapping groups.
    hit = graph.__dict__.get("_op_footprints")
    if hit is None or hit[0] is not hw or hit[1] is not graph.nodes:
        hit = graph.__dict__["_op_footprints"] = (hw, graph.nodes, {})
    known = hit[2]
    for v in nodes:
        fp = known.get(v)
        if fp is None:
            fp = known[v] = op_footprint(graph, v, hw)
        regs += fp.registers
        if fp.l1_bytes:
            members = members if members is not None else set(nodes)
            if needs_row(graph, v, members):
                l1 += fp.l1_bytes
    return Footprint(regs, l1)


def capacity_violation(graph: Graph, nodes: list[str], hw: Hardware) -> str | None:
    """Why a group exceeds registers or L1 (None if it fits; single ops always fit)."""
    if len(nodes) < 2:
        return None
    return _over_limits(group_footprint(graph, nodes, hw), hw, "needs")


# ---- looped reductions: a group run as several passes over its row inputs ------------------------

def loop_levels(graph: Graph, nodes: Iterable[str]) -> dict[str, int]:
    """Pass of every op of a group run as a looped kernel. A streaming reduction runs in the pass
    after the last streaming reduction of the group it depends on (0 when none), so each
    reduction's result is complete before any op of the group reads it; every other op runs as
    late as it may: in the earliest pass of its consumers in the group (its own earliest pass when
    it has none). So a pass computes only what it reduces, writes or passes on -- an op needed only
    by later passes is not computed (nor its inputs read) in an earlier one.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}, "w": {"shape": [2, 8]}}, "inputs": ["x", "w"],
    ...     "outputs": ["y"], "nodes": [
    ...     {"name": "m", "op": "ReduceMax", "inputs": ["x"], "outputs": ["mx"]},
    ...     {"name": "e", "op": "Exp", "inputs": ["w"], "outputs": ["ew"]},
    ...     {"name": "s", "op": "Sub", "inputs": ["ew", "mx"], "outputs": ["y"]}]})
    >>> loop_levels(g, ["m", "e", "s"])
    {'m': 0, 'e': 1, 's': 1}
    """
    members = list(nodes)
    inside = set(members)
    pos = graph.index.position
    order = sorted(members, key=pos.__getitem__)
    early: dict[str, int] = {}
    for v in order:
        early[v] = max((early[u] + (1 if facts(graph, u).streaming else 0)
                        for u in graph.index.preds[v] if u in inside), default=0)
    level: dict[str, int] = {}
    for v in reversed(order):
        if facts(graph, v).streaming:
            level[v] = early[v]
            continue
        users = [level[c] for t in graph.index.node[v].outputs if t
                 for c in graph.index.consumers.get(t, []) if c in inside]
        level[v] = min(users, default=early[v])
    return {v: level[v] for v in order}


def loop_passes(graph: Graph, nodes: Iterable[str]) -> int:
    """How many passes a looped kernel of this group makes (1: no reduction feeds an op of it)."""
    return 1 + max(loop_levels(graph, nodes).values(), default=0)


def pass_nodes(graph: Graph, nodes: Iterable[str]) -> list[list[str]]:
    """The ops each pass of a looped kernel computes (graph order): the ops of that pass and the
    ops of the group they need, recomputed, except earlier reductions, whose per-row results the
    kernel keeps from their own pass. A reduction of pass ``p`` has no successor in pass ``p``, so
    every pass streams its rows."""
    members = list(nodes)
    level = loop_levels(graph, members)
    pos = graph.index.position
    out = []
    for p in range(1 + max(level.values(), default=0)):
        keep = {v for v in members if level[v] == p}
        stack = list(keep)
        while stack:
            v = stack.pop()
            for u in graph.index.preds[v]:
                if u in level and u not in keep and not (facts(graph, u).streaming and level[u] < p):
                    keep.add(u)
                    stack.append(u)
        out.append(sorted(keep, key=pos.__getitem__))
    return out


def loop_footprint(graph: Graph, nodes: Iterable[str], hw: Hardware) -> Footprint:
    """A bound on every pass's footprint: the whole group's registers, and the L1 of its ops
    other than streaming reductions (each pass streams its reductions' rows). Monotone under
    subsets, like :func:`group_footprint`."""
    nodes = list(nodes)
    regs, l1 = hw.kernel_base_registers, 0
    for v in nodes:
        fp = op_footprint(graph, v, hw)
        regs += fp.registers
        if not facts(graph, v).streaming:
            l1 += fp.l1_bytes
    return Footprint(regs, l1)


def reduce_signature(graph: Graph, node: str) -> tuple:
    """What streaming reductions must share to run in one loop nest: input shape, reduced axes
    (sorted, non-negative), keepdims.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}}, "inputs": ["x"], "outputs": ["a"],
    ...     "nodes": [{"name": "s", "op": "ReduceSum", "inputs": ["x"], "outputs": ["a"], "attributes": {"axes": [-1]}}]})
    >>> reduce_signature(g, "s")
    ((2, 8), (1,), True)
    """
    n = graph.index.node[node]
    x = tuple(graph.tensors[n.inputs[0]].shape)
    if n.op.startswith("Global"):
        return x, tuple(range(2, len(x))), True
    ins = [(tuple(graph.tensors[t].shape), graph.tensors[t].dtype) if t else (None, None) for t in n.inputs]
    values = [graph.constant_value(t) if t else None for t in n.inputs]
    axes = tuple(sorted({a % len(x) for a in reduce_axes(n.attributes, ins, values)})) if x else ()
    return x, axes, bool(n.attributes.get("keepdims", 1))


def within(shape: Iterable[int], loop: Iterable[int]) -> bool:
    """Whether every element of a tensor of ``shape`` is reached by a loop nest over ``loop``
    through broadcasting (right-aligned; each dim 1 or equal to the loop's).

    >>> within((2, 1), (2, 8)), within((8,), (2, 8)), within((4,), (2, 8)), within((3, 2, 8), (2, 8))
    (True, True, False, False)
    """
    shape, loop = tuple(shape), tuple(loop)
    if len(shape) > len(loop):
        return False
    return all(d == 1 or d == e for d, e in zip(shape, loop[len(loop) - len(shape):]))


def loop_shape_violation(graph: Graph, nodes: Iterable[str]) -> str | None:
    """Why a looped kernel of this group could not run each pass as ONE loop nest over the
    streaming reductions' common input shape -- reading each input of the pass once, as
    ``cost.kernel_reads`` charges (None when it can). An anchor or window op would be
    materialised as tiles; a Softmax/LogSoftmax/LayerNorm/VarMean's row statistics would take a
    loop of their own; reductions of another input shape, axes or keepdims, or a tensor no loop
    over that shape reaches, would need another loop nest: each reads the pass's inputs again.
    Monotone under subsets (a subset has fewer ops and the same or no common shape).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}}, "inputs": ["x"], "outputs": ["y", "c"],
    ...     "nodes": [{"name": "m", "op": "ReduceMax", "inputs": ["x"], "outputs": ["mx"], "attributes": {"axes": [1]}},
    ...               {"name": "s", "op": "Sub", "inputs": ["x", "mx"], "outputs": ["y"]},
    ...               {"name": "c", "op": "ReduceSum", "inputs": ["x"], "outputs": ["c"], "attributes": {"axes": [0]}}]})
    >>> loop_shape_violation(g, ["m", "s"]) is None
    True
    >>> loop_shape_violation(g, ["m", "s", "c"])
    "a looped kernel streams one reduction shape: 'c' reduces (2, 8) over axes (0,) (keepdims 1), 'm' (2, 8) over (1,) (keepdims 1)"
    """
    nodes = list(nodes)
    sig, first = None, None
    for v in nodes:
        refused, s, _ = _loop_facts(graph, v)
        if refused:
            return refused
        if s is not None:
            if sig is None:
                sig, first = s, v
            elif s != sig:
                return (f"a looped kernel streams one reduction shape: {v!r} reduces {s[0]} over axes "
                        f"{s[1]} (keepdims {int(s[2])}), {first!r} {sig[0]} over {sig[1]} (keepdims {int(sig[2])})")
    if sig is None:
        return None
    for v in nodes:
        for t, shape in _loop_facts(graph, v)[2]:
            if not within(shape, sig[0]):
                return (f"node {v!r}: its output {t!r} {list(shape)} is not reached "
                        f"by the looped kernel's loop over {list(sig[0])}")
    return None


def _loop_facts(graph: Graph, v: str) -> tuple:
    """(why ``v`` may not be in a looped kernel or None, its reduction signature if it is a
    streaming reduction, its outputs' (name, shape) otherwise) -- cached on the graph, since
    enumeration asks for many overlapping groups."""
    hit = graph.__dict__.get("_loop_facts")
    if hit is None or hit[0] is not graph.nodes:
        hit = graph.__dict__["_loop_facts"] = (graph.nodes, {})
    known = hit[1]
    if v in known:
        return known[v]
    n = graph.index.node[v]
    info = OPS.get(n.op)
    f = facts(graph, v)
    refused = None
    if info is not None and info.role in ("anchor", "window"):
        refused = (f"node {v!r}: a looped kernel recomputes its ops in every pass; a {n.op} would "
                   "be materialised as tiles, which the looped cost does not charge")
    elif info is not None and info.role == "reduction" and not f.streaming:
        refused = (f"node {v!r}: a looped kernel holds no {n.op} (its row statistics would take a "
                   "loop of their own, reading the pass's inputs again)")
    if f.streaming:
        known[v] = (refused, reduce_signature(graph, v), ())
    else:
        known[v] = (refused, None, tuple((t, tuple(graph.tensors[t].shape)) for t in n.outputs if t))
    return known[v]


def loop_capacity_violation(graph: Graph, nodes: list[str], hw: Hardware) -> str | None:
    """Why no pass of a looped kernel of this group can fit (None when every pass fits)."""
    if len(nodes) < 2:
        return None
    return _over_limits(loop_footprint(graph, nodes, hw), hw, "a pass needs")


def _over_limits(fp: Footprint, hw: Hardware, who: str) -> str | None:
    """The register or L1 limit a footprint exceeds (registers first), or None."""
    if fp.registers > hw.register_budget:
        return f"needs {fp.registers} registers > budget {hw.register_budget} of {hw.name}"
    if fp.l1_bytes > hw.l1_bytes:
        return f"{who} {fp.l1_bytes} bytes of L1/shared > {hw.l1_bytes} of {hw.name}"
    return None
