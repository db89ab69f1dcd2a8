"""What the anchor tiles share: the largest stack tile, how many trailing dims a tile spans, the
open/close of a plain tile, and the geometry (strides, dilations, leading pads) of a Conv or
pooling window. A tile is a row of an anchor's output (a Conv's or pool's output plane) computed
in a stack array before the inner loops of a pass that run the fused epilogue over it.

Apart from the op-specific tiles (:mod:`~solverfuse.emit.gemm_tiles`,
:mod:`~solverfuse.emit.conv_tiles`, :mod:`~solverfuse.emit.pool_tiles`) so that they share one home.

>>> window_geometry({"pads": [1, 0, 2, 1]}, [5, 5], [3, 3], [5, 3])
([1, 1], [1, 1], [1, 0])
>>> round_up(33, 32)
64
"""
from __future__ import annotations

from typing import Sequence

from ..ops import numel
from .cexpr import attr_str as _attr_str

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


def tile_open(k, t, d=1):
    ct, n = k.ct(t), numel(k.shape(t)[-d:])
    arr, j = k.fresh("T"), k.fresh("j")
    k.line(f"{ct} {arr}[{n}] SF_ALIGN64;")
    k.line(f"for (long {j} = 0; {j} < {n}; {j}++) {arr}[{j}] = 0;")
    return arr, ct, n


def tile_done(k, t, outer, arr, d=1):
    """From here on, ``t`` at (outer..., j...) is ``arr[linear(j...)]`` (last d dims)."""
    k.set_tile(t, tuple("0" if n == 1 else k.index(i) for i, n in zip(outer, k.shape(t)[:-d])), arr, d)


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


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
