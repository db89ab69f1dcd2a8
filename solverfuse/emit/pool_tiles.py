"""Pooling windows (MaxPool, AveragePool) and LRN in C: the per-element forms (a loop over the
valid taps of the window) and the pooling plane tile (:func:`tile_pool`: per tap one
bounds-free loop; separable 2-D windows as a row pass then a column pass).

Apart from the MatMul/Conv tiles: one op family per module; the tables of all anchors are in
:mod:`~solverfuse.emit.anchors`.

>>> from types import SimpleNamespace  # taps of a 3-wide window, pads 1, inside a 4-wide input
>>> _pool_counts(SimpleNamespace(attributes={"kernel_shape": [3], "pads": [1, 1]}), [1, 1, 4], [1, 1, 4], 0, False)
[2, 3, 3, 2]
"""
from __future__ import annotations

from ..errors import EmitError
from ..ops import numel
from .cexpr import linear as _linear, lit as _lit
from .tiles import MAX_TILE, tile_done, tile_open, window_geometry

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
    :func:`~solverfuse.emit.conv_tiles.tile_conv`: per kernel tap one bounds-free loop nest over the output positions whose
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
    counts = _all_counts(node, x, out)
    if node.outputs.index(t) != 0 or (not avg and any(0 in c for c in counts)) or ct not in ("float", "double"):
        arr, ct, n = tile_open(k, t, d)
        js = [k.fresh("j") for _ in range(d)]
        for j, size in zip(js, out[-d:]):
            k.open(f"for (long {j} = 0; {j} < {size}; {j}++)")
        v = _ELEMENT[node.op](k, node, node.outputs.index(t), tuple(outer) + tuple(js))
        k.line(f"{arr}[{_linear(out[-d:], js)}] = {v};")
        for _ in js:
            k.close()
        return tile_done(k, t, outer, arr, d)
    n = numel(out[-d:])
    arr, j0 = k.fresh("T"), k.fresh("j")
    k.line(f"{ct} {arr}[{n}] SF_ALIGN64;")
    nn, c, osp = outer[0], outer[1], outer[2:]
    if d == 2 == nsp and ct == "float" and not k.counters and same_plane(node, x, out):
        _pool_same(k, node, arr, x, avg, counts, _linear(x, (nn, c, "0", "0")))
        return tile_done(k, t, outer, arr, d)
    if d == 2 and _takes_pool2d(k, node, t):
        _pool_plane(k, node, arr, outer)
        return tile_done(k, t, outer, arr, d)
    k.line(f"for (long {j0} = 0; {j0} < {n}; {j0}++) {arr}[{j0}] = {'0' if avg else '-INFINITY'};")
    # measured: 24x112x112 MaxPool 3x3/2 0.105 -> 0.087 ms (ORT 0.086); 96x109x109 no change;
    # 136x28x28 AveragePool 0.06 -> 0.11 ms (14-wide rows): only for rows of 32+ outputs
    separable = d == 2 and out[-1] >= 32 and x[-2] * out[-1] <= MAX_TILE
    if separable:
        rows = k.fresh("R")
        k.line(f"{ct} {rows}[{x[-2] * out[-1]}] SF_ALIGN64;")
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
    tile_done(k, t, outer, arr, d)


#: Largest plane whose AveragePool reciprocal tap counts are a static table (:func:`_pool_same`).
SAME_TABLE = 4096


def same_plane(node, x, out) -> bool:
    """Whether a 2-D pooling window keeps its plane's size: stride 1, dilation 1, an odd kernel
    padded by half its size on each side (inception's 3x3/1 pad 1), the plane larger than the
    kernel -- then :func:`_pool_same` runs it as flat loops over the plane."""
    kernel = list(node.attributes["kernel_shape"])
    if len(kernel) != 2 or node.attributes.get("ceil_mode", 0) or tuple(out[2:]) != tuple(x[2:]):
        return False
    st, dil, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    if st != [1, 1] or dil != [1, 1] or any(kk % 2 == 0 or p != kk // 2 for kk, p in zip(kernel, pb)):
        return False
    return x[2] > kernel[0] and x[3] > kernel[1] and (node.op == "MaxPool" or x[2] * x[3] <= SAME_TABLE)


def _pool_same(k, node, arr: str, x, avg: bool, counts, plane: str) -> None:
    """A pooling plane of the same size as its input (:func:`same_plane`) as flat loops: the
    window along the rows of the interior rows in one loop over them (``V[q] = x[q - W] + x[q] +
    x[q + W]``), the edge rows apart; then along the columns in one loop over the whole plane, the
    edge columns (whose flat neighbours are the next row's) recomputed per row; an average
    scaled by the reciprocal tap counts (a static table). Rows 28 or 14 wide made the former
    row-by-row passes mostly remainder loops (3x slower than ONNX Runtime)."""
    kernel = list(node.attributes["kernel_shape"])
    hh, ww = x[2], x[3]
    n, ph, pw = hh * ww, kernel[0] // 2, kernel[1] // 2
    src = f"{k.ptr(node.inputs[0], 'r')} + {plane}" if plane != "0" else k.ptr(node.inputs[0], "r")
    v, xp = k.fresh("V"), k.fresh("x")
    k.line(f"float {v}[{n}] SF_ALIGN64;")
    k.line(f"const float *restrict {xp} = {src};")

    def store(header, target, terms):
        """``header { target = the window's sum / max of terms; }`` (max: a NaN tap kept only when
        first, as the other pooling forms)."""
        with k.block(header):
            if avg:
                k.line(f"{target} = {' + '.join(terms)};")
                return
            m = k.fresh("m")
            k.line(f"float {m} = {terms[0]};")
            for t in terms[1:]:
                k.line(f"{m} = {t} > {m} ? {t} : {m};")
            k.line(f"{target} = {m};")
    q = k.fresh("q")
    store(f"for (long {q} = {ph * ww}; {q} < {(hh - ph) * ww}; {q}++)", f"{v}[{q}]",
          [f"{xp}[{q} + {r * ww}]" if r > 0 else f"{xp}[{q} - {-r * ww}]" if r else f"{xp}[{q}]" for r in range(-ph, ph + 1)])
    for i in list(range(ph)) + list(range(hh - ph, hh)):
        rows = [i + r for r in range(-ph, ph + 1) if 0 <= i + r < hh]
        store(f"for (long {q} = 0; {q} < {ww}; {q}++)", f"{v}[{i * ww} + {q}]", [f"{xp}[{r * ww} + {q}]" for r in rows])
    store(f"for (long {q} = {pw}; {q} < {n - pw}; {q}++)", f"{arr}[{q}]",
          [f"{v}[{q} + {c}]" if c > 0 else f"{v}[{q} - {-c}]" if c else f"{v}[{q}]" for c in range(-pw, pw + 1)])
    i = k.fresh("i")
    for j in list(range(pw)) + list(range(ww - pw, ww)):
        cols = [j + c for c in range(-pw, pw + 1) if 0 <= j + c < ww]
        store(f"for (long {i} = {j}; {i} < {n}; {i} += {ww})", f"{arr}[{i}]", [f"{v}[{i} + {c - j}]" if c > j else f"{v}[{i} - {j - c}]" if c < j else f"{v}[{i}]" for c in cols])
    if avg:
        inv = [1.0 / (a * b) for a in counts[0] for b in counts[1]]
        if len(set(inv)) == 1:
            k.line(f"for (long {q} = 0; {q} < {n}; {q}++) {arr}[{q}] *= {_lit(inv[0], 'float')};")
        else:
            tab = k.fresh("inv")
            k.line(f"static const float {tab}[{n}] = {{{', '.join(_lit(f, 'float') for f in inv)}}};")
            k.line(f"for (long {q} = 0; {q} < {n}; {q}++) {arr}[{q}] *= {tab}[{q}];")


def _all_counts(node, x, out) -> list:
    """:func:`_pool_counts` of every spatial dim (AveragePool's count_include_pad applied)."""
    inclusive = node.op == "AveragePool" and bool(node.attributes.get("count_include_pad", 0))
    return [_pool_counts(node, x, out, e, inclusive) for e in range(len(node.attributes["kernel_shape"]))]


def _takes_pool2d(k, node, t: str) -> bool:
    """Whether ``t``'s planes take :func:`_pool_plane` (sf_pool2d): the first output of a float
    2-D pool without dilation, no MaxPool window wholly in the padding, not instrumented, not a
    same-size window (those run as flat loops)."""
    x, out = k.shape(node.inputs[0]), k.shape(t)
    kernel = list(node.attributes["kernel_shape"])
    _, dil, _ = window_geometry(node.attributes, x[2:], kernel, out[2:])
    return node.outputs.index(t) == 0 and k.ct(t) == "float" and len(kernel) == 2 and not k.counters \
        and list(dil) == [1, 1] and not same_plane(node, x, out) \
        and (node.op == "AveragePool" or all(0 not in c for c in _all_counts(node, x, out)))


def _pool_plane(k, node, arr: str, outer) -> None:
    """The output plane at (n, c) = ``outer`` into ``arr`` (a C array or pointer of its H x W
    floats) by sf_pool2d: the rows of each window first (contiguous), then its columns in L1; an
    average divided by its tap counts."""
    x, out = k.shape(node.inputs[0]), k.shape(node.outputs[0])
    kernel = list(node.attributes["kernel_shape"])
    st, _, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    avg = node.op == "AveragePool"
    vw = max(pb[1] + x[3], (out[3] - 1) * st[1] + kernel[1])
    v = k.fresh("V")
    k.line(f"float {v}[{vw} + SF_POOL_SLACK] SF_ALIGN64;")
    k.use_helper("sf_pool2d")
    plane = _linear(x, (outer[0], outer[1], "0", "0"))
    k.line(f"sf_pool2d({arr}, {k.ptr(node.inputs[0], 'r')} + {plane}, {x[2]}, {x[3]}, {out[2]}, {out[3]}, "
           f"{kernel[0]}, {kernel[1]}, {st[0]}, {st[1]}, {pb[0]}, {pb[1]}, {int(avg)}, {v}, {vw});")
    if avg:
        _pool_divide(k, arr, "float", out, _all_counts(node, x, out), outer[2:], 2, 0)


def pool_plane_into(k, t: str, outer) -> bool:
    """Where a pass stores only the pool output ``t`` itself (no epilogue) and its planes take
    sf_pool2d: the plane at ``outer`` = (n, c) written straight into ``t``'s buffer (True), not into
    a stack tile that a loop then copied out (64x111x111 3x3/2 MaxPool, AVX2 Zen 3, paired: 93 -> 69 us);
    else nothing is emitted (False)."""
    node = k.graph.index.node[k.graph.index.producer[t]]
    if k.redirect or not _takes_pool2d(k, node, t):
        return False
    dst = k.fresh("O")
    shape = k.shape(t)
    k.line(f"float *const {dst} = &{k.ptr(t, 'w')}[{_linear(shape, (outer[0], outer[1], '0', '0'))}];")
    _pool_plane(k, node, dst, outer)
    return True


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


def maxpool_element(k, node, pos, idx):
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


def avgpool_element(k, node, pos, idx):
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


def _lrn_scale(k, node, ct: str, x: str, s: str) -> str:
    """``x / (bias + alpha / size * s)^beta``: beta 0.75 (every LRN of the ONNX zoo), 0.5 and 1
    with square roots and a division, which vectorise; pow one libm call per element."""
    at = node.attributes
    alpha, beta, bias, size = at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0), at["size"]
    d = k.fresh("d")
    k.line(f"const {ct} {d} = {_lit(bias, ct)} + {_lit(alpha / size, ct)} * {s};")
    f = "f" if ct == "float" else ""
    if beta == 0.75:  # d^0.75 = sqrt(d) * sqrt(sqrt(d))
        r = k.fresh("r")
        k.line(f"const {ct} {r} = sqrt{f}({d});")
        return f"{x} / ({r} * sqrt{f}({r}))"
    if beta == 0.5:
        return f"{x} / sqrt{f}({d})"
    if beta == 1.0:
        return f"{x} / {d}"
    return f"{x} / pow{f}({d}, {_lit(beta, ct)})"


def tile_lrn(k, t, outer, d=1):
    """A row of an LRN output at (n, c, h...): the squares of the window's channels summed into
    the row (one contiguous loop per channel of the window), then scaled: every loop a vector
    loop (per element, a loop over the window's channels and a pow call: 10.7 ms for ZFNet's
    96x109x109 LRN, 4x the whole row form)."""
    node = k.graph.index.node[k.graph.index.producer[t]]
    x = node.inputs[0]
    size, channels, n = node.attributes["size"], k.shape(x)[1], k.shape(t)[-1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    arr, ct, _ = tile_open(k, t, 1)
    c = k.fresh("c")
    with k.block(f"for (long {c} = sf_max(0, {outer[1]} - {lo}); {c} <= sf_min({channels - 1}, {outer[1]} + {hi}); {c}++)"):
        j = k.fresh("j")
        with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
            v = k.value(x, (outer[0], c) + tuple(outer[2:]) + (j,))
            k.line(f"{arr}[{j}] += {v} * {v};")
    j = k.fresh("j")
    with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
        k.line(f"{arr}[{j}] = {_lrn_scale(k, node, ct, k.value(x, tuple(outer) + (j,)), f'{arr}[{j}]')};")
    tile_done(k, t, outer, arr, 1)


def lrn_element(k, node, pos, idx):
    at, ct = node.attributes, k.ct(node.outputs[0])
    size, channels = at["size"], k.shape(node.inputs[0])[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    s, c = k.fresh("sq"), k.fresh("c")
    k.line(f"{ct} {s} = 0;")
    with k.block(f"for (long {c} = sf_max(0, {idx[1]} - {lo}); {c} <= sf_min({channels - 1}, {idx[1]} + {hi}); {c}++)"):
        v = k.value(node.inputs[0], (idx[0], c) + tuple(idx[2:]))
        k.line(f"{s} += {v} * {v};")
    return _lrn_scale(k, node, ct, k.value(node.inputs[0], idx), s)


#: The per-element form of each pooling op (the fallback of :func:`tile_pool`).
_ELEMENT = {"MaxPool": maxpool_element, "AveragePool": avgpool_element}
