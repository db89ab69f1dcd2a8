"""Elementwise, broadcasting and layout ops as C: each function gives the C expression of one
output element, asking the kernel for its inputs at mapped indices (``k.value(tensor, idx)``).

* ``UNARY`` -- one-input elementwise ops as templates ``(attrs, a, ctype) -> expr``;
* ``NARY`` -- broadcasting ops ``(k, attrs, values, ctype, input ctypes) -> expr`` (broadcasting
  is index arithmetic: a size-1 input dim reads index 0);
* ``INDEX_MAPS`` -- layout ops (Transpose, Reshape, Slice, Concat, Split, ...) as index maps;
* ``STRUCTURED`` -- broadcast ops with structure (BatchNormalization, Clip, Cast, Pow by a known exponent).

>>> sorted(UNARY)[:4], "Concat" in INDEX_MAPS, sorted(STRUCTURED)
(['Abs', 'Ceil', 'Cos', 'Elu'], True, ['BatchNormalization', 'Cast', 'Clip', 'Pow'])
"""
from __future__ import annotations

import math

from ..ops import slice_params, transpose_perm
from .cexpr import attr_str, bmap, lit, reshape_index


def input_specs(k, node) -> list:
    """(shape, dtype) of each input of ``node`` ((None, None) for an omitted optional input): the
    form the op table's parameter helpers (``slice_params``, ``reduce_axes``) take."""
    return [(k.shape(t), k.graph.tensors[t].dtype) if t else (None, None) for t in node.inputs]


# ---- elementwise: (attrs, a, ct) -> expr
def _gelu(at, a, ct):
    one, half = lit(1, ct), lit(0.5, ct)
    if attr_str(at.get("approximate"), "none") == "tanh":
        c = lit(math.sqrt(2 / math.pi), ct)
        return f"({half} * {a} * ({one} + tanh({c} * ({a} + {lit(0.044715, ct)} * {a} * {a} * {a}))))"
    if ct == "float":
        return f"sf_geluf({a})"
    return f"({half} * {a} * ({one} + {_erf(ct)}({a} * {lit(1 / math.sqrt(2), ct)})))"


def _scalar(k, t):
    """The value of ``t`` when it is a one-element constant read from outside the group, else None."""
    if not t or k.graph.index.producer.get(t) in k.members:
        return None
    v = k.graph.constant_value(t)
    return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None


def _inner(k, t, op: str):
    """The producer of ``t`` when it is an ``op`` of the group whose output only the one op reading
    ``t`` reads (no other reader, not written out, not kept in scratch or a tile), else None."""
    g = k.graph
    p = g.index.producer.get(t)
    if p not in k.members or t in k.writes or t in k.scratch or k.has_tile(t) \
            or len(set(g.index.consumers.get(t, []))) != 1:
        return None
    node = g.index.node[p]
    return node if node.op == op else None


def erf_gelu(k, node):
    """(x, the one-element constants it folds) when the Mul ``node`` ends an exact GELU written
    out as ops, ``x * 0.5 * (1 + erf(x / sqrt 2))`` in any order of its multiplies (exporters:
    Div by sqrt 2 or Mul by 1/sqrt 2, Erf, Add 1, Mul by x, Mul by 0.5) on float x of the output's
    shape, whose inner tensors nothing else reads: then the element is ``sf_geluf(x)`` (the
    program checks at run time that the constants are the values folded, as Pow's exponent).
    None otherwise, and in the instrumented build (its counters see the constants' loads).

    >>> from solverfuse import zoo
    >>> from solverfuse.emit.lowering import whole_graph_kernel
    >>> g = zoo.residual_layernorm_gelu(2, 8)
    >>> k = whole_graph_kernel(g)
    >>> erf_gelu(k, g.index.node["y"]), erf_gelu(k, g.index.node["gelu_mul"])
    (('layernorm', ['half', 'one', 'inv_sqrt2']), None)
    """
    if k.counters or node.op != "Mul" or k.ct(node.outputs[0]) != "float":
        return None
    leaves, todo = [], list(node.inputs)
    while todo:
        t = todo.pop()
        inner = _inner(k, t, "Mul")
        if inner is None:
            leaves.append(t)
        else:
            todo.extend(inner.inputs)
    halves = [t for t in leaves if _scalar(k, t) == 0.5]
    adds = [a for a in (_inner(k, t, "Add") for t in leaves) if a is not None]
    if len(leaves) != 3 or len(halves) != 1 or len(adds) != 1:
        return None
    add = adds[0]
    ones = [t for t in add.inputs if _scalar(k, t) == 1.0]
    erfs = [e for e in (_inner(k, t, "Erf") for t in add.inputs) if e is not None]
    if len(ones) != 1 or len(erfs) != 1:
        return None
    scale = _inner(k, erfs[0].inputs[0], "Mul") or _inner(k, erfs[0].inputs[0], "Div")
    if scale is None:
        return None
    want = math.sqrt(2) if scale.op == "Div" else 1 / math.sqrt(2)
    x, c = scale.inputs
    if scale.op == "Mul" and _scalar(k, x) is not None:
        x, c = c, x
    cv = _scalar(k, c)
    rest = [t for t in leaves if t != halves[0] and t != add.outputs[0]]
    if cv is None or abs(cv - want) > 1e-6 * want or rest != [x] or k.ct(x) != "float" \
            or k.shape(x) != k.shape(node.outputs[0]):
        return None
    return x, [halves[0], ones[0], c]


def _erf(ct: str) -> str:
    """The C erf for ``ct``: the prelude's vectorisable rational ``sf_erff`` for float (see
    emit/ctext.py), tgmath's ``erf`` otherwise."""
    return "sf_erff" if ct == "float" else "erf"


def exp_fn(ct: str) -> str:
    """The C exp for ``ct``: the prelude's inline, vectorisable ``sf_expf`` for float (see
    emit/ctext.py), tgmath's ``exp`` otherwise.

    >>> exp_fn("float"), exp_fn("double")
    ('sf_expf', 'exp')
    """
    return "sf_expf" if ct == "float" else "exp"


def stat_type(k, x) -> str:
    """The C type of a row statistic of ``x`` (max, normaliser, mean, 1/stddev, kept
    exponentials): double for a double row, so a float64 model keeps float64 accuracy; else float.

    >>> class K:
    ...     def ct(self, t): return {"a": "double", "b": "float"}[t]
    >>> stat_type(K(), "a"), stat_type(K(), "b")
    ('double', 'float')
    """
    return "double" if k.ct(x) == "double" else "float"


UNARY = {
    "Relu": lambda at, a, ct: f"({a} > 0 ? {a} : {lit(0, ct)})",
    "Neg": lambda at, a, ct: f"(-{a})",
    "Abs": lambda at, a, ct: f"({a} < 0 ? -{a} : {a})",
    "Sqrt": lambda at, a, ct: f"sqrt({a})",
    "Reciprocal": lambda at, a, ct: f"({lit(1, ct)} / {a})",
    "Exp": lambda at, a, ct: f"{exp_fn(ct)}({a})",
    "Log": lambda at, a, ct: f"log({a})",
    "Tanh": lambda at, a, ct: f"tanh({a})",
    "Erf": lambda at, a, ct: f"{_erf(ct)}({a})",
    "Sin": lambda at, a, ct: f"sin({a})",
    "Cos": lambda at, a, ct: f"cos({a})",
    "Floor": lambda at, a, ct: f"floor({a})",
    "Ceil": lambda at, a, ct: f"ceil({a})",
    "Sigmoid": lambda at, a, ct: f"({lit(1, ct)} / ({lit(1, ct)} + {exp_fn(ct)}(-{a})))",
    "Identity": lambda at, a, ct: a,
    "Not": lambda at, a, ct: f"(!{a})",
    "Sign": lambda at, a, ct: f"({ct})(({a} > 0) - ({a} < 0))",
    "LeakyRelu": lambda at, a, ct: f"({a} < 0 ? {lit(at.get('alpha', 0.01), ct)} * {a} : {a})",
    "Elu": lambda at, a, ct: f"({a} < 0 ? {lit(at.get('alpha', 1.0), ct)} * ({exp_fn(ct)}({a}) - {lit(1, ct)}) : {a})",
    "HardSigmoid": lambda at, a, ct: (f"fmax({lit(0, ct)}, fmin({lit(1, ct)}, {lit(at.get('alpha', 0.2), ct)}"
                                       f" * {a} + {lit(at.get('beta', 0.5), ct)}))"),
    "Softplus": lambda at, a, ct: f"log({lit(1, ct)} + {exp_fn(ct)}({a}))",
    "Gelu": _gelu,
    # ATen-only rows (torch.export graphs)
    "Rsqrt": lambda at, a, ct: f"({lit(1, ct)} / sqrt({a}))",
    "Silu": lambda at, a, ct: f"({a} / ({lit(1, ct)} + {exp_fn(ct)}(-{a})))",
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
    "Sum": lambda k, at, v, ct, cts: " + ".join(v),
    "Mean": lambda k, at, v, ct, cts: f"({' + '.join(v)}) / {lit(len(v), ct)}",
    "Max": lambda k, at, v, ct, cts: _fold(k, v, ct, lambda a, b: f"({a} > {b} ? {a} : {b})"),
    "Min": lambda k, at, v, ct, cts: _fold(k, v, ct, lambda a, b: f"({a} < {b} ? {a} : {b})"),
    "PRelu": lambda k, at, v, ct, cts: f"({v[0]} < 0 ? {v[0]} * {v[1]} : {v[0]})",
    "And": lambda k, at, v, ct, cts: f"({v[0]} && {v[1]})",
    "Or": lambda k, at, v, ct, cts: f"({v[0]} || {v[1]})",
    "Mod": _mod,
    "Equal": lambda k, at, v, ct, cts: f"({v[0]} == {v[1]})",
    "NotEqual": lambda k, at, v, ct, cts: f"({v[0]} != {v[1]})",
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
    return k.value(x, reshape_index(idx, k.shape(out), k.shape(x), k.index))


def _transpose(k, node, pos, idx):
    perm = transpose_perm(node.attributes, len(idx))
    src = ["0"] * len(idx)
    for j, p in enumerate(perm):
        src[p] = idx[j]
    return k.value(node.inputs[0], tuple(src))


def _expand(k, node, pos, idx):
    k.param_values(node.inputs[1])
    return k.value(node.inputs[0], bmap(idx, k.shape(node.outputs[0]), k.shape(node.inputs[0])))


def _slice(k, node, pos, idx):
    values = [k.param_values(t) if (i and t) else None for i, t in enumerate(node.inputs)]
    src = list(idx)
    for a, s, _e, st in slice_params(node.attributes, input_specs(k, node), values):
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
    return lit(v, k.ct(node.outputs[0]))


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
    return f"({x} - {m}) * ({s} / sqrt({v} + {lit(at.get('epsilon', 1e-5), ct)})) + {b}"


def _clip(k, node, pos, idx):
    ct = k.ct(node.outputs[0])
    a = k.value(node.inputs[0], idx)
    lo = k.value(node.inputs[1], ()) if len(node.inputs) > 1 and node.inputs[1] else \
        (lit(node.attributes["min"], ct) if "min" in node.attributes else None)
    hi = k.value(node.inputs[2], ()) if len(node.inputs) > 2 and node.inputs[2] else \
        (lit(node.attributes["max"], ct) if "max" in node.attributes else None)
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


#: Exponents a Pow by a known constant is written out for (GELU's x^3, RMSNorm's x^2): multiplies
#: vectorise everywhere; pow() is a libm call per element without glibc's vector libm (gpt2_ts's two
#: x^3 took 12.7 of its 22.7 µs at 1 thread) and slower than a multiply with it.
POW_FORMS = {1.0: "{b}", 2.0: "{b} * {b}", 3.0: "{b} * {b} * {b}", 4.0: "({b} * {b}) * ({b} * {b})",
             0.5: "sqrt({b})", -1.0: "{one} / {b}", -2.0: "{one} / ({b} * {b})", -0.5: "{one} / sqrt({b})"}


def _pow(k, node, pos, idx):
    """Pow; a one-element constant exponent of :data:`POW_FORMS` with a float base is written out
    (the program checks at run time that the exponent is the value it was built with). The
    instrumented build keeps the generic form, whose exponent load the byte counters see."""
    out = k.shape(node.outputs[0])
    ct = k.ct(node.outputs[0])
    base, e = node.inputs[0], node.inputs[1]
    b = k.value(base, bmap(idx, out, k.shape(base)))
    val = k.graph.constant_value(e)
    if not k.counters and ct in ("float", "double") and k.ct(base) == ct and val is not None and val.size == 1 \
            and float(val.reshape(-1)[0]) in POW_FORMS:
        k.param_values(e)
        return "(" + POW_FORMS[float(val.reshape(-1)[0])].format(b=b, one=lit(1, ct)) + ")"
    return f"({ct})pow({b}, {k.value(e, bmap(idx, out, k.shape(e)))})"


STRUCTURED = {"BatchNormalization": _batchnorm, "Clip": _clip, "Cast": _cast, "Pow": _pow}
