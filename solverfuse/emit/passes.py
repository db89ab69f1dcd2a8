"""One pass of a group's kernel: the loop nest over a shape, with an anchor's tile (a row, a conv
output plane, or a register-blocked MatMul/Conv tile) computed before the inner loops that run
the fused epilogue. :func:`emit_loop` is what every pass of :mod:`~solverfuse.emit.schedule`,
:mod:`~solverfuse.emit.forward` and :mod:`~solverfuse.emit.rows` runs; :func:`inline_deps` is
the set of in-group tensors a pass evaluates inline (materialised ones stop it).

Apart from the schedule because it decides the loops of ONE pass, not which passes a group gets.

>>> "ReduceMean" in MATERIALISED_OPS, sorted(STATS_OPS)[:2]
(True, ['LayerNormalization', 'LogSoftmax'])
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple, Optional

from . import anchors, conv_tiles, gemm_tiles, gemv_tiles, pool_tiles, reductions, row_stream
from .ctile import CHUNK
from ..ops import numel
from .cexpr import linear
from .tiles import MAX_TILE, round_up, tile_rank
from .channels import flat_band, flat_pass, flat_plane, prime_channel_reads, reads_per_channel
from .kernel import Kernel

MATERIALISED_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                    "ReduceSumSquare", "GlobalAveragePool", "GlobalMaxPool"}
STATS_OPS = frozenset(reductions.STATS)


def anchors_for(k: Kernel, shape: tuple, deps: frozenset) -> list[str]:
    """The anchor output of this pass's shape that gets a tile (vectorisable inner loops)."""
    out = []
    for t in sorted(deps, key=lambda t: k.graph.index.position[k.graph.index.producer[t]]):
        node = k.graph.index.node[k.graph.index.producer[t]]
        if node.op in anchors.TILES and k.shape(t) == shape and len(shape) and 1 < shape[-1] <= MAX_TILE:
            out.append(t)
    return out[:1]  # a group holds at most one anchor (cost.group_violation)


class Post(NamedTuple):
    """A pass over one input of a Concat along the channels whose body also computes (and
    stores) ops after the Concat: ``deps``, the in-group tensors of the Concat's ``shape`` it
    evaluates, each at the channel ``offset`` past the input's own. The pass then loads their
    per-channel constants (BatchNorm's statistics) once per channel, at the shifted channel."""
    shape: tuple
    deps: frozenset
    offset: int


def _prime(k: Kernel, deps: frozenset, shape: tuple, n: str, m: str, post: Optional[Post]) -> None:
    """:func:`~solverfuse.emit.channels.prime_channel_reads` of a pass and of its :class:`Post`."""
    prime_channel_reads(k, deps, shape, n, m)
    if post is not None and len(post.shape) == 4:
        prime_channel_reads(k, post.deps, post.shape, n, k.index(f"{m} + {post.offset}") if post.offset else m)


def _flat_post(k: Kernel, post: Optional[Post]) -> bool:
    """Whether the ops after the Concat of ``post`` (if any) allow a flat plane loop."""
    return post is None or flat_plane(k, post.deps, post.shape)


@contextlib.contextmanager
def last_dim(k: Kernel, n: int, split: int = 0):
    """The innermost loop over ``n``; its index. With ``split`` (a divisor of n, :func:`~solverfuse.emit.forward._head_split`):
    two loops over (n / split, split), the index composed from theirs (``k.splits`` maps it back)."""
    if not split:
        with k.loops((n,)) as (j,):
            yield j
        return
    with k.loops((n // split, split)) as (h, e):
        j = k.index(f"{h}*{split} + {e}")
        k.splits[j] = (h, e)
        yield j


def _streamed_pass(k: Kernel, shape: tuple, body) -> bool:
    """A pass writing float tensors of ``shape`` too large for the cache (row_stream.streamed: one
    thread, not instrumented): its rows in blocks of ``STREAM_BLOCK`` whose values the body stores
    into stack blocks, written by ``sf_stream`` (non-temporal: no read of the output line before
    it is written; the branches motif's two outputs at 2x the LLC moved 20 bytes per element for
    the plan's 12). False (nothing emitted) when no written tensor has that form."""
    outs = [t for t in k.writes if k.shape(t) == tuple(shape) and row_stream.streamed(k, t)]
    if not outs:
        return False
    k.use_helper("sf_stream")
    n = shape[-1]
    size = min(n, row_stream.STREAM_BLOCK)
    with k.loops(shape[:-1]) as outer:
        mark, ind = len(k.lines), "    " * k.depth
        blk = {t: k.fresh("O") for t in outs}
        jb, j = k.fresh("jb"), k.fresh("i")
        hi = f"{jb} + {size}" if n % size == 0 else f"sf_min({jb} + {size}, {n})"
        k.redirected = set()
        with k.block(f"for (long {jb} = 0; {jb} < {n}; {jb} += {size})"):
            with k.block(f"for (long {j} = {jb}; {j} < {hi}; {j}++)"):
                idx = tuple(outer) + (j,)
                k.redirect = {t: (blk[t], f"{j} - {jb}", idx) for t in outs}
                try:
                    body(idx)
                finally:
                    k.redirect = {}
            for t in outs:
                if t in k.redirected:
                    k.line(f"sf_stream(&{k.ptr(t, 'w')}[{linear(shape, tuple(outer) + (jb,))}], {blk[t]}, {hi} - {jb});")
        k.lines[mark:mark] = [f"{ind}float {blk[t]}[{size}] SF_ALIGN64;" for t in outs if t in k.redirected]
    k.line("sf_stream_fence();")
    return True


def emit_loop(k: Kernel, shape: tuple, deps: frozenset, body, split: int = 0, post: Optional[Post] = None,
              writes: tuple = ()) -> None:
    """One pass: loops over ``shape``; an anchor's tile (its last d dims: a row, or a Conv's
    output plane) is computed before the inner loops that run the fused epilogue. ``split``: the
    last dim's loop runs as two (:func:`last_dim`). ``post``: the pass is one input of a Concat
    and its body computes ops after the Concat too (:class:`Post`). ``writes``: the tensors the
    body stores, each its own value (a plain pass): a pooled plane stored alone is written
    straight into its buffer (:func:`~solverfuse.emit.pool_tiles.pool_plane_into`)."""
    gemv = gemv_tiles.gemv_conv(k, shape, deps)
    if gemv is not None:
        return _emit_conv_gemv(k, gemv, shape, body)
    tiled = anchors_for(k, shape, deps)
    if not tiled and len(shape) == 4 and shape[2] * shape[3] >= 16 and (
            post is not None or reads_per_channel(k, deps, shape)):
        # an NCHW pass with per-channel constants (BatchNorm after a Concat: DenseNet): loops over
        # (n, c), the constants loaded once, then the plane (per element they were loaded and
        # BatchNorm's scale / sqrt(var + eps) recomputed: 57 such kernels took 60% of DenseNet)
        flat = flat_plane(k, deps, shape) and _flat_post(k, post)
        with k.loops(shape[:2], parallel=True, dynamic=True) as outer:  # channels one at a time
            _prime(k, deps, shape, outer[0], outer[1], post)
            if flat:  # one loop over the plane (index (n, c, 0, q), q < H*W): see flat_plane
                with k.loops((shape[2] * shape[3],)) as (q,):
                    body(tuple(outer) + ("0", q))
            else:
                with k.loops(shape[2:]) as inner:
                    body(tuple(outer) + tuple(inner))
        return
    if not tiled:
        if split:
            with k.loops(shape[:-1], parallel=True) as outer:
                with last_dim(k, shape[-1], split) as j:
                    body(tuple(outer) + (j,))
            return
        if post is None and flat_pass(k, deps, shape):
            # q at the last dim over 1 (its stride is 1; an index at a dim of 1 is read as 0)
            last = max(i for i, n in enumerate(shape) if n > 1)
            with k.loops((numel(shape),), parallel=True) as (q,):
                body(tuple(q if i == last else "0" for i in range(len(shape))))
            return
        if not _streamed_pass(k, shape, body):
            with k.loops(shape, parallel=True) as idx:
                body(idx)
        return
    (t,) = tiled
    node = k.graph.index.node[k.graph.index.producer[t]]
    blocking = conv_tiles.conv_blocking(k, node) if node.op == "Conv" else None
    if blocking is not None:
        return _emit_conv_blocked(k, t, node, shape, blocking, body, deps, post)
    mb = gemm_tiles.matmul_blocking(k, node, partial=True) if node.op in ("MatMul", "Gemm") else None
    if mb is not None:
        return _emit_matmul_blocked(k, t, node, shape, mb, body, split)
    d = tile_rank(k, node)
    direct = d == 2 and node.op in ("MaxPool", "AveragePool") and tuple(writes) == (t,) and deps == {t} \
        and post is None and not split
    with k.loops(shape[:-d], parallel=True) as outer:
        if direct and pool_tiles.pool_plane_into(k, t, outer):
            return
        anchors.TILES[node.op](k, t, outer, d)
        if node.op in ("Conv", "MaxPool", "AveragePool"):  # outer = (batch, channel, ...)
            _prime(k, deps, shape, outer[0], outer[1], post)
        if d == 1:
            with last_dim(k, shape[-1], split) as j:
                body(tuple(outer) + (j,))
        elif d == 2 and node.op in ("MaxPool", "AveragePool") and flat_plane(k, deps - {t}, shape) \
                and _flat_post(k, post):
            # the epilogue of a pooling plane as ONE loop over it (index (n, c, 0, q)): see flat_plane
            with k.loops((shape[-2] * shape[-1],)) as (q,):
                body(tuple(outer) + ("0", q))
        else:
            with k.loops(shape[-d:]) as inner:
                body(tuple(outer) + tuple(inner))
    k.drop_tile(t)


#: Blocked conv/matmul tiles are taken by the threads as they go (``Kernel.loops``' ``dynamic``,
#: ``kernel.TILE_SCHEDULE``), not in fixed halves.
DYNAMIC_TILES = True


def _emit_conv_blocked(k: Kernel, t: str, node, shape: tuple, blk, body, deps: frozenset,
                       post: Optional[Post] = None) -> None:
    """A pass over a Conv output with the register-blocked tile: loops over (batch, band of output
    rows, block of mb output channels) -- a banded blocking's threads take whole bands, each
    copying its band's input first (:func:`~solverfuse.emit.conv_tiles.band_copy`) -- the tile,
    then per channel (its constants loaded, :func:`prime_channel_reads`) the epilogue: one loop
    over the band (:func:`flat_band`) or, per row of the tile, a loop over the row (read as
    ``(T[a] + r*wq)[j]``)."""
    view = conv_tiles.conv_input_view(k, node, blk)
    weights = conv_tiles.conv_weight_view(k, node, blk)
    bands = shape[2] // blk.rows
    nblocks = shape[1] // blk.mg * blk.blocks // blk.nb
    flat = flat_band(k, t, shape, blk, deps) and _flat_post(k, post)

    def tile_and_epilogue(n, band, mi, src):
        valid = ""
        if mi == "0":
            m0 = "0"
        elif blk.padded:  # block j of group g: channels g*mg + j*mb ..., the last part padding
            j = k.index(f"{mi} % {blk.blocks}")
            m0 = k.index(f"({mi} / {blk.blocks})*{blk.mg} + {j}*{blk.mb}")
            valid = k.index(f"sf_min({blk.mb}, {blk.mg} - {j}*{blk.mb})")
        else:
            m0 = k.index(f"{mi}*{blk.channels}")
        r0 = k.index(f"{band}*{blk.rows}") if band != "0" else "0"
        arr = conv_tiles.tile_conv_blocked(k, node, n, m0, r0, src, blk, weights, mi, valid)
        with k.loops((blk.channels,)) as (a,):
            if valid:
                k.line(f"if ({a} >= {valid}) break;")
            m = a if m0 == "0" else k.index(f"{m0} + {a}")
            _prime(k, deps, shape, n if shape[0] != 1 else "0", m if shape[1] != 1 else "0", post)
            if flat:
                prefix = tuple("0" if d == 1 else k.index(i) for i, d in zip((n, m, r0), shape[:3]))
                k.set_tile(t, prefix, f"{arr}[{a}]", 1)
                with k.loops((blk.rows * shape[3],)) as (q,):
                    body((n, m, r0, q))
                k.drop_tile(t)
            else:
                _conv_rows(k, t, shape, blk, body, arr, (n, m, a, r0))

    if blk.band:
        with k.loops((shape[0], bands), parallel=True, dynamic=DYNAMIC_TILES) as (n, band):
            r0 = k.index(f"{band}*{blk.rows}") if band != "0" else "0"
            src = conv_tiles.band_copy(k, node, blk, view, n, r0)
            with k.loops((nblocks,)) as (mi,):
                tile_and_epilogue(n, band, mi, src)
        return
    with k.loops((shape[0], bands, nblocks), parallel=True, dynamic=DYNAMIC_TILES) as (n, band, mi):
        tile_and_epilogue(n, band, mi, view)


def _emit_conv_gemv(k: Kernel, t: str, shape: tuple, body) -> None:
    """A pass over the output of a Conv that is a matrix-vector product per batch row
    (:mod:`~solverfuse.emit.gemv_tiles`): per batch row the one-row tile of its output channels,
    then per channel the bias and the epilogue. With fewer batch rows than threads the threads
    share each row's channels (:func:`~solverfuse.emit.gemm_tiles.column_share`: disjoint
    panels of the filters, as a linear layer's GEMV)."""
    node = k.graph.index.node[k.graph.index.producer[t]]
    bsrc = gemv_tiles.gemv_weights(k, node)
    m, rest = shape[1], tuple("0" for _ in shape[2:])
    m2 = round_up(m, CHUNK)
    share = gemm_tiles.column_share(k.threads, m, shape[0])
    shares = -(-m2 // share) if share else 1
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    with k.loops((shape[0] * shares,), parallel=True, dynamic=DYNAMIC_TILES) as (it,):
        if share:
            n, s = (k.index(f"{it} / {shares}"), k.index(f"{it} % {shares}")) if shape[0] > 1 else ("0", it)
            q0 = k.index(f"{s}*{share}") if s != "0" else "0"
            q1 = k.index(f"sf_min({q0} + {share}, {m2})")
            hi = k.index(f"sf_min({q1}, {m})")
        else:
            n, q0, q1, hi = it, "0", str(m2), str(m)
        arr = gemv_tiles.tile_gemv(k, node, n, bsrc, (q0, q1))
        j = k.fresh("j")
        with k.block(f"for (long {j} = {q0}; {j} < {hi}; {j}++)"):
            v = f"{arr}[0][{j}]"
            if bias:
                v = k.tmp(k.ct(t), f"{v} + {k.value(bias, (j,))}")
            k.bind(t, (n, j) + rest, v)
            body((n, j) + rest)


def _conv_rows(k: Kernel, t: str, shape: tuple, blk, body, arr: str, at: tuple) -> None:
    """The epilogue of one channel of a blocked conv tile, row by row (``at``: batch, channel,
    channel in the block, first row of the band)."""
    n, m, a, r0 = at
    with k.loops((blk.rows,)) as (r,):
        oh = r if r0 == "0" else r0 if r == "0" else k.index(f"{r0} + {r}")
        prefix = tuple("0" if d == 1 else k.index(i) for i, d in zip((n, m, oh), shape[:3]))
        k.set_tile(t, prefix, f"({arr}[{a}] + {r}*{blk.wq})" if r != "0" else f"{arr}[{a}]", 1)
        with k.loops(shape[3:]) as (j,):
            body((n, m, oh, j))
        k.drop_tile(t)


def _emit_matmul_blocked(k: Kernel, t: str, node, shape: tuple, mb: int, body, split: int = 0) -> None:
    """A pass over a MatMul output with the register-blocked tile: loops over (batch..., block
    of mb rows), the tile, then per row of the block the epilogue's loop over the row. With M
    not a multiple of mb (:func:`~solverfuse.emit.gemm_tiles.matmul_blocking`'s ``partial``: 197
    tokens in blocks of 8) the last block's tile and epilogue stop at row M."""
    bsrc = gemm_tiles.matmul_b_view(k, node, mb)
    n = gemm_tiles.mm_columns(k, node)
    m = shape[-2]
    blocks = -(-m // mb)
    flat = not split and all(d == 1 for d in shape[:-2])
    share = gemm_tiles.column_share(k.threads, n, blocks) if flat else 0
    if share:
        return _matmul_column_shares(k, t, node, shape, mb, body, bsrc, share)
    slab = gemm_tiles.slab_columns(gemm_tiles.mm_depth(k, node), n, blocks) if flat else 0
    if slab:
        return _matmul_column_shares(k, t, node, shape, mb, body, bsrc, slab, slab_major=True)
    with k.loops(tuple(shape[:-2]) + (blocks,), parallel=True, dynamic=DYNAMIC_TILES) as outer:
        batch, mi = tuple(outer[:-1]), outer[-1]
        i0 = k.index(f"{mi}*{mb}") if mi != "0" else "0"
        rows = k.index(f"sf_min({mb}, {m} - {i0})") if m % mb else None
        arr = gemm_tiles.tile_matmul_blocked(k, node, batch, i0, bsrc, mb, rows=rows)
        _matmul_rows(k, t, shape, mb, rows, batch, i0, arr, lambda i: _last_dim_body(k, shape, split, body, batch, i))


def _last_dim_body(k: Kernel, shape: tuple, split: int, body, batch: tuple, i: str) -> None:
    with last_dim(k, shape[-1], split) as j:
        body(batch + (i, j))


def _matmul_rows(k: Kernel, t: str, shape: tuple, mb: int, rows, batch: tuple, i0: str, arr: str, row) -> None:
    """Per row of a blocked MatMul tile (``rows``: the C expression of how many rows are in the
    output, None: all mb): the tile's row bound to ``t``, then ``row(i)``."""
    with k.loops((mb,)) as (a,):
        if rows is not None:
            k.line(f"if ({a} >= {rows}) break;")
        i = a if i0 == "0" else k.index(f"{i0} + {a}")
        prefix = tuple("0" if d == 1 else k.index(x) for x, d in zip(batch + (i,), shape[:-1]))
        k.set_tile(t, prefix, f"{arr}[{a}]", 1)
        row(i)
        k.drop_tile(t)


def _matmul_column_shares(k: Kernel, t: str, node, shape: tuple, mb: int, body, bsrc: str, share: int,
                          slab_major: bool = False) -> None:
    """:func:`_emit_matmul_blocked` with the threads sharing the columns of each block of rows
    (:func:`~solverfuse.emit.gemm_tiles.column_share`): one loop over (block, share of ``share``
    columns); each iteration computes its columns of the tile and runs the epilogue over them.
    ``slab_major``: the loop runs over (share, block) instead, so that every block of rows reads
    a share's columns of B (a slab, :func:`~solverfuse.emit.gemm_tiles.slab_columns`) in turn.
    Either way a block of rows is computed once per share: A is packed once before the loop
    (:func:`~solverfuse.emit.gemm_tiles.pack_a`) rather than transposed by every tile (at 2
    threads, 8 x 4096 x 4096 in shares of 256 columns: 0.83 of the time)."""
    n, m = shape[-1], shape[-2]
    shares, blocks = -(-n // share), -(-m // mb)
    batch = tuple("0" for _ in shape[:-2])
    packed = gemm_tiles.pack_a(k, node, mb) if mb > 1 else None
    with k.loops((blocks * shares,), parallel=True, dynamic=DYNAMIC_TILES) as (it,):
        if it == "0":
            mi, s = "0", "0"
        elif slab_major:
            mi, s = k.index(f"{it} % {blocks}"), k.index(f"{it} / {blocks}")
        else:
            mi, s = k.index(f"{it} / {shares}"), k.index(f"{it} % {shares}")
        i0 = k.index(f"{mi}*{mb}") if mi != "0" else "0"
        rows = k.index(f"sf_min({mb}, {m} - {i0})") if m % mb else None
        q0 = k.index(f"{s}*{share}") if s != "0" else "0"
        q1 = k.index(f"sf_min({q0} + {share}, {round_up(n, CHUNK)})")
        arr = gemm_tiles.tile_matmul_blocked(k, node, batch, i0, bsrc, mb, (q0, q1), rows, packed=packed)
        hi = k.index(f"sf_min({q1}, {n})")

        def row(i):
            j = k.fresh("j")
            with k.block(f"for (long {j} = {q0}; {j} < {hi}; {j}++)"):
                body(batch + (i, j))
        _matmul_rows(k, t, shape, mb, rows, batch, i0, arr, row)
