"""C expressions and types: dtype -> C type, literals, row-major strides and offsets, broadcast
index maps and a reduction's input index, a parameter's run-time check, where a loop-invariant
load is declared. The leaf of the emitter: every other emit module builds on it, it builds on
none.

>>> linear((4, 1, 8), ("i0", "0", "j")), lit(0.5, "float"), bmap(("i", "j"), (2, 3), (3,))
('i0*8 + j', '0.5f', ('j',))
"""
from __future__ import annotations

import math
import re
from typing import Optional, Sequence

from ..errors import EmitError
from ..graph import Graph

#: C type of each supported dtype (bool is one byte, as in NumPy).
CTYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t",
          "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "uint16": "uint16_t",
          "uint32": "uint32_t", "uint64": "uint64_t", "bool": "uint8_t"}

#: Bytes of each C type of :data:`CTYPES`.
CSIZES = {"float": 4, "double": 8, "int64_t": 8, "int32_t": 4, "int16_t": 2, "int8_t": 1, "uint8_t": 1,
          "uint16_t": 2, "uint32_t": 4, "uint64_t": 8}

#: A gather index out of range, seen by one of several threads: an atomic store (a GCC builtin,
#: not ``#pragma omp atomic``, which a build without OpenMP -- the sanitizer's -- rejects under
#: -Werror as an unknown pragma).
SET_INDEX_ERROR = "__atomic_store_n(&sf_error, 3, __ATOMIC_RELAXED);"


def ctype(graph: Graph, tensor: str) -> str:
    """C type of a tensor; EmitError for a dtype the emitter does not support.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"m": {"shape": [2], "dtype": "bool"}}, "inputs": ["m"],
    ...     "outputs": ["y"], "nodes": [{"name": "n", "op": "Not", "inputs": ["m"], "outputs": ["y"]}]})
    >>> ctype(g, "m"), ctype(g, "y")
    ('uint8_t', 'uint8_t')
    """
    dtype = graph.tensors[tensor].dtype
    if dtype not in CTYPES:
        raise EmitError(f"tensor {tensor!r}: dtype {dtype} is not supported by the C emitter")
    return CTYPES[dtype]


def lit(value, ct: str) -> str:
    """A C literal of type ``ct``.

    >>> lit(0.5, "float"), lit(float("-inf"), "float"), lit(3, "int64_t"), lit(-2**63, "int64_t")
    ('0.5f', '(-INFINITY)', '3', '(-9223372036854775807LL - 1)')
    """
    if ct in ("float", "double"):
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return repr(v) + ("f" if ct == "float" else "")
    v = int(value)
    if v == -2 ** 63:
        return "(-9223372036854775807LL - 1)"
    if v >= 2 ** 63:
        return f"{v}ULL"
    return str(v) if -2 ** 31 < v < 2 ** 31 else f"{v}LL"


def is_simple(expr: str) -> bool:
    """Whether a C expression is a bare name or integer (needs no temporary, no parentheses).

    >>> is_simple("i3"), is_simple("-2"), is_simple("i + 1")
    (True, True, False)
    """
    return expr.isidentifier() or expr.lstrip("-").isdigit()


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides.

    >>> strides((2, 3, 4))
    [12, 4, 1]
    """
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def linear(shape: Sequence[int], idx: Sequence[str]) -> str:
    """C expression of the row-major offset of ``idx`` in ``shape`` (size-1 dims skipped).

    >>> linear((4, 1, 8), ("i0", "0", "j"))
    'i0*8 + j'
    """
    terms = []
    for d, s, i in zip(shape, strides(shape), idx):
        if d == 1 or i == "0":
            continue
        i = i if is_simple(i) else f"({i})"
        terms.append(i if s == 1 else f"{i}*{s}")
    return " + ".join(terms) or "0"


def bmap(idx: Sequence[str], out_shape: Sequence[int], in_shape: Sequence[int]) -> tuple[str, ...]:
    """Index of a broadcast input (right-aligned; size-1 dims read index 0).

    >>> bmap(("i", "j", "k"), (2, 3, 4), (3, 1))
    ('j', '0')
    """
    r = len(out_shape) - len(in_shape)
    return tuple("0" if d == 1 else idx[r + j] for j, d in enumerate(in_shape))


def delinearize(lin: str, shape: Sequence[int]) -> tuple[str, ...]:
    """Index expressions in ``shape`` of the row-major offset ``lin`` (a simple expression).

    >>> delinearize("t", (2, 1, 4))
    ('t / 4', '0', '(t) % 4')
    """
    out = []
    for j, (d, s) in enumerate(zip(shape, strides(shape))):
        if d == 1:
            out.append("0")
        else:
            e = lin if s == 1 else f"{lin} / {s}"
            out.append(e if j == 0 else f"({e}) % {d}")
    return tuple(out)


def reshape_index(idx: Sequence[str], src: Sequence[int], dst: Sequence[int], name) -> tuple[str, ...]:
    """Index in ``dst`` of the element at ``idx`` in ``src`` (same elements, row-major): dims both
    shapes share at the front and back keep their index; only the middle is linearised (through
    ``name``, which binds an expression to a simple one) and split. A channel shuffle's [C] <->
    [g, C/g] then costs one division per channel, hoisted out of the row loops, not a chain of
    them per element.

    >>> reshape_index(("n", "c", "h"), (1, 6, 5), (1, 2, 3, 5), lambda e: "t")
    ('n', 't / 3', '(t) % 3', 'h')
    """
    if [d for d in src if d != 1] == [d for d in dst if d != 1]:
        it = iter([i for i, d in zip(idx, src) if d != 1])
        return tuple("0" if d == 1 else next(it) for d in dst)
    n = min(len(src), len(dst))
    p = next((i for i in range(n) if src[i] != dst[i]), n)
    q = next((i for i in range(n - p) if src[-1 - i] != dst[-1 - i]), n - p)
    mid = delinearize(name(linear(src[p:len(src) - q], idx[p:len(idx) - q])), dst[p:len(dst) - q])
    return tuple(idx[:p]) + mid + tuple(idx[len(idx) - q:])


def attr_str(v, default: str) -> str:
    """A string attribute (ONNX may give bytes).

    >>> attr_str(b"SAME_UPPER", "NOTSET"), attr_str(None, "NOTSET")
    ('SAME_UPPER', 'NOTSET')
    """
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def input_index(xs, idx, axes, keep, red):
    """The input index of a reduction's output index ``idx`` at reduced-axes index ``red`` (input
    of shape ``xs``, reduced ``axes``, ``keep`` the reduced dims in the output).

    >>> input_index((2, 3, 4), ("i",), [1, 2], 0, ("j", "k"))
    ('i', 'j', 'k')
    """
    if keep:
        full = [None if i in axes else idx[i] for i in range(len(xs))]
    else:
        it = iter(idx)
        full = [None if i in axes else next(it) for i in range(len(xs))]
    for a, r in zip(axes, red):
        full[a] = r
    return tuple(full)


def param_check(graph: Graph, tensor: str, b: int, load: str) -> list[str]:
    """C lines that return 1 when parameter ``tensor`` (buffer ``b``, element ``q`` read by the C
    expression ``load``) differs from the value the program was built with.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 3]}, "s": {"shape": [1], "dtype": "int64",
    ...     "constant": True, "value": [6]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Reshape", "inputs": ["x", "s"], "outputs": ["y"]}]})
    >>> param_check(g, "s", 1, "b1[q]")
    ['static const int64_t p1[1] = {6};', 'for (long q = 0; q < 1; q++) if (b1[q] != p1[q]) return 1;']
    """
    flat = graph.constant_value(tensor).reshape(-1)
    ct = ctype(graph, tensor)
    return [f"static const {ct} p{b}[{max(len(flat), 1)}] = {{{', '.join(lit(x, ct) for x in flat.tolist()) or '0'}}};",
            f"for (long q = 0; q < {len(flat)}; q++) if ({load} != p{b}[q]) return 1;"]


def hoist_point(lines: Sequence[str], index: str) -> Optional[tuple[str, str]]:
    """Where a load at C index ``index`` (enclosing loop variables only) is declared once: the
    line defining the innermost of its variables -- or, for a loop of a collapsed nest, the
    nest's last loop, which must stay perfectly nested -- and the indentation of a declaration
    after it; None when the index names no variable or one that ``lines`` does not define.

    >>> hoist_point(["for (long i1 = 0; i1 < 4; i1++) {", "    for (long i2 = 0; i2 < 8; i2++) {"], "i1*2")
    ('for (long i1 = 0; i1 < 4; i1++) {', '    ')
    >>> hoist_point(["#pragma omp for collapse(2)", "for (long i1 = 0; i1 < 4; i1++) {",
    ...              "for (long i2 = 0; i2 < 8; i2++) {"], "i1")[0]
    'for (long i2 = 0; i2 < 8; i2++) {'
    """
    defs = {}
    for i, ln in enumerate(lines):
        m = re.match(r"\s*(?:for \(long|const long(?: SF_UNUSED)?|long) ([a-z]+\d+) = ", ln)
        if m:
            defs[m.group(1)] = i
    names = set(re.findall(r"\b[a-z]+\d+\b", index))
    if not names or not names <= defs.keys():
        return None
    at = top = max(defs[v] for v in names)
    while top > 0 and lines[top - 1].lstrip().startswith("for ("):
        top -= 1
    c = re.search(r"collapse\((\d+)\)", lines[top - 1]) if top > 0 else None
    if c and lines[at].lstrip().startswith("for (") and at < top + int(c.group(1)) - 1:
        at = top + int(c.group(1)) - 1
    line = lines[at]
    return line, line[:len(line) - len(line.lstrip())] + ("    " if line.rstrip().endswith("{") else "")


def split_args(text: str) -> list:
    """A C argument list (or a declaration's declarators) split at its top-level commas.

    >>> split_args("E1, m2, 4912, &b0[sf_min(a, b)], pf3")
    ['E1', 'm2', '4912', '&b0[sf_min(a, b)]', 'pf3']
    """
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch in "([") - (ch in ")]")
        cur += ch
    return out + [cur.strip()]
