"""LayerNormalization and VarMean statistics as C: the row mean and 1/stddev of a LayerNorm (a
float row over the last axis: one pass of two sums shifted by the mean of its first values), the
variance and mean of a VarMean -- scalars inside a row loop or a pass of their own into scratch
arrays indexed by row. In a serial row loop of long rows whose Softmax keeps its exponentials, a
LayerNorm's sums for the next row are taken inside this row's exponentials and carried to it
(:func:`next_row_stats`, called by :mod:`~solverfuse.emit.softmax`). Reductions and the other
statistics live in :mod:`~solverfuse.emit.reductions`, which builds its ``STATS`` table from these.

>>> LN_SHIFT_VALUES
16
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from ..errors import InternalError
from ..ops import numel
from .cexpr import input_index, linear
from .elementwise import stat_type
from .row_loop import (Square, computed, declare_row, keeps_exponentials, lane_sums, moving_index, next_row,
                       row_array_filled)


def _ln_row(k, x, idx, axis, shape, eps, row_copy=None):
    """Mean and 1/stddev over shape[axis:] at row ``idx``: C expressions (double accumulation).
    A float row over the last axis alone: :func:`_ln_float_row`."""
    n = numel(shape[axis:])
    if k.ct(x) == "float" and axis == len(shape) - 1:
        mf, var = _ln_float_row(k, x, idx, n, row_copy)
        return mf, _inv_std(var, eps)
    s, q, mu = k.fresh("s"), k.fresh("q"), k.fresh("mu")
    k.line(f"double {s} = 0, {q} = 0;")
    with k.loops(shape[axis:], simd=f"reduction(+:{s},{q})") as inner:
        v = k.value(x, tuple(idx[:axis]) + tuple(inner))
        k.line(f"{s} += {v}; {q} += (double){v} * {v};")
    k.line(f"const double {mu} = {s} / {n};")
    st = stat_type(k, x)
    return f"({st}){mu}", f"({st})(1.0 / sqrt(fmax({q} / {n} - {mu} * {mu}, 0.0) + {eps!r}))"


def _inv_std(var: str, eps) -> str:
    """1/stddev (a float) from the variance ``var`` (a double)."""
    return f"(float)(1.0 / sqrt({var} + {eps!r}))"


#: Values whose mean shifts a float LayerNorm row before its one-pass sums (:func:`_ln_float_row`).
LN_SHIFT_VALUES = 16


def _ln_float_row(k, x, idx, n, row_copy=None):
    """Mean (a float) and variance (a double) of a float row of ``n`` in one pass: the sums of
    d = x - K and of d * d, K the mean of the row's first ``LN_SHIFT_VALUES`` values (a shift near
    the mean keeps the cancellation in sum(d * d) / n - (sum(d) / n)^2 small), in float lanes
    added to a double (:func:`lane_sums`), then :func:`_ln_moments`. The one pass saved 7% of the
    l1_overflow motif's time in cache. ``row_copy`` (an array) receives each value in the first
    pass; the second pass and the row's output loop read it there."""
    s, q, mu, mf = k.fresh("s"), k.fresh("q"), k.fresh("mu"), k.fresh("mf")
    sh, dm, var = k.fresh("K"), k.fresh("dm"), k.fresh("var")
    k.line(f"float {sh} = 0;")
    _ln_shift(k, sh, n, lambda j: k.value(x, tuple(idx[:-1]) + (j,)))
    k.line(f"double {s} = 0, {q} = 0;")

    def shifted(j):
        v = k.value(x, tuple(idx[:-1]) + (j,))
        if row_copy is not None:
            k.line(f"{row_copy}[{j}] = {v};")
        d = k.tmp("float", f"{v} - {sh}", "d")
        return d, Square(d)
    lane_sums(k, n, (s, q), shifted)
    return _ln_moments(k, n, sh, s, q, lambda j: f"{row_copy}[{j}]" if row_copy is not None
                       else k.value(x, tuple(idx[:-1]) + (j,)), (mu, mf, dm, var))


def _ln_shift(k, sh: str, n: int, value) -> None:
    """``sh`` (a float, 0 before) = the mean of the row's first ``LN_SHIFT_VALUES`` values
    (``value(j)``, C): one simd reduction (16 values < SUM_LANES; a plain loop's 16 dependent adds
    cost gpt2's Gemm + Add + LayerNorm kernels, 8 rows of 32, ~0.1 us each)."""
    m0 = min(n, LN_SHIFT_VALUES)
    lane_sums(k, m0, sh, value)
    k.line(f"{sh} /= {m0};")


def _ln_moments(k, n: int, sh: str, s: str, q: str, value, names: tuple):
    """Mean (a float) and variance (a double) of a row of ``n`` from the double sums ``s`` of
    d = x - ``sh`` and ``q`` of d * d. The cancellation is bounded -- the shift's values are part
    of the row, so (K - mean)^2 <= n / 16 variances -- and where the shift is far from the mean
    against the spread ((sum(d) / n)^2 above the variance: a row whose first values are not typical
    of it, or a variance rounded below 0), a second pass sums the squares about the mean (no
    cancellation however large the mean is against the spread) over the row in cache (``value(j)``:
    its j-th value, C). ``names``: the C names of the mean (double and float), sum(d) / n and the
    variance."""
    mu, mf, dm, var = names
    k.line(f"const double {dm} = {s} / {n}, {mu} = {sh} + {dm};")
    k.line(f"const float {mf} = (float){mu};")
    k.line(f"double {var} = {q} / {n} - {dm} * {dm};")
    with k.block(f"if ({dm} * {dm} > {var})"):  # false for NaN: it propagates through var
        k.line(f"{q} = 0;")
        lane_sums(k, n, q, lambda j: Square(k.tmp("float", f"{value(j)} - {mf}", "d")))
        k.line(f"{var} = {q} / {n};")
    return mf, var


#: Bytes of a float LayerNorm row from which a serial row loop computes the next row's statistics
#: inside this row's exponentials (:func:`layernorm_stats`) when a Softmax of the row keeps them
#: (:func:`~solverfuse.emit.row_loop.keeps_exponentials`): rows that do not stay in the L1 through
#: the row's passes, where the statistics' pass of their own streams the row from the L2 while
#: the FMA units idle. l1_overflow (rows of 4,912), 1 thread, Zen 4, against each row's own pass
#: (interleaved rounds): 0.884 and 0.94 of the time at 2x the LLC in two runs, in cache 1.00.
CARRY_MIN_ROW_BYTES = 8192


class NextRowStats(NamedTuple):
    """The next row's LayerNorm statistics computed inside this row's ``sf_expsum_ln`` call:
    ``args`` (the call's last three arguments: the next row or NULL, its shift, the two double
    sums), then ``finish()`` emitted after the call (the mean and variance carried to that row)."""
    args: list
    finish: Callable[[], None]


def _carried(k, node, x, shape, axis, row) -> bool:
    """Whether the LayerNorm ``node``'s statistics come from the previous row (:func:`layernorm_stats`):
    a plain serial row loop (``k.carry_rows``), a float row of at least ``CARRY_MIN_ROW_BYTES`` of a
    global input over the last axis, and a later Softmax of the row that keeps its exponentials
    (whose ``sf_expsum`` call computes them, :func:`next_row_stats`); one LayerNorm per row."""
    g = k.graph
    later = k.nodes[k.nodes.index(node.name) + 1:]
    return (k.carry_rows and k.ct(x) == "float" and axis == len(shape) - 1 and len(row) == len(shape) - 1
            and 4 * shape[-1] >= CARRY_MIN_ROW_BYTES and moving_index(row) is not None
            and g.index.producer.get(x) not in k.members and x in k.buffers and x not in k.gathered
            and not any("next" in st for st in k.stats.values())
            and any(keeps_exponentials(k, g.index.node[v]) for v in later))


def next_row_stats(k, row):
    """Inside a row loop whose LayerNorm takes its statistics from the previous row
    (:func:`layernorm_stats`): the next row's, for the row's ``sf_expsum`` call (its ``_ln`` form),
    as a :class:`NextRowStats`; None when no LayerNorm of this row waits for them. The next row's
    shift is computed before the call; after it (``finish``) the mean and variance, with the second
    pass over that row where the shift was far from its mean, go to the carried variables. The
    first row of the loop computes its own (the LayerNorm's pass, in a conditional)."""
    st = next((st for st in k.stats.values() if "next" in st and not st["next"]["taken"]
               and st["next"]["row"] == tuple(row)), None)
    if st is None:
        return None
    nxt = st["next"]
    nxt["taken"] = True
    n, (mfp, varp) = nxt["n"], nxt["carry"]
    cond, addr = next_row(k, nxt["x"], row, "0")
    xs, sh, sq = k.fresh("xs"), k.fresh("K"), k.fresh("sq")
    k.line(f"const float *{xs} = {cond} ? {addr} : 0;")
    k.line(f"float {sh} = 0;")
    with k.block(f"if ({xs})"):
        _ln_shift(k, sh, n, lambda j: f"{xs}[{j}]")
    k.line(f"double {sq}[2] = {{0, 0}};")

    def finish():
        with k.block(f"if ({xs})"):
            names = k.fresh("mu"), k.fresh("mf"), k.fresh("dm"), k.fresh("var")
            mf, var = _ln_moments(k, n, sh, f"{sq}[0]", f"{sq}[1]", lambda j: f"{xs}[{j}]", names)
            k.line(f"{mfp} = {mf}; {varp} = {var};")
    return NextRowStats([xs, sh, sq], finish)


def carried_declarations(k) -> list:
    """The declarations (before the row loop) of the statistics carried from row to row
    (:func:`layernorm_stats`); an :class:`~solverfuse.errors.InternalError` where a row's
    ``sf_expsum`` never computed them."""
    out = []
    for name, st in k.stats.items():
        if "next" in st:
            if not st["next"]["taken"]:
                raise InternalError(f"kernel {k.gid}: LayerNorm {name!r} takes its statistics from the previous "
                                    "row, but no sf_expsum call of the row computes them")
            mfp, varp = st["next"]["carry"]
            out.append(f"float {mfp} = 0; double {varp} = 0;")
    return out


def layernorm_stats(k, node, row=None):
    """Row mean and 1/stddev of a LayerNormalization (scratch arrays, or scalars in a row loop;
    there a float input computed in the group is kept in a row array for the output loop). In a
    plain serial row loop where a Softmax of the row keeps its exponentials (:func:`_carried`), the
    statistics of every row but the loop's first are computed during the previous row's
    exponentials (:func:`next_row_stats`) and carried to this one."""
    x = node.inputs[0]
    shape = k.shape(x)
    axis = node.attributes.get("axis", -1) % len(shape)
    rshape = tuple(shape[:axis]) + (1,) * (len(shape) - axis)
    eps = node.attributes.get("epsilon", 1e-5)
    if row is not None:
        idx = tuple(row) + ("0",) * (len(shape) - len(row))
        if _carried(k, node, x, shape, axis, row):
            a, b = k.fresh("rmean"), k.fresh("ristd")
            mfp, varp = k.fresh("mfP"), k.fresh("varP")
            with k.block(f"if ({row[moving_index(row)]} == 0)"):  # the loop's first row: its own
                mf, var = _ln_float_row(k, x, idx, shape[-1])
                k.line(f"{mfp} = {mf}; {varp} = {var};")
            k.line(f"const float {a} = {mfp}, {b} = {_inv_std(varp, eps)};")
            k.stats[node.name] = {"a": a, "b": b, "row": True, "next": {
                "x": x, "row": tuple(row), "n": shape[-1], "carry": (mfp, varp), "taken": False}}
            return
        copy = None
        if k.ct(x) == "float" and axis == len(shape) - 1 and computed(k, x):
            copy = k.fresh("R")
            declare_row(k, "float", copy, shape[-1])
        mexpr, iexpr = _ln_row(k, x, idx, axis, shape, eps, copy)
        a, b = k.fresh("rmean"), k.fresh("ristd")
        k.line(f"const {stat_type(k, x)} {a} = {mexpr}, {b} = {iexpr};")
        row_array_filled(k, x, row, copy)
        k.stats[node.name] = {"a": a, "b": b, "row": True}
        return
    st = stat_type(k, x)
    mean, inv = k.alloc(st, numel(rshape), "row mean"), k.alloc(st, numel(rshape), "row 1/stddev")
    k.line("/* pass: LayerNormalization row statistics */")
    with k.loops(rshape, parallel=True) as idx:
        mexpr, iexpr = _ln_row(k, x, idx, axis, shape, eps)
        r = linear(rshape, idx)
        k.line(f"{mean}[{r}] = {mexpr};")
        k.line(f"{inv}[{r}] = {iexpr};")
    k.stats[node.name] = {"a": mean, "b": inv, "shape": rshape, "ct": st}


def varmean_setup(k, node):
    """(input shape, reduced axes, keepdims, correction) of a VarMean (aten.var_mean) node."""
    xs = k.shape(node.inputs[0])
    axes = sorted({int(a) % len(xs) for a in node.attributes.get("axes", range(len(xs)))})
    return xs, axes, node.attributes.get("keepdims", 0), float(node.attributes.get("correction", 1))


def _varmean_value(k, node, idx):
    """Variance and mean (C expressions of the output type) at output index ``idx``: one loop
    over the reduced axes accumulating sum and sum of squares in double, as LayerNormalization."""
    x, ct = node.inputs[0], k.ct(node.outputs[0])
    xs, axes, keep, corr = varmean_setup(k, node)
    n = numel([xs[a] for a in axes])
    s, q, mu = k.fresh("s"), k.fresh("q"), k.fresh("mu")
    k.line(f"double {s} = 0, {q} = 0;")
    with k.loops([xs[a] for a in axes], simd=f"reduction(+:{s},{q})") as red:
        v = k.value(x, input_index(xs, idx, axes, keep, red))
        k.line(f"{s} += {v}; {q} += (double){v} * {v};")
    k.line(f"const double {mu} = {s} / {max(n, 1)};")
    # Bessel-style correction: divide by n - correction (0/0 is NaN, as in torch)
    return f"({ct})(fmax({q} - {s} * {mu}, 0.0) / {float(n - corr)!r})", f"({ct}){mu}"


def varmean_stats(k, node, row=None):
    """VarMean: variance and mean into scratch arrays of the (reduced) output shape, or -- ``row``
    given (reduction over the last axis only, inside a row loop) -- two scalars of that row."""
    out = node.outputs[0]
    oshape, ct = k.shape(out), k.ct(out)
    if row is not None:
        keep = node.attributes.get("keepdims", 0)
        vexpr, mexpr = _varmean_value(k, node, tuple(row) + (("0",) if keep else ()))
        a, b = k.fresh("rvar"), k.fresh("rmean")
        k.line(f"const {ct} {a} = {vexpr}, {b} = {mexpr};")
        k.stats[node.name] = {"a": a, "b": b, "row": True}
        return
    var, mean = k.alloc(ct, numel(oshape), "var"), k.alloc(ct, numel(oshape), "mean")
    k.line("/* pass: VarMean statistics */")
    with k.loops(oshape, parallel=True) as idx:
        vexpr, mexpr = _varmean_value(k, node, idx)
        r = linear(oshape, idx)
        k.line(f"{var}[{r}] = {vexpr};")
        k.line(f"{mean}[{r}] = {mexpr};")
    k.stats[node.name] = {"a": var, "b": mean, "shape": oshape, "ct": ct}
