"""Softmax / LogSoftmax row statistics as C: the row max, then the exponentials and their sum
(:func:`softmax_stats`; the exp loop as :func:`expsum_blocks`, which an exporter's decomposed
softmax, ``ReduceSum(Exp(z - max))`` in :mod:`~solverfuse.emit.reductions`, shares). Row-loop
building blocks come from :mod:`~solverfuse.emit.row_loop`.

>>> ROW_EXP_MAX
16384
"""
from __future__ import annotations

from ..ops import numel
from .cexpr import linear
from .elementwise import stat_type
from .norm_stats import next_row_stats
from .row_loop import (FAR_PREFETCH_ROW_BYTES, FAR_PREFETCH_ROWS_AHEAD, OUTPUT_FAR_ROWS_AHEAD, ROW_EXP_MAX, declare_row,
                       lane_max, simd_max, lane_sums, next_row_pointer, row_array, row_array_filled)


def expsum_blocks(k, arr, m, n: int, total: str, prefetch=None, src=None, m_is_max=False) -> None:
    """``arr[j] = exp(arr[j] - m)`` for j < n, added to the double ``total`` by one call of the shared
    helper ``sf_expsum`` (AVX-512: a table-driven vector exp in 12 operations, ~40% fewer than the
    inline ``sf_expf`` that GCC vectorises; elsewhere that loop), which sums blocks of ``SUM_BLOCK``
    in float and the blocks in double. ``src`` (a pointer to a float row): ``arr[j] = exp(src[j] -
    m)`` (``sf_expsum_from``). ``prefetch`` (x, row) as :func:`float_blocks`: the helper
    prefetches the next row of x's first input stream (:func:`next_row_pointer`) as it computes;
    from ``FAR_PREFETCH_ROW_BYTES`` a row, into the L2 only and ``FAR_PREFETCH_ROWS_AHEAD`` rows on;
    under that, for an input from memory (:func:`~solverfuse.emit.row_loop.from_memory`), also the
    row ``OUTPUT_FAR_ROWS_AHEAD`` rows on into the L2 (softmax_rows, rows of 1,024, at 2x the LLC,
    Zen 4: 0.88-0.89 of the time with the row 3 to 5 rows on, interleaved rounds).
    ``m_is_max``: m is the max of the row's values (every argument <= 0 or NaN): the ``_max``
    forms, without the upper clamp. Where a LayerNorm of the row waits for the next row's
    statistics (:func:`~solverfuse.emit.norm_stats.next_row_stats`), the ``_ln`` form computes them
    in the same loop."""
    k.use_helper("sf_expsum")
    far_row = 4 * n >= FAR_PREFETCH_ROW_BYTES
    pf = next_row_pointer(k, *prefetch, FAR_PREFETCH_ROWS_AHEAD if far_row else 1) if prefetch is not None else "0"
    far = "1" if pf != "0" and far_row else "0"
    # a row read into the L1 one row ahead, from memory: into the L2 further on as well
    pf2 = next_row_pointer(k, *prefetch, OUTPUT_FAR_ROWS_AHEAD, memory_only=True) if pf != "0" and not far_row else "0"
    nxt = next_row_stats(k, prefetch[1]) if prefetch is not None and src is None else None
    name = "sf_expsum" + ("_from" if src is not None else "") + ("_ln" if nxt else "") + ("_max" if m_is_max else "")
    args = [arr, m, str(n)] + ([src] if src is not None else []) + [pf, far, pf2] + (nxt.args if nxt else [])
    k.line(f"{total} += {name}({', '.join(args)});")
    if nxt:
        nxt.finish()


def _softmax_loops(k, x, at, n, row=None, keep_exp=False):
    """Row max ``m`` then ``s`` = sum of exp(x - m) (float lanes added in double, :func:`lane_sums`):
    loops the compiler vectorises (inline exp, lane-wise max and sum), where one online loop could
    not be. ``keep_exp``: the exponentials also go to a row array, returned third (else None); for
    a float row the max loop keeps x in that array and the exponentials replace it there
    (:func:`expsum_blocks`)."""
    copy = row_array(k, x) if row is not None else None
    m, s = k.fresh("m"), k.fresh("s")
    st = stat_type(k, x)
    k.line(f"{st} {m} = -INFINITY; double {s} = 0;")
    ex = k.fresh("E") if keep_exp else None
    if ex:
        declare_row(k, st, ex, n)
    # a float row's exponentials are computed in place in the kept array (sf_expsum): the max
    # loop copies x into it
    stash = ex if ex and k.ct(x) == "float" else None
    def max_body(j):
        v = k.value(x, at(j))
        if copy is not None:
            k.line(f"{copy}[{j}] = {v};")
        if stash:
            k.line(f"{stash}[{j}] = {v};")
        return v
    if st == "float":
        lane_max(k, n, m, max_body, stores=copy is not None or stash is not None)
    else:
        simd_max(k, "0", str(n), m, max_body)
    row_array_filled(k, x, row, copy)
    if k.ct(x) != "float":  # a double row: double exponentials summed in double, as tgmath's exp gives
        with k.loops([n], simd=f"reduction(+:{s})") as (j,):
            xv = f"{stash}[{j}]" if stash else k.value(x, at(j))
            if ex:
                e = k.fresh("e")
                k.line(f"const {k.ct(x)} {e} = exp({xv} - {m});")
                k.line(f"{ex}[{j}] = {e}; {s} += {e};")
            else:
                k.line(f"{s} += exp({xv} - {m});")
        return m, s, ex
    if stash:
        expsum_blocks(k, stash, m, n, s, (x, row), m_is_max=True)
        return m, s, ex
    def exp_value(j):
        xv = k.value(x, at(j))
        if not ex:
            return f"sf_expf({xv} - {m})"
        e = k.fresh("e")
        k.line(f"const float {e} = sf_expf({xv} - {m});")
        k.line(f"{ex}[{j}] = {e};")
        return e
    lane_sums(k, n, s, exp_value, (x, row))
    return m, s, ex


def softmax_stats(k, node, row=None):
    """Row max and normaliser of a (Log)Softmax: into scratch arrays indexed by row (a pass of
    its own), or -- ``row`` given, inside a row loop -- into two scalars of that row."""
    x = node.inputs[0]
    shape = k.shape(x)
    axis = node.attributes.get("axis", -1) % len(shape)
    rshape = tuple(1 if i == axis else d for i, d in enumerate(shape))
    if row is not None:
        keep = node.op == "Softmax" and shape[axis] <= ROW_EXP_MAX
        m, s, ex = _softmax_loops(k, x, lambda j: tuple(row) + (j,), shape[axis], tuple(row), keep)
        a, b = k.fresh("rmax"), k.fresh("rnorm")
        st = stat_type(k, x)
        if ex:
            a = m  # the output reads the kept exponentials, not the max
            k.line(f"const {st} {b} = ({st})(1.0 / {s});")
        elif node.op == "Softmax":
            k.line(f"const {st} {a} = {m}, {b} = ({st})(1.0 / {s});")
        else:
            k.line(f"const {st} {a} = ({st})((double){m} + log({s}));")
        k.stats[node.name] = {"a": a, "b": b, "row": True, "exp": ex}
        return
    st = stat_type(k, x)
    mx, sm = k.alloc(st, numel(rshape), "row max"), k.alloc(st, numel(rshape), "row normaliser")
    k.line(f"/* pass: {node.op} row statistics (online max and sum of exponentials) */")
    with k.loops(rshape, parallel=True) as idx:
        m, s, _ = _softmax_loops(k, x, lambda j: idx[:axis] + (j,) + idx[axis + 1:], shape[axis])
        r = linear(rshape, idx)
        if node.op == "Softmax":
            k.line(f"{mx}[{r}] = {m}; {sm}[{r}] = ({st})(1.0 / {s});")
        else:
            k.line(f"{mx}[{r}] = ({st})((double){m} + log({s}));")
    k.stats[node.name] = {"a": mx, "b": sm, "shape": rshape, "ct": st}


