"""LayerNormalization and VarMean statistics as C: the row mean and 1/stddev of a LayerNorm (a
float row over the last axis: one pass of two sums shifted by the mean of its first values), the
variance and mean of a VarMean -- scalars inside a row loop or a pass of their own into scratch
arrays indexed by row. Reductions and the other statistics live in
:mod:`~solverfuse.emit.reductions`, which builds its ``STATS`` table from these.

>>> LN_SHIFT_VALUES
16
"""
from __future__ import annotations

from ..ops import numel
from .cexpr import input_index, linear
from .elementwise import stat_type
from .row_loop import Square, computed, declare_row, lane_sums, row_array_filled


def _ln_row(k, x, idx, axis, shape, eps, row_copy=None):
    """Mean and 1/stddev over shape[axis:] at row ``idx``: C expressions (double accumulation).
    A float row over the last axis alone: :func:`_ln_float_row`."""
    n = numel(shape[axis:])
    if k.ct(x) == "float" and axis == len(shape) - 1:
        return _ln_float_row(k, x, idx, n, eps, row_copy)
    s, q, mu = k.fresh("s"), k.fresh("q"), k.fresh("mu")
    k.line(f"double {s} = 0, {q} = 0;")
    with k.loops(shape[axis:], simd=f"reduction(+:{s},{q})") as inner:
        v = k.value(x, tuple(idx[:axis]) + tuple(inner))
        k.line(f"{s} += {v}; {q} += (double){v} * {v};")
    k.line(f"const double {mu} = {s} / {n};")
    st = stat_type(k, x)
    return f"({st}){mu}", f"({st})(1.0 / sqrt(fmax({q} / {n} - {mu} * {mu}, 0.0) + {eps!r}))"


#: Values whose mean shifts a float LayerNorm row before its one-pass sums (:func:`_ln_float_row`).
LN_SHIFT_VALUES = 16


def _ln_float_row(k, x, idx, n, eps, row_copy=None):
    """Mean and 1/stddev of a float row of ``n`` in one pass: the sums of d = x - K and of d * d,
    K the mean of the row's first ``LN_SHIFT_VALUES`` values (a shift near the mean keeps the
    cancellation in sum(d * d) / n - (sum(d) / n)^2 small), in float lanes added to a double
    (:func:`lane_sums`). The cancellation is bounded -- the 16 values are part of the row, so
    (K - mean)^2 <= n / 16 variances -- and where the shift is far from the mean against the
    spread ((sum(d) / n)^2 above the variance: a row whose first values are not typical of it,
    or a variance rounded below 0), a second pass sums the squares about the mean (no
    cancellation however large the mean is against the spread) over the row in cache. The one
    pass saved 7% of the l1_overflow motif's time in cache. ``row_copy`` (an array) receives each
    value in the first pass; the second pass and the row's output loop read it there."""
    s, q, mu, mf = k.fresh("s"), k.fresh("q"), k.fresh("mu"), k.fresh("mf")
    sh, dm, var = k.fresh("K"), k.fresh("dm"), k.fresh("var")
    m0 = min(n, LN_SHIFT_VALUES)
    # one simd reduction (16 values < SUM_LANES): a plain loop's 16 dependent adds cost gpt2's
    # Gemm + Add + LayerNorm kernels (8 rows of 32) ~0.1 us each
    k.line(f"float {sh} = 0;")
    lane_sums(k, m0, sh, lambda j: k.value(x, tuple(idx[:-1]) + (j,)))
    k.line(f"{sh} /= {m0};")
    k.line(f"double {s} = 0, {q} = 0;")

    def shifted(j):
        v = k.value(x, tuple(idx[:-1]) + (j,))
        if row_copy is not None:
            k.line(f"{row_copy}[{j}] = {v};")
        d = k.tmp("float", f"{v} - {sh}", "d")
        return d, Square(d)

    def square(j):
        v = f"{row_copy}[{j}]" if row_copy is not None else k.value(x, tuple(idx[:-1]) + (j,))
        d = k.tmp("float", f"{v} - {mf}", "d")
        return Square(d)
    lane_sums(k, n, (s, q), shifted)
    k.line(f"const double {dm} = {s} / {n}, {mu} = {sh} + {dm};")
    k.line(f"const float {mf} = (float){mu};")
    k.line(f"double {var} = {q} / {n} - {dm} * {dm};")
    with k.block(f"if ({dm} * {dm} > {var})"):  # false for NaN: it propagates through var
        k.line(f"{q} = 0;")
        lane_sums(k, n, q, square)
        k.line(f"{var} = {q} / {n};")
    return mf, f"(float)(1.0 / sqrt({var} + {eps!r}))"


def layernorm_stats(k, node, row=None):
    """Row mean and 1/stddev of a LayerNormalization (scratch arrays, or scalars in a row loop;
    there a float input computed in the group is kept in a row array for the output loop)."""
    x = node.inputs[0]
    shape = k.shape(x)
    axis = node.attributes.get("axis", -1) % len(shape)
    rshape = tuple(shape[:axis]) + (1,) * (len(shape) - axis)
    eps = node.attributes.get("epsilon", 1e-5)
    if row is not None:
        copy = None
        if k.ct(x) == "float" and axis == len(shape) - 1 and computed(k, x):
            copy = k.fresh("R")
            declare_row(k, "float", copy, shape[-1])
        mexpr, iexpr = _ln_row(k, x, tuple(row) + ("0",) * (len(shape) - len(row)), axis, shape, eps, copy)
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
