"""A looped kernel as C: a group whose rows do not fit L1, run as the passes the plan states.

The cost model (:func:`solverfuse.cost.kernel_reads`) charges a looped kernel of ``P`` passes the
reads of every pass: pass ``p`` computes the ops :func:`solverfuse.mapping.pass_nodes` lists for it
-- the ops of its level (:func:`solverfuse.mapping.loop_levels`) and, recomputed, the ops of the
group they need -- except the streaming reductions of earlier passes, whose results the kernel
keeps. The capacity model admits a looped kernel only when each pass can run as ONE loop nest
(:func:`solverfuse.mapping.loop_shape_violation`: its streaming reductions share input shape,
axes and keepdims; every other op's output is reached from that shape by broadcasting; no anchor,
window or Softmax/LayerNorm statistics). This module emits exactly that, one loop nest per pass:

* a pass with streaming reductions: one loop over their common output with one inner loop over
  the reduced axes (:func:`solverfuse.emit.reductions.reduce_pass_shared`) that accumulates them
  into kernel-local scratch indexed by their output (the "per-row scalars" carried to later
  passes) and stores every tensor of this pass the plan says the kernel writes
  (:meth:`Kernel.store_within`: a smaller, broadcast shape is stored where the loop's
  broadcast indices are 0);
* a pass without: one loop over the broadcast of its written shapes, storing each the same way.

Every other value is computed on demand at its index (:meth:`Kernel.value`): an op of an earlier
level is recomputed in each pass that needs it, from the kernel's inputs in global memory, as the
cost model charges; so each pass reads its inputs in one sweep, once as charged. An op of the pass
that nothing of the pass reads and the kernel does not write is still computed (its reads are
charged). In the instrumented build each pass marks its reads with its own bit (``SF_PASS``), so
the counters charge every pass's reads and equal ``cost.kernel_traffic``.

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
from ..mapping import loop_levels, loop_shape_violation, pass_nodes, reduce_signature, within
from ..ops import OPS
from .cexpr import ctype, param_check
from .kernel import Kernel
from .lowering import SUPPORTED
from .reductions import REDUCE_OPS, STATS, reduce_pass_shared

#: The instrumented build marks a pass's reads with one bit of a byte.
MAX_COUNTED_PASSES = 8


def render_looped(k: Kernel, passes: int) -> str:
    """The C function ``k<gid>`` of a looped kernel of ``passes`` passes (see the module doc)."""
    g = k.graph
    for v in k.nodes:
        node = g.index.node[v]
        if node.op not in OPS or node.op not in SUPPORTED:
            raise EmitError(f"node {v!r}: op {node.op!r} is not supported by the C emitter")
        for t in node.inputs + node.outputs:
            if t:
                ctype(g, t)
    why = loop_shape_violation(g, k.nodes) if passes > 1 else None
    if why:
        raise EmitError(f"group of {k.nodes[0]!r}: not emitted as a looped kernel: {why}")
    level = loop_levels(g, k.nodes)
    per_pass = pass_nodes(g, k.nodes)
    if len(per_pass) != passes:
        raise EmitError(f"group of {k.nodes[0]!r}: the plan states {passes} passes, its ops make {len(per_pass)}")
    if k.counters and passes > MAX_COUNTED_PASSES:
        raise EmitError(f"group of {k.nodes[0]!r}: the instrumented build counts at most "
                        f"{MAX_COUNTED_PASSES} passes, not {passes}")
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
        reds = [g.index.node[v] for v in ops if g.index.node[v].op in REDUCE_OPS and level[v] == p]
        writes = [t for t in k.writes if level[g.index.producer[t]] == p
                  and g.index.node[g.index.producer[t]].op not in REDUCE_OPS]  # those store their own
        idle = _unread(k, ops, level, p)
        if reds:
            reduce_pass_shared(k, reds, writes, idle)
        elif writes or idle:
            shapes = [k.shape(t) for t in writes + idle]
            rank = max(len(s) for s in shapes)
            loop = tuple(max((s[d - rank + len(s)] if d >= rank - len(s) else 1) for s in shapes)
                         for d in range(rank))
            k.line(f"/* {len(writes)} written tensor(s), one loop over {list(loop)} */")
            with k.loops(loop, parallel=True) as idx:
                for t in writes:
                    k.store_within(t, loop, idx)
                for t in idle:
                    k.store_within(t, loop, idx, store=False)
    _recheck_parameters(k, per_pass, starts)
    return k.assemble()


def _unread(k: Kernel, ops: list, level: dict, p: int) -> list[str]:
    """Outputs of ops of pass ``p`` that nothing of the pass reads and the kernel does not write
    (a plan may keep such an op in a kernel): the pass computes them anyway, without storing
    them, since the cost model charges their reads in this pass."""
    g = k.graph
    inside = set(ops)
    return [t for v in ops if level[v] == p and g.index.node[v].op not in REDUCE_OPS
            for t in g.index.node[v].outputs if t and t not in k.writes
            and not any(c in inside for c in g.index.consumers.get(t, []))]


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
    (or computes for no reader) is reached from that input shape by broadcasting, and it holds
    no anchor, window or (Log)Softmax/LayerNorm -- so that
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
    sigs = {reduce_signature(g, node.name) for node in reds}
    if len(sigs) != 1:
        return False
    (sig,) = sigs
    ends = [t for v in k.nodes if g.index.node[v].op not in REDUCE_OPS for t in g.index.node[v].outputs
            if t and (t in k.writes or not any(c in k.members for c in g.index.consumers.get(t, [])))]
    return all(within(k.shape(t), sig[0]) for t in ends)
