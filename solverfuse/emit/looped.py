"""A looped kernel as C: a group whose rows do not fit L1, run as the passes the plan states.

The cost model (:func:`solverfuse.cost.kernel_reads`) charges a looped kernel of ``P`` passes the
reads of every pass: pass ``p`` computes the ops :func:`solverfuse.mapping.pass_nodes` lists for it
-- the ops of its level (:func:`solverfuse.mapping.loop_levels`) and, recomputed, the ops of the
group they need -- except the streaming reductions of earlier passes, whose results the kernel
keeps. This module emits exactly that, pass by pass:

1. the (Log)Softmax / LayerNormalization statistics the pass needs and no earlier pass computed
   (they keep their row: the capacity check counts their L1);
2. the streaming reductions (Reduce*, Global*Pool) of this level, into kernel-local scratch
   indexed by their output (a few values per row: the "per-row scalars" carried to later
   passes) -- those with the same input shape, axes and keepdims share one loop nest, so the pass
   reads each input element once;
3. the tensors of this level the plan says the kernel writes: those of a reduction's input shape
   are stored inside that reduction's loop (one read of the inputs for both), the others by one
   loop nest per shape.

Every other value is computed on demand at its index (:meth:`Kernel.value`): an op of an earlier
level is recomputed in each pass that needs it, from the kernel's inputs in global memory, as the
cost model charges. In the instrumented build each pass marks its reads with its own bit
(``SF_PASS``), so the counters charge every pass's reads and equal ``cost.kernel_traffic``.

Anchors and window ops are not emitted in a looped kernel (an EmitError names the node): the
schedule's tiles would materialise them, which the cost model of a looped kernel does not charge.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.emit.kernel import Kernel
>>> from solverfuse.emit.lowering import code_for_op
>>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "m", "op": "ReduceMax", "inputs": ["x"], "outputs": ["mx"], "attributes": {"axes": [1]}},
...               {"name": "s", "op": "Sub", "inputs": ["x", "mx"], "outputs": ["y"]}]})
>>> k = Kernel(g, ["m", "s"], 0, {"x": 0, "y": 1}, counters=True, threads=1, lower=code_for_op)
>>> src = render_looped(k, 2)
>>> src.count("SF_PASS("), src.count("SFR(b0")
(2, 2)
"""
from __future__ import annotations

from .. import cost
from ..errors import EmitError
from ..mapping import loop_levels, pass_nodes
from ..ops import OPS
from .cexpr import ctype
from .kernel import Kernel, param_check
from .lowering import SUPPORTED
from .reductions import REDUCE_OPS, STATS, reduce_pass_shared, reduce_signature

#: The instrumented build marks a pass's reads with one bit of a byte.
MAX_COUNTED_PASSES = 8


def render_looped(k: Kernel, passes: int) -> str:
    """The C function ``k<gid>`` of a looped kernel of ``passes`` passes (see the module doc)."""
    g = k.graph
    for v in k.nodes:
        node = g.index.node[v]
        if node.op not in OPS or node.op not in SUPPORTED:
            raise EmitError(f"node {v!r}: op {node.op!r} is not supported by the C emitter")
        if OPS[node.op].role in ("anchor", "window"):
            raise EmitError(f"node {v!r}: a looped kernel with a {node.op} is not emitted "
                            "(its tiles would be materialised, which the looped cost does not charge)")
        for t in node.inputs + node.outputs:
            if t:
                ctype(g, t)
    level = loop_levels(g, k.nodes)
    per_pass = pass_nodes(g, k.nodes)
    if len(per_pass) != passes:
        raise EmitError(f"group of {k.nodes[0]!r}: the plan states {passes} passes, its ops make {len(per_pass)}")
    if k.counters and passes > MAX_COUNTED_PASSES:
        raise EmitError(f"group of {k.nodes[0]!r}: the instrumented build counts at most "
                        f"{MAX_COUNTED_PASSES} passes, not {passes}")
    stats_done: set[str] = set()
    starts = []
    for p, ops in enumerate(per_pass):
        if passes == 1:
            k.line("/* one pass: a stream ending in reductions, stored and accumulated in one loop */")
        else:
            k.line(f"/* looped kernel, pass {p + 1} of {passes}: {len(ops)} op(s), "
                   f"{sum(level[v] < p for v in ops)} of them recomputed */")
        if k.counters:
            k.line(f"SF_PASS({p});")
        starts.append(len(k.lines))
        for v in ops:
            node = g.index.node[v]
            if node.op in STATS and v not in stats_done:
                stats_done.add(v)
                STATS[node.op](k, node)
        shared: dict[tuple, list] = {}
        for v in ops:
            node = g.index.node[v]
            if node.op in REDUCE_OPS and level[v] == p:
                shared.setdefault(reduce_signature(k, node), []).append(node)
        writes = [t for t in k.writes if level[g.index.producer[t]] == p
                  and g.index.node[g.index.producer[t]].op not in REDUCE_OPS]  # those store their own
        for sig, nodes in shared.items():
            mine = [t for t in writes if k.shape(t) == sig[0]]
            writes = [t for t in writes if t not in mine]
            reduce_pass_shared(k, nodes, mine)
        by_shape: dict[tuple, list[str]] = {}
        for t in writes:
            by_shape.setdefault(k.shape(t), []).append(t)
        for shape, ts in by_shape.items():
            k.line(f"/* {len(ts)} written tensor(s) of shape {list(shape)} */")
            with k.loops(shape, parallel=True) as idx:
                for t in ts:
                    k.store(t, idx, k.value(t, idx))
    _recheck_parameters(k, per_pass, starts)
    return k.assemble()


def _recheck_parameters(k: Kernel, per_pass: list, starts: list) -> None:
    """A shape/axes parameter is checked once at the kernel's entry; a looped kernel whose passes
    recompute its reader checks it again in each later pass that reads it -- a read per pass, as
    the cost model charges (inserted at each pass's start, last pass first)."""
    g = k.graph
    seen: set[str] = set()
    at: list[tuple[int, str]] = []
    for p, ops in enumerate(per_pass):
        reads = [t for t in cost.group_reads(g, ops) if g.index.producer.get(t) not in k.members]
        for t in k.checked:
            if t in reads:
                if t in seen:
                    at.append((p, t))
                seen.add(t)
    for p, t in sorted(at, reverse=True):
        b = k.buffers[t]
        load = f"SFR(b{b}, {b}, q)" if k.counters else f"b{b}[q]"
        body = ["    {"] + ["        " + ln for ln in param_check(g, t, b, load)] + ["    }"]
        k.lines[starts[p]:starts[p]] = body


def streams_in_one_loop(k: Kernel) -> bool:
    """Whether a one-pass group is a stream ending in reductions -- no reduction feeds an op of the
    group, all its reductions share input shape, axes and keepdims, every other tensor it writes
    has that input shape, and it holds no anchor, window or (Log)Softmax/LayerNorm -- so that
    :func:`render_looped` emits it as ONE loop nest that stores the written tensors and
    accumulates the reductions (what the cost model charges: one read of each input). The
    general schedule would give the reductions a loop nest of their own, reading the inputs again.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.emit.lowering import code_for_op
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}}, "inputs": ["x"], "outputs": ["e", "s"],
    ...     "nodes": [{"name": "x1", "op": "Exp", "inputs": ["x"], "outputs": ["e"]},
    ...               {"name": "r", "op": "ReduceSum", "inputs": ["e"], "outputs": ["s"], "attributes": {"axes": [1]}}]})
    >>> k = Kernel(g, ["x1", "r"], 0, {"x": 0, "e": 1, "s": 2}, counters=False, threads=1, lower=code_for_op)
    >>> streams_in_one_loop(k), render_looped(k, 1).count("b0[")
    (True, 1)
    """
    g = k.graph
    reds = []
    for v in k.nodes:
        node = g.index.node[v]
        if node.op not in OPS or node.op not in SUPPORTED or node.op in STATS \
                or OPS[node.op].role in ("anchor", "window"):
            return False
        if node.op in REDUCE_OPS:
            reds.append(node)
    if not reds or max(loop_levels(g, k.nodes).values()) > 0:
        return False
    sigs = {reduce_signature(k, node) for node in reds}
    if len(sigs) != 1:
        return False
    (sig,) = sigs
    return all(k.shape(t) == sig[0] for t in k.writes if g.index.node[g.index.producer[t]].op not in REDUCE_OPS)
