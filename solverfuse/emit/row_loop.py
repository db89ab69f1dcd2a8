"""Building blocks of a row loop's reductions (:mod:`~solverfuse.emit.rows`): float partial sums
in vector lanes (:func:`lane_sums`), prefetches of the next row's input streams while this row computes
(:func:`prefetch_next_row`, :func:`output_prefetch`), and row arrays that keep an in-group tensor's
row for the row's later ops (:func:`row_array`). Used by :mod:`~solverfuse.emit.reductions` and
:mod:`~solverfuse.emit.softmax`.

>>> SUM_BLOCK
1024
"""
from __future__ import annotations

import re
from typing import NamedTuple

from ..ops import numel
from .cexpr import linear


#: Values per block of a row's exp sum (``sf_expsum``, whose float block sums are added in double:
#: a float accumulator keeps the exp loop at full vector width where a double one converts and
#: adds every lane twice, softmax_rows motif: 0.54 -> 0.46 ns per element in L1 here), the blocks
#: inside one call per row that also prefetches the next row (:func:`next_row_pointer`). 1,024 as
#: ``LANE_BLOCK``'s float lanes (32 values a lane): blocks of 256, each ending in three horizontal
#: sums with the LayerNorm statistics, made l1_overflow 4% slower at 2x the LLC (Zen 4).
SUM_BLOCK = 1024
#: Elements per chunk of a pipelined softmax row (:mod:`~solverfuse.emit.softmax_pipeline`): the
#: exponentials trail the max pass by one chunk, each chunk's taken at the running max at its end.
PIPELINE_CHUNK = 512


def computed(k, x) -> bool:
    """Whether reading ``x`` in this group recomputes its producer (no row copy, tile or scratch)."""
    return k.graph.index.producer.get(x) in k.members and not k.has_tile(x) and x not in k.scratch


def row_inputs(k, x) -> list:
    """The global tensors of x's shape that computing x in this group reads element for element
    (a row loop's rows of them stream from memory; parameters and broadcasts are excluded)."""
    g, shape, out, seen, todo = k.graph, k.shape(x), [], set(), [x]
    while todo:
        t = todo.pop()
        if not t or t in seen:
            continue
        seen.add(t)
        p = g.index.producer.get(t)
        if p in k.members:
            if computed(k, t):
                todo.extend(g.index.node[p].inputs)
        elif t in k.buffers and k.shape(t) == shape and t not in k.gathered:
            out.append(t)
    return sorted(out)


def prefetch_next_row(k, x, row, start: str, size: int) -> None:
    """Inside a row loop: prefetch the next row's block [start, start + size) of every global
    input x streams from (one prefetch per 64-byte line). A pass that is compute-bound on a row
    already in L1 would otherwise leave memory idle; issued a block at a time, the lines of the
    next row arrive while this one computes (softmax_rows' exponentials: ~70% -> ~85% of the triad
    here; all of a row's prefetches at once were slower; the exponentials prefetch inside
    ``sf_expsum`` instead, :func:`next_row_pointer`). Not in instrumented builds."""
    if k.counters or row is None:
        return
    for t in row_inputs(k, x):
        q = k.fresh("q")
        nxt = next_row(k, t, row, f"{start} + {q}")
        if nxt is not None:
            with k.block(f"if ({nxt[0]}) for (long {q} = 0; {q} < {size}; {q} += 16)"):
                k.line(f"__builtin_prefetch({nxt[1]});")


#: Bytes of a float tensor from which a row loop takes it to come from memory (:func:`from_memory`):
#: larger than the last-level caches of the hosts measured (32 MiB here), it is in memory by the
#: time anything reads it. Such an output is written with non-temporal stores (row_stream: its
#: lines need not be read into the cache before being written; softmax_rows at 2x the LLC: 12 of
#: plain stores' 16 bytes of traffic per element become 8; a smaller output stays cached for its
#: reader), and such an input is also prefetched into the L2 rows ahead
#: (``OUTPUT_FAR_ROWS_AHEAD``).
STREAM_MIN_BYTES = 32 << 20


def from_memory(k, t) -> bool:
    """Whether the float tensor ``t`` is of at least ``STREAM_MIN_BYTES``.

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> k = whole_graph_kernel(zoo.softmax_rows(16384, 1024))   # 64 MiB rows
    >>> from_memory(k, "x"), from_memory(whole_graph_kernel(zoo.softmax_rows(4, 1024)), "x")
    (True, False)
    """
    return k.ct(t) == "float" and 4 * numel(k.shape(t)) >= STREAM_MIN_BYTES


#: Name stem of :func:`next_row_pointer`'s pointers (:func:`prefetches_next_row` finds them by it).
_NEXT_ROW_PTR = "pf"
#: Bytes of a next row from which ``sf_expsum`` prefetches it into the L2 only (``far``): such a
#: row does not stay in the L1 with the row computing, whose passes evict it before it is read.
#: Paired at 2x the LLC, 1 thread, Zen 4 (medians of 15-31 interleaved rounds; A-A 0.985-0.989):
#: l1_overflow's 19.6 KB rows 0.947-0.98 of the time; softmax_rows' 4 KB rows 0.985-1.022 with it
#: (so they keep the L1 prefetch).
FAR_PREFETCH_ROW_BYTES = 8192
#: Rows ahead that a far prefetch (``FAR_PREFETCH_ROW_BYTES``) reaches: the row after next, whose
#: lines then have all of the next row's passes to arrive; prefetched one row ahead, the lines asked
#: for late in this row's exponentials were still on their way when the next row's first pass read
#: them. l1_overflow at 2x the LLC, 1 thread, Zen 4, medians of 15-21 interleaved rounds: 0.945-0.965
#: of the time at 2 rows ahead, 0.922-0.957 at 4, 0.943 at 8. The L1 prefetches of shorter rows stay
#: one row ahead: at 2 (4) rows ahead softmax_rows took 1.12 (1.19) of the time, and
#: residual_layernorm_gelu's block prefetches 1.17 (1.15).
FAR_PREFETCH_ROWS_AHEAD = 2


def next_row_pointer(k, x, row, ahead: int = 1, memory_only: bool = False) -> str:
    """Inside a row loop: a C pointer (declared here) to the start of the row ``ahead`` rows on of
    the first global input that x streams from (:func:`row_inputs`), null past the last row, for a
    helper that prefetches it while this row computes (``sf_expsum``); "0" when there is none, in
    instrumented builds, or (``memory_only``) when that input is not :func:`from_memory`. Only the
    first stream: the hardware prefetchers follow any others."""
    if k.counters or row is None:
        return "0"
    for t in row_inputs(k, x):
        nxt = next_row(k, t, row, "0", ahead)
        if nxt is not None:
            if memory_only and not from_memory(k, t):
                return "0"
            p = k.fresh(_NEXT_ROW_PTR)
            k.line(f"const float *{p} = {nxt[0]} ? {nxt[1]} : 0;")
            return p
    return "0"


def prefetches_next_row(lines) -> bool:
    """Whether these lines of a row prefetch the next row: a ``__builtin_prefetch`` or a pointer of
    :func:`next_row_pointer` (a helper prefetches through it).

    >>> prefetches_next_row(["const float *pf3 = i + 1 < 4 ? &b0[((i + 1))*8] : 0;"]), prefetches_next_row(["x;"])
    (True, False)
    """
    return any("__builtin_prefetch" in ln or re.match(rf"\s*const float \*{_NEXT_ROW_PTR}\d+ = ", ln) for ln in lines)


def moving_index(row):
    """The position in ``row`` (a row loop's indices) of the index that moves from one row to the
    next: the last one not fixed at 0; None for a single row.

    >>> moving_index(("i1", "i2", "0")), moving_index(("0",))
    (1, None)
    """
    live = [n for n, i in enumerate(row) if i != "0"]
    return live[-1] if live else None


def next_row(k, t, row, at: str, ahead: int = 1):
    """(condition, address) of element ``at`` of the row ``ahead`` rows after ``row`` of the float
    tensor ``t`` (the row index that moves: :func:`moving_index`); None when there is no
    such row index or ``t`` is not float (one prefetch per 64-byte line is 16 floats)."""
    pos = moving_index(row)
    if pos is None or k.ct(t) != "float":
        return None
    shape = k.shape(t)
    nxt = tuple(f"({i} + {ahead})" if n == pos else i for n, i in enumerate(row)) + (at,)
    return f"{row[pos]} + {ahead} < {shape[pos]}", f"&{k.ptr(t, 'r')}[{linear(shape, nxt)}]"


#: Longest row whose exponentials a Softmax inside a row loop keeps in a stack array (64 KiB;
#: the l1_overflow motif has 4,912): the output loop then multiplies instead of calling exp again.
ROW_EXP_MAX = 16384


def keeps_exponentials(k, node) -> bool:
    """Whether the Softmax ``node``, in a row loop, keeps its float row's exponentials in an array
    that ``sf_expsum`` fills in place (:mod:`~solverfuse.emit.softmax`): a row of at most
    ``ROW_EXP_MAX`` over the last axis.

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> g = zoo.l1_overflow(2, "intel-xeon-8480")   # LayerNormalization, Mul, Softmax
    >>> k = whole_graph_kernel(g)
    >>> [keeps_exponentials(k, n) for n in g.nodes]
    [False, False, True]
    """
    shape = k.shape(node.inputs[0])
    axis = node.attributes.get("axis", -1) % len(shape)
    return (node.op == "Softmax" and k.ct(node.inputs[0]) == "float" and axis == len(shape) - 1
            and shape[axis] <= ROW_EXP_MAX)


#: Float partial sums of a row sum (:func:`lane_sums`): four 16-float vectors, whose adds overlap
#: where one accumulator waits on each add's latency (and GCC then added its 16 lanes one by one
#: per SUM_BLOCK): LayerNorm statistics of the residual_layernorm_gelu motif took ~0.8 of its 1.7
#: cycles per element in L1 here.
SUM_LANES = 64  # the lane count sf_lanesum64 (row_helpers.py) adds
#: Values of a row sum added in float (SUM_LANES lanes of 16) before they go to the double total.
LANE_BLOCK = 1024


class Square(NamedTuple):
    """A value of :func:`lane_sums` that is ``d * d``: a lane adds it by one FMA where the host
    has FMA (the multiply's rounding gone; ISO C mode does not contract ``s += d * d``)."""
    d: str


def _lane_add(lane: str, v) -> str:
    """The C statement adding the value ``v`` (a C expression or a :class:`Square`) to ``lane``."""
    return f"{lane} = SF_FMA({v.d}, {v.d}, {lane});" if isinstance(v, Square) else f"{lane} += {v};"


def lane_sums(k, n: int, total, body, prefetch=None) -> None:
    """Add ``body(j)`` for j < n to ``total`` (a double; a float where the sum is only a shift,
    as LayerNorm's): for n under ``SUM_LANES`` one simd reduction into a float (the lanes'
    zeroing and tree cost more than they save: the bert and vit exports, LayerNorm rows of 32,
    ran 7.8 -> 9.7 us at 2 threads with them); else ``SUM_LANES``
    float partial sums (a loop of whole chunks of lanes the compiler keeps in vector registers,
    then the last n % SUM_LANES by a simd reduction), the lanes added pairwise (``sf_lanesum64``)
    and then to ``total`` every ``LANE_BLOCK`` values.
    ``body(j)`` emits the element's code and returns its C value (it is emitted twice when n is
    not a multiple of SUM_LANES). ``prefetch`` (x, row): each chunk of lanes first prefetches the
    next row's lines of x's inputs at its position. Several sums in one loop: ``total`` a tuple
    of doubles and ``body(j)`` a tuple of as many values, each added to its own lanes (each half
    of the lanes then in a loop of its own); a value may be a :class:`Square`.

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> g = zoo.residual_layernorm_gelu(2, 8)
    >>> k = whole_graph_kernel(g)
    >>> k.line("double s = 0;"); lane_sums(k, 100, "s", lambda j: f"b0[{j}]")
    >>> [ln.strip() for ln in k.lines if "+=" in ln and "for" not in ln]
    ['sp2[l4] += b0[i5];', 'st6 += b0[i7];', 'sp2[0] += st6;', 's += sf_lanesum64(sp2);']
    >>> k.lines.clear(); lane_sums(k, 100, ("s", "q"), lambda j: (f"b0[{j}]", Square(f"b0[{j}]")))
    >>> [ln.strip() for ln in k.lines if "+=" in ln and "for" not in ln][:2]
    ['sp9[l12] += b0[i13]; sp10[l12] = SF_FMA(b0[i13], b0[i13], sp10[l12]);', 'sp9[32 + l15] += b0[i16]; sp10[32 + l15] = SF_FMA(b0[i16], b0[i16], sp10[32 + l15]);']
    """
    totals = (total,) if isinstance(total, str) else tuple(total)

    def values(j) -> tuple:
        v = body(j)
        return (v,) if isinstance(v, (str, Square)) else tuple(v)

    def simd_sums(lo: str, hi: str, into) -> None:
        """The values of lo <= j < hi by one simd reduction into float parts, then ``into(i, part)``."""
        parts, j = [k.fresh("st") for _ in totals], k.fresh("i")
        k.line(f"float {' = 0, '.join(parts)} = 0;")
        mark = len(k.lines)
        k.line(f"#pragma omp simd reduction(+:{','.join(parts)})")
        with k.block(f"for (long {j} = {lo}; {j} < {hi}; {j}++)"):
            k.line(" ".join(f"{p} += {v.d} * {v.d};" if isinstance(v, Square) else f"{p} += {v};"
                            for p, v in zip(parts, values(j))))
        if any("#pragma omp" in ln for ln in k.lines[mark + 1:]):
            del k.lines[mark]
        for i, p in enumerate(parts):
            into(i, p)

    if n < SUM_LANES:  # no whole chunk: one simd reduction (a lane array and its tree cost more)
        if prefetch is not None:
            prefetch_next_row(k, prefetch[0], prefetch[1], "0", n)   # the next row's n values, no further
        simd_sums("0", str(n), lambda i, p: k.line(f"{totals[i]} += {p};"))
        return
    jb = k.fresh("jb")
    with k.block(f"for (long {jb} = 0; {jb} < {n}; {jb} += {LANE_BLOCK})"):
        hi = f"{jb} + {LANE_BLOCK}" if n % LANE_BLOCK == 0 else f"sf_min({jb} + {LANE_BLOCK}, {n})"
        sps = [k.fresh("sp") for _ in totals]
        for sp in sps:
            k.line(f"float {sp}[{SUM_LANES}] SF_ALIGN64 = {{0}};")
        # two sums' 2 x 64 lanes are all 16 AVX2 registers: then each half of the lanes has a loop
        # of its own (the same values in the same lanes and order; l1_overflow 2% in cache)
        width = SUM_LANES if len(totals) == 1 else SUM_LANES // 2
        for h in range(0, SUM_LANES, width):
            jc, lane, j = k.fresh("jc"), k.fresh("l"), k.fresh("i")
            at = f"{h} + {lane}" if h else lane
            with k.block(f"for (long {jc} = {jb}; {jc} + {SUM_LANES} <= {hi}; {jc} += {SUM_LANES})"):
                if prefetch is not None and h == 0:
                    prefetch_next_row(k, prefetch[0], prefetch[1], jc, SUM_LANES)
                mark = len(k.lines)
                k.line("#pragma omp simd")
                with k.block(f"for (long {lane} = 0; {lane} < {width}; {lane}++)"):
                    k.line(f"const long {j} = {jc} + {at};")
                    k.line(" ".join(_lane_add(f"{sp}[{at}]", v) for sp, v in zip(sps, values(j))))
                if any("#pragma omp" in ln for ln in k.lines[mark + 1:]):
                    del k.lines[mark]  # no OpenMP construct may be nested in a simd loop
        if n % SUM_LANES:
            simd_sums(f"{jb} + ({hi} - {jb}) / {SUM_LANES} * {SUM_LANES}", hi,
                      lambda i, p: k.line(f"{sps[i]}[0] += {p};"))
        k.use_helper("sf_lanesum64")  # the lanes added pairwise
        for t, sp in zip(totals, sps):
            k.line(f"{t} += sf_lanesum64({sp});")


def simd_max(k, lo: str, hi: str, m: str, body) -> None:
    """``m`` = the max of ``m`` and ``body(j)`` for lo <= j < hi: one simd max reduction (NaN
    never taken: ``v > m`` is false).

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> k = whole_graph_kernel(zoo.softmax_rows(2, 8))
    >>> simd_max(k, "0", "8", "m", lambda j: f"b0[{j}]"); [ln.strip() for ln in k.lines]
    ['#pragma omp simd reduction(max:m)', 'for (long i1 = 0; i1 < 8; i1++) {', 'if (b0[i1] > m) m = b0[i1];', '}']
    """
    mark = len(k.lines)
    k.line(f"#pragma omp simd reduction(max:{m})")
    j = k.fresh("i")
    with k.block(f"for (long {j} = {lo}; {j} < {hi}; {j}++)"):
        v = body(j)
        k.line(f"if ({v} > {m}) {m} = {v};")
    if any("#pragma omp" in ln for ln in k.lines[mark + 1:]):
        del k.lines[mark]


def lane_max(k, n: int, m: str, body, stores: bool = False) -> None:
    """``m`` = the max of ``m`` and ``body(j)`` for j < n, a float row: ``SUM_LANES`` lanes of
    partial maxima (4 vector registers: a single simd reduction is one chain of dependent max
    operations, ~14% of softmax_rows in cache), the last n % SUM_LANES by :func:`simd_max`, the
    lanes reduced pairwise. ``body(j)`` emits the element's code (it may store) and returns its
    value (emitted twice when n is not a multiple of SUM_LANES; once for n < SUM_LANES).
    ``stores``: the body stores a row array, and the chunks of SUM_LANES are each one simd max
    reduction into ``m`` instead: GCC keeps the lanes array in memory, a load and a store per
    vector beside the body's own store, where a chunk's reduction stays in registers (l1_overflow,
    whose max pass normalises and keeps each row: 0.94-0.96 of the time at 2x the LLC, Zen 4).

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> k = whole_graph_kernel(zoo.softmax_rows(2, 8))
    >>> k.line("float m = -INFINITY;"); lane_max(k, 100, "m", lambda j: f"b0[{j}]")
    >>> [ln.strip() for ln in k.lines if "b0[" in ln or "m = mp" in ln]
    ['mp1[l4] = b0[i5] > mp1[l4] ? b0[i5] : mp1[l4];', 'if (b0[i6] > m) m = b0[i6];', 'if (mp1[0] > m) m = mp1[0];']
    >>> k.lines = []; lane_max(k, 128, "m", lambda j: f"b0[{j}]", stores=True); [ln.strip() for ln in k.lines[:3]]
    ['for (long jc13 = 0; jc13 + 64 <= 128; jc13 += 64) {', '#pragma omp simd reduction(max:m)', 'for (long l14 = 0; l14 < 64; l14++) {']
    """
    if n < SUM_LANES:
        simd_max(k, "0", str(n), m, body)
        return
    mp = None if stores else k.fresh("mp")
    if mp:
        lane = k.fresh("l")
        k.line(f"float {mp}[{SUM_LANES}] SF_ALIGN64;")
        k.line(f"for (long {lane} = 0; {lane} < {SUM_LANES}; {lane}++) {mp}[{lane}] = -INFINITY;")
    jc = k.fresh("jc")
    with k.block(f"for (long {jc} = 0; {jc} + {SUM_LANES} <= {n}; {jc} += {SUM_LANES})"):
        lane, j = k.fresh("l"), k.fresh("i")
        mark = len(k.lines)
        k.line(f"#pragma omp simd reduction(max:{m})" if stores else "#pragma omp simd")
        with k.block(f"for (long {lane} = 0; {lane} < {SUM_LANES}; {lane}++)"):
            k.line(f"const long {j} = {jc} + {lane};")
            v = body(j)
            k.line(f"if ({v} > {m}) {m} = {v};" if stores else f"{mp}[{lane}] = {v} > {mp}[{lane}] ? {v} : {mp}[{lane}];")
        if any("#pragma omp" in ln for ln in k.lines[mark + 1:]):
            del k.lines[mark]
    if n % SUM_LANES:
        simd_max(k, str(n // SUM_LANES * SUM_LANES), str(n), m, body)
    if stores:
        return
    w = SUM_LANES // 2
    while w:
        lane = k.fresh("l")
        k.line(f"for (long {lane} = 0; {lane} < {w}; {lane}++) "
               f"{mp}[{lane}] = {mp}[{lane} + {w}] > {mp}[{lane}] ? {mp}[{lane} + {w}] : {mp}[{lane}];")
        w //= 2
    k.line(f"if ({mp}[0] > {m}) {m} = {mp}[0];")


def row_streams(k, tensors) -> list:
    """The global tensors the row loop's ``tensors`` stream from (see :func:`output_prefetch`);
    taken before the row's statistics keep any row in an array.

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> g = zoo.residual_layernorm_gelu(2, 8)
    >>> k = whole_graph_kernel(g)
    >>> row_streams(k, ["y"])
    ['residual', 'x']
    >>> output_prefetch(k, ["x"], ("i",), "j"); k.lines
    ['    if (i + 1 < 2) __builtin_prefetch(&b0[((i + 1))*8 + j]);']
    """
    return sorted(set().union(*(row_inputs(k, x) for x in tensors)))


#: Rows ahead that a second prefetch, into the L2 only, reaches where a row loop's input comes from
#: memory (:func:`from_memory`) and its lines are prefetched into the L1 one row ahead: an output
#: loop's (:func:`output_prefetch`, ``far``) and a softmax row's ``sf_expsum`` (its ``pf2``): a
#: line asked for a row ahead alone was often still on its way. residual_layernorm_gelu (rows of
#: 768, two inputs) at 2x the LLC, 1 thread, Zen 4, against the L1 prefetch one row ahead alone
#: (interleaved rounds, two runs): 0.90 at 2 rows ahead, 0.86-0.87 at 3, 0.86 at 4, 0.87 at 6; the
#: L2 prefetch alone, one row ahead 1.14, and the L1 prefetch two rows ahead 1.08.
OUTPUT_FAR_ROWS_AHEAD = 3


def output_prefetch(k, streams, row, at: str, far=()) -> None:
    """Inside a row loop's output loop, run 16 outputs at a time: prefetch the next row's cache
    line at ``at`` of each float tensor of ``streams`` (:func:`row_streams`); of those also in
    ``far``, the line ``OUTPUT_FAR_ROWS_AHEAD`` rows on into the L2 as well. A row whose output
    loop computes much (LayerNorm + erf GELU: ~0.45 ns per element in L1) leaves memory idle
    while it does, and the next row's statistics loop then waits on memory: the
    residual_layernorm_gelu motif ran at about memory + compute time (48% of the triad). One
    line per 16 outputs spreads the next row's misses over the whole output loop; the 16 lines
    of a 256-value block at once (as :func:`prefetch_next_row`) or the whole row at the row's
    start were slower here (the loads queued behind them: 72% and 54% of the triad, this 84%,
    best of 40 rounds). Not in instrumented builds. Example: :func:`row_streams`."""
    if k.counters:
        return
    for t in streams:
        nxt = next_row(k, t, row, at)
        if nxt is not None:
            k.line(f"if ({nxt[0]}) __builtin_prefetch({nxt[1]});")
        nxt = next_row(k, t, row, at, OUTPUT_FAR_ROWS_AHEAD) if t in far else None
        if nxt is not None:
            k.line(f"if ({nxt[0]}) __builtin_prefetch({nxt[1]}, 0, 2);")


def declare_row(k, ct: str, name: str, n: int) -> None:
    """Declare the row array ``name`` of ``n`` values of C type ``ct``: on the stack, used through a
    pointer. A loop that stores into a stack array indexed directly kept :func:`lane_sums`'
    lanes in memory (GCC 12 loaded and stored them at every chunk, ~2x the statistics time);
    through a pointer they stay in registers.

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> g = zoo.residual_layernorm_gelu(2, 8)
    >>> k = whole_graph_kernel(g)
    >>> declare_row(k, "float", "R", 8); k.lines
    ['    float R_s[8] SF_ALIGN64;', '    float *const R = R_s;']
    """
    k.line(f"{ct} {name}_s[{n}] SF_ALIGN64;")
    k.line(f"{ct} *const {name} = {name}_s;")


def row_array(k, x):
    """A row array for the in-group tensor ``x`` that a row reduction reads and other ops of the
    group read again (a softmax's exp(x - max)): filled by the reduction's loop, then read
    instead of recomputing the chain (None when x is a global load, a tile, or read once)."""
    g = k.graph
    if g.index.producer.get(x) not in k.members or k.has_tile(x):
        return None
    if x not in k.writes and sum(c in k.members for c in g.index.consumers.get(x, [])) < 2:
        return None
    arr = k.fresh("R")
    declare_row(k, k.ct(x), arr, k.shape(x)[-1])
    return arr


def row_array_filled(k, x, row, arr):
    """From here on (in this row), ``x`` at (row, j) is ``arr[j]``."""
    if arr is not None:
        k.set_tile(x, tuple("0" if n == 1 else k.index(i) for i, n in zip(row, k.shape(x)[:-1])), arr, 1)
