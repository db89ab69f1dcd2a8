"""A deferred softmax row's max pass and exponentials as one pipelined loop (AVX-512 builds).

In a row whose max pass normalises the row into its kept array (:mod:`~solverfuse.emit.row_stream`:
``_drained_max_pass``, a LayerNorm's statistics carried from the previous row), the max pass loads
its inputs from the L2 (the row, the scale, the bias) and does little arithmetic, and the
exponentials that follow do much arithmetic on the L1: run one after the other, each leaves the
other's units idle. :func:`pipeline_max_pass` rewrites the two as one loop over vectors of 16:
each iteration computes a vector of the max pass (its scalar C as GCC vector operations,
:func:`vector_body`) and the exponentials of the vector ``PIPELINE_CHUNK`` values back, taken at
the running max at the end of that vector's chunk (an online softmax: ``sf_oexp`` keeps the sum at
the largest max so far). The row's output then scales each chunk by its own factor,
e^(chunk max - row max) / sum (``sf_drain``'s ``g``). l1_overflow at 2x the LLC, 1 thread, Zen 4:
0.33-0.34 ns per element hand-written this way against 0.40-0.41 in two passes.

>>> vector_body(["const float v2 = SF_FMA((b0[i1*8 + j] - mu) * 2.0f, b1[j], b2[j]);", "E3[j] = v2;"],
...             "j", "E3")[1]
['const sf_v16 v2 = SF_FMA16((SF_LOAD16(&b0[i1*8 + j]) - mu_v) * SF_SET1(2.0f), SF_LOAD16(&b1[j]), SF_LOAD16(&b2[j]));', 'SF_STORE16(&E3[j], v2);']
>>> vector_body(["const float v2 = fabsf(b0[j]);"], "j", "E3") is None
True
"""
from __future__ import annotations

import re
from typing import Optional

from ..errors import InternalError
from .cexpr import split_args
from .row_loop import PIPELINE_CHUNK, SUM_LANES

#: C words that end the conversion where they appear in a body (a cast, another type).
_TYPES = frozenset({"float", "double", "int", "long", "unsigned", "char", "short", "const", "signed"})
_ARRAY = re.compile(r"\b([A-Za-z_]\w*)\[([^\[\]]*)\]")
_WORD = re.compile(r"\b([A-Za-z_]\w*)\b(\s*\()?")
_NUMBER = re.compile(r"(?<![\w.])(0[xX][0-9a-fA-F.]+[pP][+-]?\d+f?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?f?)")
_LOAD = re.compile(r"__L(\d+)__")


def _vector_expr(expr: str, idx: str, arr: str, vectors: set, scalars: dict, fresh) -> Optional[str]:
    """The float expression ``expr`` of the max pass's body at element ``idx`` as a GCC vector
    expression of the 16 elements from ``idx``: array reads at ``idx`` become vector loads, the
    body's temporaries (``vectors``) stay, other names become broadcasts (collected in
    ``scalars``: name -> its broadcast's name, from ``fresh``), literals ``SF_SET1``, ``SF_FMA``
    ``SF_FMA16``; None where the expression holds anything else (a call, a comparison, a cast, a
    read of ``arr`` or at an index other than ``idx``)."""
    loads: list = []

    def load(m):
        name, at = m.group(1), m.group(2).strip()
        if name == arr or not (at == idx or at.endswith(f"+ {idx}")) or re.search(rf"\b{idx}\b", at[:-len(idx)]):
            raise ValueError
        loads.append(f"SF_LOAD16(&{name}[{at}])")
        return f"__L{len(loads) - 1}__"

    def word(m):
        name, call = m.group(1), m.group(2)
        if _LOAD.fullmatch(name) or name in vectors:
            return m.group(0)
        if call or name in _TYPES or name == idx:
            if name != "SF_FMA" or not call:
                raise ValueError
            return "SF_FMA16" + call
        if name not in scalars:
            scalars[name] = fresh(name)
        return scalars[name]

    def number(m):
        lit = m.group(1)
        if not lit.endswith("f") and re.search(r"[.eEpP]", lit) and not lit.lower().startswith("0x") or \
                lit.lower().startswith("0x") and not lit.endswith("f"):
            raise ValueError  # a double literal: the scalar code computes in double there
        return f"SF_SET1({lit})"
    try:
        text = _ARRAY.sub(load, expr)
        if re.search(r"[^\w\s+\-*/(),.]", text):
            return None
        text = _NUMBER.sub(number, _WORD.sub(word, text))
    except ValueError:
        return None
    return _LOAD.sub(lambda m: loads[int(m.group(1))], text)


def float_names(lines: list) -> set:
    """The names ``lines`` declare as float scalars, float arrays or pointers to float.

    >>> sorted(float_names(["const float a = x, b = f(1, 2); double c = 0;", "const float *restrict b0 = B[0];",
    ...                     "float E1[8] SF_ALIGN64;"]))
    ['E1', 'a', 'b', 'b0']
    """
    out = set()
    for ln in lines:
        for stmt in ln.split(";"):
            m = re.match(r"\s*(?:const )?float (.*)", stmt)
            if not m:
                continue
            for d in split_args(m.group(1)):
                name = re.match(r"\*?\s*(?:restrict |const )?\s*(\w+)", d)
                if name:
                    out.add(name.group(1))
    return out


def vector_body(lines: list, idx: str, arr: str, fresh=lambda name: f"{name}_v"):
    """(broadcasts {scalar: name}, vector lines) of the max pass's body ``lines`` (stripped C: float
    temporaries and the store of the kept array ``arr`` at ``idx``), or None where a line is of
    another form (the pass stays as it is)."""
    vectors: set = set()
    scalars: dict = {}
    out = []
    for ln in lines:
        m = re.fullmatch(r"const float (\w+) = (.*);", ln)
        if m:
            v = _vector_expr(m.group(2), idx, arr, vectors, scalars, fresh)
            if v is None:
                return None
            vectors.add(m.group(1))
            out.append(f"const sf_v16 {m.group(1)} = {v};")
            continue
        m = re.fullmatch(rf"{re.escape(arr)}\[{re.escape(idx)}\] = (\w+);", ln)
        if m and m.group(1) in vectors:
            out.append(f"SF_STORE16(&{arr}[{idx}], {m.group(1)});")
            continue
        return None
    return scalars, out


def _block_end(lines: list, head: int, ind: str) -> int:
    """Index of the line closing the block opened at ``head`` (at nesting ``ind``)."""
    return next(j for j in range(head + 1, len(lines)) if lines[j] == f"{ind}}}")


def pipeline_max_pass(k, lo: int, call: int, ind: str, arr: str, n: int, pend: str) -> Optional[tuple]:
    """Rewrite the drained max pass between lines ``lo`` and ``call`` (the row's ``sf_expsum*_max``
    call on the kept array ``arr``, at nesting ``ind``) and that call as the pipelined loop of the
    module doc under ``#if defined(SF_AVX512_TILES)`` (the two passes as they were under
    ``#else``), the lines between them that do not use the row's max or sum hoisted before both.
    Returns what :func:`pend_lines` and :func:`factors_declaration` need, or None where the row is
    of another form (nothing is changed)."""
    lanes, ch = SUM_LANES, PIPELINE_CHUNK
    n64 = n // lanes * lanes
    L = k.lines
    cm = re.fullmatch(r"(\w+) \+= sf_expsum(_ln)?_max\((.*)\);", L[call].strip())
    args = split_args(cm.group(3)) if cm and "(" not in cm.group(3) else []  # no calls: at() offsets plain names
    if cm is None or n64 < 2 * ch or len(args) != (9 if cm.group(2) else 6) or args[0] != arr or args[2] != str(n):
        return None
    total, m, (pf, far, pf2) = cm.group(1), args[1], args[3:6]
    xs, K, sq = args[6:9] if len(args) == 9 else ("0", "0.0f", "0")
    heads = [i for i in range(lo, call) if re.fullmatch(
        rf"{ind}for \(long (\w+) = 0; \1 \+ {lanes} <= {n}; \1 \+= {lanes}\) \{{", L[i])]
    if len(heads) != 1:
        return None
    h = heads[0]
    e = _block_end(L, h, ind)
    jc = re.search(r"long (\w+)", L[h]).group(1)
    inner = re.fullmatch(rf"{ind}    for \(long (\w+) = 0; \1 < {lanes}; \1\+\+\) \{{", L[h + 3])
    first = re.fullmatch(rf"{ind}        const long (\w+) = {jc} \+ (\w+);", L[h + 4])
    last = re.fullmatch(rf"{ind}        if \((\w+) > {re.escape(m)}\) {re.escape(m)} = \1;", L[e - 2])
    if L[h + 1].strip() != f"sf_drain(&{pend}, {jc}, {lanes});" or L[h + 2].strip() != f"#pragma omp simd reduction(max:{m})" \
            or not inner or not first or first.group(2) != inner.group(1) or not last or L[e - 1] != f"{ind}    }}":
        return None
    idx = first.group(1)
    body = vector_body([ln.strip() for ln in L[h + 5:e - 2]], idx, arr, lambda name: k.fresh(f"{name}_v"))
    if body is None or f"const sf_v16 {last.group(1)} = " not in "\n".join(body[1]):
        return None
    scalars, vlines = body
    floats = float_names(L[:h] + [text for _, text in k.invariants]) \
        | {f"b{b}" for t, b in k.buffers.items() if k.ct(t) == "float"} \
        | {c for t, c in k.hoisted.items() if k.ct(t) == "float"}
    loads = {a for ln in vlines for a in re.findall(r"SF_LOAD16\(&(\w+)\[", ln)}
    if not (set(scalars) | loads) <= floats:
        return None   # a double (or integer) operand: the scalar code computes in double there
    # the rest of the max pass (n % lanes values), then the lines the call needs (its pointers)
    rest_end = e
    if n % lanes:
        heads = [i for i in range(e + 1, call) if L[i].startswith(f"{ind}for (long ") and f"= {n64}; " in L[i]]
        if len(heads) != 1:
            return None
        rest_end = _block_end(L, heads[0], ind)
    hoist = L[rest_end + 1:call]
    used = re.compile(rf"\b(?:{re.escape(m)}|{re.escape(arr)}|{re.escape(total)})\b")
    if any(used.search(ln) for ln in hoist):
        return None
    nch, nf = -(-n // ch), n64 // ch
    o, mc, vm, fac, kv = k.fresh("O"), k.fresh("MC"), k.fresh("VM"), k.fresh("G"), k.fresh("KV")
    c, j, mv, gv, jb = k.fresh("c"), k.fresh("jc"), k.fresh("MV"), k.fresh("GV"), k.fresh("jb")

    def at(p, off):  # a pointer that may be null (or "0") at an offset
        return f"{p} ? {p} + {off} : 0" if p != "0" else "0"

    def vectors(lo_: str, hi_: str, exps: bool) -> list:  # the max pass over [lo_, hi_), exps trailing
        lag = f"{j} - {ch}"
        return [f"for (long {j} = {lo_}; {j} < {hi_}; {j} += 16) {{",
                f"    sf_drain16(&{pend}, {j}, {gv});",
                f"    const long {idx} = {j};"] + ["    " + ln for ln in vlines] \
            + [f"    {vm} = SF_MAX16({last.group(1)}, {vm});"] \
            + ([f"    sf_oexp16(&{o}, {arr} + {lag}, {mv}, (sf_mask16)-1, {at(pf, lag)}, {far}, {at(pf2, lag)}, "
                f"{at(xs, lag)}, {kv});"] if exps else []) + ["}"]
    cmax = f"{{ const float {c}_m = sf_hmax16({vm}); if ({c}_m > {m}) {m} = {c}_m; }}"
    gfac = f"const sf_v16 {gv} = SF_SET1({pend}.g ? {pend}.g[{c}] : {pend}.r);"
    loop = ["#if defined(SF_AVX512_TILES)",
            f"sf_osum {o}; sf_osum_init(&{o});",
            f"float {mc}[{nch}];",
            f"sf_v16 {vm} = SF_SET1(-INFINITY);",
            f"const sf_v16 {kv} = SF_SET1({K});"]
    loop += [f"SF_UNUSED const sf_v16 {v} = SF_SET1({s});" for s, v in scalars.items()]
    loop += ["{", f"    const long {c} = 0;", "    " + gfac] + ["    " + ln for ln in vectors("0", str(ch), False)] \
        + ["    " + cmax, f"    {mc}[0] = {m};", "}"]
    loop += [f"for (long {c} = 1; {c} < {nf}; {c}++) {{",
             f"    sf_osum_at(&{o}, {mc}[{c} - 1]);",
             f"    const sf_v16 {mv} = SF_SET1({mc}[{c} - 1]);",
             "    " + gfac] + ["    " + ln for ln in vectors(f"{c} * {ch}", f"{c} * {ch} + {ch}", True)] \
        + [f"    sf_osum_flush(&{o});", "    " + cmax, f"    {mc}[{c}] = {m};", "}"]
    if n64 > nf * ch:  # a part chunk: with the exponentials of as many values of the last whole one
        loop += ["{", f"    const long {c} = {nf};", f"    sf_osum_at(&{o}, {mc}[{c} - 1]);",
                 f"    const sf_v16 {mv} = SF_SET1({mc}[{c} - 1]);", "    " + gfac] \
            + ["    " + ln for ln in vectors(str(nf * ch), str(n64), True)] \
            + [f"    sf_osum_flush(&{o});", "    " + cmax, "}"]
    loop += ["#else"]
    # the exponentials left (from the last whole chunk's values past those the part chunk took),
    # each chunk's part at that chunk's max
    tail = ["#if defined(SF_AVX512_TILES)",
            f"for (long {c} = {nf}; {c} < {nch}; {c}++) {mc}[{c}] = {m};",
            f"for (long {jb} = {n64 - ch}; {jb} < {n}; {jb} = ({jb} / {ch} + 1) * {ch}) sf_oexp(&{o}, {arr} + {jb}, "
            f"{mc}[{jb} / {ch}], sf_min(({jb} / {ch} + 1) * {ch}, {n}) - {jb}, {at(pf, jb)}, {far}, {at(pf2, jb)}, "
            f"{at(xs, jb)}, {K});",
            f"{total} += sf_osum_total(&{o}, {sq});",
            "#else", L[call].strip(), "#endif"]
    k.lines = L[:h] + hoist + [ind + ln for ln in loop] + L[h:e + 1] + [f"{ind}#endif"] + L[e + 1:rest_end + 1] \
        + [ind + ln for ln in tail] + L[call + 1:]
    k.use_helper("sf_osum")
    return mc, m, nch, fac, c


def pend_lines(piped: tuple, pend: str, literal: str) -> list:
    """The pending row's ``sf_pend`` assignment (``literal``, its ``g`` 0) after a row that
    :func:`pipeline_max_pass` rewrote (``piped``, what it returned): under AVX-512 the chunk
    factors e^(chunk max - row max) / sum first, then ``g`` set to them."""
    mc, m, nch, fac, c = piped
    r = re.fullmatch(r"\(sf_pend\)\{(.*), (\w+), 0, 0\}", literal)
    if r is None:
        raise InternalError(f"a pending row literal of another form: {literal}")
    rnorm = r.group(2)
    return ["#if defined(SF_AVX512_TILES)",
            f"for (long {c} = 0; {c} < {nch}; {c}++) {fac}[{c}] = {mc}[{c}] == {m} ? {rnorm} : expf({mc}[{c}] - {m}) * {rnorm};",
            f"{pend} = (sf_pend){{{r.group(1)}, {rnorm}, 0, {fac}}};", "#else", f"{pend} = {literal};", "#endif"]


def factors_declaration(piped: tuple) -> list:
    """The chunk factors' array, declared before the row loop (the last row's drain after the loop
    reads it)."""
    _, _, nch, fac, _ = piped
    return ["#if defined(SF_AVX512_TILES)", f"float {fac}[{nch}];", "#endif"]
