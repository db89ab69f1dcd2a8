"""Ops that read materialised inputs (cost rule: their inputs always come from global memory):
anchors (MatMul/Gemm/Conv), windows (MaxPool/AveragePool/LRN) and Gather.

Each has a per-element form for :func:`solverfuse.emit.lowering.code_for_op` (an inner loop: a dot
product, a window, an index lookup); anchors also have ``TILES``: a row of the output (a Conv's
output plane, :func:`~solverfuse.emit.tiles.tile_rank`) accumulated in a stack array with
bounds-free, vectorisable inner loops, used when a pass runs over the anchor's own shape -- the
fused-epilogue case. The fast form of those tiles is register-blocked
(:func:`~solverfuse.emit.conv_tiles.conv_blocking`, :func:`~solverfuse.emit.gemm_tiles.matmul_blocking`):
several output channels/rows x 32 positions of accumulators stay in vector registers through the
whole reduction, in helper functions shared by all kernels of a program (``sf_conv_tile<mb>``,
``sf_mm_tile<mb>``); the epilogue then reads the block row by row. Weights are packed once at
load: Conv filters by output-channel block, MatMul/Gemm B (transposed linear-layer weights too) in
32-column panels; a computed B (attention) is packed per run. One-row/one-channel tiles (GEMV,
depthwise conv) are GNU-vector loops. Pooling windows (MaxPool/AveragePool) get plane tiles too
(:func:`~solverfuse.emit.pool_tiles.tile_pool`: per tap one bounds-free loop). Instrumented
(counter) builds keep the plain tiles.

Where: :mod:`~solverfuse.emit.tiles` (shared tile helpers, window geometry),
:mod:`~solverfuse.emit.gemm_tiles` (MatMul/Gemm), :mod:`~solverfuse.emit.conv_tiles` (Conv),
:mod:`~solverfuse.emit.pool_tiles` (pooling, LRN); this module keeps Gather and the two tables,
``TILES`` (op -> tile) and ``SPECIAL_ANCHORS`` (op -> per-element form).

>>> sorted(TILES), "Gather" in SPECIAL_ANCHORS
(['AveragePool', 'Conv', 'Gemm', 'LRN', 'MatMul', 'MaxPool'], True)
"""
from __future__ import annotations

from .cexpr import SET_INDEX_ERROR
from .conv_tiles import conv_element, tile_conv
from .gemm_tiles import gemm_element, matmul_element, tile_gemm, tile_matmul
from .pool_tiles import avgpool_element, lrn_element, maxpool_element, tile_lrn, tile_pool

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
        k.line(SET_INDEX_ERROR if k.threads > 1 else "sf_error = 3;")
        k.line(f"{ix} = 0;")
    k.cache[key] = ix
    return ix


TILES = {"MatMul": tile_matmul, "Gemm": tile_gemm, "Conv": tile_conv, "MaxPool": tile_pool, "AveragePool": tile_pool,
         "LRN": tile_lrn}


SPECIAL_ANCHORS = {"MatMul": matmul_element, "Gemm": gemm_element, "Conv": conv_element, "MaxPool": maxpool_element,
                   "AveragePool": avgpool_element, "LRN": lrn_element, "Gather": _gather}
