"""The op table of the C renderer: op -> C expression of one output element (``code_for_op``).

Every function here receives the :class:`~solverfuse.emit.c.Kernel` being rendered and asks it
for input values at mapped indices (``k.value(tensor, idx)``); the kernel decides whether that is
a global load, a scratch read or, for an in-group producer, more inlined code. So an op only says
*what* its element is:

* ``UNARY`` / ``NARY`` -- elementwise and broadcasting ops as C expression templates
  (broadcasting is index arithmetic: a size-1 input dim reads index 0);
* ``INDEX_MAPS`` -- layout ops (Transpose, Reshape, Slice, Concat, Split, ...) as index maps;
* ``SPECIAL`` -- ops with structure (BatchNormalization, Clip, Cast) and, from
  :mod:`solverfuse.emit.anchors`, the anchors, windows and Gather (per element; anchor tiles
  live there too);
* ``STATS`` (Softmax, LogSoftmax, LayerNormalization): row statistics (a pass of their own, or
  scalars inside a row loop), after which each output element is an expression;
  ``reduce_pass``: Reduce* and global pooling.

>>> sorted(UNARY)[:4], "Concat" in INDEX_MAPS, sorted(TILES)
(['Abs', 'Ceil', 'Cos', 'Elu'], True, ['Conv', 'Gemm', 'MatMul'])
"""
from __future__ import annotations

import math

from ..errors import EmitError
from ..ops import numel, reduce_axes, slice_params, transpose_perm
from .anchors import SPECIAL_ANCHORS, TILES  # noqa: F401  (TILES re-exported)
from .c import attr_str, bmap, linear, lit, strides


_lit = lit
_attr_str = attr_str


# ---- elementwise: (attrs, a, ct) -> expr
def _gelu(at, a, ct):
    one, half = _lit(1, ct), _lit(0.5, ct)
    if _attr_str(at.get("approximate"), "none") == "tanh":
        c = _lit(math.sqrt(2 / math.pi), ct)
        return f"({half} * {a} * ({one} + tanh({c} * ({a} + {_lit(0.044715, ct)} * {a} * {a} * {a}))))"
    return f"({half} * {a} * ({one} + erf({a} * {_lit(1 / math.sqrt(2), ct)})))"


UNARY = {
    "Relu": lambda at, a, ct: f"({a} > 0 ? {a} : {_lit(0, ct)})",
    "Neg": lambda at, a, ct: f"(-{a})",
    "Abs": lambda at, a, ct: f"({a} < 0 ? -{a} : {a})",
    "Sqrt": lambda at, a, ct: f"sqrt({a})",
    "Reciprocal": lambda at, a, ct: f"({_lit(1, ct)} / {a})",
    "Exp": lambda at, a, ct: f"exp({a})",
    "Log": lambda at, a, ct: f"log({a})",
    "Tanh": lambda at, a, ct: f"tanh({a})",
    "Erf": lambda at, a, ct: f"erf({a})",
    "Sin": lambda at, a, ct: f"sin({a})",
    "Cos": lambda at, a, ct: f"cos({a})",
    "Floor": lambda at, a, ct: f"floor({a})",
    "Ceil": lambda at, a, ct: f"ceil({a})",
    "Sigmoid": lambda at, a, ct: f"({_lit(1, ct)} / ({_lit(1, ct)} + exp(-{a})))",
    "Identity": lambda at, a, ct: a,
    "Not": lambda at, a, ct: f"(!{a})",
    "Sign": lambda at, a, ct: f"({ct})(({a} > 0) - ({a} < 0))",
    "LeakyRelu": lambda at, a, ct: f"({a} < 0 ? {_lit(at.get('alpha', 0.01), ct)} * {a} : {a})",
    "Elu": lambda at, a, ct: f"({a} < 0 ? {_lit(at.get('alpha', 1.0), ct)} * (exp({a}) - {_lit(1, ct)}) : {a})",
    "HardSigmoid": lambda at, a, ct: (f"fmax({_lit(0, ct)}, fmin({_lit(1, ct)}, {_lit(at.get('alpha', 0.2), ct)}"
                                       f" * {a} + {_lit(at.get('beta', 0.5), ct)}))"),
    "Softplus": lambda at, a, ct: f"log({_lit(1, ct)} + exp({a}))",
    "Gelu": _gelu,
}


# ---- broadcasting: (k, attrs, [values], ct, [input ctypes]) -> expr
def _fold(k, vals, ct, pick):
    acc = vals[0]
    for v in vals[1:]:
        acc = k.tmp(ct, pick(acc, v))
    return acc


def _mod(k, at, v, ct, cts):
    a, b = v
    if at.get("fmod", 0):
        return f"fmod({a}, {b})"
    r = k.tmp(ct, f"fmod({a}, {b})" if ct in ("float", "double") else f"{a} % {b}")
    return f"(({r} != 0 && (({r} < 0) != ({b} < 0))) ? {r} + {b} : {r})"


NARY = {
    "Add": lambda k, at, v, ct, cts: f"{v[0]} + {v[1]}",
    "Sub": lambda k, at, v, ct, cts: f"{v[0]} - {v[1]}",
    "Mul": lambda k, at, v, ct, cts: f"{v[0]} * {v[1]}",
    "Div": lambda k, at, v, ct, cts: f"{v[0]} / {v[1]}",
    "Pow": lambda k, at, v, ct, cts: f"({ct})pow({v[0]}, {v[1]})",
    "Sum": lambda k, at, v, ct, cts: " + ".join(v),
    "Mean": lambda k, at, v, ct, cts: f"({' + '.join(v)}) / {_lit(len(v), ct)}",
    "Max": lambda k, at, v, ct, cts: _fold(k, v, ct, lambda a, b: f"({a} > {b} ? {a} : {b})"),
    "Min": lambda k, at, v, ct, cts: _fold(k, v, ct, lambda a, b: f"({a} < {b} ? {a} : {b})"),
    "PRelu": lambda k, at, v, ct, cts: f"({v[0]} < 0 ? {v[0]} * {v[1]} : {v[0]})",
    "And": lambda k, at, v, ct, cts: f"({v[0]} && {v[1]})",
    "Or": lambda k, at, v, ct, cts: f"({v[0]} || {v[1]})",
    "Mod": _mod,
    "Equal": lambda k, at, v, ct, cts: f"({v[0]} == {v[1]})",
    "Less": lambda k, at, v, ct, cts: f"({v[0]} < {v[1]})",
    "Greater": lambda k, at, v, ct, cts: f"({v[0]} > {v[1]})",
    "LessOrEqual": lambda k, at, v, ct, cts: f"({v[0]} <= {v[1]})",
    "GreaterOrEqual": lambda k, at, v, ct, cts: f"({v[0]} >= {v[1]})",
    "Where": lambda k, at, v, ct, cts: f"({v[0]} ? {v[1]} : {v[2]})",
}


# ---- layout ops as index maps: (k, node, pos, idx) -> expr
def _reshape_like(k, node, pos, idx):
    x, out = node.inputs[0], node.outputs[pos]
    for t in node.inputs[1:]:
        if t:
            k.param_values(t)
    xs, os_ = k.shape(x), k.shape(out)
    if [d for d in xs if d != 1] == [d for d in os_ if d != 1]:
        it = iter([i for i, d in zip(idx, os_) if d != 1])
        return k.value(x, tuple("0" if d == 1 else next(it) for d in xs))
    lin = k.index(_linear(os_, idx))
    st = _strides(xs)
    src = []
    for j, (d, s) in enumerate(zip(xs, st)):
        if d == 1:
            src.append("0")
        else:
            e = lin if s == 1 else f"{lin} / {s}"
            src.append(e if j == 0 else f"({e}) % {d}")
    return k.value(x, tuple(src))


_linear, _strides = linear, strides


def _transpose(k, node, pos, idx):
    perm = transpose_perm(node.attributes, len(idx))
    src = ["0"] * len(idx)
    for j, p in enumerate(perm):
        src[p] = idx[j]
    return k.value(node.inputs[0], tuple(src))


def _expand(k, node, pos, idx):
    k.param_values(node.inputs[1])
    return k.value(node.inputs[0], bmap(idx, k.shape(node.outputs[0]), k.shape(node.inputs[0])))


def _ins(k, node):
    return [(k.shape(t), k.graph.tensors[t].dtype) if t else (None, None) for t in node.inputs]


def _slice(k, node, pos, idx):
    values = [k.param_values(t) if (i and t) else None for i, t in enumerate(node.inputs)]
    src = list(idx)
    for a, s, _e, st in slice_params(node.attributes, _ins(k, node), values):
        src[a] = str(s) if idx[a] == "0" else f"{s} + {st}*{idx[a]}" if st != 1 else f"{s} + {idx[a]}"
    return k.value(node.inputs[0], tuple(src))


def _concat(k, node, pos, idx):
    out = node.outputs[0]
    axis = node.attributes.get("axis", 0) % len(idx)
    parts, off = [], 0
    for t in node.inputs:
        size = k.shape(t)[axis]
        if size:
            parts.append((t, off, size))
        off += size
    if len(parts) == 1:
        t, o, _ = parts[0]
        return k.value(t, idx[:axis] + (f"{idx[axis]} - {o}" if o else idx[axis],) + idx[axis + 1:])
    res = k.fresh("c")
    k.line(f"{k.ct(out)} {res} = 0;")
    for n, (t, o, size) in enumerate(parts):
        cond = f"({idx[axis]} < {o + size})"
        header = f"if {cond}" if n == 0 else f"else if {cond}" if n < len(parts) - 1 else "else"
        with k.block(header):
            v = k.value(t, idx[:axis] + (f"{idx[axis]} - {o}" if o else idx[axis],) + idx[axis + 1:])
            k.line(f"{res} = {v};")
    return res


def _split(k, node, pos, idx):
    if len(node.inputs) > 1 and node.inputs[1]:
        k.param_values(node.inputs[1])
    axis = node.attributes.get("axis", 0) % len(idx)
    off = sum(k.shape(t)[axis] for t in node.outputs[:pos])
    return k.value(node.inputs[0], idx[:axis] + (f"{idx[axis]} + {off}" if off else idx[axis],) + idx[axis + 1:])


def _identity(k, node, pos, idx):
    if pos == 1:
        return "1"  # Dropout's mask at inference: every element kept
    return k.value(node.inputs[0], idx)


def _shape_op(k, node, pos, idx):
    dims = ", ".join(str(d) for d in k.shape(node.inputs[0])) or "0"
    return f"((const int64_t[]){{{dims}}})[{idx[0]}]"


def _constant_of_shape(k, node, pos, idx):
    k.param_values(node.inputs[0])
    v = node.attributes.get("value", 0)
    while isinstance(v, (list, tuple)):
        v = v[0] if v else 0
    return _lit(v, k.ct(node.outputs[0]))


INDEX_MAPS = {"Reshape": _reshape_like, "Flatten": _reshape_like, "Squeeze": _reshape_like,
              "Unsqueeze": _reshape_like, "Transpose": _transpose, "Expand": _expand,
              "Slice": _slice, "Concat": _concat, "Split": _split, "Identity": _identity,
              "Dropout": _identity, "Shape": _shape_op, "ConstantOfShape": _constant_of_shape}


# ---- broadcast ops with structure
def _batchnorm(k, node, pos, idx):
    at = node.attributes
    ct = k.ct(node.outputs[0])
    c = (idx[1],) if len(idx) > 1 else ("0",)
    x = k.value(node.inputs[0], idx)
    s, b, m, v = (k.value(t, c) for t in node.inputs[1:5])
    return f"({x} - {m}) * ({s} / sqrt({v} + {_lit(at.get('epsilon', 1e-5), ct)})) + {b}"


def _clip(k, node, pos, idx):
    ct = k.ct(node.outputs[0])
    a = k.value(node.inputs[0], idx)
    lo = k.value(node.inputs[1], ()) if len(node.inputs) > 1 and node.inputs[1] else \
        (_lit(node.attributes["min"], ct) if "min" in node.attributes else None)
    hi = k.value(node.inputs[2], ()) if len(node.inputs) > 2 and node.inputs[2] else \
        (_lit(node.attributes["max"], ct) if "max" in node.attributes else None)
    if lo is not None:
        a = k.tmp(ct, f"({a} < {lo} ? {lo} : {a})")
    if hi is not None:
        a = k.tmp(ct, f"({a} > {hi} ? {hi} : {a})")
    return a


def _cast(k, node, pos, idx):
    a = k.value(node.inputs[0], idx)
    if k.graph.tensors[node.outputs[0]].dtype == "bool":
        return f"({a} != 0)"
    return f"({k.ct(node.outputs[0])}){a}"


# ---- anchors, per element (the general fallback; see TILES for the fused-epilogue fast path)
SPECIAL = {"BatchNormalization": _batchnorm, "Clip": _clip, "Cast": _cast, **SPECIAL_ANCHORS, **INDEX_MAPS}


def code_for_op(k, node, pos: int, idx: tuple[str, ...]) -> str:
    """C expression of output ``pos`` of ``node`` at index ``idx`` (may emit statements first)."""
    op, out = node.op, node.outputs[pos]
    if op in UNARY:
        return UNARY[op](node.attributes, k.value(node.inputs[0], idx), k.ct(out))
    if op in NARY:
        oshape = k.shape(out)
        ins = [t for t in node.inputs if t]
        vals = [k.value(t, bmap(idx, oshape, k.shape(t))) for t in ins]
        return NARY[op](k, node.attributes, vals, k.ct(out), [k.ct(t) for t in ins])
    if op in SPECIAL:
        return SPECIAL[op](k, node, pos, idx)
    if op in STATS_EXPR:
        return STATS_EXPR[op](k, node, pos, idx)
    raise EmitError(f"node {node.name!r}: op {op!r} is not supported by the C emitter")


# ---- reductions: statistics passes and reduced outputs
def _row_index(k, node, idx, rshape):
    return _linear(rshape, tuple("0" if d == 1 else i for i, d in zip(idx, rshape)))


def _softmax_loops(k, x, at, n, row=None):
    """Row max ``m`` then ``s`` = sum of exp(x - m) (double accumulator): two loops the compiler
    vectorises (vector exp, lane-wise max and sum), where one online loop could not be."""
    copy = _row_copy(k, x) if row is not None else None
    m, s = k.fresh("m"), k.fresh("s")
    k.line(f"float {m} = -INFINITY; double {s} = 0;")
    with k.loops([n], simd=f"reduction(max:{m})") as (j,):
        v = k.value(x, at(j))
        k.line(f"if ({v} > {m}) {m} = {v};")
        if copy is not None:
            k.line(f"{copy}[{j}] = {v};")
    _row_copied(k, x, row, copy)
    with k.loops([n], simd=f"reduction(+:{s})") as (j,):
        k.line(f"{s} += exp({k.value(x, at(j))} - {m});")
    return m, s


def softmax_stats(k, node, row=None):
    """Row max and normaliser of a (Log)Softmax: into scratch arrays indexed by row (a pass of
    its own), or -- ``row`` given, inside a row loop -- into two scalars of that row."""
    x = node.inputs[0]
    shape = k.shape(x)
    axis = node.attributes.get("axis", -1) % len(shape)
    rshape = tuple(1 if i == axis else d for i, d in enumerate(shape))
    if row is not None:
        m, s = _softmax_loops(k, x, lambda j: tuple(row) + (j,), shape[axis], tuple(row))
        a, b = k.fresh("rmax"), k.fresh("rnorm")
        if node.op == "Softmax":
            k.line(f"const float {a} = {m}, {b} = (float)(1.0 / {s});")
        else:
            k.line(f"const float {a} = (float)((double){m} + log({s}));")
        k.stats[node.name] = {"a": a, "b": b, "row": True}
        return
    mx, sm = k.alloc("float", numel(rshape), "row max"), k.alloc("float", numel(rshape), "row normaliser")
    k.line(f"/* pass: {node.op} row statistics (online max and sum of exponentials) */")
    with k.loops(rshape, parallel=True) as idx:
        m, s = _softmax_loops(k, x, lambda j: idx[:axis] + (j,) + idx[axis + 1:], shape[axis])
        r = _linear(rshape, idx)
        if node.op == "Softmax":
            k.line(f"{mx}[{r}] = {m}; {sm}[{r}] = (float)(1.0 / {s});")
        else:
            k.line(f"{mx}[{r}] = (float)((double){m} + log({s}));")
    k.stats[node.name] = {"a": mx, "b": sm, "shape": rshape}


def _ln_row(k, x, idx, axis, shape, eps):
    """Mean and 1/stddev over shape[axis:] at row ``idx``: C expressions (double accumulation)."""
    n = numel(shape[axis:])
    s, q, mu = k.fresh("s"), k.fresh("q"), k.fresh("mu")
    k.line(f"double {s} = 0, {q} = 0;")
    with k.loops(shape[axis:], simd=f"reduction(+:{s},{q})") as inner:
        v = k.value(x, tuple(idx[:axis]) + tuple(inner))
        k.line(f"{s} += {v}; {q} += (double){v} * {v};")
    k.line(f"const double {mu} = {s} / {n};")
    return f"(float){mu}", f"(float)(1.0 / sqrt(fmax({q} / {n} - {mu} * {mu}, 0.0) + {eps!r}))"


def layernorm_stats(k, node, row=None):
    """Row mean and 1/stddev of a LayerNormalization (scratch arrays, or scalars in a row loop)."""
    x = node.inputs[0]
    shape = k.shape(x)
    axis = node.attributes.get("axis", -1) % len(shape)
    rshape = tuple(shape[:axis]) + (1,) * (len(shape) - axis)
    eps = node.attributes.get("epsilon", 1e-5)
    if row is not None:
        mexpr, iexpr = _ln_row(k, x, tuple(row) + ("0",) * (len(shape) - len(row)), axis, shape, eps)
        a, b = k.fresh("rmean"), k.fresh("ristd")
        k.line(f"const float {a} = {mexpr}, {b} = {iexpr};")
        k.stats[node.name] = {"a": a, "b": b, "row": True}
        return
    mean, inv = k.alloc("float", numel(rshape), "row mean"), k.alloc("float", numel(rshape), "row 1/stddev")
    k.line("/* pass: LayerNormalization row statistics */")
    with k.loops(rshape, parallel=True) as idx:
        mexpr, iexpr = _ln_row(k, x, idx, axis, shape, eps)
        r = _linear(rshape, idx)
        k.line(f"{mean}[{r}] = {mexpr};")
        k.line(f"{inv}[{r}] = {iexpr};")
    k.stats[node.name] = {"a": mean, "b": inv, "shape": rshape}


STATS = {"Softmax": softmax_stats, "LogSoftmax": softmax_stats, "LayerNormalization": layernorm_stats}


def _stat(k, node, idx):
    """C expressions of a reduction's two statistics for the row of ``idx``."""
    st = k.stats[node.name]
    if st.get("row"):
        return st["a"], st.get("b")
    r = k.index(_row_index(k, node, idx, st["shape"]))
    return f"{st['a']}[{r}]", f"{st['b']}[{r}]"


def _softmax_expr(k, node, pos, idx):
    a, b = _stat(k, node, idx)
    x = k.value(node.inputs[0], idx)
    if node.op == "Softmax":
        return f"exp({x} - {a}) * {b}"
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
    expr = f"({x} - {a}) * {b} * {sc}"
    if len(node.inputs) > 2 and node.inputs[2]:
        expr += f" + {k.value(node.inputs[2], bmap(idx, out, k.shape(node.inputs[2])))}"
    return expr


STATS_EXPR = {"Softmax": _softmax_expr, "LogSoftmax": _softmax_expr, "LayerNormalization": _layernorm_expr}

_ACC = {"ReduceSum": "sum", "ReduceMean": "mean", "GlobalAveragePool": "mean", "ReduceMax": "max",
        "GlobalMaxPool": "max", "ReduceMin": "min", "ReduceProd": "prod", "ReduceL2": "l2",
        "ReduceSumSquare": "sumsq"}


def _reduce_setup(k, node):
    """(axes, keepdims, accumulator kind) of a Reduce*/Global*Pool node."""
    xs = k.shape(node.inputs[0])
    if node.op.startswith("Global"):
        return list(range(2, len(xs))), 1, _ACC[node.op]
    values = [None] + [k.param_values(u) if u else None for u in node.inputs[1:]]
    return reduce_axes(node.attributes, _ins(k, node), values), node.attributes.get("keepdims", 1), _ACC[node.op]


def _reduce_value(k, node, idx, axes, keep, kind, row_copy=None):
    """Accumulate the reduction at output index ``idx`` (an inner loop over the reduced axes);
    returns the C expression of the reduced value. ``row_copy`` (an array) also receives each
    input value of a last-axis reduction, so later ops of the row need not recompute it."""
    x, t = node.inputs[0], node.outputs[0]
    xs, ct = k.shape(x), k.ct(t)
    floaty = ct in ("float", "double")
    if keep:
        base = [None if i in axes else idx[i] for i in range(len(xs))]
    else:
        it = iter(idx)
        base = [None if i in axes else next(it) for i in range(len(xs))]
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
    with k.loops([xs[a] for a in axes], simd=simd and f"reduction({simd}:{acc})") as red:
        full = list(base)
        for a, r in zip(axes, red):
            full[a] = r
        v = k.value(x, tuple(full))
        if row_copy is not None:
            k.line(f"{row_copy}[{red[-1]}] = {v};")
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
    n = numel([xs[a] for a in axes])
    return {"mean": f"({ct})({acc} / {max(n, 1)})", "l2": f"({ct})sqrt({acc})"}.get(kind, f"({ct}){acc}")


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
            k.line(f"{dest}[{_linear(os_, idx)}] = {res};")
    if not direct:
        k.scratch[t] = dest


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
    copy = _row_copy(k, node.inputs[0])
    v = k.tmp(k.ct(t), _reduce_value(k, node, idx, axes, keep, kind, copy), "red")
    _row_copied(k, node.inputs[0], row, copy)
    k.cache[("v", t, tuple("0" if d == 1 else i for i, d in zip(idx, k.shape(t))))] = v


def _row_copy(k, x):
    """A row array for the in-group tensor ``x`` that a row reduction reads and other ops of the
    group read again (a softmax's exp(x - max)): filled by the reduction's loop, then read
    instead of recomputing the chain (None when x is a global load, a tile, or read once)."""
    g = k.graph
    if g.index.producer.get(x) not in k.members or x in k.tiles:
        return None
    if x not in k.writes and sum(c in k.members for c in g.index.consumers.get(x, [])) < 2:
        return None
    arr = k.fresh("R")
    k.line(f"{k.ct(x)} {arr}[{k.shape(x)[-1]}];")
    return arr


def _row_copied(k, x, row, arr):
    """From here on (in this row), ``x`` at (row, j) is ``arr[j]``."""
    if arr is not None:
        k.tiles[x] = (tuple("0" if n == 1 else k.index(i) for i, n in zip(row, k.shape(x)[:-1])), arr, 1)


SUPPORTED = set(UNARY) | set(NARY) | set(SPECIAL) | set(STATS) | set(_ACC)
