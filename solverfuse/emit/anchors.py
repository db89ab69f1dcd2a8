"""Ops that read materialised inputs (cost rule: their inputs always come from global memory):
anchors (MatMul/Gemm/Conv), windows (MaxPool/AveragePool/LRN) and Gather.

Each has a per-element form for :func:`solverfuse.emit.lowering.code_for_op` (an inner loop: a dot
product, a window, an index lookup); anchors also have ``TILES``: a row of the output (a Conv's
output plane, :func:`tile_rank`) accumulated in a stack array with bounds-free, vectorisable inner
loops, used when a pass runs over the anchor's own shape -- the fused-epilogue case. The fast form
of those tiles is register-blocked (:func:`conv_blocking`, :func:`matmul_blocking`): several output
channels/rows x 32 positions of accumulators stay in vector registers through the whole reduction,
in helper functions shared by all kernels of a program (``sf_conv_tile<mb>``, ``sf_mm_tile<mb>``);
the epilogue then reads the block row by row. Weights are packed once at load: Conv filters by
output-channel block, MatMul/Gemm B (transposed linear-layer weights too) in 32-column panels; a
computed B (attention) is packed per run. One-row/one-channel tiles (GEMV, depthwise conv) are
GNU-vector loops. Pooling windows (MaxPool/AveragePool) get plane tiles too (:func:`tile_pool`:
per tap one bounds-free loop). Instrumented (counter) builds keep the plain tiles.

>>> window_geometry({"pads": [1, 0, 2, 1]}, [5, 5], [3, 3], [5, 3])
([1, 1], [1, 1], [1, 0])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import EmitError
from ..ops import numel
from .cexpr import attr_str as _attr_str
from .cexpr import bmap, linear as _linear, lit as _lit
from .ctext import CHUNK, CM_CHANNELS, CM_POSITIONS

def _mm_operands(k, node, full):
    """(A index, B index) functions of k for MatMul at full (batch..., i, j) output index."""
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    a2 = a if len(a) > 1 else (1,) + a
    b2 = b if len(b) > 1 else b + (1,)
    batch = full[:-2]
    oshape = tuple(max(x, y) for x, y in zip((1,) * (len(batch) - len(a2[:-2])) + a2[:-2],
                                              (1,) * (len(batch) - len(b2[:-2])) + b2[:-2]))
    ab, bb = bmap(batch, oshape, a2[:-2]), bmap(batch, oshape, b2[:-2])

    def ai(kk):
        return ab + ((full[-2], kk) if len(a) > 1 else (kk,))

    def bi(kk):
        return bb + ((kk, full[-1]) if len(b) > 1 else (kk,))
    return ai, bi, a2[-1]


def _matmul(k, node, pos, idx):
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    full = tuple(idx)
    if len(a) == 1:
        full = full[:-1] + ("0",) + full[-1:]
    if len(b) == 1:
        full = full + ("0",)
    ai, bi, K = _mm_operands(k, node, full)
    ct = k.ct(node.outputs[0])
    acc, kk = k.fresh("acc"), k.fresh("k")
    k.line(f"{ct} {acc} = 0;")
    with k.block(f"for (long {kk} = 0; {kk} < {K}; {kk}++)"):
        k.line(f"{acc} += {k.value(node.inputs[0], ai(kk))} * {k.value(node.inputs[1], bi(kk))};")
    return acc


def _gemm_idx(node, i, j, kk):
    at = node.attributes
    return ((kk, i) if at.get("transA", 0) else (i, kk)), ((j, kk) if at.get("transB", 0) else (kk, j))


def _gemm_k(k, node):
    a = k.shape(node.inputs[0])
    return a[0] if node.attributes.get("transA", 0) else a[1]


def _gemm_epilogue(k, node, acc, i, j):
    at, ct = node.attributes, k.ct(node.outputs[0])
    expr = f"{_lit(at.get('alpha', 1.0), ct)} * {acc}"
    if len(node.inputs) > 2 and node.inputs[2]:
        c = k.value(node.inputs[2], bmap((i, j), k.shape(node.outputs[0]), k.shape(node.inputs[2])))
        expr += f" + {_lit(at.get('beta', 1.0), ct)} * {c}"
    return expr


def _gemm(k, node, pos, idx):
    i, j = idx
    ct = k.ct(node.outputs[0])
    acc, kk = k.fresh("acc"), k.fresh("k")
    k.line(f"{ct} {acc} = 0;")
    ia, ib = _gemm_idx(node, i, j, kk)
    with k.block(f"for (long {kk} = 0; {kk} < {_gemm_k(k, node)}; {kk}++)"):
        k.line(f"{acc} += {k.value(node.inputs[0], ia)} * {k.value(node.inputs[1], ib)};")
    return _gemm_epilogue(k, node, acc, i, j)


def window_geometry(attrs: dict, in_sp: Sequence[int], kernel: Sequence[int], out_sp: Sequence[int]):
    """(strides, dilations, pads_begin) of a Conv/pool, resolving ``auto_pad``.

    >>> window_geometry({"auto_pad": "SAME_UPPER", "strides": [2]}, [7], [3], [4])
    ([2], [1], [1])
    """
    n = len(in_sp)
    st = list(attrs.get("strides", [1] * n))
    dil = list(attrs.get("dilations", [1] * n))
    auto = _attr_str(attrs.get("auto_pad"), "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin = []
        for i in range(n):
            total = max(0, (out_sp[i] - 1) * st[i] + (kernel[i] - 1) * dil[i] + 1 - in_sp[i])
            begin.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
        return st, dil, begin
    if auto == "VALID":
        return st, dil, [0] * n
    return st, dil, list(attrs.get("pads", [0] * (2 * n)))[:n]


def _conv_geometry(k, node):
    x, w, out = (k.shape(t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    kernel = list(node.attributes.get("kernel_shape", w[2:]))
    st, dil, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    group = node.attributes.get("group", 1)
    return x, w, out, kernel, st, dil, pb, group


def _conv(k, node, pos, idx):
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    ct = k.ct(node.outputs[0])
    cg, mg = w[1], out[1] // group
    n, m, osp = idx[0], idx[1], idx[2:]
    acc, c = k.fresh("acc"), k.fresh("c")
    bias = len(node.inputs) > 2 and node.inputs[2]
    k.line(f"{ct} {acc} = {k.value(node.inputs[2], (m,)) if bias else _lit(0, ct)};")
    ch = f"({m} / {mg}) * {cg} + {c}" if group > 1 else c
    with k.block(f"for (long {c} = 0; {c} < {cg}; {c}++)"):
        kv = [k.fresh("r") for _ in kernel]
        pos_ = [k.fresh("p") for _ in kernel]
        for d, (r, p) in enumerate(zip(kv, pos_)):
            k.open(f"for (long {r} = 0; {r} < {kernel[d]}; {r}++)")
            k.line(f"const long {p} = {osp[d]}*{st[d]} - {pb[d]} + {r}*{dil[d]};")
            k.line(f"if ({p} < 0 || {p} >= {x[2 + d]}) continue;")
        xv = k.value(node.inputs[0], (n, ch) + tuple(pos_))
        wv = k.value(node.inputs[1], (m, c) + tuple(kv))
        k.line(f"{acc} += {xv} * {wv};")
        for _ in kv:
            k.close()
    return acc


# ---- tiles for anchors (fused epilogue fast path): set the tile of t at `outer`
#: Largest tile kept on the stack (elements).
MAX_TILE = 16384


def tile_rank(k, node) -> int:
    """How many trailing output dims an anchor's tile spans: a Conv or pooling tiles its whole
    output plane when it fits (the per-tap loop overhead is paid once per plane), everything else
    one row."""
    if node.op not in ("Conv", "MaxPool", "AveragePool"):
        return 1
    out = k.shape(node.outputs[0])
    d = len(out) - 2
    while d > 1 and numel(out[-d:]) > MAX_TILE:
        d -= 1
    return d


def _tile_open(k, t, d=1):
    ct, n = k.ct(t), numel(k.shape(t)[-d:])
    arr, j = k.fresh("T"), k.fresh("j")
    k.line(f"{ct} {arr}[{n}];")
    k.line(f"for (long {j} = 0; {j} < {n}; {j}++) {arr}[{j}] = 0;")
    return arr, ct, n


def _tile_done(k, t, outer, arr, d=1):
    """From here on, ``t`` at (outer..., j...) is ``arr[linear(j...)]`` (last d dims)."""
    k.set_tile(t, tuple("0" if n == 1 else k.index(i) for i, n in zip(outer, k.shape(t)[:-d])), arr, d)


def tile_matmul(k, t, outer, d=1):
    node = k.graph.index.node[k.graph.index.producer[t]]
    arr, ct, n = _tile_open(k, t)
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    if len(a) < 2 or len(b) < 2:
        j = k.fresh("j")
        with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
            k.line(f"{arr}[{j}] = {_matmul(k, node, 0, tuple(outer) + (j,))};")
        return _tile_done(k, t, outer, arr)
    kk, j = k.fresh("k"), k.fresh("j")
    ai, bi, K = _mm_operands(k, node, tuple(outer) + (j,))
    with k.block(f"for (long {kk} = 0; {kk} < {K}; {kk}++)"):
        av = k.value(node.inputs[0], ai(kk))
        with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
            k.line(f"{arr}[{j}] += {av} * {k.value(node.inputs[1], bi(kk))};")
    _tile_done(k, t, outer, arr)


def tile_gemm(k, t, outer, d=1):
    node = k.graph.index.node[k.graph.index.producer[t]]
    arr, ct, n = _tile_open(k, t)
    i = outer[0]
    kk, j = k.fresh("k"), k.fresh("j")
    at = node.attributes
    if at.get("transB", 0) and not at.get("transA", 0):
        # B is [N, K] (a linear layer's weights): a contiguous dot product per output column
        # (the axpy form below would stride through B by K floats per element)
        with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
            acc = k.fresh("acc")
            k.line(f"{ct} {acc} = 0;")
            with k.loops([_gemm_k(k, node)], simd=f"reduction(+:{acc})") as (r,):
                ia, ib = _gemm_idx(node, i, j, r)
                k.line(f"{acc} += {k.value(node.inputs[0], ia)} * {k.value(node.inputs[1], ib)};")
            k.line(f"{arr}[{j}] = {acc};")
    else:
        ia, ib = _gemm_idx(node, i, j, kk)
        with k.block(f"for (long {kk} = 0; {kk} < {_gemm_k(k, node)}; {kk}++)"):
            av = k.value(node.inputs[0], ia)
            with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
                k.line(f"{arr}[{j}] += {av} * {k.value(node.inputs[1], ib)};")
    with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
        k.line(f"{arr}[{j}] = {_gemm_epilogue(k, node, f'{arr}[{j}]', i, j)};")
    _tile_done(k, t, outer, arr)


def tile_conv(k, t, outer, d=1):
    """The last ``d`` spatial dims of Conv output at (n, m, outer spatial...): per (channel,
    kernel tap) one bounds-free loop nest over the valid output positions (contiguous when the
    stride is 1), so the checks are paid per tap, not per element."""
    node = k.graph.index.node[k.graph.index.producer[t]]
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    arr, ct, n = _tile_open(k, t, d)
    cg, mg = w[1], out[1] // group
    nn, m, osp = outer[0], outer[1], outer[2:]
    nsp, fixed = len(kernel), len(kernel) - d
    if len(node.inputs) > 2 and node.inputs[2]:
        j = k.fresh("j")
        bv = k.value(node.inputs[2], (m,))
        k.line(f"for (long {j} = 0; {j} < {n}; {j}++) {arr}[{j}] = {bv};")
    c = k.fresh("c")
    ch = f"({m} / {mg}) * {cg} + {c}" if group > 1 else c
    with k.block(f"for (long {c} = 0; {c} < {cg}; {c}++)"):
        # a kernel extent of 1 (1x1 convolutions) gets no loop: its tap index is the literal 0
        kv = ["0" if kernel[e] == 1 else k.fresh("r") for e in range(nsp)]
        src = []
        opened = []

        def open_(header):
            k.open(header)
            opened.append(header)

        def term(v, factor):
            return "" if v == "0" or factor == 0 else f" + {v}" if factor == 1 else f" + {v}*{factor}"
        for e in range(fixed):
            p = k.fresh("p")
            if kv[e] != "0":
                open_(f"for (long {kv[e]} = 0; {kv[e]} < {kernel[e]}; {kv[e]}++)")
            k.line(f"const long {p} = {osp[e]}*{st[e]} - {pb[e]}{term(kv[e], dil[e])};")
            k.line(f"if ({p} < 0 || {p} >= {x[2 + e]}) continue;")
            src.append(p)
        ranges = []
        for e in range(fixed, nsp):
            r, s, dl, p, size = kv[e], st[e], dil[e], pb[e], x[2 + e]
            if r == "0":  # the valid output range is known now
                ranges.append((str(max(0, -(-p // s))), str(min(out[2 + e], (size - 1 + p) // s + 1))))
                continue
            open_(f"for (long {r} = 0; {r} < {kernel[e]}; {r}++)")
            lo, hi = k.fresh("lo"), k.fresh("hi")
            k.line(f"const long {lo} = sf_max(0, sf_cdiv({p} - {r}*{dl}, {s}));")
            k.line(f"const long {hi} = sf_min({out[2 + e]}, sf_fdiv({size - 1 + p} - {r}*{dl}, {s}) + 1);")
            ranges.append((lo, hi))
        wv = k.value(node.inputs[1], (m, c) + tuple(kv))
        js = []
        for e, (lo, hi) in zip(range(fixed, nsp), ranges):
            j = k.fresh("j")
            open_(f"for (long {j} = {lo}; {j} < {hi}; {j}++)")
            js.append(j)
            shift = f"{j}*{st[e]}" if st[e] != 1 else j
            src.append(f"{shift}{f' - {pb[e]}' if pb[e] else ''}{term(kv[e], dil[e])}")
        xv = k.value(node.inputs[0], (nn, ch) + tuple(src))
        k.line(f"{arr}[{_linear(out[-d:], js)}] += {xv} * {wv};")
        for _ in opened:
            k.close()
    _tile_done(k, t, outer, arr, d)


def _pool_counts(node, x, out, e: int, inclusive: bool) -> list[int]:
    """Per output position along spatial dim ``e``: how many window taps fall inside the input
    (``inclusive``: inside the padded input, AveragePool's count_include_pad; with ceil_mode a
    window may run past the end padding too)."""
    kernel = list(node.attributes["kernel_shape"])
    st, dil, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    pads = list(node.attributes.get("pads", [0] * (2 * len(kernel))))
    lo = -pb[e] if inclusive else 0
    hi = x[2 + e] + (pads[len(kernel) + e] if inclusive and len(pads) > e else 0)
    return [sum(1 for r in range(kernel[e]) if lo <= o * st[e] - pb[e] + r * dil[e] < hi) for o in range(out[2 + e])]


def tile_pool(k, t, outer, d=1):
    """The last ``d`` spatial dims of a MaxPool/AveragePool output at (n, c, outer spatial...), as
    :func:`tile_conv`: per kernel tap one bounds-free loop nest over the output positions whose
    tap is inside the input, so no per-element bounds checks -- a plane in two 1-D passes
    (:func:`_pool_separable`); an average divides by the per-position tap counts (static tables). A MaxPool with a window wholly in the padding
    (output 0) or its Indices output keeps the per-element form."""
    node = k.graph.index.node[k.graph.index.producer[t]]
    x, out = k.shape(node.inputs[0]), k.shape(t)
    kernel = list(node.attributes["kernel_shape"])
    st, dil, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    nsp, fixed = len(kernel), len(kernel) - d
    ct = k.ct(t)
    avg = node.op == "AveragePool"
    counts = [_pool_counts(node, x, out, e, avg and bool(node.attributes.get("count_include_pad", 0)))
              for e in range(nsp)]
    if node.outputs.index(t) != 0 or (not avg and any(0 in c for c in counts)) or ct not in ("float", "double"):
        arr, ct, n = _tile_open(k, t, d)
        js = [k.fresh("j") for _ in range(d)]
        for j, size in zip(js, out[-d:]):
            k.open(f"for (long {j} = 0; {j} < {size}; {j}++)")
        v = SPECIAL_ANCHORS[node.op](k, node, node.outputs.index(t), tuple(outer) + tuple(js))
        k.line(f"{arr}[{_linear(out[-d:], js)}] = {v};")
        for _ in js:
            k.close()
        return _tile_done(k, t, outer, arr, d)
    n = numel(out[-d:])
    arr, j0 = k.fresh("T"), k.fresh("j")
    k.line(f"{ct} {arr}[{n}];")
    nn, c, osp = outer[0], outer[1], outer[2:]
    if d == 2 == nsp and ct == "float" and not k.counters and list(dil) == [1, 1]:
        # a whole plane: sf_pool2d (rows of the window first, contiguous; then columns in L1)
        vw = max(pb[1] + x[3], (out[3] - 1) * st[1] + kernel[1])
        v = k.fresh("V")
        k.line(f"float {v}[{vw}];")
        k.use_helper("sf_pool2d")
        plane = _linear(x, (nn, c, "0", "0"))
        k.line(f"sf_pool2d({arr}, {k.ptr(node.inputs[0], 'r')} + {plane}, {x[2]}, {x[3]}, {out[2]}, {out[3]}, "
               f"{kernel[0]}, {kernel[1]}, {st[0]}, {st[1]}, {pb[0]}, {pb[1]}, {int(avg)}, {v}, {vw});")
        if avg:
            _pool_divide(k, arr, ct, out, counts, osp, nsp, fixed)
        return _tile_done(k, t, outer, arr, d)
    k.line(f"for (long {j0} = 0; {j0} < {n}; {j0}++) {arr}[{j0}] = {'0' if avg else '-INFINITY'};")
    # measured: 24x112x112 MaxPool 3x3/2 0.105 -> 0.087 ms (ORT 0.086); 96x109x109 no change;
    # 136x28x28 AveragePool 0.06 -> 0.11 ms (14-wide rows): only for rows of 32+ outputs
    separable = d == 2 and out[-1] >= 32 and x[-2] * out[-1] <= MAX_TILE
    if separable:
        rows = k.fresh("R")
        k.line(f"{ct} {rows}[{x[-2] * out[-1]}];")
    opened = 0
    src = []
    for e in range(fixed):
        r, p = k.fresh("r"), k.fresh("p")
        k.open(f"for (long {r} = 0; {r} < {kernel[e]}; {r}++)")
        opened += 1
        k.line(f"const long {p} = {osp[e]}*{st[e]} - {pb[e]} + {r}*{dil[e]};")
        k.line(f"if ({p} < 0 || {p} >= {x[2 + e]}) continue;")
        src.append(p)
    if separable:
        _pool_separable(k, node, (nn, c) + tuple(src), rows, arr, (x, out, kernel, st, dil, pb), avg)
        for _ in range(opened):
            k.close()
        opened = 0
    ranges = []
    for e in range(fixed, nsp) if not separable else ():
        r, lo, hi = k.fresh("r"), k.fresh("lo"), k.fresh("hi")
        k.open(f"for (long {r} = 0; {r} < {kernel[e]}; {r}++)")
        opened += 1
        k.line(f"const long {lo} = sf_max(0, sf_cdiv({pb[e]} - {r}*{dil[e]}, {st[e]}));")
        k.line(f"const long {hi} = sf_min({out[2 + e]}, sf_fdiv({x[2 + e] - 1 + pb[e]} - {r}*{dil[e]}, {st[e]}) + 1);")
        ranges.append((r, lo, hi))
    if not separable:
        js = []
        for e, (r, lo, hi) in zip(range(fixed, nsp), ranges):
            j = k.fresh("j")
            k.open(f"for (long {j} = {lo}; {j} < {hi}; {j}++)")
            opened += 1
            js.append(j)
            src.append(f"{j}*{st[e]} - {pb[e]} + {r}*{dil[e]}")
        xv = k.value(node.inputs[0], (nn, c) + tuple(src))
        cell = f"{arr}[{_linear(out[-d:], js)}]"
        k.line(f"{cell} += {xv};" if avg else f"{cell} = {xv} > {cell} ? {xv} : {cell};")
        for _ in range(opened):
            k.close()
    if avg:
        _pool_divide(k, arr, ct, out, counts, osp, nsp, fixed)
    _tile_done(k, t, outer, arr, d)


def _pool_divide(k, arr: str, ct: str, out, counts, osp, nsp: int, fixed: int) -> None:
    """An AveragePool tile's window sums divided by their tap counts: the divisor of a position
    is the product of its per-dim tap counts (static tables)."""
    d = nsp - fixed
    tabs = []
    for e in range(nsp):
        tab = k.fresh("cnt")
        k.line(f"static const int {tab}[{out[2 + e]}] = {{{', '.join(map(str, counts[e]))}}};")
        tabs.append(tab)
    fixed_div = " * ".join(f"{tabs[e]}[{osp[e]}]" for e in range(fixed)) or "1"
    js = [k.fresh("j") for _ in range(d)]
    for j, size in zip(js, out[-d:]):
        k.open(f"for (long {j} = 0; {j} < {size}; {j}++)")
    div = f"({ct})(" + " * ".join([fixed_div] + [f"{tabs[e]}[{j}]" for e, j in zip(range(fixed, nsp), js)]) + ")"
    cell = f"{arr}[{_linear(out[-d:], js)}]"
    k.line(f"{cell} = ({div}) != 0 ? {cell} / ({div}) : 0;")
    for _ in js:
        k.close()


def _pool_separable(k, node, prefix: tuple, rows: str, arr: str, geom, avg: bool) -> None:
    """A 2-D window in two 1-D passes (max and sum are separable): per input row, the window
    along the columns into ``rows[H][OW]``; then per output row, the window along the rows of
    that. 3 + 3 taps per output instead of 3 x 3 for a 3x3 window; each pass one bounds-free
    loop per tap over the positions whose tap is inside the input."""
    x, out, kernel, st, dil, pb = geom
    hh, ow = x[-2], out[-1]
    ct = k.ct(node.outputs[0])

    def update(cell, v):
        k.line(f"{cell} += {v};" if avg else f"{cell} = {v} > {cell} ? {v} : {cell};")
    p, j = k.fresh("p"), k.fresh("j")
    with k.block(f"for (long {p} = 0; {p} < {hh}; {p}++)"):
        k.line(f"for (long {j} = 0; {j} < {ow}; {j}++) {rows}[{p}*{ow} + {j}] = {'0' if avg else '-INFINITY'};")
        r, lo, hi = k.fresh("r"), k.fresh("lo"), k.fresh("hi")
        with k.block(f"for (long {r} = 0; {r} < {kernel[-1]}; {r}++)"):
            k.line(f"const long {lo} = sf_max(0, sf_cdiv({pb[-1]} - {r}*{dil[-1]}, {st[-1]}));")
            k.line(f"const long {hi} = sf_min({ow}, sf_fdiv({x[-1] - 1 + pb[-1]} - {r}*{dil[-1]}, {st[-1]}) + 1);")
            with k.block(f"for (long {j} = {lo}; {j} < {hi}; {j}++)"):
                update(f"{rows}[{p}*{ow} + {j}]", k.value(node.inputs[0], prefix + (p, f"{j}*{st[-1]} - {pb[-1]} + {r}*{dil[-1]}")))
    r, lo, hi, o, q = (k.fresh(v) for v in ("r", "lo", "hi", "o", "q"))
    with k.block(f"for (long {r} = 0; {r} < {kernel[-2]}; {r}++)"):
        k.line(f"const long {lo} = sf_max(0, sf_cdiv({pb[-2]} - {r}*{dil[-2]}, {st[-2]}));")
        k.line(f"const long {hi} = sf_min({out[-2]}, sf_fdiv({hh - 1 + pb[-2]} - {r}*{dil[-2]}, {st[-2]}) + 1);")
        with k.block(f"for (long {o} = {lo}; {o} < {hi}; {o}++)"):
            k.line(f"const {ct} *{q} = {rows} + ({o}*{st[-2]} - {pb[-2]} + {r}*{dil[-2]})*{ow};")
            j = k.fresh("j")
            with k.block(f"for (long {j} = 0; {j} < {ow}; {j}++)"):
                update(f"{arr}[{o}*{ow} + {j}]", f"{q}[{j}]")


TILES = {"MatMul": tile_matmul, "Gemm": tile_gemm, "Conv": tile_conv, "MaxPool": tile_pool, "AveragePool": tile_pool}

@dataclass(frozen=True)
class ConvBlocking:
    """How a register-blocked Conv tile is laid out (see :func:`conv_blocking`)."""
    mb: int       # output channels per tile (accumulators kept in registers for each)
    rows: int     # output rows per tile (a band; the tile loop runs over bands)
    hq: int       # rows of one phase plane of the input copy
    wq: int       # its width = the tile's row pitch (>= output width: junk columns are dropped)
    chunk: int    # output positions per accumulator chunk
    mg: int = 1   # output channels per group
    blocks: int = 1  # blocks of mb channels per group (the last may be part padding)
    cols: int = 0  # column-shifted copies (one per kernel column; wq = output width), 0: phase-split

    @property
    def cplane(self) -> int:
        """Floats of one input channel's copy (all its phase planes / column copies)."""
        return (self.cols or self.s1) * self.s0 * self.hq * self.wq

    s0: int = 1   # the strides
    s1: int = 1
    local: int = 0  # floats of a per-tile copy of the block's one input channel (0: a copy of all)

    @property
    def padded(self) -> bool:
        """Whether the last block of each group runs past the group's channels (zero weights)."""
        return self.blocks * self.mb != self.mg


def conv_blocking(k, node):
    """The register-blocked Conv tile for this node, or None (then the plain tile is used).

    The plain tile accumulates one output channel's plane in memory: every multiply-add loads
    and stores the tile. The blocked tile keeps ``mb`` output channels x ``chunk`` output positions
    of accumulators in registers through the whole (input channel, tap) loop, so each input value
    loaded feeds ``mb`` multiply-adds. The input is first copied zero-padded and split into its
    stride phases (plane (ph, pw) holds padded rows ph, ph+s0, ... and columns pw, pw+s1, ...): a
    tap then reads one phase plane at stride 1, so a band of output rows is one contiguous run of
    positions with row pitch ``wq`` (the few columns past the output width are computed and
    dropped) and every chunk is a contiguous vector load -- no bounds checks, no strided loads.
    Only 2-D float convolutions; ``mb`` is the largest of 8, 4, 2, 1 dividing the output channels
    per group -- or 8 when padding the group's channels to a multiple of 8 adds at most 1/8 more
    work (the last block's extra channels get zero weights and no epilogue: ShuffleNet's 68
    channels per group ran at 54 GFLOP/s in blocks of 4, 78 in blocks of 8) -- so a depthwise
    convolution (one output channel per group) takes the blocked tile with ``mb = 1``: its taps
    run on contiguous vectors of the padded copy, with no bounds checks.
    On small planes the phase-split copy's junk columns cost up to 30% (13x13 3x3: a row pitch of
    15 for 13 outputs), and a strided depthwise conv read every input at stride 2: those take
    column-shifted copies instead (``cols``: one copy per kernel column, shifted by the column's
    offset and subsampled by the stride, row pitch = output width; tap (r, kw) reads copy kw).
    A depthwise conv copies its one input channel per tile into a stack buffer (``local``: in L1
    when it is used) rather than the whole input in a pass of its own. With threads, the rows are
    split into more bands when the tiles would not divide evenly among the threads.
    Instrumented builds keep the plain tile (the counters then see the reads the cost model
    describes, not the copy)."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    if k.counters or len(kernel) != 2 or k.ct(node.outputs[0]) != "float":
        return None
    mg = out[1] // group
    mb = next(b for b in (8, 4, 2, 1) if mg % b == 0)  # a block stays in one group
    if mb < 8 and mg > 8 and 8 * _round_up(mg, 8) <= 9 * mg:
        mb = 8
    hp, wp = (max(pb[e] + x[2 + e], (out[2 + e] - 1) * st[e] + (kernel[e] - 1) * dil[e] + 1) for e in range(2))
    hq, wq = -(-hp // st[0]), -(-wp // st[1])
    cols = 0
    if kernel[1] > 1 and ((mb == 1 and st[1] != 1) or (mb > 1 and 12 * wq > 13 * out[3])):
        # small planes (13x13 3x3: 15 columns computed per 13) and strided depthwise convs
        cols, wq = kernel[1], out[3]
    fits = [r for r in range(1, out[2] + 1) if out[2] % r == 0
            and (mb * _round_up(r * wq, CHUNK) <= MAX_TILE or r == 1)]
    tiles = x[0] * group * -(-mg // mb)  # tiles per band of rows
    # the threads share the (batch, block, band) tiles: split the rows into more bands when the
    # tiles would not divide evenly among them (3 tiles on 2 threads: one waits a third of the time)
    even = [r for r in fits if (tiles * (out[2] // r)) % k.threads == 0 or tiles * (out[2] // r) >= 8 * k.threads]
    rows = max(even or fits)
    span = rows * wq
    if mg % CM_CHANNELS == 0 and out[1] >= 4 * CM_CHANNELS and rows == out[2] and CM_POSITIONS <= span <= 256 \
            and wq == out[3] and span < 0.85 * _round_up(span, 16) and CM_CHANNELS * span <= MAX_TILE:
        # a small plane that fills 16-lane vectors of positions badly (7x7: 49 positions in 4
        # masked vectors): the channel-vectorised tile (sf_conv_tile32), at least 4 tiles
        mb = CM_CHANNELS
    blk = ConvBlocking(mb, rows, hq, wq, CHUNK, mg, -(-mg // mb), cols, st[0], st[1])
    if w[1] == 1 and group > 1 and rows == out[2]:
        # depthwise: each tile copies its one input channel into L1 just before using it (a
        # separate copy pass of the whole input cost as much as the convolution)
        local = blk.cplane + max(0, out[2] * wq + _max_tap(blk, kernel, st, dil) - blk.cplane)
        if local <= MAX_TILE:
            blk = ConvBlocking(mb, rows, hq, wq, CHUNK, mg, -(-mg // mb), cols, st[0], st[1], local)
    return blk


def _max_tap(blk, kernel, st, dil) -> int:
    return max(_tap_offset(blk, st, dil, r0, r1) for r0 in range(kernel[0]) for r1 in range(kernel[1]))


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _tap_offset(blk: ConvBlocking, st, dil, r0: int, r1: int) -> int:
    """Offset of tap (r0, r1) from the channel's start: its phase plane (or row phase and column
    copy), then row and column."""
    a, b = r0 * dil[0], r1 * dil[1]
    if blk.cols:
        return ((a % st[0]) * blk.cols + r1) * blk.hq * blk.wq + (a // st[0]) * blk.wq
    return ((a % st[0]) * st[1] + b % st[1]) * blk.hq * blk.wq + (a // st[0]) * blk.wq + b // st[1]


def conv_input_view(k, node, blk: ConvBlocking) -> str:
    """Before the tile loops: the Conv input as the tile reads it. A 1x1 convolution at stride 1
    without padding reads its input in place (its one phase plane is the input plane; the tile
    masks its last partial chunk, so it reads nothing past the plane). Otherwise a
    zero-padded, phase-split copy in kernel-local scratch (``[N][C][s0][s1][hq][wq]``), with
    zeroed slack after it for the last band's taps, which run past the last plane; the copy is
    shared out among the threads (:func:`_copy_call`)."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    if kernel == [1, 1] and st == [1, 1] and pb == [0, 0]:
        k.line("/* a 1x1 convolution reads its input in place */")
        return k.ptr(node.inputs[0], "r")
    if blk.local:
        k.line("/* each tile copies its input channel (tile_conv_blocked) */")
        return k.ptr(node.inputs[0], "r")
    size = x[0] * x[1] * blk.cplane
    last = out[2] * blk.wq - 1 + _max_tap(blk, kernel, st, dil)  # the last band's last position (the tiles read no further)
    slack = max(0, last + 1 - blk.cplane)
    what = "column-shifted" if blk.cols else "stride-phase-split"
    arr = k.alloc("float", size + slack, f"zero-padded, {what} copy of a Conv input")
    if slack:
        k.line(f"for (long q = {size}; q < {size + slack}; q++) {arr}[q] = 0;")
    _copy_call(k, arr, k.ptr(node.inputs[0], "r"), x, blk, pb, dil)
    return arr


def _copy_call(k, dst: str, src: str, x, blk: ConvBlocking, pb, dil) -> None:
    """``sf_conv_copy`` (or ``sf_conv_copy_cols``) of all N*C planes; with threads, each thread
    copies a contiguous run of planes (a serial copy took 10-20% of a 3x3 conv's time at 2
    threads on 13x13 planes)."""
    nc = x[0] * x[1]
    fn = "sf_conv_copy_cols" if blk.cols else "sf_conv_copy"
    geom = f"{x[2]}, {x[3]}, {blk.s0}, {blk.s1}, {blk.hq}, {blk.wq}, {pb[0]}, {pb[1]}"
    if blk.cols:
        geom += f", {blk.cols}, {dil[1]}"
    k.use_helper(fn)
    if k.threads == 1 or nc < 2 * k.threads:
        k.line(f"{fn}({dst}, {src}, {nc}, {geom});")
        return
    step = -(-nc // k.threads)
    c = k.fresh("c")
    k.line(f"#pragma omp parallel for schedule(static) num_threads({k.threads})")
    with k.block(f"for (long {c} = 0; {c} < {nc}; {c} += {step})"):
        k.line(f"{fn}({dst} + {c}*{blk.cplane}, {src} + {c}*{x[2] * x[3]}, sf_min({step}, {nc} - {c}), {geom});")


def conv_weight_view(k, node, blk: ConvBlocking) -> str:
    """The Conv weights repacked as ``[groups][blocks][C][taps][mb]`` (zero past a group's
    channels), so the mb weights a tile step
    multiplies are one cache line (read in place, rows of C*taps floats apart -- 4 KiB for
    C=1024 -- they fall into one L1 set and evict each other: measured 10x slower on ResNet-50's
    last stage). Constant weights are packed once per set of constants; computed ones per run."""
    wt = node.inputs[1]
    ws = k.shape(wt)
    k.use_helper("sf_conv_pack")
    groups = ws[0] // blk.mg
    args = f"{groups}, {blk.mg}, {ws[1]}, {ws[2] * ws[3]}, {blk.mb}"
    size = groups * blk.blocks * blk.mb * numel(ws[1:])
    if k.is_constant(wt):
        return k.packed("float", size, "Conv weights repacked by output-channel block",
                        f"sf_conv_pack({{dst}}, {{w}}, {args});", {"w": wt})
    arr = k.alloc("float", size, "Conv weights repacked by output-channel block")
    k.line(f"sf_conv_pack({arr}, {k.ptr(wt, 'r')}, {args});")
    return arr


def tile_conv_blocked(k, node, n, m0, r0, src, blk: ConvBlocking, wsrc: str, mi: str, valid: str = "") -> str:
    """Output channels m0..m0+mb-1 x output rows r0..r0+rows-1 of Conv output at batch ``n`` into
    a stack array ``T[mb][rows * wq]`` (row r of channel a at ``T[a] + r*wq``); its name.
    ``mi`` is the block's number (its packed weights), ``valid`` the count of real channels in
    it when the block may be part padding (:attr:`ConvBlocking.padded`)."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    span = blk.rows * blk.wq  # the tile masks the positions past its last whole chunk
    mb = blk.mb
    arr, off, a, j = k.fresh("T"), k.fresh("off"), k.fresh("a"), k.fresh("j")
    taps = kernel[0] * kernel[1]
    cplane = blk.cplane
    offs = [_tap_offset(blk, st, dil, r_0, r_1) for r_0 in range(kernel[0]) for r_1 in range(kernel[1])]
    k.line(f"float {arr}[{mb}][{span}];")
    k.line(f"static const long {off}[{taps}] = {{{', '.join(map(str, offs))}}};")
    # the block's group starts at input channel goff (0 when ungrouped)
    goff = "" if group == 1 or m0 == "0" else f"({m0} / {out[1] // group})*{w[1]} + "
    plane = f"({n}*{x[1]} + {goff}0)*{cplane}" if n != "0" else f"({goff}0)*{cplane}"
    if blk.local:  # copy the one input channel here, then read the copy
        buf = k.fresh("X")
        chan = f"({n}*{x[1]} + {goff}0)*{x[2] * x[3]}" if n != "0" else f"({goff}0)*{x[2] * x[3]}"
        k.line(f"float {buf}[{blk.local}];")
        if blk.local > cplane:
            k.line(f"for (long {j} = {cplane}; {j} < {blk.local}; {j}++) {buf}[{j}] = 0;")
        fn = "sf_conv_copy_cols" if blk.cols else "sf_conv_copy"
        k.use_helper(fn)
        geom = f"{x[2]}, {x[3]}, {blk.s0}, {blk.s1}, {blk.hq}, {blk.wq}, {pb[0]}, {pb[1]}"
        k.line(f"{fn}({buf}, {src} + {chan}, 1, {geom}{f', {blk.cols}, {dil[1]}' if blk.cols else ''});")
        src, plane = buf, "0"
    row0 = "" if r0 == "0" else f" + {r0}*{blk.wq}"
    wrow = f" + {mi}*{w[1] * taps * mb}" if mi != "0" else ""
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    # a bias in a buffer of its own starts the accumulators (no pass over the tile); not for a
    # block that may be part padding (it would read past the last group's bias)
    in_tile = (bias is not None and not valid and k.ct(bias) == "float" and bias not in k.scratch
               and not k.has_tile(bias) and k.graph.index.producer.get(bias) not in k.members)
    bptr = (f"{k.ptr(bias, 'r')} + {m0}" if m0 != "0" else k.ptr(bias, "r")) if in_tile else "0"
    k.use_helper(f"sf_conv_tile{mb}")
    k.line(f"sf_conv_tile{mb}(&{arr}[0][0], {span}, {src} + {plane}{row0}, {cplane}, {wsrc}{wrow}, "
           f"{w[1]}, {taps}, {off}, {bptr});")
    if bias is not None and not in_tile:
        with k.block(f"for (int {a} = 0; {a} < {valid or mb}; {a}++)"):
            bias = k.value(node.inputs[2], (k.index(f"{m0} + {a}"),))
            k.line(f"for (long {j} = 0; {j} < {span}; {j}++) {arr}[{a}][{j}] += {bias};")
    return arr


def matmul_blocking(k, node):
    """``mb`` rows of a MatMul/Gemm output per register-blocked tile, or None (the plain row tile).
    For float A [..., M, K] x B [..., K, N] (weights or a batched operand: attention's QK^T) and
    Gemm with A not transposed (B may be: linear layers), N >= 8, not instrumented: like
    :func:`conv_blocking`, ``mb`` output rows x CHUNK columns of accumulators stay in registers
    through the K loop; ``mb`` is the largest of 8, 4, 2, 1 dividing M whose tile fits 256 KiB."""
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    if k.counters or len(a) < 2 or len(b) < 2 or k.ct(node.outputs[0]) != "float" \
            or k.ct(node.inputs[0]) != "float" or k.ct(node.inputs[1]) != "float":
        return None
    if node.op == "Gemm" and node.attributes.get("transA", 0):
        return None
    n = b[-2] if node.op == "Gemm" and node.attributes.get("transB", 0) else b[-1]
    if n < 8:
        return None
    # the tile T[mb][N rounded up] lives on the stack (of an OpenMP worker too): at most 256 KiB
    return next((m for m in (8, 4, 2, 1) if a[-2] % m == 0 and m * _round_up(n, CHUNK) <= 4 * MAX_TILE), None)


def _mm_kn(k, node) -> tuple:
    """(K, N) of a MatMul/Gemm's B as the tile reads it (a transposed Gemm B is packed [K][N])."""
    b = k.shape(node.inputs[1])
    if node.op == "Gemm" and node.attributes.get("transB", 0):
        return b[1], b[0]
    return b[-2], b[-1]


def matmul_b_view(k, node, mb: int) -> str:
    """B packed as ``[batch][N rounded up / CHUNK][K][CHUNK]``: panels of CHUNK columns, zero
    columns after N, a transposed Gemm B transposed here. A tile's chunk of columns then reads
    one contiguous panel through the K loop (row-major B put its rows N floats apart: one cache
    line per page at N=1024). One-row tiles (``mb`` 1: matrix-vector products) stream B row by
    row instead and get it row-major (one panel of all the columns). Packed once per set of constants when B is a constant (weights),
    else into kernel-local scratch at every run."""
    bt = node.inputs[1]
    kk, n = _mm_kn(k, node)
    nb = numel(k.shape(bt)[:-2])
    n2 = _round_up(n, CHUNK)
    trans = int(node.op == "Gemm" and bool(node.attributes.get("transB", 0)))
    call = f"sf_pack_b({{dst}}, {{b}}, {nb}, {kk}, {n}, {n2}, {trans}, {n2 if mb == 1 else CHUNK});"
    k.use_helper("sf_pack_b")
    what = "MatMul/Gemm B packed in panels of columns"
    if k.is_constant(bt):
        return k.packed("float", nb * kk * n2, what, call, {"b": bt})
    arr = k.alloc("float", nb * kk * n2, what)
    k.line(call.format(dst=arr, b=k.ptr(bt, "r")))
    return arr


def tile_matmul_blocked(k, node, batch, i0, bsrc, mb) -> str:
    """Rows i0..i0+mb-1 of MatMul/Gemm output at ``batch`` into ``T[mb][N rounded up]``, with a
    Gemm's alpha and beta*C applied (the tile is hot); its name."""
    at = node.inputs[0]
    a, b = k.shape(at), k.shape(node.inputs[1])
    kk, n = _mm_kn(k, node)
    n2 = _round_up(n, CHUNK)
    out = k.shape(node.outputs[0])
    arr = k.fresh("T")
    # 64-byte aligned: the tile helpers add into it a whole vector of CHUNK floats at a time;
    # where the stack frame left it 32-byte aligned every access split a cache line and each
    # add's load waited on the previous store (vit_ts's QKV kernels: 1.40 -> 0.98 us)
    k.line(f"float {arr}[{mb}][{n2}] SF_ALIGN64;")
    base = _linear(a, bmap(batch, out[:-2], a[:-2]) + (i0, "0"))
    bb = bmap(batch, out[:-2], b[:-2]) if node.op == "MatMul" else ()
    boff = _linear(b[:-2], bb) if bb else "0"
    bptr = bsrc if boff == "0" else f"{bsrc} + ({boff})*{kk * n2}"
    k.use_helper(f"sf_mm_tile{mb}")
    k.line(f"sf_mm_tile{mb}(&{arr}[0][0], {n2}, {k.ptr(at, 'r')} + {base}, {kk}, {kk}, {bptr});")
    if node.op == "Gemm":
        at_ = node.attributes
        alpha, beta = at_.get("alpha", 1.0), at_.get("beta", 1.0)
        has_c = len(node.inputs) > 2 and node.inputs[2] and beta != 0
        if alpha != 1.0 or has_c:
            r, j = k.fresh("r"), k.fresh("j")
            with k.block(f"for (int {r} = 0; {r} < {mb}; {r}++)"):
                with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
                    i = f"({i0} + {r})" if i0 != "0" else r
                    k.line(f"{arr}[{r}][{j}] = {_gemm_epilogue(k, node, f'{arr}[{r}][{j}]', i, j)};")
    return arr


# ---- windows and gather, per element
def _window_loops(k, node, idx, body):
    """Loop over the valid taps of a pooling window at output ``idx``; body(positions, in_pad)."""
    x, out = k.shape(node.inputs[0]), k.shape(node.outputs[0])
    kernel = list(node.attributes["kernel_shape"])
    st, dil, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    pads = list(node.attributes.get("pads", [0] * (2 * len(kernel))))
    pos_ = []
    inpad = []
    for d in range(len(kernel)):
        r, p = k.fresh("r"), k.fresh("p")
        k.open(f"for (long {r} = 0; {r} < {kernel[d]}; {r}++)")
        k.line(f"const long {p} = {idx[2 + d]}*{st[d]} - {pb[d]} + {r}*{dil[d]};")
        pos_.append(p)
        inpad.append(f"{p} < {x[2 + d] + (pads[len(kernel) + d] if len(pads) > d else 0)}")
    inside = " && ".join(f"{p} >= 0 && {p} < {x[2 + d]}" for d, p in enumerate(pos_))
    body(pos_, inside, " && ".join(inpad))
    for _ in kernel:
        k.close()


def _maxpool(k, node, pos, idx):
    if pos != 0:
        raise EmitError(f"node {node.name!r}: MaxPool's Indices output is not supported by the C emitter")
    ct = k.ct(node.outputs[0])
    m, f = k.fresh("mx"), k.fresh("f")
    k.line(f"{ct} {m} = 0; int {f} = 1;")

    def body(p, inside, _):
        with k.block(f"if ({inside})"):
            v = k.value(node.inputs[0], (idx[0], idx[1]) + tuple(p))
            k.line(f"if ({f} || {v} > {m}) {{ {m} = {v}; {f} = 0; }}")
    _window_loops(k, node, idx, body)
    return m


def _avgpool(k, node, pos, idx):
    ct = k.ct(node.outputs[0])
    s, n = k.fresh("sum"), k.fresh("cnt")
    k.line(f"{ct} {s} = 0; long {n} = 0;")
    include = node.attributes.get("count_include_pad", 0)

    def body(p, inside, inpad):
        if include:
            k.line(f"if ({inpad}) {n}++;")
        with k.block(f"if ({inside})"):
            k.line(f"{s} += {k.value(node.inputs[0], (idx[0], idx[1]) + tuple(p))};")
            if not include:
                k.line(f"{n}++;")
    _window_loops(k, node, idx, body)
    return f"({n} ? {s} / ({ct}){n} : {_lit(0, ct)})"


def _lrn(k, node, pos, idx):
    at, ct = node.attributes, k.ct(node.outputs[0])
    size, channels = at["size"], k.shape(node.inputs[0])[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    s, c = k.fresh("sq"), k.fresh("c")
    k.line(f"{ct} {s} = 0;")
    with k.block(f"for (long {c} = sf_max(0, {idx[1]} - {lo}); {c} <= sf_min({channels - 1}, {idx[1]} + {hi}); {c}++)"):
        v = k.value(node.inputs[0], (idx[0], c) + tuple(idx[2:]))
        k.line(f"{s} += {v} * {v};")
    x = k.value(node.inputs[0], idx)
    alpha, beta, bias = at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0)
    return f"{x} / pow({_lit(bias, ct)} + {_lit(alpha / size, ct)} * {s}, {_lit(beta, ct)})"


def _gather(k, node, pos, idx):
    data, ind = node.inputs[0], node.inputs[1]
    d, q = k.shape(data), len(k.shape(ind))
    k.mark_gathered(node, idx)
    axis = node.attributes.get("axis", 0) % len(d)
    ix = gather_index(k, node, tuple(idx[axis:axis + q]))
    return k.value(data, tuple(idx[:axis]) + (ix,) + tuple(idx[axis + q:]))


def gather_index(k, node, at: tuple) -> str:
    """The checked, wrapped row a Gather reads for its index element ``at`` (a C name), computed
    once per block: a row loop computes the index of a row-invariant Gather before its inner
    loops (the check's store to ``sf_error`` kept them scalar)."""
    key = ("gather", node.name, tuple(at))
    if key in k.cache:
        return k.cache[key]
    dim = k.shape(node.inputs[0])[node.attributes.get("axis", 0) % len(k.shape(node.inputs[0]))]
    iv = k.value(node.inputs[1], at)
    ix = k.fresh("g")
    k.line(f"long {ix} = (long){iv};")
    k.line(f"if ({ix} < 0) {ix} += {dim};")
    with k.block(f"if ({ix} < 0 || {ix} >= {dim})"):
        if k.threads > 1:
            k.pragma("#pragma omp atomic write")
        k.line("sf_error = 3;")
        k.line(f"{ix} = 0;")
    k.cache[key] = ix
    return ix


SPECIAL_ANCHORS = {"MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "MaxPool": _maxpool,
                   "AveragePool": _avgpool, "LRN": _lrn, "Gather": _gather}
