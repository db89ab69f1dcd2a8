"""Conv in C: the per-element form (a window dot product), the plain plane tile, and the
register-blocked tile (:func:`conv_blocking`): ``mb`` output channels x 32 (AVX-512: 48) positions
of accumulators in vector registers through the whole reduction, in the shared helper
``sf_conv_tile<mb>`` (on small planes 32 channels x 14 positions, vectorised across the
channels). Filters are packed once at load by output-channel block; the tile reads a zero-padded
input copy split by stride phase, or one copy per kernel column (small planes, kernels up to 3
wide with junk columns, strided depthwise convs), on wide planes copied band by band in the tile
loop; 1x1 convs in place, strided 1x1 convs a copy of the positions they read; grouped convs in
padded 8-channel blocks.

Apart from :mod:`~solverfuse.emit.gemm_tiles` and :mod:`~solverfuse.emit.pool_tiles`: one op
family per module; the tables of all anchors are in :mod:`~solverfuse.emit.anchors`.

>>> ConvBlocking.__dataclass_params__.frozen
True
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..ops import numel
from .cexpr import linear as _linear, lit as _lit
from .conv_cm import CM_CHANNELS, CM_POSITIONS
from .conv_helpers import CONV_CBLOCK_MIN
from .ctile import CHUNK
from .sharing import thread_runs
from .tiles import MAX_TILE, round_up, tile_done, tile_open, window_geometry

def _conv_geometry(k, node):
    x, w, out = (k.shape(t) for t in (node.inputs[0], node.inputs[1], node.outputs[0]))
    kernel = list(node.attributes.get("kernel_shape", w[2:]))
    st, dil, pb = window_geometry(node.attributes, x[2:], kernel, out[2:])
    group = node.attributes.get("group", 1)
    return x, w, out, kernel, st, dil, pb, group


def conv_element(k, node, pos, idx):
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    ct = k.ct(node.outputs[0])
    cg, mg = w[1], out[1] // group
    n, m, osp = idx[0], idx[1], idx[2:]
    acc, c = k.fresh("acc"), k.fresh("c")
    bias = len(node.inputs) > 2 and node.inputs[2]
    k.line(f"{ct} {acc} = {k.value(node.inputs[2], (m,)) if bias else _lit(0, ct)};")
    ch = f"({m} / {mg}) * {cg} + {c}" if group > 1 else c
    with k.block(f"for (long {c} = 0; {c} < {cg}; {c}++)"):
        kv = [k.fresh("r") for _ in kernel]
        pos_ = [k.fresh("p") for _ in kernel]
        for d, (r, p) in enumerate(zip(kv, pos_)):
            k.open(f"for (long {r} = 0; {r} < {kernel[d]}; {r}++)")
            k.line(f"const long {p} = {osp[d]}*{st[d]} - {pb[d]} + {r}*{dil[d]};")
            k.line(f"if ({p} < 0 || {p} >= {x[2 + d]}) continue;")
        xv = k.value(node.inputs[0], (n, ch) + tuple(pos_))
        wv = k.value(node.inputs[1], (m, c) + tuple(kv))
        k.line(f"{acc} += {xv} * {wv};")
        for _ in kv:
            k.close()
    return acc


def tile_conv(k, t, outer, d=1):
    """The last ``d`` spatial dims of Conv output at (n, m, outer spatial...): per (channel,
    kernel tap) one bounds-free loop nest over the valid output positions (contiguous when the
    stride is 1), so the checks are paid per tap, not per element."""
    node = k.graph.index.node[k.graph.index.producer[t]]
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    arr, ct, n = tile_open(k, t, d)
    cg, mg = w[1], out[1] // group
    nn, m, osp = outer[0], outer[1], outer[2:]
    nsp, fixed = len(kernel), len(kernel) - d
    if len(node.inputs) > 2 and node.inputs[2]:
        j = k.fresh("j")
        bv = k.value(node.inputs[2], (m,))
        k.line(f"for (long {j} = 0; {j} < {n}; {j}++) {arr}[{j}] = {bv};")
    c = k.fresh("c")
    ch = f"({m} / {mg}) * {cg} + {c}" if group > 1 else c
    with k.block(f"for (long {c} = 0; {c} < {cg}; {c}++)"):
        # a kernel extent of 1 (1x1 convolutions) gets no loop: its tap index is the literal 0
        kv = ["0" if kernel[e] == 1 else k.fresh("r") for e in range(nsp)]
        src = []
        opened = []

        def open_(header):
            k.open(header)
            opened.append(header)

        def term(v, factor):
            return "" if v == "0" or factor == 0 else f" + {v}" if factor == 1 else f" + {v}*{factor}"
        for e in range(fixed):
            p = k.fresh("p")
            if kv[e] != "0":
                open_(f"for (long {kv[e]} = 0; {kv[e]} < {kernel[e]}; {kv[e]}++)")
            k.line(f"const long {p} = {osp[e]}*{st[e]} - {pb[e]}{term(kv[e], dil[e])};")
            k.line(f"if ({p} < 0 || {p} >= {x[2 + e]}) continue;")
            src.append(p)
        ranges = []
        for e in range(fixed, nsp):
            r, s, dl, p, size = kv[e], st[e], dil[e], pb[e], x[2 + e]
            if r == "0":  # the valid output range is known now
                ranges.append((str(max(0, -(-p // s))), str(min(out[2 + e], (size - 1 + p) // s + 1))))
                continue
            open_(f"for (long {r} = 0; {r} < {kernel[e]}; {r}++)")
            lo, hi = k.fresh("lo"), k.fresh("hi")
            k.line(f"const long {lo} = sf_max(0, sf_cdiv({p} - {r}*{dl}, {s}));")
            k.line(f"const long {hi} = sf_min({out[2 + e]}, sf_fdiv({size - 1 + p} - {r}*{dl}, {s}) + 1);")
            ranges.append((lo, hi))
        wv = k.value(node.inputs[1], (m, c) + tuple(kv))
        js = []
        for e, (lo, hi) in zip(range(fixed, nsp), ranges):
            j = k.fresh("j")
            open_(f"for (long {j} = {lo}; {j} < {hi}; {j}++)")
            js.append(j)
            shift = f"{j}*{st[e]}" if st[e] != 1 else j
            src.append(f"{shift}{f' - {pb[e]}' if pb[e] else ''}{term(kv[e], dil[e])}")
        xv = k.value(node.inputs[0], (nn, ch) + tuple(src))
        k.line(f"{arr}[{_linear(out[-d:], js)}] += {xv} * {wv};")
        for _ in opened:
            k.close()
    tile_done(k, t, outer, arr, d)


@dataclass(frozen=True)
class ConvBlocking:
    """How a register-blocked Conv tile is laid out (see :func:`conv_blocking`)."""
    mb: int       # output channels per tile (accumulators kept in registers for each)
    rows: int     # output rows per tile (a band; the tile loop runs over bands)
    hq: int       # rows of one phase plane of the input copy
    wq: int       # its width = the tile's row pitch (>= output width: junk columns are dropped)
    chunk: int    # output positions per accumulator chunk
    mg: int = 1   # output channels per group
    blocks: int = 1  # blocks of mb channels per group (the last may be part padding)
    cols: int = 0  # column-shifted copies (one per kernel column; wq = output width), 0: phase-split

    @property
    def cplane(self) -> int:
        """Floats of one input channel's copy (all its phase planes / column copies)."""
        return (self.cols or self.s1) * self.s0 * self.hq * self.wq

    s0: int = 1   # the strides
    s1: int = 1
    local: int = 0  # floats of a per-tile copy of the block's one input channel (0: a copy of all)
    band: bool = False  # each band copies its rows of every channel (hq: a band's rows with the taps' halo)
    nb: int = 1  # blocks of mb channels per tile, one pass of the tile over each block of input channels

    @property
    def channels(self) -> int:
        """Output channels per tile."""
        return self.mb * self.nb

    @property
    def padded(self) -> bool:
        """Whether the last block of each group runs past the group's channels (zero weights)."""
        return self.blocks * self.mb != self.mg


#: Output width from which a band's input copy is kept within ``BAND_BYTES`` (half the L2 of
#: the Zen 4 this was measured on) by taking fewer rows per band, down to 96 positions a band.
WIDE_PLANE, BAND_BYTES = 112, 512 * 1024
#: Output width from which a stride-1 conv up to 3 wide reads a phase-split copy (its junk: 2
#: columns in 58 and fewer) rather than one copy per kernel column (3x the input in memory).
#: Standalone 3x3 convs on 56x56 planes, paired: 256 channels 0.91-0.93 of the time, 128
#: channels 0.96, 64 channels 0.99; on 28x28 planes (junk 2 in 30) the copies stay faster (128
#: and 512 channels: 1.03-1.04 with the phase-split copy).
COPY_WIDE = 56


def conv_blocking(k, node):
    """The register-blocked Conv tile for this node, or None (then the plain tile is used).

    The plain tile accumulates one output channel's plane in memory: every multiply-add loads
    and stores the tile. The blocked tile keeps ``mb`` output channels x ``chunk`` output positions
    of accumulators in registers through the whole (input channel, tap) loop, so each input value
    loaded feeds ``mb`` multiply-adds. The input is first copied zero-padded and split into its
    stride phases (plane (ph, pw) holds padded rows ph, ph+s0, ... and columns pw, pw+s1, ...): a
    tap then reads one phase plane at stride 1, so a band of output rows is one contiguous run of
    positions with row pitch ``wq`` (the few columns past the output width are computed and
    dropped) and every chunk is a contiguous vector load -- no bounds checks, no strided loads.
    Only 2-D float convolutions; ``mb`` is the largest of 8, 4, 2, 1 dividing the output channels
    per group -- or 8 when padding the group's channels to a multiple of 8 adds at most 1/8 more
    work (the last block's extra channels get zero weights and no epilogue: ShuffleNet's 68
    channels per group ran at 54 GFLOP/s in blocks of 4, 78 in blocks of 8) -- so a depthwise
    convolution (one output channel per group) takes the blocked tile with ``mb = 1``: its taps
    run on contiguous vectors of the padded copy, with no bounds checks.
    On small planes the phase-split copy's junk columns cost up to 30% (13x13 3x3: a row pitch of
    15 for 13 outputs), and a strided depthwise conv read every input at stride 2: those (but not
    a plane ``COPY_WIDE`` wide and more at stride 1, whose junk is under 4%) take column-shifted
    copies instead
    (``cols``: one copy per kernel column, shifted by the column's offset and subsampled by the
    stride, row pitch = output width; tap (r, kw) reads copy kw).
    A depthwise conv copies its one input channel per tile into a stack buffer (``local``: in L1
    when it is used) rather than the whole input in a pass of its own. On wide planes (``WIDE_PLANE``
    columns and more) a band's input copy is kept within ``BAND_BYTES``, and each band copies its
    own rows of every channel just before its blocks read them (``band``: :func:`band_copy`, one
    copy per thread). With threads, the rows are split into more bands when the tiles (or, with
    band copies, the bands) would not divide evenly among the threads.
    An ungrouped conv whose input copy the AVX-512 tile reduces in blocks of channels takes 2 or 4
    blocks of 8 output channels per tile (:func:`_sub_blocks`).
    Instrumented builds keep the plain tile (the counters then see the reads the cost model
    describes, not the copy)."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    if k.counters or len(kernel) != 2 or k.ct(node.outputs[0]) != "float":
        return None
    mg = out[1] // group
    mb = next(b for b in (8, 4, 2, 1) if mg % b == 0)  # a block stays in one group
    if mb < 8 and mg > 8 and 8 * round_up(mg, 8) <= 9 * mg:
        mb = 8
    hp, wp = (max(pb[e] + x[2 + e], (out[2 + e] - 1) * st[e] + (kernel[e] - 1) * dil[e] + 1) for e in range(2))
    hq, wq = -(-hp // st[0]), -(-wp // st[1])
    cols = 0
    if _subsampled(kernel, st, pb, out):  # one plane of the positions it reads (sf_conv_copy_sub)
        hq, wq = out[2], out[3]
    # a wide plane at stride 1 keeps the phase-split copy for a kernel up to 3 wide: its junk is
    # at most 2 columns per 58 (COPY_WIDE), and the column copies are 3 copies of the input
    # written and read through memory (VGG-19's 224x224 64-channel plane: 39 MB); paired in-model
    # CPU times on VGG-19's 224x224 and 112x112 3x3 convs: 0.83-0.90 of the time
    narrow = out[3] < COPY_WIDE or st[1] != 1
    junk = 12 * wq > 13 * out[3] or (kernel[1] <= 3 and wq > out[3] and narrow)
    if kernel[1] > 1 and ((mb == 1 and st[1] != 1) or (mb > 1 and junk)):
        # small planes (13x13 3x3: 15 columns computed per 13), strided depthwise convs, and any
        # kernel up to 3 wide with junk columns (in ResNet-50, paired in-model CPU times: 28x28
        # 3x3 8% faster, stride-2 3x3 5-12%; its 7x7 stem 6% slower: 7 copies of the plane)
        cols, wq = kernel[1], out[3]
    fits = [r for r in range(1, out[2] + 1) if out[2] % r == 0
            and (mb * round_up(r * wq, CHUNK) <= MAX_TILE or r == 1)]
    if out[3] >= WIDE_PLANE:
        # every block of output channels rereads its band's input copy: on wide planes keep a
        # band's copy within half the L2 (VGG-19's 224x224 and 112x112 3x3 convs, paired in-model:
        # 0.87-0.98 of the time; on ResNet-50's 28x28 planes the same rule was 6-11% slower)
        s0, s1 = (1, 1) if _subsampled(kernel, st, pb, out) else st
        per_row = 4 * w[1] * (cols or s1) * s0 * wq
        halo = (kernel[0] - 1) * dil[0] // s0
        fits = [r for r in fits if per_row * (r + halo) <= BAND_BYTES and r * wq >= 96] or fits
    tiles = x[0] * group * -(-mg // mb)  # tiles per band of rows
    # the threads share the (batch, block, band) tiles: split the rows into more bands when the
    # tiles would not divide evenly among them (3 tiles on 2 threads: one waits a third of the time)
    even = [r for r in fits if _even(tiles * (out[2] // r), k.threads)]
    rows = max(even or fits)
    span = rows * wq
    # an ungrouped conv may pad its last block of 32 channels by up to 1/32 (squeezenet's 1000-channel
    # classifier on 13x13: 32 tiles of 32 channels; standalone tile, paired: 0.98 of the time
    # of 125 position-vectorised tiles of 8, with 2.4% more multiply-adds)
    whole = mg % CM_CHANNELS == 0 or (group == 1 and CM_CHANNELS * round_up(mg, CM_CHANNELS) <= 33 * mg)
    if whole and out[1] >= 4 * CM_CHANNELS and rows == out[2] and CM_POSITIONS <= span <= 256 \
            and wq == out[3] and span % 16 and CM_CHANNELS * span <= MAX_TILE:
        # a small plane that fills 16-lane vectors of positions partly (7x7: 49 positions in 4
        # masked vectors; 14x14: 196 in 13): the channel-vectorised tile (sf_conv_tile32), at
        # least 4 tiles. Paired in-model CPU times on ResNet-50's 14x14 convs: 3-7% faster than
        # the position-vectorised tile (its 14x14 3x3 and 1x1 layers; not on 28x28 planes, which
        # need bands of rows: 7-15% slower)
        mb = CM_CHANNELS
    s0, s1 = (1, 1) if _subsampled(kernel, st, pb, out) else st
    blk = ConvBlocking(mb, rows, hq, wq, CHUNK, mg, -(-mg // mb), cols, s0, s1)
    # the threads share whole bands: at least two each, evenly (then maybe fewer rows a band)
    shared = [r for r in fits if r <= rows and x[0] * (out[2] // r) >= 2 * k.threads
              and _even(x[0] * (out[2] // r), k.threads)]
    if out[3] >= WIDE_PLANE and not _in_place(kernel, st, pb) and not _subsampled(kernel, st, pb, out) and shared:
        # each band copies its rows (and the taps' halo) just before its blocks read them: the
        # copy stays in the L2, where the whole input's copy went through memory first (VGG-19's
        # 224x224 64-channel plane: 13 MB) and, with threads, waited at a barrier after it.
        # Paired, Zen 4: that conv standalone 0.91 of the time at 1 thread, 0.87 at 2; 112x112
        # 128-channel 3x3 1.00 / 0.97; ShuffleNet's stride-2 stem in-model 0.70 at 1 thread
        r = max(shared)
        band_hq = r + (kernel[0] - 1) * dil[0] // s0
        if 4 * x[1] * (cols or s1) * s0 * band_hq * wq <= BAND_BYTES:
            return ConvBlocking(mb, r, band_hq, wq, CHUNK, mg, -(-mg // mb), cols, s0, s1, band=True)
    if w[1] == 1 and group > 1 and rows == out[2]:
        # depthwise: each tile copies its one input channel into L1 just before using it (a
        # separate copy pass of the whole input cost as much as the convolution)
        local = blk.cplane + max(0, out[2] * wq + _max_tap(blk, kernel, st, dil) - blk.cplane)
        if local <= MAX_TILE:
            blk = ConvBlocking(mb, rows, hq, wq, CHUNK, mg, -(-mg // mb), cols, st[0], st[1], local)
    return _sub_blocks(k, blk, x[0] * (out[2] // blk.rows), x[1]) if group == 1 else blk


#: Largest tile of several blocks of output channels (floats; its partial sums stay in the L2 between
#: the passes over the blocks of input channels).
SUB_TILE = 2 * MAX_TILE


def _sub_blocks(k, blk: ConvBlocking, bands: int, channels: int) -> ConvBlocking:
    """``blk`` with several blocks of output channels per tile (:attr:`ConvBlocking.nb`) when the
    tile reduces its input in blocks of channels (an input copy over ``CONV_CBLOCK_MIN`` bytes):
    each block of input channels is then read from the L2 by every block of output channels of
    the tile, where one block per tile read the whole input copy from beyond the L2 once per 8
    output channels. Paired variants on a Zen 4 core: a 41 MB copy (4096 channels on 28x28 onto
    64) 69 -> 80 (2 blocks) -> 92 GFLOP/s (4 blocks; ORT 108); VGG-19's 512-channel 28x28 convs,
    whose 5 MB copy this host's L3 serves fast, unchanged (in model 0.99-1.02 of their time). A
    16-core Xeon (2 MiB L2, a slow L3) had run those at 0.4 of MLAS (``benchmarks/results/conv.md``).
    ``bands``: bands of rows x batch; ``channels``: input channels (an ungrouped conv)."""
    if blk.mb != 8 or blk.padded or blk.local or blk.band or 4 * channels * blk.cplane <= CONV_CBLOCK_MIN:
        return blk
    span = blk.rows * blk.wq
    for nb in (4, 2):
        tiles = bands * (blk.blocks // nb)
        if blk.blocks % nb == 0 and blk.mb * nb * span <= SUB_TILE and tiles >= 2 * k.threads \
                and _even(tiles, k.threads):
            return dataclasses.replace(blk, nb=nb)
    return blk


def _even(count: int, threads: int) -> bool:
    """Whether ``count`` tiles taken as the threads go keep ``threads`` threads about evenly busy.

    >>> _even(6, 2), _even(7, 2), _even(17, 2)
    (True, False, True)
    """
    return count % threads == 0 or count >= 8 * threads


def _in_place(kernel, st, pb) -> bool:
    """A 1x1 convolution at stride 1 without padding: its tile reads the input itself, no copy."""
    return list(kernel) == [1, 1] and list(st) == [1, 1] and list(pb) == [0, 0]


def _subsampled(kernel, st, pb, out) -> bool:
    """A strided 1x1 convolution without padding: its input copy holds only the positions it
    reads, subsampled by the strides (one plane: the blocking's strides are 1). Paired in-model
    CPU times on ResNet-50's downsampling convs: 5-7% faster onto 28x28 and 14x14 planes, but 11%
    slower onto 7x7 (2048 channels from 1024; not understood: planes of 49 floats), so only
    from 128 output positions up."""
    return list(kernel) == [1, 1] and list(st) != [1, 1] and not any(pb) and out[-2] * out[-1] >= 128


def _max_tap(blk, kernel, st, dil) -> int:
    return max(_tap_offset(blk, st, dil, r0, r1) for r0 in range(kernel[0]) for r1 in range(kernel[1]))


def pass_floats(offs: list[int], window: int = 40) -> int:
    """Floats of one input channel that a pass of the AVX2 position tile reads: the union of its
    taps' windows (24 positions and a line of slack: 40 floats) at ``offs``. It sizes the tile's
    channel blocks for the L1 (``sf_conv_cblock_l1``); computed here once, not per tile call.

    >>> pass_floats([0, 1, 2]), pass_floats([0, 100]), pass_floats([5, 5, 0])
    (42, 80, 45)
    """
    starts = sorted(set(offs))
    return sum(min(window, b - a) for a, b in zip(starts, starts[1:])) + window if starts else 0


def _tap_offset(blk: ConvBlocking, st, dil, r0: int, r1: int) -> int:
    """Offset of tap (r0, r1) from the channel's start: its phase plane (or row phase and column
    copy), then row and column."""
    a, b = r0 * dil[0], r1 * dil[1]
    if blk.cols:
        return ((a % st[0]) * blk.cols + r1) * blk.hq * blk.wq + (a // st[0]) * blk.wq
    return ((a % st[0]) * st[1] + b % st[1]) * blk.hq * blk.wq + (a // st[0]) * blk.wq + b // st[1]


def conv_input_view(k, node, blk: ConvBlocking) -> str:
    """Before the tile loops: the Conv input as the tile reads it. A 1x1 convolution at stride 1
    without padding reads its input in place (its one phase plane is the input plane; the tile
    masks its last partial chunk, so it reads nothing past the plane). Otherwise a
    zero-padded, phase-split copy in kernel-local scratch (``[N][C][s0][s1][hq][wq]``), with
    zeroed slack after it for the last band's taps, which run past the last plane; with threads,
    one copy per thread up to ``PRIVATE_COPY_MAX`` bytes (:func:`_private_copies`; the view is
    then the calling thread's copy), a larger one shared out among them (:func:`_copy_call`)."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    if _in_place(kernel, st, pb):
        k.line("/* a 1x1 convolution reads its input in place */")
        return k.ptr(node.inputs[0], "r")
    if blk.local:
        k.line("/* each tile copies its input channel (tile_conv_blocked) */")
        return k.ptr(node.inputs[0], "r")
    if blk.band:
        return k.alloc("float", k.threads * _band_floats(k, node, blk), "each thread's copy of a band (band_copy)")
    if _subsampled(kernel, st, pb, out):
        arr = k.alloc("float", x[0] * x[1] * blk.cplane, "the positions a strided 1x1 Conv reads")
        _copy_sub_call(k, arr, k.ptr(node.inputs[0], "r"), x, out, st)
        return arr
    size = x[0] * x[1] * blk.cplane
    last = out[2] * blk.wq - 1 + _max_tap(blk, kernel, st, dil)  # the last band's last position (the tiles read no further)
    slack = max(0, last + 1 - blk.cplane)
    what = "column-shifted" if blk.cols else "stride-phase-split"
    if k.threads > 1 and 4 * (size + slack) <= PRIVATE_COPY_MAX:
        per = round_up(size + slack, 16)
        arr = k.alloc("float", k.threads * per, f"each thread's zero-padded, {what} copy of a Conv input",
                      private=True)
        _private_copies(k, arr, per, k.ptr(node.inputs[0], "r"), x, blk, pb, dil, (size, slack))
        return f"({arr} + (long)SF_TID()*{per})"
    arr = k.alloc("float", size + slack, f"zero-padded, {what} copy of a Conv input")
    fill = f"for (long q = {size}; q < {size + slack}; q++) {arr}[q] = 0;" if slack else ""
    _copy_call(k, arr, k.ptr(node.inputs[0], "r"), x, blk, pb, dil, fill)
    return arr


def _band_floats(k, node, blk: ConvBlocking) -> int:
    """Floats of one thread's band copy: every input channel's band, then zeroed slack for the
    last channel's taps (whole cache lines, so the threads' copies share none)."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    last = blk.rows * blk.wq - 1 + _max_tap(blk, kernel, st, dil)
    return round_up(x[1] * blk.cplane + max(0, last + 1 - blk.cplane), 16)


def band_copy(k, node, blk: ConvBlocking, view: str, n: str, r0: str) -> str:
    """In the tile loop of a banded blocking (:attr:`ConvBlocking.band`): the calling thread's
    copy of output rows ``r0``.. of batch ``n`` -- every input channel's phase-plane rows from
    ``r0`` on (``sf_conv_copy`` with the padding shifted by the band's first row), then the
    slack zeroed; the C name of the copy, which the band's tiles read from its start."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    per = _band_floats(k, node, blk)
    buf, q = k.fresh("X"), k.fresh("q")
    at = f" + (long)SF_TID()*{per}" if k.threads > 1 else ""
    k.line(f"float *restrict {buf} = {view}{at};")
    size = x[1] * blk.cplane
    if per > size:
        k.line(f"for (long {q} = {size}; {q} < {per}; {q}++) {buf}[{q}] = 0;")
    src = k.ptr(node.inputs[0], "r")
    if n != "0":
        src = f"{src} + {n}*{x[1] * x[2] * x[3]}"
    p0 = str(pb[0]) if r0 == "0" else f"{pb[0]} - {r0}" + (f"*{blk.s0}" if blk.s0 != 1 else "")
    fn, geom = _copy_fn(k, x, blk, p0, pb, dil)
    k.line(f"{fn}({buf}, {src}, {x[1]}, {geom});")
    return buf


def _copy_fn(k, x, blk: ConvBlocking, p0, pb, dil) -> tuple:
    """The input copy helper a blocking reads (``sf_conv_copy``, or ``sf_conv_copy_cols`` for
    column copies; marked used) and its geometry arguments after the plane count, the first row's
    padding ``p0`` (a C expression: a band's is shifted by its first row)."""
    fn = "sf_conv_copy_cols" if blk.cols else "sf_conv_copy"
    k.use_helper(fn)
    geom = f"{x[2]}, {x[3]}, {blk.s0}, {blk.s1}, {blk.hq}, {blk.wq}, {p0}, {pb[1]}"
    return fn, geom + (f", {blk.cols}, {dil[1]}" if blk.cols else "")


def _copy_call(k, dst: str, src: str, x, blk: ConvBlocking, pb, dil, fill: str = "") -> None:
    """``sf_conv_copy`` (or ``sf_conv_copy_cols``) of all N*C planes, and the C statement ``fill``
    (zeroing the slack after them), over the threads as :func:`~solverfuse.emit.sharing.thread_runs`."""
    fn, geom = _copy_fn(k, x, blk, pb[0], pb, dil)
    thread_runs(k, x[0] * x[1], lambda c, n: f"{fn}({_at(dst, c, blk.cplane)}, {_at(src, c, x[2] * x[3])}, {n}, {geom});",
                fill)


#: Largest conv input copy (bytes) that each thread makes whole for itself (:func:`_private_copies`)
#: where the threads would share one. Larger ones are the copies the tile reads in blocks of
#: channels from beyond the L2 (``CONV_CBLOCK_MIN``), where a second copy would double that traffic.
PRIVATE_COPY_MAX = CONV_CBLOCK_MIN


def _private_copies(k, dst: str, per: int, src: str, x, blk: ConvBlocking, pb, dil, sizes: tuple) -> None:
    """Thread t's own copy of the whole input at ``dst + t*per`` (``sizes``: the copy's floats and
    its zeroed slack), one per iteration of a static loop over the threads, so thread t makes copy
    t and the tiles it takes read that copy (``SF_TID()``). Where the threads shared one copy, each
    wrote half of it into lines the other thread's core had read in the previous conv (every thread
    reads all of a copy): on the 2-vCPU Zen 4 guest such writes ran at a third to a tenth of the
    speed of writes to the thread's own lines (``benchmarks/line_share.py``), and DenseNet-121's
    copies took longer at 2 threads than at 1 (``benchmarks/kernel_passes.py``,
    ``benchmarks/results/omp.md``). Each thread now copies twice as much into lines only it uses."""
    fn, geom = _copy_fn(k, x, blk, pb[0], pb, dil)
    size, slack = sizes
    t, q = k.fresh("c"), k.fresh("q")
    k.line(f"#pragma omp parallel for schedule(static) num_threads({k.threads})")
    with k.block(f"for (long {t} = 0; {t} < {k.threads}; {t}++)"):
        k.line(f"{fn}({dst} + {t}*{per}, {src}, {x[0] * x[1]}, {geom});")
        if slack:
            k.line(f"for (long {q} = {size}; {q} < {size + slack}; {q}++) {dst}[{t}*{per} + {q}] = 0;")


def _copy_sub_call(k, dst: str, src: str, x, out, st) -> None:
    """``sf_conv_copy_sub`` of all N*C planes, over the threads as :func:`~solverfuse.emit.sharing.thread_runs`."""
    geom = f"{x[2]}, {x[3]}, {st[0]}, {st[1]}, {out[2]}, {out[3]}"
    k.use_helper("sf_conv_copy_sub")
    plane = out[2] * out[3]
    thread_runs(k, x[0] * x[1],
                lambda c, n: f"sf_conv_copy_sub({_at(dst, c, plane)}, {_at(src, c, x[2] * x[3])}, {n}, {geom});")


def _at(ptr: str, c: str, stride: int) -> str:
    return ptr if c == "0" else f"{ptr} + {c}*{stride}"


def conv_weight_view(k, node, blk: ConvBlocking) -> str:
    """The Conv weights repacked as ``[groups][blocks][C][taps][mb]`` (zero past a group's
    channels), so the mb weights a tile step
    multiplies are one cache line (read in place, rows of C*taps floats apart -- 4 KiB for
    C=1024 -- they fall into one L1 set and evict each other: measured 10x slower on ResNet-50's
    last stage). Constant weights are packed once per set of constants; computed ones per run."""
    wt = node.inputs[1]
    ws = k.shape(wt)
    k.use_helper("sf_conv_pack")
    groups = ws[0] // blk.mg
    args = f"{groups}, {blk.mg}, {ws[1]}, {ws[2] * ws[3]}, {blk.mb}"
    size = groups * blk.blocks * blk.mb * numel(ws[1:])
    if k.is_constant(wt):
        return k.packed("float", size, "Conv weights repacked by output-channel block",
                        f"sf_conv_pack({{dst}}, {{w}}, {args});", {"w": wt})
    arr = k.alloc("float", size, "Conv weights repacked by output-channel block")
    k.line(f"sf_conv_pack({arr}, {k.ptr(wt, 'r')}, {args});")
    return arr


def tile_conv_blocked(k, node, n, m0, r0, src, blk: ConvBlocking, wsrc: str, mi: str, valid: str = "") -> str:
    """Output channels m0..m0+mb-1 x output rows r0..r0+rows-1 of Conv output at batch ``n`` into
    a stack array ``T[mb][rows * wq]`` (row r of channel a at ``T[a] + r*wq``); its name.
    ``mi`` is the block's number (its packed weights), ``valid`` the count of real channels in
    it when the block may be part padding (:attr:`ConvBlocking.padded`)."""
    x, w, out, kernel, st, dil, pb, group = _conv_geometry(k, node)
    span = blk.rows * blk.wq  # the tile masks the positions past its last whole chunk
    mb = blk.mb
    arr, off, a, j = k.fresh("T"), k.fresh("off"), k.fresh("a"), k.fresh("j")
    taps = kernel[0] * kernel[1]
    cplane = blk.cplane
    offs = [_tap_offset(blk, st, dil, r_0, r_1) for r_0 in range(kernel[0]) for r_1 in range(kernel[1])]
    k.line(f"float {arr}[{blk.channels}][{span}] SF_ALIGN64;")
    # the taps' offsets, then the floats one channel's pass reads (the AVX2 tile's L1 channel block)
    k.line(f"static const long {off}[{taps + 1}] = {{{', '.join(map(str, offs + [pass_floats(offs)]))}}};")
    # the block's group starts at input channel goff (0 when ungrouped)
    goff = "" if group == 1 or m0 == "0" else f"({m0} / {out[1] // group})*{w[1]} + "
    plane = f"({n}*{x[1]} + {goff}0)*{cplane}" if n != "0" and not blk.band else f"({goff}0)*{cplane}"
    if blk.local:  # copy the one input channel here, then read the copy
        buf = k.fresh("X")
        chan = f"({n}*{x[1]} + {goff}0)*{x[2] * x[3]}" if n != "0" else f"({goff}0)*{x[2] * x[3]}"
        k.line(f"float {buf}[{blk.local}] SF_ALIGN64;")
        if blk.local > cplane:
            k.line(f"for (long {j} = {cplane}; {j} < {blk.local}; {j}++) {buf}[{j}] = 0;")
        fn, geom = _copy_fn(k, x, blk, pb[0], pb, dil)
        k.line(f"{fn}({buf}, {src} + {chan}, 1, {geom});")
        src, plane = buf, "0"
    row0 = "" if r0 == "0" or blk.band else f" + {r0}*{blk.wq}"
    wrow = f" + {mi}*{w[1] * taps * blk.channels}" if mi != "0" else ""
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    # a bias in a buffer of its own starts the accumulators (no pass over the tile); not for a
    # block that may be part padding (it would read past the last group's bias)
    in_tile = (bias is not None and not valid and k.ct(bias) == "float" and bias not in k.scratch
               and not k.has_tile(bias) and k.graph.index.producer.get(bias) not in k.members)
    bptr = (f"{k.ptr(bias, 'r')} + {m0}" if m0 != "0" else k.ptr(bias, "r")) if in_tile else "0"
    k.use_helper(f"sf_conv_tile{mb}")
    extra = "" if mb in (1, CM_CHANNELS) else f", {_epilogue_prefetch(k, node, n, m0, r0)}, {blk.nb}"
    k.line(f"sf_conv_tile{mb}(&{arr}[0][0], {span}, {src} + {plane}{row0}, {cplane}, {wsrc}{wrow}, "
           f"{w[1]}, {taps}, {off}, {bptr}{extra});")
    if bias is not None and not in_tile:
        with k.block(f"for (int {a} = 0; {a} < {valid or mb}; {a}++)"):
            bias = k.value(node.inputs[2], (k.index(f"{m0} + {a}"),))
            k.line(f"for (long {j} = 0; {j} < {span}; {j}++) {arr}[{a}][{j}] += {bias};")
    return arr


def _epilogue_prefetch(k, node, n: str, m0: str, r0: str) -> str:
    """The position-vectorised tile's prefetch arguments ``pw, pr, ps``: the block's region of the
    kernel's first float output of the conv's shape (written by the epilogue) and of its first
    other float input of that shape (a residual the epilogue adds), ``0`` where there is none.
    Paired, standalone tile + a BatchNorm(+Sum)+Relu epilogue on ResNet-50's 1x1 64->256 conv at
    56x56: 12-20% faster (the epilogue's misses overlap the tile's multiply-adds)."""
    out = k.shape(node.outputs[0])
    plane = out[2] * out[3]

    def region(ts, mode):
        t = next((t for t in ts if t in k.buffers and k.shape(t) == out and k.ct(t) == "float"), None)
        if t is None:
            return "0"
        at = f"({n}*{out[1]} + {m0})*{plane}" if n != "0" else f"{m0}*{plane}" if m0 != "0" else ""
        row = f"{r0}*{out[3]}" if r0 != "0" else ""
        off = " + ".join(p for p in (at, row) if p)
        return f"{k.ptr(t, mode)}{' + ' + off if off else ''}"
    pw = region(k.writes, "w")
    pr = region([t for t in k.reads if t != node.inputs[0]], "r")
    return f"{pw}, {pr}, {plane}"
