"""MatMul and Gemm in C: the per-element form (a dot product, for
:func:`solverfuse.emit.lowering.code_for_op`), the plain row tile, and the register-blocked tile
(:func:`matmul_blocking`): ``mb`` rows x 32 columns of accumulators in vector registers through
the whole reduction, in the shared helper ``sf_mm_tile<mb>``, B packed once at load in 32-column
panels (transposed linear-layer weights too; a computed B, attention's, per run). One-row tiles
(GEMV: ``sf_mm_tile1``) stream the same panels with the sums in registers; where there are too
few blocks of rows for the threads they share a block's columns (:func:`column_share`).

Apart from :mod:`~solverfuse.emit.conv_tiles` and :mod:`~solverfuse.emit.pool_tiles`: one op
family per module; the tables of all anchors are in :mod:`~solverfuse.emit.anchors`.

>>> round_up(100, CHUNK) // CHUNK  # panels of B for N = 100 columns
4
"""
from __future__ import annotations

from ..ops import numel
from .cexpr import bmap, linear as _linear, lit as _lit
from .ctile import CHUNK
from .sharing import thread_runs
from .tiles import MAX_TILE, round_up, tile_done, tile_open

def _mm_operands(k, node, full):
    """(A index, B index) functions of k for MatMul at full (batch..., i, j) output index."""
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    a2 = a if len(a) > 1 else (1,) + a
    b2 = b if len(b) > 1 else b + (1,)
    batch = full[:-2]
    oshape = tuple(max(x, y) for x, y in zip((1,) * (len(batch) - len(a2[:-2])) + a2[:-2],
                                              (1,) * (len(batch) - len(b2[:-2])) + b2[:-2]))
    ab, bb = bmap(batch, oshape, a2[:-2]), bmap(batch, oshape, b2[:-2])

    def ai(kk):
        return ab + ((full[-2], kk) if len(a) > 1 else (kk,))

    def bi(kk):
        return bb + ((kk, full[-1]) if len(b) > 1 else (kk,))
    return ai, bi, a2[-1]


def matmul_element(k, node, pos, idx):
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    full = tuple(idx)
    if len(a) == 1:
        full = full[:-1] + ("0",) + full[-1:]
    if len(b) == 1:
        full = full + ("0",)
    ai, bi, K = _mm_operands(k, node, full)
    ct = k.ct(node.outputs[0])
    acc, kk = k.fresh("acc"), k.fresh("k")
    k.line(f"{ct} {acc} = 0;")
    with k.block(f"for (long {kk} = 0; {kk} < {K}; {kk}++)"):
        k.line(f"{acc} += {k.value(node.inputs[0], ai(kk))} * {k.value(node.inputs[1], bi(kk))};")
    return acc


def _gemm_idx(node, i, j, kk):
    at = node.attributes
    return ((kk, i) if at.get("transA", 0) else (i, kk)), ((j, kk) if at.get("transB", 0) else (kk, j))


def _gemm_k(k, node):
    a = k.shape(node.inputs[0])
    return a[0] if node.attributes.get("transA", 0) else a[1]


def _gemm_epilogue(k, node, acc, i, j):
    at, ct = node.attributes, k.ct(node.outputs[0])
    expr = f"{_lit(at.get('alpha', 1.0), ct)} * {acc}"
    if len(node.inputs) > 2 and node.inputs[2]:
        c = k.value(node.inputs[2], bmap((i, j), k.shape(node.outputs[0]), k.shape(node.inputs[2])))
        expr += f" + {_lit(at.get('beta', 1.0), ct)} * {c}"
    return expr


def gemm_element(k, node, pos, idx):
    i, j = idx
    ct = k.ct(node.outputs[0])
    acc, kk = k.fresh("acc"), k.fresh("k")
    k.line(f"{ct} {acc} = 0;")
    ia, ib = _gemm_idx(node, i, j, kk)
    with k.block(f"for (long {kk} = 0; {kk} < {_gemm_k(k, node)}; {kk}++)"):
        k.line(f"{acc} += {k.value(node.inputs[0], ia)} * {k.value(node.inputs[1], ib)};")
    return _gemm_epilogue(k, node, acc, i, j)


def tile_matmul(k, t, outer, d=1):
    node = k.graph.index.node[k.graph.index.producer[t]]
    arr, ct, n = tile_open(k, t)
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    if len(a) < 2 or len(b) < 2:
        j = k.fresh("j")
        with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
            k.line(f"{arr}[{j}] = {matmul_element(k, node, 0, tuple(outer) + (j,))};")
        return tile_done(k, t, outer, arr)
    kk, j = k.fresh("k"), k.fresh("j")
    ai, bi, K = _mm_operands(k, node, tuple(outer) + (j,))
    with k.block(f"for (long {kk} = 0; {kk} < {K}; {kk}++)"):
        av = k.value(node.inputs[0], ai(kk))
        with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
            k.line(f"{arr}[{j}] += {av} * {k.value(node.inputs[1], bi(kk))};")
    tile_done(k, t, outer, arr)


def tile_gemm(k, t, outer, d=1):
    node = k.graph.index.node[k.graph.index.producer[t]]
    arr, ct, n = tile_open(k, t)
    i = outer[0]
    kk, j = k.fresh("k"), k.fresh("j")
    at = node.attributes
    if at.get("transB", 0) and not at.get("transA", 0):
        # B is [N, K] (a linear layer's weights): a contiguous dot product per output column
        # (the axpy form below would stride through B by K floats per element)
        with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
            acc = k.fresh("acc")
            k.line(f"{ct} {acc} = 0;")
            with k.loops([_gemm_k(k, node)], simd=f"reduction(+:{acc})") as (r,):
                ia, ib = _gemm_idx(node, i, j, r)
                k.line(f"{acc} += {k.value(node.inputs[0], ia)} * {k.value(node.inputs[1], ib)};")
            k.line(f"{arr}[{j}] = {acc};")
    else:
        ia, ib = _gemm_idx(node, i, j, kk)
        with k.block(f"for (long {kk} = 0; {kk} < {_gemm_k(k, node)}; {kk}++)"):
            av = k.value(node.inputs[0], ia)
            with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
                k.line(f"{arr}[{j}] += {av} * {k.value(node.inputs[1], ib)};")
    with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
        k.line(f"{arr}[{j}] = {_gemm_epilogue(k, node, f'{arr}[{j}]', i, j)};")
    tile_done(k, t, outer, arr)


def matmul_blocking(k, node, partial: bool = False):
    """``mb`` rows of a MatMul/Gemm output per register-blocked tile, or None (the plain row tile).
    For float A [..., M, K] x B [..., K, N] (weights or a batched operand: attention's QK^T) and
    Gemm with A not transposed (B may be: linear layers), N >= 8, not instrumented: like
    :func:`~solverfuse.emit.conv_tiles.conv_blocking`, ``mb`` output rows x CHUNK columns of accumulators stay in registers
    through the K loop; ``mb`` is the largest of 8, 4, 2, 1 dividing M whose tile fits 256 KiB --
    with ``partial`` (the caller stops the last block at row M), the largest below M: M = 197
    (ViT's tokens) in blocks of 8, not 197 one-row tiles that each stream all of B."""
    a, b = k.shape(node.inputs[0]), k.shape(node.inputs[1])
    if k.counters or len(a) < 2 or len(b) < 2 or k.ct(node.outputs[0]) != "float" \
            or k.ct(node.inputs[0]) != "float" or k.ct(node.inputs[1]) != "float":
        return None
    if node.op == "Gemm" and node.attributes.get("transA", 0):
        return None
    n = b[-2] if node.op == "Gemm" and node.attributes.get("transB", 0) else b[-1]
    if n < 8:
        return None
    # the tile T[mb][N rounded up] lives on the stack (of an OpenMP worker too): at most 256 KiB
    return next((m for m in (8, 4, 2, 1) if (a[-2] % m == 0 or (partial and a[-2] > m))
                 and m * round_up(n, CHUNK) <= 4 * MAX_TILE), None)


def _mm_kn(k, node) -> tuple:
    """(K, N) of a MatMul/Gemm's B as the tile reads it (a transposed Gemm B is packed [K][N])."""
    b = k.shape(node.inputs[1])
    if node.op == "Gemm" and node.attributes.get("transB", 0):
        return b[1], b[0]
    return b[-2], b[-1]


def matmul_b_view(k, node, mb: int) -> str:
    """B packed as ``[batch][N rounded up / CHUNK][K][CHUNK]``: panels of CHUNK columns, zero
    columns after N, a transposed Gemm B transposed here. A tile's chunk of columns then reads
    one contiguous panel through the K loop (row-major B put its rows N floats apart: one cache
    line per page at N=1024); so does a one-row tile (``mb`` 1: a matrix-vector product), its
    CHUNK sums in registers, and threads that share a row's columns read disjoint panels. Packed
    once per set of constants when B is a constant (weights), else into kernel-local scratch at
    every run."""
    bt = node.inputs[1]
    kk, n = _mm_kn(k, node)
    nb = numel(k.shape(bt)[:-2])
    n2 = round_up(n, CHUNK)
    trans = int(node.op == "Gemm" and bool(node.attributes.get("transB", 0)))
    call = f"sf_pack_b({{dst}}, {{b}}, {nb}, {kk}, {n}, {n2}, {trans}, {CHUNK});"
    k.use_helper("sf_pack_b")
    what = "MatMul/Gemm B packed in panels of columns"
    if k.is_constant(bt):
        return k.packed("float", nb * kk * n2, what, call, {"b": bt})
    arr = k.alloc("float", nb * kk * n2, what)
    k.line(call.format(dst=arr, b=k.ptr(bt, "r")))
    return arr


def column_share(threads: int, n: int, blocks: int) -> int:
    """Columns per share of a MatMul/Gemm output row block when the threads split its ``n``
    columns, or 0 (each thread takes whole blocks of rows): with fewer than 2 of the ``blocks``
    per thread (a linear layer at batch 1: one row), the row's CHUNK-column panels of packed B in
    about 8 shares per thread, which the threads take as they go -- each share a contiguous
    stream of B, and the row's read of B split among the threads.

    >>> column_share(2, 4096, 1), column_share(2, 1000, 1), column_share(1, 4096, 1), column_share(2, 4096, 8)
    (256, 64, 0, 0)
    """
    if threads < 2 or blocks >= 2 * threads:
        return 0
    panels = round_up(n, CHUNK) // CHUNK
    shares = min(panels, -(-8 * threads // blocks))
    return 0 if shares < 2 else -(-panels // shares) * CHUNK


#: A MatMul/Gemm B of more than SLAB_MIN bytes is read in column slabs of at most SLAB_BYTES,
#: each used by every block of rows in turn while it is in the L2 (:func:`slab_columns`). Read
#: whole per block of rows, a large B streamed from the L3 or DRAM once per 8 rows: a 64x768x3072
#: GEMM (9.4 MB of B) ran at 20 GFLOP/s on a Zen 3 core that peaks at 100.
SLAB_MIN, SLAB_BYTES = 4 << 20, 256 << 10


def large_b(kk: int, n: int) -> bool:
    """A ``kk`` x ``n`` B (packed, columns rounded up to CHUNK) of more than SLAB_MIN bytes."""
    return kk * round_up(n, CHUNK) * 4 > SLAB_MIN


def slab_columns(kk: int, n: int, blocks: int) -> int:
    """Columns per slab of a ``kk`` x ``n`` B that ``blocks`` blocks of rows share (a multiple of
    CHUNK, at least one CHUNK), or 0 where B is read whole per block (B within SLAB_MIN bytes,
    one block of rows, or one slab would be all of B).

    >>> slab_columns(768, 3072, 8), slab_columns(1024, 1024, 32), slab_columns(768, 3072, 1)
    (64, 0, 0)
    """
    n2 = round_up(n, CHUNK)
    if blocks < 2 or not large_b(kk, n):
        return 0
    cols = max(CHUNK, SLAB_BYTES // (4 * kk) // CHUNK * CHUNK)
    return 0 if cols >= n2 else cols


#: Rows per tile that :func:`row_block` tries, largest first.
ROW_BLOCKS = (64, 32)


def row_block(k, node, mb: int) -> int:
    """Rows per tile where the whole row must be computed before the row's epilogue (a MatMul
    fused with a row reduction: the slabs of :func:`slab_columns` cannot be used): ``mb``, or, where
    B is over SLAB_MIN bytes, the first of ROW_BLOCKS that divides M and whose tile fits 4 x
    MAX_TILE floats, so that B streams from the L3 once per 64 or 32 rows, not per 8 (BERT's FFN
    output projection + LayerNorm, 128 x 3072 x 768, Zen 3 core: 28 ms fused against 18 ms
    unfused, where the MatMul alone reads B in slabs; 32-row tiles 21 ms, 64-row tiles 17 ms)."""
    kk, n = _mm_kn(k, node)
    m = k.shape(node.inputs[0])[-2]
    if mb != 8 or not large_b(kk, n):
        return mb
    return next((r for r in ROW_BLOCKS if m % r == 0 and r * round_up(n, CHUNK) <= 4 * MAX_TILE), mb)


def mm_columns(k, node) -> int:
    """N of a MatMul/Gemm output (the columns of its B as the tile reads it)."""
    return _mm_kn(k, node)[1]


def mm_depth(k, node) -> int:
    """K of a MatMul/Gemm (the rows of its B as the tile reads it)."""
    return _mm_kn(k, node)[0]


def pack_a(k, node, mb: int) -> str:
    """A MatMul/Gemm's A ([M, K], no batch: a flat output) packed once per run into kernel-local
    scratch as the blocks of ``mb`` rows ``sf_mm_ptile<mb>`` reads (``[K][mb]`` each, the rows
    past M zero), the threads packing one contiguous run of blocks each; its C name. For a B read
    in column slabs (:func:`slab_columns`) or rows whose columns the threads share
    (:func:`column_share`): every block of rows then computes once per slab or share, and each
    ``sf_mm_tile<mb>`` call transposed its block of A again -- on a Zen 4 core, 256 x 4096 x 4096
    in slabs of one 32-column panel: 85 GFLOP/s, 105 with that transposition taken out."""
    a = k.shape(node.inputs[0])
    m, kk = a[-2], a[-1]
    blocks = -(-m // mb)
    arr = k.alloc("float", blocks * kk * mb, f"A packed in blocks of {mb} rows (sf_pack_a)")
    k.use_helper("sf_pack_a")
    src = k.ptr(node.inputs[0], "r")
    thread_runs(k, blocks, lambda c, n: f"sf_pack_a({arr}, {src}, {kk}, {m}, {kk}, {mb}, {c}, {n});")
    return arr


def tile_matmul_blocked(k, node, batch, i0, bsrc, mb, cols=None, rows=None, into=None, packed=None) -> str:
    """Rows i0..i0+mb-1 of MatMul/Gemm output at ``batch`` into ``T[mb][N rounded up]``, with a
    Gemm's alpha and beta*C applied (the tile is hot); its name. ``cols``: (first, end) C
    expressions, multiples of CHUNK: only those columns of T are computed (default all);
    ``rows``: a C expression, the rows of the block inside the output (default mb; A is read
    only there, the rows past it are zero); ``into``: the name of a tile of that shape declared
    by the caller (threads filling disjoint columns of one tile), instead of a new one;
    ``packed``: A as :func:`pack_a` packed it (then read there, not from A)."""
    at = node.inputs[0]
    a, b = k.shape(at), k.shape(node.inputs[1])
    kk, n = _mm_kn(k, node)
    n2 = round_up(n, CHUNK)
    out = k.shape(node.outputs[0])
    arr = into or k.fresh("T")
    if into is None:
        # 64-byte aligned: the tile helpers add into it a whole vector of CHUNK floats at a time;
        # where the stack frame left it 32-byte aligned every access split a cache line and each
        # add's load waited on the previous store (vit_ts's QKV kernels: 1.40 -> 0.98 us)
        k.line(f"float {arr}[{mb}][{n2}] SF_ALIGN64;")
    base = _linear(a, bmap(batch, out[:-2], a[:-2]) + (i0, "0"))
    bb = bmap(batch, out[:-2], b[:-2]) if node.op == "MatMul" else ()
    boff = _linear(b[:-2], bb) if bb else "0"
    bptr = bsrc if boff == "0" else f"{bsrc} + ({boff})*{kk * n2}"
    q0, q1 = cols if cols else ("0", str(n2))
    if packed is not None:
        k.use_helper(f"sf_mm_ptile{mb}")
        at_i0 = packed if i0 == "0" else f"{packed} + {i0}*{kk}"
        k.line(f"sf_mm_ptile{mb}(&{arr}[0][0], {n2}, {at_i0}, {kk}, {bptr}, {q0}, {q1});")
    elif mb == 1:
        k.use_helper("sf_mm_tile1")
        k.line(f"sf_mm_tile1(&{arr}[0][0], {q0}, {q1}, {k.ptr(at, 'r')} + {base}, {kk}, {bptr});")
    else:
        k.use_helper(f"sf_mm_tile{mb}")
        k.line(f"sf_mm_tile{mb}(&{arr}[0][0], {n2}, {k.ptr(at, 'r')} + {base}, {kk}, {kk}, {bptr}, {q0}, {q1}, "
               f"{rows if rows is not None else mb});")
    if node.op == "Gemm":
        at_ = node.attributes
        alpha, beta = at_.get("alpha", 1.0), at_.get("beta", 1.0)
        has_c = len(node.inputs) > 2 and node.inputs[2] and beta != 0
        if alpha != 1.0 or has_c:
            r, j = k.fresh("r"), k.fresh("j")
            with k.block(f"for (int {r} = 0; {r} < {rows if rows is not None else mb}; {r}++)"):
                with k.block(f"for (long {j} = {q0}; {j} < sf_min({q1}, {n}); {j}++)"):
                    i = f"({i0} + {r})" if i0 != "0" else r
                    k.line(f"{arr}[{r}][{j}] = {_gemm_epilogue(k, node, f'{arr}[{r}][{j}]', i, j)};")
    return arr
