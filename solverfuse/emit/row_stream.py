"""A row loop's large float outputs (:mod:`~solverfuse.emit.rows`): written with non-temporal
stores (``sf_stream``), and a softmax's output deferred to the next row (``sf_drain``).

A softmax row's output needs the row's normaliser, so within one row its stores cannot overlap its
exponentials; with non-temporal stores the output pass then waits for its lines to drain to
memory. :func:`defer_output` stores row i's output block by block while row i + 1 computes its
exponentials (the rows' kept exponentials in two alternating buffers), so the stores drain during
arithmetic. :func:`output_value` writes a Div by a softmax normaliser as ``sf_divq``.

>>> STREAM_BLOCK
256
"""
from __future__ import annotations

import re

from ..errors import InternalError
from . import reductions, row_loop, softmax_pipeline
from .cexpr import bmap, linear, split_args
from .kernel import Kernel

#: Elements of a streamed output computed into a stack block before ``sf_stream`` writes them.
STREAM_BLOCK = 256
#: Bytes of a row from which a softmax output is deferred to the next row (:func:`defer_output`).
#: CPU time per element at 2x the LLC, best of 7 (loaded machine): rows of 4,912 floats (l1_overflow)
#: 0.76 ns deferred against 0.93 streamed at the row's end (its 307 lines wait to drain); rows of
#: 1,024 floats (softmax_rows) 0.48-0.68 against 0.43-0.49 (64 lines the store buffers absorb while
#: the next row's max loop, loads only, runs). Both still hold with the row's end streamed by
#: ``sf_drain`` straight from the exponentials (:func:`stream_outputs`), medians of 12 side by side:
#: l1_overflow 10.99 ms deferred against 11.28, softmax_rows 7.50 against 7.34.
DEFER_MIN_ROW_BYTES = 8192


def output_value(k: Kernel, t: str, idx: tuple) -> str:
    """C value of the written tensor ``t`` at ``idx``. A Div by a softmax's normaliser
    (:func:`~solverfuse.emit.reductions.softmax_normaliser`, a row scalar here) is ``sf_divq``: a
    product by the reciprocal (hoisted out of the loop) and one FMA remainder step, equal to the
    division there at about half its cost (vdivps was 30% of softmax_rows in cache)."""
    node = k.graph.index.node.get(k.graph.index.producer.get(t))
    if node is not None and node.op == "Div" and node.name in k.members and k.ct(t) == "float" \
            and k.ct(node.inputs[0]) == "float" and reductions.softmax_normaliser(k, node.inputs[1], node.inputs[0]):
        shape = k.shape(t)
        a = k.value(node.inputs[0], bmap(idx, shape, k.shape(node.inputs[0])))
        b = k.value(node.inputs[1], bmap(idx, shape, k.shape(node.inputs[1])))
        k.use_helper("sf_divq")
        return k.tmp("float", f"sf_divq({a}, {b}, 1.0f / {b})")
    return k.value(t, idx)


def streamed(k: Kernel, t: str) -> bool:
    """Whether the row loop writes ``t`` with non-temporal stores: a float row tensor of at least
    ``row_loop.STREAM_MIN_BYTES`` (:func:`~solverfuse.emit.row_loop.from_memory`), in a serial
    kernel (the fence after the row loop orders one thread's stores; the instrumented build counts
    plain stores)."""
    shape = k.shape(t)
    return (not k.counters and k.threads == 1 and len(shape) > 0 and shape[-1] >= 16
            and row_loop.from_memory(k, t))


def stream_outputs(k: Kernel, shape: tuple, outer: tuple, writes: list, streamed: list) -> None:
    """A row's output loop in blocks of ``STREAM_BLOCK``: the streamed tensors' values into stack
    blocks, written by ``sf_stream`` after each block; the others stored in place. A streamed
    softmax of the row (:func:`_kept_output`) is written by ``sf_drain`` straight from the kept
    exponentials instead, with no stack block between (softmax_rows at 2x the LLC, Zen 3, medians
    of 12 side by side: 8.26 -> 7.30 ms; the block's store and reload cost more than the product)."""
    n = shape[-1]
    kept = {t: _kept_output(k, t) for t in streamed}
    for t in streamed:
        if kept[t] is not None:
            k.use_helper("sf_drain")
            k.line(f"sf_drain(&{_pend(k, t, shape, outer, kept[t])}, 0, {n});")
    streamed = [t for t in streamed if kept[t] is None]
    writes = [t for t in writes if kept.get(t) is None]
    if not writes:
        return
    k.use_helper("sf_stream")
    blk = {t: k.fresh("O") for t in streamed}
    for o in blk.values():
        k.line(f"float {o}[{min(n, STREAM_BLOCK)}] SF_ALIGN64;")
    jb, j = k.fresh("jb"), k.fresh("i")
    hi = f"{jb} + {STREAM_BLOCK}" if n % STREAM_BLOCK == 0 else f"sf_min({jb} + {STREAM_BLOCK}, {n})"
    with k.block(f"for (long {jb} = 0; {jb} < {n}; {jb} += {STREAM_BLOCK})"):
        with k.block(f"for (long {j} = {jb}; {j} < {hi}; {j}++)"):
            idx = outer + (j,)
            for t in writes:
                if t in blk:
                    k.line(f"{blk[t]}[{j} - {jb}] = {output_value(k, t, idx)};")
                else:
                    k.store(t, idx, output_value(k, t, idx))
        for t, o in blk.items():
            k.line(f"sf_stream(&{k.ptr(t, 'w')}[{linear(shape, outer + (jb,))}], {o}, {hi} - {jb});")


def _pend(k: Kernel, t: str, shape: tuple, outer: tuple, kept: tuple) -> str:
    """The ``sf_pend`` literal of the written tensor ``t``'s row at ``outer`` from its
    :func:`_kept_output` ``kept``: what ``sf_drain`` writes."""
    arr, s, r, div = kept
    return f"(sf_pend){{&{k.ptr(t, 'w')}[{linear(shape, outer + ('0',))}], {arr}, {s}, {r}, {div}, 0}}"


def _kept_output(k: Kernel, t: str):
    """(array of kept exponentials, normaliser or "0.0f", reciprocal, 1 for sf_divq / 0 for a
    product) when every element of the written tensor ``t`` at this row is a function of its
    row's kept exponentials and row scalars: a Softmax's output (``E[j] * rnorm``) or a Div by an
    exporters' normaliser (``sf_divq(R[j], s, 1 / s)``); else None."""
    g = k.graph
    node = g.index.node.get(g.index.producer.get(t))
    if node is None or node.name not in k.members:
        return None
    if node.op == "Softmax":
        st = k.stats.get(node.name, {})
        return (st["exp"], "0.0f", st["b"], 0) if st.get("row") and st.get("exp") else None
    if node.op == "Div" and k.ct(node.inputs[0]) == "float" \
            and reductions.softmax_normaliser(k, node.inputs[1], node.inputs[0]):
        tile = k.tiles.get(node.inputs[0])
        if tile is None or tile[2] != 1 or k.shape(node.inputs[0]) != k.shape(t):
            return None
        s = k.value(node.inputs[1], (*tile[0], "0"))
        return tile[1], s, f"1.0f / {s}", 1
    return None


def defer_output(k: Kernel, shape: tuple, outer: tuple, writes: list, start: int = 0) -> list:
    """After a row's statistics (the row's code from line ``start``), in a serial row loop writing
    one streamed tensor (:func:`streamed`) that is a softmax of the row (:func:`_kept_output`) in
    rows of at least ``DEFER_MIN_ROW_BYTES``: the row's kept exponentials go to one of two buffers
    declared before the row loop (their declaration in the row becomes a pointer), and the previous
    row's output is streamed (``sf_drain``) block by block during this row's first pass of lane
    sums over the row (a LayerNorm's statistics: loads only); else, where the row's max pass
    stores the kept row (a LayerNorm's statistics carried from the previous row,
    :mod:`~solverfuse.emit.norm_stats`), chunk by chunk in that pass from one buffer
    (:func:`_drained_max_pass`); else with each block of the row's ``sf_expsum`` call
    (:func:`_drained_expsum`). This row's output is left pending. Returns [pending, buffers, n,
    one buffer] for :func:`finish_deferred` ([] when the row is not of that form: nothing is
    changed).

    The sums' pass is the least busy: l1_overflow at 2x the LLC (Zen 3) took 0.74-0.76 ns per
    element draining there, 0.78-0.80 during the exponentials (which also prefetch the next row)
    and 0.84 during the normalising pass (its loads of the scale and bias are L2 traffic already)."""
    if len(writes) != 1 or not streamed(k, writes[0]) or 4 * shape[-1] < DEFER_MIN_ROW_BYTES:
        return []
    kept = _kept_output(k, writes[0])
    if kept is None:
        return []
    arr = kept[0]   # the kept exponentials
    n = shape[-1]
    # the row array (row_loop.declare_row): its stack array goes, its pointer points into the buffers
    decl = [i for i, ln in enumerate(k.lines) if ln.strip() == f"float *const {arr} = {arr}_s;"]
    if len(decl) != 1 or not k.lines[decl[0] - 1].strip().startswith(f"float {arr}_s[{n}]"):
        return []
    calls = [i for i, ln in enumerate(k.lines) if re.search(rf"sf_expsum(?:_from|_ln)?(?:_max)?\({arr}, ", ln)]
    if not calls:
        return []
    pend, buf = k.fresh("P"), k.fresh("SFB")
    row = linear(shape[:-1], outer) if outer else "0"
    # a lane-sum pass over the row at the row's own nesting (not in a conditional second pass)
    ind = k.lines[decl[0]][:len(k.lines[decl[0]]) - len(k.lines[decl[0]].lstrip())]
    sums = [i for i in range(start, decl[0]) if re.fullmatch(
        rf"{ind}for \(long (\w+) = 0; \1 < {n}; \1 \+= {row_loop.LANE_BLOCK}\) \{{", k.lines[i])]
    single = False
    if sums:  # each block of the sums' pass drains the same block of the previous row
        jb = re.search(r"long (\w+)", k.lines[sums[0]]).group(1)
        size = row_loop.LANE_BLOCK if n % row_loop.LANE_BLOCK == 0 else f"sf_min({row_loop.LANE_BLOCK}, {n} - {jb})"
        k.lines.insert(sums[0] + 1, f"{ind}    sf_drain(&{pend}, {jb}, {size});")
        decl[0] += 1
    else:
        single = _drained_max_pass(k, decl[0] + 1, calls[0], ind, arr, n, pend)
        if not single:
            for i in reversed(calls):
                k.lines[i:i + 1] = _drained_expsum(k, k.lines[i], pend)
    piped = None
    if single and len(calls) == 1 and not kept[3]:
        call = next(i for i in range(decl[0], len(k.lines)) if re.search(rf"sf_expsum\w*\({arr}, ", k.lines[i]))
        piped = softmax_pipeline.pipeline_max_pass(k, decl[0] + 1, call, ind, arr, n, pend)
    ln = k.lines[decl[0]]
    k.lines[decl[0]] = ln[:len(ln) - len(ln.lstrip())] + f"float *restrict {arr} = {buf}{'' if single else f'[({row}) & 1]'};"
    del k.lines[decl[0] - 1]
    k.use_helper("sf_drain")
    literal = _pend(k, writes[0], shape, outer, kept)
    for ln in softmax_pipeline.pend_lines(piped, pend, literal) if piped else [f"{pend} = {literal};"]:
        k.line(ln)
    return [pend, buf, n, single, piped]


def _drained_max_pass(k: Kernel, lo: int, hi: int, ind: str, arr: str, n: int, pend: str) -> bool:
    """Where the row's max pass (:func:`~solverfuse.emit.row_loop.lane_max`) is the loops at the
    row's nesting (``ind``) between lines ``lo`` and ``hi`` that store into the kept array ``arr``
    -- chunks of ``SUM_LANES`` over [0, n - n % SUM_LANES), then one loop over the rest --: the
    previous row's output is drained from ``arr`` chunk by chunk just before the chunk overwrites
    it (one buffer for both rows: each line is read by the drain and written again while in the L1,
    where a second buffer's lines came from the L2 to be written). Returns whether it did (else
    nothing is changed). l1_overflow at 2x the LLC, 1 thread, Zen 4, with the LayerNorm statistics
    carried (no pass of sums): 0.93-0.99 of the time drained with the exponentials' blocks (five
    runs, medians of 9-25 interleaved rounds)."""
    lanes = row_loop.SUM_LANES
    heads = []
    for i in range(lo, hi):
        ln = k.lines[i]
        if ln.startswith(f"{ind}for (") and ln.endswith("{"):
            end = next(j for j in range(i + 1, len(k.lines)) if k.lines[j] == f"{ind}}}")
            if any(re.search(rf"\b{arr}\[\w+\] = ", x) for x in k.lines[i + 1:end]):
                heads.append(i)
        elif re.search(rf"\b{arr}\[", ln) and not ln.startswith(f"{ind} "):
            return False     # the kept array touched at the row's own nesting: not the max pass
    chunk = [i for i in heads if re.fullmatch(rf"{ind}for \(long (\w+) = 0; \1 \+ {lanes} <= {n}; \1 \+= {lanes}\) \{{",
                                                 k.lines[i])]
    rest = [i for i in heads if re.fullmatch(rf"{ind}for \(long (\w+) = {n // lanes * lanes}; \1 < {n}; \1\+\+\) \{{",
                                                k.lines[i])]
    if len(heads) != len(chunk) + len(rest) or len(chunk) != (n >= lanes) or len(rest) != (n % lanes > 0):
        return False
    for i in sorted(heads, reverse=True):
        if i in rest:
            at = i - 1 if k.lines[i - 1].strip().startswith("#pragma omp") else i   # the pragma stays on its loop
            k.lines.insert(at, f"{ind}sf_drain(&{pend}, {n // lanes * lanes}, {n % lanes});")
        else:
            jc = re.search(r"long (\w+)", k.lines[i]).group(1)
            k.lines.insert(i + 1, f"{ind}    sf_drain(&{pend}, {jc}, {lanes});")
    return True


def _drained_expsum(k: Kernel, line: str, pend: str) -> list:
    """A row's one ``sf_expsum`` call (:func:`~solverfuse.emit.softmax.expsum_blocks`:
    ``total += sf_expsum..(arr, m, n[, src], pf, far, pf2[, xs, K, sq]);``) as a loop over its blocks of
    ``SUM_BLOCK``, each block's call followed by the previous row's output drained over the same
    block (the same sums as the one call: each block's float sum is added to the double total).

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> k = whole_graph_kernel(zoo.softmax_rows(2, 8))
    >>> print("\\n".join(_drained_expsum(k, "s1 += sf_expsum_ln_max(E2, m3, 3000, pf4, 1, 0, xs5, K6, sq7);", "P8")))
    for (long jb1 = 0; jb1 < 3000; jb1 += 1024) {
        s1 += sf_expsum_ln_max(E2 + jb1, m3, sf_min(1024, 3000 - jb1), pf4 ? pf4 + jb1 : 0, 1, 0, xs5 ? xs5 + jb1 : 0, K6, sq7);
        sf_drain(&P8, jb1, sf_min(1024, 3000 - jb1));
    }
    """
    ind = line[:len(line) - len(line.lstrip())]
    m = re.fullmatch(r"(\w+) \+= (sf_expsum\w*)\((.*)\);", line.strip())
    args = split_args(m.group(3)) if m else []
    if m is None or len(args) != (7 if "_from" in m.group(2) else 9 if "_ln" in m.group(2) else 6):
        raise InternalError(f"kernel {k.gid}: an sf_expsum call of another form: {line.strip()}")
    if "_ln" in m.group(2):  # the next row's statistics (xs, K, sq): the same block of xs
        (arr, mx, n, pf, far, pf2, xs, sh, sq), src = args, []
    else:
        (arr, mx, n, *src, pf, far, pf2), xs = args, None
    jb, step = k.fresh("jb"), row_loop.SUM_BLOCK
    size = str(step) if int(n) % step == 0 else f"sf_min({step}, {n} - {jb})"

    def moved(p):  # a pointer that may be null (or "0") at this block
        return f"{p} ? {p} + {jb} : 0" if p != "0" else "0"
    at = [f"{arr} + {jb}", mx, size] + [f"{x} + {jb}" for x in src] + [moved(pf), far, moved(pf2)]
    if xs is not None:
        at += [moved(xs), sh, sq]
    return [f"{ind}for (long {jb} = 0; {jb} < {n}; {jb} += {step}) {{",
            f"{ind}    {m.group(1)} += {m.group(2)}({', '.join(at)});",
            f"{ind}    sf_drain(&{pend}, {jb}, {size});", f"{ind}}}"]


def finish_deferred(k: Kernel, mark: int, depth: int, pend: str, buf: str, n: int, single: bool = False,
                    piped=None) -> None:
    """The deferred output's buffers (one, ``single``, where the max pass drains the previous row:
    :func:`_drained_max_pass`), the chunk factors of a pipelined row (``piped``:
    :func:`~solverfuse.emit.softmax_pipeline.pipeline_max_pass`) and pending row declared before
    the row loop (which starts at line ``mark``, nesting ``depth``), and the last row's output
    streamed after it."""
    ind = "    " * depth
    # the two buffers 64 bytes more than a row apart: rows of 1,024 floats 4 KiB apart made the
    # drain's loads of one alias the exponentials' stores to the other (4K aliasing), and
    # softmax_rows ran 25% slower deferred than not
    dims = f"[{n}]" if single else f"[2][{n + 16}]"
    k.lines[mark:mark] = [f"{ind}float {buf}{dims} SF_ALIGN64;", f"{ind}sf_pend {pend} = {{0}};"] \
        + [ind + ln for ln in (softmax_pipeline.factors_declaration(piped) if piped else [])]
    k.line(f"sf_drain(&{pend}, 0, {n});")
