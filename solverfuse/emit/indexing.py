"""C lowerings of the ops exporters add around transformers and padded convolutions: NaN tests,
Trilu/Pad/Tile/Range index maps, GatherElements/GatherND, CumSum, a few activations, and the
ATen index maps Select and ConstantPad.

Each entry computes one output element at index ``idx`` (the form of
:mod:`~solverfuse.emit.elementwise`), asking the kernel for inputs at mapped indices. A read
that may fall outside its input (Pad's border, a data-dependent gather index) is made inside a
branch, so no load is issued out of bounds; a gather index out of range sets ``sf_error = 3`` as
Gather does.

>>> sorted(UNARY_MORE)[:3], sorted(INDEXING)[:3]
(['HardSwish', 'IsInf', 'IsNaN'], ['ConstantPad', 'CumSum', 'GatherElements'])
"""
from __future__ import annotations

from ..errors import EmitError
from .cexpr import SET_INDEX_ERROR, attr_str, lit

_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


def _isinf(at, a, ct):
    pos, neg = at.get("detect_positive", 1), at.get("detect_negative", 1)
    if pos and neg:
        return f"(isinf({a}) != 0)"
    if not (pos or neg):
        return "0"
    return f"(isinf({a}) && {a} {'>' if pos else '<'} 0)"


#: one-input elementwise ops: ``(attrs, a, ctype) -> expr``.
UNARY_MORE = {
    "IsNaN": lambda at, a, ct: f"(isnan({a}) != 0)",
    "IsInf": _isinf,
    "Round": lambda at, a, ct: f"({ct})nearbyint({a})",
    "HardSwish": lambda at, a, ct: (f"({a} * fmax({lit(0, ct)}, fmin({lit(1, ct)}, "
                                     f"{a} * {lit(1 / 6, ct)} + {lit(0.5, ct)})))"),
    "Softsign": lambda at, a, ct: f"({a} / ({lit(1, ct)} + fabs({a})))",
    "Selu": lambda at, a, ct: (f"({lit(at.get('gamma', _SELU_GAMMA), ct)} * ({a} > 0 ? {a} : "
                                f"{lit(at.get('alpha', _SELU_ALPHA), ct)} * (exp({a}) - {lit(1, ct)})))"),
    "Mish": lambda at, a, ct: f"({a} * tanh(log1p(exp({a}))))",
}

#: broadcasting ops: ``(k, attrs, values, ctype, input ctypes) -> expr``.
NARY_MORE = {"Xor": lambda k, at, v, ct, cts: f"(!{v[0]} != !{v[1]})"}


def _scalar(k, node, i, default):
    """A scalar input's C value (read at run time), or ``default`` when it is omitted."""
    return k.value(node.inputs[i], ()) if len(node.inputs) > i and node.inputs[i] else default


def _trilu(k, node, pos, idx):
    out = node.outputs[0]
    ct = k.ct(out)
    diag = _scalar(k, node, 1, "0")
    i, j = idx[-2], idx[-1]
    keep = f"({j}) - ({i}) >= {diag}" if node.attributes.get("upper", 1) else f"({j}) - ({i}) <= {diag}"
    res = k.fresh("t")
    k.line(f"{ct} {res} = {lit(0, ct)};")
    with k.block(f"if ({keep})"):
        k.line(f"{res} = {k.value(node.inputs[0], idx)};")
    return res


def _pad(k, node, pos, idx):
    x, out = node.inputs[0], node.outputs[0]
    xs, ct = k.shape(x), k.ct(out)
    if "pads" in node.attributes:
        pads = list(node.attributes["pads"])
    else:
        pads = [int(p) for p in k.param_values(node.inputs[1]).reshape(-1)]
    axes = list(range(len(xs)))
    if len(node.inputs) > 3 and node.inputs[3]:
        axes = [int(a) % len(xs) for a in k.param_values(node.inputs[3]).reshape(-1)]
    begin = [0] * len(xs)
    for n, a in enumerate(axes):
        begin[a] = pads[n]
    mode = attr_str(node.attributes.get("mode"), "constant")
    src = [f"({i}) - {b}" if b else i for i, b in zip(idx, begin)]
    if mode == "constant":
        cval = _scalar(k, node, 2, lit(node.attributes.get("value", 0.0), ct))
        conds = [f"{s} >= 0 && {s} < {d}" for s, b, d, o in zip(src, begin, xs, k.shape(out))
                 if b or o != d]
        res = k.fresh("p")
        k.line(f"{ct} {res} = {cval};")
        with k.block(f"if ({' && '.join(conds) or '1'})"):
            k.line(f"{res} = {k.value(x, tuple(src))};")
        return res
    mapped = []
    for s, d in zip(src, xs):
        v = k.fresh("q")
        k.line(f"long {v} = {s};")
        if mode == "edge":
            k.line(f"{v} = {v} < 0 ? 0 : {v} >= {d} ? {d - 1} : {v};")
        elif mode == "reflect":
            if d > 1:
                k.line(f"while ({v} < 0 || {v} >= {d}) {v} = {v} < 0 ? -{v} : {2 * (d - 1)} - {v};")
            else:
                k.line(f"{v} = 0;")
        else:
            raise EmitError(f"node {node.name!r}: Pad mode {mode!r} is not supported by the C emitter")
        mapped.append(v)
    return k.value(x, tuple(mapped))


def _constant_pad(k, node, pos, idx):
    """aten.constant_pad_nd: ``pad`` lists (before, after) pairs from the last dimension back; a
    negative pad crops."""
    x, out = node.inputs[0], node.outputs[0]
    xs, ct = k.shape(x), k.ct(out)
    pad = list(node.attributes.get("pad", []))
    begin = [0] * len(xs)
    for i in range(len(pad) // 2):
        begin[len(xs) - 1 - i] = int(pad[2 * i])
    src = [f"({i}) - {b}" if b > 0 else f"({i}) + {-b}" if b < 0 else i for i, b in zip(idx, begin)]
    conds = [f"{s} >= 0 && {s} < {d}" for s, b, d, o in zip(src, begin, xs, k.shape(out)) if b or o != d]
    res = k.fresh("p")
    k.line(f"{ct} {res} = {lit(node.attributes.get('value', 0.0), ct)};")
    with k.block(f"if ({' && '.join(conds) or '1'})"):
        k.line(f"{res} = {k.value(x, tuple(src))};")
    return res


def _select(k, node, pos, idx):
    """aten.select.int: position ``index`` of dimension ``axis`` (that dimension dropped)."""
    xs = k.shape(node.inputs[0])
    axis = node.attributes.get("axis", 0) % len(xs)
    at = node.attributes.get("index", 0) % xs[axis]
    return k.value(node.inputs[0], tuple(idx[:axis]) + (str(at),) + tuple(idx[axis:]))


def _tile(k, node, pos, idx):
    k.param_values(node.inputs[1])
    xs = k.shape(node.inputs[0])
    return k.value(node.inputs[0], tuple(f"({i}) % {d}" if d > 1 else "0" for i, d in zip(idx, xs)))


def _range(k, node, pos, idx):
    start, delta = k.value(node.inputs[0], ()), k.value(node.inputs[2], ())
    return f"({k.ct(node.outputs[0])})({start} + ({idx[0]}) * {delta})"


def _checked_index(k, iv, size):
    """A gather index as a C variable, negatives wrapped, out of range -> sf_error 3."""
    ix = k.fresh("g")
    k.line(f"long {ix} = (long){iv};")
    k.line(f"if ({ix} < 0) {ix} += {size};")
    with k.block(f"if ({ix} < 0 || {ix} >= {size})"):
        k.line(SET_INDEX_ERROR if k.threads > 1 else "sf_error = 3;")
        k.line(f"{ix} = 0;")
    return ix


def _gather_elements(k, node, pos, idx):
    k.mark_gathered(node, idx)
    data, ind = node.inputs[0], node.inputs[1]
    d = k.shape(data)
    axis = node.attributes.get("axis", 0) % len(d)
    ix = _checked_index(k, k.value(ind, idx), d[axis])
    return k.value(data, tuple(idx[:axis]) + (ix,) + tuple(idx[axis + 1:]))


def _gather_nd(k, node, pos, idx):
    k.mark_gathered(node, idx)
    data, ind = node.inputs[0], node.inputs[1]
    d, q = k.shape(data), k.shape(ind)
    b = node.attributes.get("batch_dims", 0)
    r = q[-1]
    lead = tuple(idx[:len(q) - 1])
    picked = [_checked_index(k, k.value(ind, lead + (str(j),)), d[b + j]) for j in range(r)]
    return k.value(data, tuple(idx[:b]) + tuple(picked) + tuple(idx[len(q) - 1:]))


def _cumsum(k, node, pos, idx):
    x, out = node.inputs[0], node.outputs[0]
    ct, xs = k.ct(out), k.shape(x)
    axis_value = k.param_values(node.inputs[1])
    if axis_value is None:
        raise EmitError(f"node {node.name!r}: CumSum's axis must be a constant for the C emitter")
    axis = int(axis_value.reshape(-1)[0]) % len(xs)
    excl, rev = node.attributes.get("exclusive", 0), node.attributes.get("reverse", 0)
    i, n = idx[axis], xs[axis]
    j = k.fresh("j")
    lo, hi = (f"({i}) + {1 if excl else 0}", str(n)) if rev else ("0", f"({i}) + {0 if excl else 1}")
    res = k.fresh("s")
    k.line(f"{ct} {res} = {lit(0, ct)};")
    with k.block(f"for (long {j} = {lo}; {j} < {hi}; {j}++)"):
        k.line(f"{res} += {k.value(x, tuple(idx[:axis]) + (j,) + tuple(idx[axis + 1:]))};")
    return res


#: structured ops: ``(kernel, node, output position, idx) -> expr``.
INDEXING = {"Trilu": _trilu, "Pad": _pad, "Tile": _tile, "Range": _range,
            "GatherElements": _gather_elements, "GatherND": _gather_nd, "CumSum": _cumsum,
            "ConstantPad": _constant_pad, "Select": _select}
