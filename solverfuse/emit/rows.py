"""The row loop: a group whose written tensors share one shape S, whose reductions are all over
the last axis (Softmax / LayerNorm / Reduce* rows) and whose values are all read at the current
row runs as ONE loop over the rows S[:-1] -- anchor row tile, row statistics as scalars, then
every output of the row. :func:`row_fusable` decides, :func:`emit_rows` emits.

Apart from the general passes (:mod:`~solverfuse.emit.schedule`) because it is a different
layout of the whole kernel, tried first.

>>> sorted(_NARROW)
['bool', 'int8', 'uint8']
"""
from __future__ import annotations

import math
from typing import Optional

from ..ops import OPS
from . import anchors, gemm_tiles, norm_stats, reductions, row_loop, row_stream
from .ctile import CHUNK
from .tiles import MAX_TILE, round_up
from .cexpr import attr_str, bmap, linear
from .elementwise import erf_gelu
from .kernel import Kernel, inline_deps
from .passes import MATERIALISED_OPS, STATS_OPS, anchors_for, emit_loop

def row_fusable(k: Kernel) -> Optional[tuple]:
    """The shape S when the whole group can run as ONE loop over the rows S[:-1]: every written
    tensor has shape S, every reduction is a Softmax/LogSoftmax/LayerNormalization or Reduce* over
    the last axis of an S-shaped input, every anchor/window output has shape S (anchors get a row tile),
    and no layout op remaps indices (every value is read at the current row). Then the row
    statistics are scalars and the anchor row lives in a stack tile. Written tensors and ops that
    are pure (:func:`_pure_tensors`) are exempt: a GPT-2 causal mask (Cast, And, Expand, written
    too) beside its attention scores."""
    g = k.graph
    pure = _pure_tensors(k)
    shapes = {k.shape(t) for t in k.writes if t not in pure}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    if not shape or not 1 < shape[-1] <= MAX_TILE:
        return None
    has_stats = False
    for v in k.nodes:
        node = g.index.node[v]
        role = OPS[node.op].role if node.op in OPS else "opaque"
        if all(t in pure for t in node.outputs if t):
            continue  # recomputed from global reads at any index: no statistics to lose
        if node.op in MATERIALISED_OPS:
            # a reduction over the last axis of an S-shaped input is a row scalar
            if k.shape(node.inputs[0]) != shape or not reductions.reduce_last_axis(k, node):
                return None
            has_stats = True
            continue
        if role == "injective" and node.op not in ("Identity", "Dropout"):
            return None  # an index map could read another row, whose statistics are gone
        if node.op in STATS_OPS:
            if k.shape(node.inputs[0]) != shape or not reductions.stats_last_axis(k, node):
                return None
            has_stats = True
        elif role in ("anchor", "window") and (k.shape(node.outputs[0]) != shape or
                                               (role == "anchor" and node.op not in anchors.TILES)):
            return None
    return shape if has_stats else None


def _pure_tensors(k: Kernel) -> frozenset:
    """In-group tensors computed from global reads by elementwise, broadcast, layout and gather
    ops only (no anchor, window, statistics or reduction upstream in the group): they may be
    evaluated at any index, in any pass, by recomputing."""
    g = k.graph
    impure: set = set()
    pure: set = set()
    for v in k.nodes:
        node = g.index.node[v]
        role = OPS[node.op].role if node.op in OPS else "opaque"
        ins = [t for t in node.inputs if t and g.index.producer.get(t) in k.members]
        bad = (role not in ("elementwise", "broadcast", "injective", "gather") or node.op in STATS_OPS
               or node.op in MATERIALISED_OPS or v in k.materialised or any(t in impure for t in ins))
        (impure if bad else pure).update(t for t in node.outputs if t)
    return frozenset(pure)


#: 1-byte dtypes: a loop that loads or stores one is vectorised by bytes (see :func:`_narrow_rows`).
_NARROW = frozenset({"bool", "uint8", "int8"})


def _narrow_rows(k: Kernel, shape: tuple, deps: frozenset, pure: frozenset, row: tuple) -> None:
    """Before a row's statistics: each pure float tensor of the row whose op reads a 1-byte
    tensor (a bool attention mask selected into -inf/0 by Where) into a stack row array, read
    by the statistics and output loops. A 1-byte load in those loops makes GCC size its vectors
    by bytes (64 lanes), more than a short row has, and leave them scalar: 1.1 of 2.0 µs of a
    masked GPT-2 score kernel."""
    g = k.graph
    for t in sorted(deps, key=lambda t: g.index.position[g.index.producer[t]]):
        ts = k.shape(t)
        if t not in pure or k.ct(t) not in ("float", "double") or not ts or ts[-1] != shape[-1] \
                or len(ts) > len(shape) or k.has_tile(t):
            continue
        node = g.index.node[g.index.producer[t]]
        if not any(g.tensors[u].dtype in _NARROW for u in node.inputs if u):
            continue
        at = bmap(tuple(row) + ("<j>",), shape, ts)[:-1]
        arr = k.fresh("M")
        k.line(f"{k.ct(t)} {arr}[{shape[-1]}] SF_ALIGN64;")
        with k.loops(shape[-1:]) as (j,):
            idx = tuple(at) + (j,)
            if node.op == "Where" and all(k.ct(u) == k.ct(t) for u in node.inputs[1:3]):
                _bit_select(k, node, ts, idx, f"{arr}[{j}]")
            else:
                k.line(f"{arr}[{j}] = {k.value(t, idx)};")
        k.set_tile(t, tuple("0" if d == 1 else k.index(i) for i, d in zip(at, ts[:-1])), arr, 1)


def _row_invariants(k: Kernel, shape: tuple, deps: frozenset, pure: frozenset, row: tuple) -> None:
    """Before a row's loops: the index of each Gather whose index does not change along the row
    (an embedding's token, position or token-type ids) checked once, at the row, not per element
    inside the row's loops (the check's error store kept them scalar: roberta's embedding kernel
    ran 0.75 us fused, 0.24 us apart)."""
    g = k.graph
    for t in sorted(deps, key=lambda t: g.index.position[g.index.producer[t]]):
        node = g.index.node[g.index.producer[t]]
        if t not in pure or node.op != "Gather" or k.shape(t) != shape:
            continue
        axis = node.attributes.get("axis", 0) % len(k.shape(node.inputs[0]))
        q = len(k.shape(node.inputs[1]))
        if axis + q < len(shape):  # the index does not change along the row
            at = tuple("0" if n == 1 else i for i, n in zip(tuple(row)[axis:axis + q], k.shape(node.inputs[1])))
            anchors.gather_index(k, node, at)


def _bit_select(k: Kernel, node, shape: tuple, idx: tuple, dst: str) -> None:
    """``dst = cond ? x : y`` of a Where at ``idx`` as a bitwise select of the two values' bits
    (exact): GCC leaves a select on a byte condition in a short row as a branch, mispredicted
    along a causal mask (1.15 µs -> 0.17 µs for 32 rows of 8 in a micro-benchmark)."""
    cond, x, y = (k.value(u, bmap(idx, shape, k.shape(u))) for u in node.inputs[:3])
    ut = "uint64_t" if k.ct(node.outputs[0]) == "double" else "uint32_t"
    km, ux, uy = k.fresh("km"), k.fresh("ux"), k.fresh("uy")
    k.line(f"const {ut} {km} = -({ut})({cond} != 0); {ut} {ux}, {uy};")
    k.line(f"memcpy(&{ux}, &{x}, sizeof {ux}); memcpy(&{uy}, &{y}, sizeof {uy});")
    k.line(f"{ux} = ({ux} & {km}) | ({uy} & ~{km}); memcpy(&{dst}, &{ux}, sizeof {ux});")


def _prefetching(k: Kernel, writes: list) -> bool:
    """Whether a row loop's output loop prefetches the next row: a LayerNormalization row (its
    output loop is the long one: normalise, affine, and often an erf GELU), not instrumented."""
    return not k.counters and any(k.graph.index.node[v].op == "LayerNormalization" for v in k.nodes)


def _row_outputs(k: Kernel, writes: list, idx: tuple) -> None:
    """Inside a row loop's output loop: compute and store every written tensor at ``idx``."""
    for t in writes:
        k.store(t, idx, row_stream.output_value(k, t, idx))


def _gelu_output(k: Kernel, writes: list) -> Optional[tuple]:
    """(t, x) when the row loop writes one float tensor t = GELU(x), erf form (a Gelu op or the
    ops :func:`~solverfuse.emit.elementwise.erf_gelu` folds; its constants checked at run time),
    else None."""
    if len(writes) != 1 or k.counters or k.ct(writes[0]) != "float":
        return None
    node = k.graph.index.node.get(k.graph.index.producer.get(writes[0]))
    if node is None or node.name not in k.members:
        return None
    if node.op == "Gelu" and attr_str(node.attributes.get("approximate"), "none") == "none" \
            and k.ct(node.inputs[0]) == "float":
        return writes[0], node.inputs[0]
    found = erf_gelu(k, node)
    if found is None:
        return None
    for c in found[1]:
        k.param_values(c)
    return writes[0], found[0]


#: Values of a row's GELU output per block (:func:`_gelu_block`): AVX2's sf_geluf is a chain of
#: ~40 cycles (two Horner polynomials and a division), and 8 vectors of a block overlap where the
#: 2 of a block of 16 did not (residual_layernorm_gelu in L1, Zen 3: 0.71 -> 0.67 ns per element).
GELU_BLOCK = 64


def _gelu_block(k: Kernel, t: str, x: str, outer: tuple, j0: str, hi: str, writes: list) -> None:
    """Inside the output loop's block [j0, hi) of at most ``GELU_BLOCK``: the GELU's input into a
    stack block, then ``sf_gelu_block`` (AVX-512: a per-interval polynomial read by vpermps, 12
    operations and 5 permutes per 16 lanes where sf_geluf takes 16, residual_layernorm_gelu's
    output loop in L1 0.34 -> 0.28 ns per element; AVX2: sf_gelu8, sf_geluf's operations on 8
    lanes, streamed output written with non-temporal stores); other targets keep the loop calling
    sf_geluf."""
    k.use_helper("sf_gelu_block")
    k.pragma("#if defined(SF_AVX512_TILES) || defined(SF_AVX2_TILES)")
    g, j = k.fresh("G"), k.fresh("i")
    k.line(f"float {g}[{GELU_BLOCK}] SF_ALIGN64;")
    with k.block(f"for (long {j} = {j0}; {j} < {hi}; {j}++)"):
        k.line(f"{g}[{j} - {j0}] = {k.value(x, bmap(outer + (j,), k.shape(t), k.shape(x)))};")
    size = str(GELU_BLOCK) if hi == f"{j0} + {GELU_BLOCK}" else f"{hi} - {j0}"
    stream = int(row_stream.streamed(k, t))
    k.line(f"sf_gelu_block(&{k.ptr(t, 'w')}[{linear(k.shape(t), outer + (j0,))}], {g}, {size}, {stream});")
    k.pragma("#else")
    j = k.fresh("i")
    with k.block(f"for (long {j} = {j0}; {j} < {hi}; {j}++)"):
        _row_outputs(k, writes, outer + (j,))
    k.pragma("#endif")


def _tile_by_column_shares(k: Kernel, anchor, shape: tuple, mb: int, bsrc: str, share: int) -> str:
    """The MatMul/Gemm anchor's whole output when it is one block of ``mb`` rows (a linear layer at
    batch 1 before a Softmax: every CNN classifier's) into one tile, the threads sharing its
    columns (:func:`~solverfuse.emit.gemm_tiles.column_share`: each share a contiguous stream of
    packed B, its bias added there; A packed once, :func:`~solverfuse.emit.gemm_tiles.pack_a`,
    where the block has several rows); its name. The row statistics and outputs then run on one
    thread over the hot tile. As one block of the row loop the kernel ran on one thread: ResNet-50's
    and AlexNet's last kernels (8 and 16 MB of weights, memory-bound) took as long at 2 threads as
    at 1."""
    n2 = round_up(gemm_tiles.mm_columns(k, anchor), CHUNK)
    arr = k.fresh("T")
    # an arena slot, not a stack array: in the run's thread team (emit.team) every thread writes
    # its columns into it and thread 0 reads them all
    k.line(f"float (*const {arr})[{n2}] = (float (*)[{n2}]){k.alloc('float', mb * n2, 'the shared tile')};")
    packed = gemm_tiles.pack_a(k, anchor, mb) if mb > 1 else None
    with k.loops((-(-n2 // share),), parallel=True, dynamic=True) as (s,):
        q0 = k.index(f"{s}*{share}") if s != "0" else "0"
        q1 = k.index(f"sf_min({q0} + {share}, {n2})")
        gemm_tiles.tile_matmul_blocked(k, anchor, tuple("0" for _ in shape[:-2]), "0", bsrc, mb, (q0, q1),
                                       into=arr, packed=packed)
    return arr


def emit_rows(k: Kernel, shape: tuple) -> None:
    """The row-fused kernel: per row, anchor tiles, then each reduction's statistics (scalars, an
    inner loop over the row), then one inner loop storing every written tensor. A MatMul anchor
    that takes the register-blocked tile runs over blocks of rows (the tile of a block, then the
    rows of the block), so fusing a row reduction into it keeps the fast tile; with threads and one
    block of rows in all, the threads share the block's columns (:func:`_tile_by_column_shares`)."""
    g = k.graph
    memo: dict = {}
    pure = _pure_tensors(k)
    side = [t for t in k.writes if t in pure and (k.shape(t) != shape or g.tensors[t].dtype in _NARROW)]
    writes = [t for t in k.writes if t not in side]
    by_shape: dict[tuple, list[str]] = {}
    for t in side:
        by_shape.setdefault(k.shape(t), []).append(t)
    for sshape, ts in by_shape.items():  # pure side outputs: a plain pass each, before the rows
        sdeps = frozenset().union(*(inline_deps(k, t, memo) for t in ts))
        k.line(f"/* pass: {len(ts)} written tensor(s) of shape {list(sshape)} computed from global reads */")
        emit_loop(k, sshape, sdeps, lambda idx, ts=ts: [k.store(t, idx, k.value(t, idx)) for t in ts])
    deps = frozenset().union(*(inline_deps(k, t, memo) for t in writes))
    tiled = anchors_for(k, shape, deps)
    k.line(f"/* one row loop over {list(shape[:-1])}: row tiles, row statistics, outputs */")
    before = set(k.tiles)
    pend: list = []   # a softmax output deferred to the next row's exponentials (row_stream)
    fence: list = []  # the row's outputs streamed (row_stream)
    anchor = g.index.node[g.index.producer[tiled[0]]] if tiled else None

    def row(outer):
        mark, streams = len(k.lines), row_loop.row_streams(k, writes)
        _row_invariants(k, shape, deps, pure, outer)
        _narrow_rows(k, shape, deps, pure, outer)
        for v in k.nodes:
            node = g.index.node[v]
            if node.op in STATS_OPS:
                reductions.STATS[node.op](k, node, row=tuple(outer))
            elif node.op in MATERIALISED_OPS:
                reductions.reduce_row(k, node, tuple(outer))
        if anchor is None:
            pend.extend(row_stream.defer_output(k, shape, tuple(outer), writes, mark))
            if pend:
                return
        prefetched = row_loop.prefetches_next_row(k.lines[mark:]) or not _prefetching(k, writes)
        streamed = [t for t in writes if row_stream.streamed(k, t)] if prefetched else []
        if streamed:
            row_stream.stream_outputs(k, shape, tuple(outer), writes, streamed)
            fence.append(True)
            return
        if prefetched:
            with k.loops(shape[-1:]) as inner:
                _row_outputs(k, writes, tuple(outer) + tuple(inner))
            return
        # no statistics loop of the row prefetched the next row: the output loop does, one cache
        # line of each input stream per 16 outputs (see row_loop.output_prefetch; a GELU's blocks of
        # GELU_BLOCK prefetch their lines at the block's start)
        n, j0, j = shape[-1], k.fresh("j"), k.fresh("i")
        far = [t for t in streams if row_loop.from_memory(k, t)]
        gelu = _gelu_output(k, writes)
        step = GELU_BLOCK if gelu is not None else 16
        with k.block(f"for (long {j0} = 0; {j0} < {n}; {j0} += {step})"):
            for q in range(0, min(step, n), 16):
                row_loop.output_prefetch(k, streams, tuple(outer), f"{j0} + {q}" if q else j0, far)
            hi = f"{j0} + {step}" if n % step == 0 else f"sf_min({j0} + {step}, {n})"
            if gelu is not None:
                _gelu_block(k, *gelu, tuple(outer), j0, hi, writes)
                if row_stream.streamed(k, gelu[0]):
                    fence.append(True)
                return
            with k.block(f"for (long {j} = {j0}; {j} < {hi}; {j}++)"):
                _row_outputs(k, writes, tuple(outer) + (j,))
    mb = gemm_tiles.matmul_blocking(k, anchor) if anchor is not None and anchor.op in ("MatMul", "Gemm") else None
    share = 0
    if mb is not None:
        mb = gemm_tiles.row_block(k, anchor, mb)
        (t,) = tiled
        bsrc = gemm_tiles.matmul_b_view(k, anchor, mb)
        share = gemm_tiles.column_share(k.threads, shape[-1], 1) if math.prod(shape[:-1]) == mb else 0
    if share:  # one block of rows: the threads share its columns, then one thread runs its rows
        arr = _tile_by_column_shares(k, anchor, shape, mb, bsrc, share)
        with k.loops((mb,)) as (a,):
            outer = tuple("0" for _ in shape[:-2]) + (a,)
            k.set_tile(t, tuple("0" if d == 1 else x for x, d in zip(outer, shape[:-1])), f"{arr}[{a}]", 1)
            row(outer)
    elif mb is not None:
        # whole tiles: the threads take them as they go (2 tiles of 64 rows on 2 threads run
        # one each; as a plain loop, under 2 per thread, they ran serial)
        with k.loops(tuple(shape[:-2]) + (shape[-2] // mb,), parallel=True, dynamic=True) as blk:
            batch, mi = tuple(blk[:-1]), blk[-1]
            i0 = k.index(f"{mi}*{mb}") if mi != "0" else "0"
            arr = gemm_tiles.tile_matmul_blocked(k, anchor, batch, i0, bsrc, mb)
            with k.loops((mb,)) as (a,):
                i = a if i0 == "0" else k.index(f"{i0} + {a}")
                outer = batch + (i,)
                k.set_tile(t, tuple("0" if d == 1 else k.index(x) for x, d in zip(outer, shape[:-1])),
                           f"{arr}[{a}]", 1)
                row(outer)
    else:
        mark, depth = len(k.lines), k.depth
        k.carry_rows = k.threads == 1 and not k.counters and not tiled
        with k.loops(shape[:-1], parallel=True) as outer:
            for t in tiled:
                anchors.TILES[g.index.node[g.index.producer[t]].op](k, t, outer, 1)
            row(outer)
        k.carry_rows = False
        k.lines[mark:mark] = ["    " * depth + d for d in norm_stats.carried_declarations(k)]
        if pend:
            row_stream.finish_deferred(k, mark, depth, *pend)
    for t in set(k.tiles) - before:
        k.drop_tile(t)  # the row's tiles and row copies end with the row loop
    if pend or fence:  # the row loop wrote with non-temporal stores
        k.line("sf_stream_fence();")
