"""Reductions as C: row statistics of Softmax / LogSoftmax / LayerNormalization / VarMean (a pass of their
own into scratch arrays indexed by row, or scalars inside a row loop) and the expression of each
output element from them (``STATS``, ``STATS_EXPR``); Reduce* and global pooling as a pass over
the reduced output (:func:`reduce_pass`) or a row scalar (:func:`reduce_row`). Softmax statistics live in
:mod:`~solverfuse.emit.softmax`, LayerNorm and VarMean statistics in :mod:`~solverfuse.emit.norm_stats`,
the row-loop building blocks in :mod:`~solverfuse.emit.row_loop`.

>>> sorted(STATS), sorted(REDUCE_OPS)[:3]
(['LayerNormalization', 'LogSoftmax', 'ScaledDotProductAttention', 'Softmax', 'VarMean'], ['GlobalAveragePool', 'GlobalMaxPool', 'ReduceL2'])
"""
from __future__ import annotations

from ..errors import InternalError
from ..mapping import within
from ..ops import numel, reduce_axes
from .attention import ATTENTION_EXPR, ATTENTION_STATS
from .cexpr import bmap, input_index, linear
from .elementwise import NARY, STRUCTURED, UNARY, exp_fn, input_specs
from .kernel import Kernel, inline_deps
from .norm_stats import layernorm_stats, varmean_setup, varmean_stats
from .row_loop import computed, lane_max, lane_sums, row_array, row_array_filled
from .softmax import expsum_blocks, softmax_stats


# ---- reductions: statistics passes and reduced outputs
def _row_index(k, node, idx, rshape):
    return linear(rshape, tuple("0" if d == 1 else i for i, d in zip(idx, rshape)))


def stats_last_axis(k, node) -> bool:
    """Whether the statistics op ``node`` reduces exactly the last axis of its input (so a row
    loop can keep its statistics as row scalars).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.emit.kernel import Kernel
    >>> from solverfuse.emit.lowering import code_for_op
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}}, "inputs": ["x"], "outputs": ["v", "m"],
    ...     "nodes": [{"name": "vm", "op": "VarMean", "inputs": ["x"], "outputs": ["v", "m"],
    ...                "attributes": {"axes": [0]}}]})
    >>> k = Kernel(g, ["vm"], 0, {"x": 0, "v": 1, "m": 2}, counters=False, threads=1, lower=code_for_op)
    >>> stats_last_axis(k, g.index.node["vm"])
    False
    """
    rank = len(k.shape(node.inputs[0]))
    if node.op == "VarMean":
        return varmean_setup(k, node)[1] == [rank - 1]
    if node.op in ATTENTION_STATS:
        return False
    return node.attributes.get("axis", -1) % rank == rank - 1


STATS = {"Softmax": softmax_stats, "LogSoftmax": softmax_stats, "LayerNormalization": layernorm_stats,
         "VarMean": varmean_stats, **ATTENTION_STATS}


def _stat(k, node, idx):
    """C expressions of a reduction's two statistics for the row of ``idx``."""
    st = k.stats[node.name]
    if st.get("row"):
        return st["a"], st.get("b")
    r = _row_index(k, node, idx, st["shape"])
    return k.invariant(st["ct"], st["a"], r), k.invariant(st["ct"], st["b"], r)


def _softmax_expr(k, node, pos, idx):
    a, b = _stat(k, node, idx)
    ex = k.stats[node.name].get("exp")
    if ex:  # a row loop's Softmax: this row's exponentials are kept, indexed along the axis
        return f"{ex}[{idx[node.attributes.get('axis', -1) % len(idx)]}] * {b}"
    x = k.value(node.inputs[0], idx)
    if node.op == "Softmax":
        return f"{exp_fn(k.ct(node.outputs[0]))}({x} - {a}) * {b}"
    return f"({x} - {a})"


def _layernorm_expr(k, node, pos, idx):
    a, b = _stat(k, node, idx)
    if pos == 1:
        return a
    if pos == 2:
        return b
    out = k.shape(node.outputs[0])
    x = k.value(node.inputs[0], idx)
    sc = k.value(node.inputs[1], bmap(idx, out, k.shape(node.inputs[1])))
    bias = None
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = k.value(node.inputs[2], bmap(idx, out, k.shape(node.inputs[2])))
    if bias is not None and k.ct(node.outputs[0]) == "float":
        # one rounding less and one vector op less per element (ISO C mode contracts nothing)
        return f"SF_FMA(({x} - {a}) * {b}, {sc}, {bias})"
    return f"({x} - {a}) * {b} * {sc}" + (f" + {bias}" if bias is not None else "")


def _varmean_expr(k, node, pos, idx):
    var, mean = _stat(k, node, idx)
    return var if pos == 0 else mean


STATS_EXPR = {"Softmax": _softmax_expr, "LogSoftmax": _softmax_expr, "LayerNormalization": _layernorm_expr,
              "VarMean": _varmean_expr, **ATTENTION_EXPR}

_ACC = {"ReduceSum": "sum", "ReduceMean": "mean", "GlobalAveragePool": "mean", "ReduceMax": "max",
        "GlobalMaxPool": "max", "ReduceMin": "min", "ReduceProd": "prod", "ReduceL2": "l2",
        "ReduceSumSquare": "sumsq"}


def _reduce_setup(k, node):
    """(axes, keepdims, accumulator kind) of a Reduce*/Global*Pool node."""
    xs = k.shape(node.inputs[0])
    if node.op.startswith("Global"):
        return list(range(2, len(xs))), 1, _ACC[node.op]
    values = [None] + [k.param_values(u) if u else None for u in node.inputs[1:]]
    return reduce_axes(node.attributes, input_specs(k, node), values), node.attributes.get("keepdims", 1), _ACC[node.op]


def _acc_open(k, node, kind):
    """Declare a reduction's accumulator: (C name, its C type, the 'first value' flag or None,
    the ``#pragma omp simd`` reduction clause or None)."""
    t = node.outputs[0]
    ct = k.ct(t)
    floaty = ct in ("float", "double")
    acc = k.fresh("acc")
    at = ("double" if floaty else "int64_t") if kind in ("sum", "mean", "l2", "sumsq", "prod") else ct
    init = {"prod": "1", "max": "-INFINITY" if floaty else None, "min": "INFINITY" if floaty else None}.get(kind, "0")
    flag = None
    if init is None:
        flag = k.fresh("f")
        k.line(f"{at} {acc} = 0; int {flag} = 1;")
    else:
        k.line(f"{at} {acc} = {init};")
    simd = {"sum": "+", "mean": "+", "l2": "+", "sumsq": "+", "prod": "*"}.get(kind)
    if kind in ("max", "min") and flag is None:
        simd = kind
    return acc, at, flag, simd and f"reduction({simd}:{acc})"


def _acc_step(k, kind, acc, at, flag, v):
    """Accumulate the C value ``v``."""
    if kind in ("sum", "mean"):
        k.line(f"{acc} += {v};")
    elif kind in ("l2", "sumsq"):
        k.line(f"{acc} += ({at}){v} * {v};")
    elif kind == "prod":
        k.line(f"{acc} *= {v};")
    else:
        cmp = ">" if kind == "max" else "<"
        cond = f"{flag} || {v} {cmp} {acc}" if flag else f"{v} {cmp} {acc}"
        k.line(f"if ({cond}) {{ {acc} = {v};{f' {flag} = 0;' if flag else ''} }}")


def _acc_result(k, node, kind, acc, n):
    """C expression of the reduced value from its accumulator (``n`` elements reduced)."""
    ct = k.ct(node.outputs[0])
    return {"mean": f"({ct})({acc} / {max(n, 1)})", "l2": f"({ct})sqrt({acc})"}.get(kind, f"({ct}){acc}")


def _reduce_value(k, node, idx, axes, keep, kind, row_copy=None, row=None):
    """Accumulate the reduction at output index ``idx`` (an inner loop over the reduced axes);
    returns the C expression of the reduced value. ``row_copy`` (an array) also receives each
    input value of a last-axis reduction, so later ops of the row need not recompute it; ``row``
    (inside a row loop) prefetches the next row of the inputs while a float sum computes."""
    x = node.inputs[0]
    xs = k.shape(x)
    acc, at, flag, simd = _acc_open(k, node, kind)
    if kind in ("sum", "mean") and k.ct(x) == "float" and len(axes) == 1:
        # float lanes, added in double (see lane_sums)
        def value(j):
            v = k.value(x, input_index(xs, idx, axes, keep, (j,)))
            if row_copy is not None:
                k.line(f"{row_copy}[{j}] = {v};")
            return v
        lane_sums(k, xs[axes[0]], acc, value, (x, row) if row is not None else None)
        return _acc_result(k, node, kind, acc, xs[axes[0]])
    if kind in ("sum", "mean") and k.ct(x) == "float" and flat_trailing(k, x, axes):
        # one loop over the trailing axes as one run (a 13x13 plane in a 169 loop, not 13 of 13)
        n = numel([xs[a] for a in axes])
        lead = ("0",) * (len(axes) - 1)
        lane_sums(k, n, acc, lambda j: k.value(x, input_index(xs, idx, axes, keep, lead + (j,))))
        return _acc_result(k, node, kind, acc, n)
    if kind == "max" and flag is None and k.ct(x) == "float" and at == "float" and len(axes) == 1:
        # lanes of partial maxima (see lane_max)
        def value_at(j):
            v = k.value(x, input_index(xs, idx, axes, keep, (j,)))
            if row_copy is not None:
                k.line(f"{row_copy}[{j}] = {v};")
            return v
        lane_max(k, xs[axes[0]], acc, value_at)
        return _acc_result(k, node, kind, acc, xs[axes[0]])
    with k.loops([xs[a] for a in axes], simd=simd) as red:
        v = k.value(x, input_index(xs, idx, axes, keep, red))
        if row_copy is not None:
            k.line(f"{row_copy}[{red[-1]}] = {v};")
        _acc_step(k, kind, acc, at, flag, v)
    return _acc_result(k, node, kind, acc, numel([xs[a] for a in axes]))


def flat_trailing(k: Kernel, x: str, axes: list) -> bool:
    """Whether a reduction of ``x`` over ``axes`` may run as ONE loop over them (index 0 on every
    reduced axis but the last, which runs to their element count: the row-major offset of every
    reduced element): ``axes`` are the last two or more axes of ``x``, and every op computing ``x``
    inline is pointwise (``elementwise``'s ops), each tensor it reads having ``x``'s trailing sizes there or ones.
    SqueezeNet's GlobalAveragePool pass (1000 13x13 planes after a ReLU), the emitted loops alone:
    0.087-0.092 ms as 13 loops of 13, 0.030-0.034 as one loop of 169 (its whole kernel, 1.77 ms,
    did not move beyond noise).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.emit.lowering import code_for_op
    >>> g = load_graph({"tensors": {"x": {"shape": [1, 8, 5, 5]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "p", "op": "GlobalAveragePool", "inputs": ["h"], "outputs": ["y"]}]})
    >>> k = Kernel(g, ["r", "p"], 0, {"x": 0, "y": 1}, counters=False, threads=1, lower=code_for_op)
    >>> flat_trailing(k, "h", [2, 3]), flat_trailing(k, "h", [3]), flat_trailing(k, "h", [1, 2])
    (True, False, False)
    """
    xs = k.shape(x)
    m = len(axes)
    if m < 2 or list(axes) != list(range(len(xs) - m, len(xs))):
        return False
    tail = tuple(xs[-m:])
    for d in inline_deps(k, x, {}):
        node = k.graph.index.node[k.graph.index.producer[d]]
        if not (node.op in NARY or node.op in UNARY or node.op in STRUCTURED) or tuple(k.shape(d)[-m:]) != tail:
            return False
        for u in node.inputs:
            if u and (((1,) * m + tuple(k.shape(u)))[-m:] not in (tail, (1,) * m)):
                return False
    return True


def reduce_pass_shared(k, nodes, stores=(), computes=()) -> None:
    """Several Reduce*/Global*Pool nodes with the same input shape, reduced axes and keepdims as
    ONE pass: a loop over the (common) reduced output, one inner loop over the reduced axes that
    accumulates every node -- and stores every tensor of ``stores`` (each of a shape that loop
    reaches, :meth:`Kernel.store_within`) at the same index, and computes those of ``computes``
    without storing them -- so the pass reads each input element once. Results go to kernel-local scratch when an op of the group reads them, and to
    global memory when the group writes them.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.emit.kernel import Kernel
    >>> from solverfuse.emit.lowering import code_for_op
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}}, "inputs": ["x"], "outputs": ["a", "b"],
    ...     "nodes": [{"name": "s", "op": "ReduceSum", "inputs": ["x"], "outputs": ["a"], "attributes": {"axes": [1]}},
    ...               {"name": "m", "op": "ReduceMax", "inputs": ["x"], "outputs": ["b"], "attributes": {"axes": [1]}}]})
    >>> k = Kernel(g, ["s", "m"], 0, {"x": 0, "a": 1, "b": 2}, counters=False, threads=1, lower=code_for_op)
    >>> reduce_pass_shared(k, [g.index.node["s"], g.index.node["m"]])
    >>> sum("for (long" in ln for ln in k.lines), sum("b0[" in ln for ln in k.lines)
    (2, 1)
    """
    if not all(within(k.shape(t), k.shape(nodes[0].inputs[0])) for t in (*stores, *computes)):
        raise InternalError(f"node {nodes[0].name!r}: a store in a reduction's loop that it does not reach")
    first = nodes[0]
    t0 = first.outputs[0]
    os_, xs = k.shape(t0), k.shape(first.inputs[0])
    setups = [_reduce_setup(k, node) for node in nodes]
    axes, keep = setups[0][0], setups[0][1]
    k.line(f"/* pass: {', '.join(n.op for n in nodes)} (one loop over the reduced axes) */")
    dests = []
    for node in nodes:
        t = node.outputs[0]
        kept = any(c in k.members for c in k.graph.index.consumers.get(t, []))
        dests.append(k.alloc(k.ct(t), numel(os_), f"{node.op} result read by later ops") if kept else None)
    with k.loops(os_, parallel=True) as idx:
        accs = [_acc_open(k, node, kind) for node, (_, _, kind) in zip(nodes, setups)]
        clauses = [a[3] for a in accs]
        simd = " ".join(clauses) if all(clauses) else None
        with k.loops([xs[a] for a in axes], simd=simd) as red:
            at_x = input_index(xs, idx, axes, keep, red)
            for t in stores:
                k.store_within(t, xs, at_x)
            for t in computes:
                k.store_within(t, xs, at_x, store=False)
            for node, (_, _, kind), (acc, at, flag, _) in zip(nodes, setups, accs):
                _acc_step(k, kind, acc, at, flag, k.value(node.inputs[0], at_x))
        n = numel([xs[a] for a in axes])
        for node, (_, _, kind), (acc, _, _, _), dest in zip(nodes, setups, accs, dests):
            # a reduction a kernel computes only because its reads are charged has no reader
            res = k.tmp(k.ct(node.outputs[0]), _acc_result(k, node, kind, acc, n), "red", may_be_unused=True)
            if node.outputs[0] in k.writes:
                k.store(node.outputs[0], idx, res)
            if dest is not None:
                k.line(f"{dest}[{linear(os_, idx)}] = {res};")
    for node, dest in zip(nodes, dests):
        if dest is not None:
            k.bind_scratch(node.outputs[0], dest)


def reduce_pass(k, node):
    """Reduce*/Global*Pool: a loop over the reduced output, an inner loop over the reduced axes.
    Writes straight to global memory when nothing in the group reads the result."""
    t = node.outputs[0]
    os_, ct = k.shape(t), k.ct(t)
    axes, keep, kind = _reduce_setup(k, node)
    direct = t in k.writes and not any(c in k.members for c in k.graph.index.consumers.get(t, []))
    dest = None if direct else k.alloc(ct, numel(os_), f"{node.op} result read by later ops")
    k.line(f"/* pass: {node.op} */")
    with k.loops(os_, parallel=True) as idx:
        res = _reduce_value(k, node, idx, axes, keep, kind)
        if direct:
            k.store(t, idx, res)
        else:
            k.line(f"{dest}[{linear(os_, idx)}] = {res};")
    if not direct:
        k.bind_scratch(t, dest)


def reduce_last_axis(k, node) -> bool:
    """Whether a Reduce* reduces exactly the last axis of its input (a row reduction)."""
    if node.op.startswith("Global"):
        return False
    axes, _, _ = _reduce_setup(k, node)
    return list(axes) == [len(k.shape(node.inputs[0])) - 1]


def reduce_row(k, node, row) -> None:
    """Inside a row loop: the row's reduced value of a last-axis Reduce* as a scalar, registered
    as the value of its output at this row (so later ops of the row read the scalar)."""
    t = node.outputs[0]
    axes, keep, kind = _reduce_setup(k, node)
    idx = tuple(row) + (("0",) if keep else ())
    copy = row_array(k, node.inputs[0])
    exp = _exp_producer(k, node.inputs[0]) if copy is not None and kind == "sum" else None
    if exp is not None:
        red = _exp_sum_row(k, node, idx, axes, keep, copy, exp, tuple(row))
    else:
        red = _reduce_value(k, node, idx, axes, keep, kind, copy, tuple(row))
    v = k.tmp(k.ct(t), red, "red", may_be_unused=True)
    row_array_filled(k, node.inputs[0], row, copy)
    k.bind(t, idx, v)


def _exp_producer(k, x):
    """The in-group float Exp node whose output ``x`` is, when computing x recomputes it (an
    exporter's softmax, ``ReduceSum(Exp(x - max))``), else None."""
    node = k.graph.index.node.get(k.graph.index.producer.get(x))
    if node is None or node.op != "Exp" or not computed(k, x):
        return None
    return node if k.ct(x) == "float" and k.ct(node.inputs[0]) == "float" else None


def _exp_sum_row(k, node, idx, axes, keep, copy, exp, row) -> str:
    """Inside a row loop, the float sum over the row of Exp ``exp``'s output (``node`` the ReduceSum
    reading it): the row of exp's argument into ``copy`` (a loop the compiler vectorises), then
    the exponentials in place there by :func:`expsum_blocks` -- the row's copy of the
    exponentials that the later ops of the row read. Returns the C expression of the sum."""
    xs = k.shape(node.inputs[0])
    n = xs[axes[0]]
    acc = k.fresh("acc")
    shifted = _shifted_row(k, exp.inputs[0], input_index(xs, idx, axes, keep, ("0",)))
    if shifted is not None:  # exp(z - m) of a row z in memory: no copy of z - m first
        k.line(f"double {acc} = 0;")
        expsum_blocks(k, copy, shifted[1], n, acc, (node.inputs[0], row), src=shifted[0], m_is_max=shifted[2])
        return f"({k.ct(node.outputs[0])}){acc}"
    with k.loops([n]) as (j,):
        k.line(f"{copy}[{j}] = {k.value(exp.inputs[0], input_index(xs, idx, axes, keep, (j,)))};")
    k.line(f"double {acc} = 0;")
    expsum_blocks(k, copy, "0.0f", n, acc, (node.inputs[0], row))
    return f"({k.ct(node.outputs[0])}){acc}"


def _shifted_row(k, d, at):
    """(pointer to the row of z at ``at``, C value of m, whether m is the max of z's row) when ``d``
    is ``Sub(z, m)`` in the group, z a float global row of d's shape read in place (not gathered,
    not counted) and m a row scalar (one value per row); else None."""
    g = k.graph
    sub = g.index.node.get(g.index.producer.get(d))
    if k.counters or sub is None or sub.op != "Sub" or sub.name not in k.members:
        return None
    z, m = sub.inputs[0], sub.inputs[1]
    ms = k.shape(m)
    if g.index.producer.get(z) in k.members or z not in k.buffers or z in k.gathered or k.has_tile(z) \
            or k.shape(z) != k.shape(d) or k.ct(z) != "float" or k.ct(m) != "float" or not ms or ms[-1] != 1:
        return None
    shape = k.shape(d)
    mx = g.index.node.get(g.index.producer.get(m))
    # m with kept dims the max of z's own row: every z - m is <= 0 (or NaN)
    is_max = mx is not None and mx.op == "ReduceMax" and mx.name in k.members and mx.inputs[0] == z \
        and reduce_last_axis(k, mx) and ms == k.shape(z)[:-1] + (1,)
    return f"&{k.ptr(z, 'r')}[{linear(shape, at)}]", k.value(m, bmap(at, shape, ms)), is_max


def softmax_normaliser(k, t, e) -> bool:
    """Whether ``t`` is a float row sum of the exponentials ``e`` of a row minus its max, all in the
    group (``ReduceSum(e = Exp(z - ReduceMax(z)))`` over the last axis, the exporters' softmax):
    e is then in [0, 1] or NaN and t at least 1 (its largest term is e^0) and at most the row
    length, or NaN -- the operands for which ``sf_divq(e, t)`` equals the division.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.emit.kernel import Kernel
    >>> from solverfuse.emit.lowering import code_for_op
    >>> r = {"axes": [1], "keepdims": 1}
    >>> g = load_graph({"tensors": {"z": {"shape": [2, 8]}}, "inputs": ["z"], "outputs": ["y"], "nodes": [
    ...     {"name": "m", "op": "ReduceMax", "inputs": ["z"], "outputs": ["m"], "attributes": r},
    ...     {"name": "d", "op": "Sub", "inputs": ["z", "m"], "outputs": ["d"]},
    ...     {"name": "e", "op": "Exp", "inputs": ["d"], "outputs": ["e"]},
    ...     {"name": "s", "op": "ReduceSum", "inputs": ["e"], "outputs": ["s"], "attributes": r},
    ...     {"name": "y", "op": "Div", "inputs": ["e", "s"], "outputs": ["y"]}]})
    >>> k = Kernel(g, list("mdesy"), 0, {"z": 0, "y": 1}, counters=False, threads=1, lower=code_for_op)
    >>> softmax_normaliser(k, "s", "e"), softmax_normaliser(k, "s", "d")
    (True, False)
    """
    g = k.graph

    def made(x, op):
        node = g.index.node.get(g.index.producer.get(x))
        return node if node is not None and node.op == op and node.name in k.members else None
    red = made(t, "ReduceSum")
    if red is None or red.inputs[0] != e or k.ct(t) != "float" or not reduce_last_axis(k, red):
        return False
    exp = made(red.inputs[0], "Exp")
    sub = exp and made(exp.inputs[0], "Sub")
    mx = sub and made(sub.inputs[1], "ReduceMax")
    z = sub.inputs[0] if sub else None
    # m with kept dims: the max of z's own row at every element (e <= 1, and 1 at the max)
    return bool(mx) and mx.inputs[0] == z and reduce_last_axis(k, mx) \
        and k.shape(z) == k.shape(exp.outputs[0]) and k.shape(mx.outputs[0]) == k.shape(z)[:-1] + (1,)


#: The Reduce*/Global*Pool ops (computed by a pass of their own, or as a row scalar).
REDUCE_OPS = frozenset(_ACC)
