"""A Conv whose output plane is one position and whose kernel covers its whole input (a 1x1 conv
on a 1x1 plane: DenseNet's and SqueezeNet-style classifiers, the squeeze-excite convs of
EfficientNet; or a kernel as large as its unpadded input: a linear layer written as a conv) is a
matrix-vector product per batch row: ``y[n, m] = b[m] + sum_r W[m, r] x[n, r]`` over
r < C * kernel positions, W's rows and x's contiguous. It runs as the one-row MatMul tile
(``sf_mm_tile1``: the filters packed once at load in panels of CHUNK output channels, each panel
one contiguous stream, its sums in registers) instead of the per-element window loop (a scalar
dot product per channel: DenseNet's classifier, 4 MB of weights, ran at 2.6 GFLOP/s).

Apart from :mod:`~solverfuse.emit.conv_tiles` (the plane tiles) and
:mod:`~solverfuse.emit.gemm_tiles` (whose helpers it calls): it decides only when a Conv is a GEMV
and emits its tile; the pass around it is :func:`solverfuse.emit.passes.emit_loop`'s.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.emit.kernel import Kernel
>>> g = load_graph({"tensors": {"x": {"shape": [1, 64, 1, 1]}, "w": {"shape": [10, 64, 1, 1], "constant": True}},
...     "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "c", "op": "Conv", "inputs": ["x", "w"], "outputs": ["y"]}]})
>>> k = Kernel(g, ["c"], 0, {"x": 0, "w": 1, "y": 2}, counters=False, threads=1, lower=None)
>>> gemv_conv(k, (1, 10, 1, 1), frozenset({"y"})), gemv_depth(k, g.index.node["c"])
('y', 64)
"""
from __future__ import annotations

from typing import Optional

from ..ops import numel
from .ctile import CHUNK
from .tiles import MAX_TILE, round_up, window_geometry


def gemv_depth(k, node) -> int:
    """K of a Conv that is a matrix-vector product per batch row (channels x kernel positions),
    or 0: float, one group, every output plane dim 1, the kernel as large as the input along
    every spatial dim and no leading pad (then the one window reads all of x[n] in W's order)."""
    if node.op != "Conv" or len(node.inputs) < 2 or node.attributes.get("group", 1) != 1:
        return 0
    x, w, out = (k.shape(t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if len(out) < 3 or any(d != 1 for d in out[2:]) or tuple(w[2:]) != tuple(x[2:]) or w[1] != x[1]:
        return 0
    kernel = list(node.attributes.get("kernel_shape", w[2:]))
    _, dil, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    if any(p != 0 for p in pb) or any(d != 1 for s, d in zip(kernel, dil) if s > 1):
        return 0
    ts = [t for t in node.inputs[:3] if t] + [node.outputs[0]]
    if any(k.ct(t) != "float" for t in ts):
        return 0
    return numel(x[1:])


def gemv_conv(k, shape: tuple, deps: frozenset) -> Optional[str]:
    """The output of an in-group Conv of ``deps`` that a pass over ``shape`` (its own shape) can
    compute with the GEMV tile (:func:`gemv_depth`), or None (instrumented builds: the plain
    forms, whose reads the counters follow; more output channels than a stack tile holds)."""
    if k.counters or len(shape) < 3 or shape[1] < 2 or round_up(shape[1], CHUNK) > 4 * MAX_TILE:
        return None
    g = k.graph
    for t in sorted(deps, key=lambda t: g.index.position[g.index.producer[t]]):
        node = g.index.node[g.index.producer[t]]
        if k.shape(t) == shape and gemv_depth(k, node):
            return t
    return None


def gemv_weights(k, node) -> str:
    """The Conv's filters ``[M][K]`` packed in panels of CHUNK output channels (``sf_pack_b``
    with B = W transposed: ``[K][M]``, zero channels past M): once per set of constants when the
    filters are constant, else into kernel-local scratch at every run. Its C name."""
    w = node.inputs[1]
    m, kk = k.shape(w)[0], gemv_depth(k, node)
    m2 = round_up(m, CHUNK)
    call = f"sf_pack_b({{dst}}, {{b}}, 1, {kk}, {m}, {m2}, 1, {CHUNK});"
    k.use_helper("sf_pack_b")
    what = "Conv filters (a matrix-vector product) packed in panels of output channels"
    if k.is_constant(w):
        return k.packed("float", kk * m2, what, call, {"b": w})
    arr = k.alloc("float", kk * m2, what)
    k.line(call.format(dst=arr, b=k.ptr(w, "r")))
    return arr


def tile_gemv(k, node, n: str, bsrc: str, cols: tuple) -> str:
    """Output channels ``cols`` (first, end: C expressions, multiples of CHUNK) of the Conv at
    batch row ``n`` into a 64-byte aligned stack tile ``T[1][M rounded up]`` (no bias); its name."""
    x = node.inputs[0]
    m2 = round_up(k.shape(node.outputs[0])[1], CHUNK)
    kk = gemv_depth(k, node)
    arr = k.fresh("T")
    k.line(f"float {arr}[1][{m2}] SF_ALIGN64;")
    k.use_helper("sf_mm_tile1")
    base = f"{k.ptr(x, 'r')} + {n}*{kk}" if n != "0" else k.ptr(x, "r")
    k.line(f"sf_mm_tile1(&{arr}[0][0], {cols[0]}, {cols[1]}, {base}, {kk}, {bsrc});")
    return arr
