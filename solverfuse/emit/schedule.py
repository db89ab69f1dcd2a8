"""How a group's kernel is laid out: which values are recomputed, which are materialised, and
the loop nests (*passes*) that run them -- a row loop, a forward-mapped store, or passes.

:func:`render_kernel` is the entry point (called by :func:`solverfuse.emit.program.render` per group).
The rules, in the order they are tried:

1. :func:`_row_fusable` -> :func:`_emit_rows`: one loop over rows; anchor row tile, reduction
   statistics and last-axis Reduce* as row scalars, then all outputs of the row (Softmax /
   LayerNorm + producers and consumers, MatMul + Softmax, residual + LayerNorm + GELU, x - mean(x));
2. otherwise per pass (:func:`_plan_passes`): Reduce*/statistics passes in graph order, then one
   pass per shape of written tensors -- or, for an anchor reshaped/transposed into the written
   tensor, :func:`_emit_forward` (loop over the anchor's tile, store at the mapped index);
3. an anchor/window output needed by several passes or at another shape is materialised in
   kernel-local scratch (:func:`_materialise_inline`).

>>> sorted(STATS_OPS)
['LayerNormalization', 'LogSoftmax', 'ScaledDotProductAttention', 'Softmax', 'VarMean']
"""
from __future__ import annotations

import contextlib
from typing import Optional

from ..errors import EmitError
from ..ops import OPS, numel, transpose_perm
from . import anchors, reductions
from .anchors import MAX_TILE
from .cexpr import attr_str, bmap, ctype, linear, lit, reshape_index
from .elementwise import NARY, STRUCTURED, UNARY
from .indexing import NARY_MORE, UNARY_MORE
from .kernel import Kernel, UntiledRead
from .lowering import SUPPORTED

MATERIALISED_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                    "ReduceSumSquare", "GlobalAveragePool", "GlobalMaxPool"}
STATS_OPS = frozenset(reductions.STATS)


def _deps(k: Kernel, tensor: str, memo: dict) -> frozenset:
    """In-group tensors evaluated inline when ``tensor`` is requested (materialised ones stop)."""
    if tensor in memo:
        return memo[tensor]
    p = k.graph.index.producer.get(tensor)
    if not tensor or p not in k.members or p in k.materialised:
        out = frozenset()
    else:
        node = k.graph.index.node[p]
        out = frozenset([tensor]).union(*(_deps(k, t, memo) for t in node.inputs if t))
    memo[tensor] = out
    return out


def _plan_passes(k: Kernel) -> list:
    """Decide which nodes are materialised and the passes: ('node', v) or ('out', shape, tensors)."""
    g = k.graph
    for v in k.nodes:
        if g.index.node[v].op in MATERIALISED_OPS:
            k.materialised.add(v)
    while True:
        memo: dict = {}
        passes = []
        for v in k.nodes:
            node = g.index.node[v]
            if v in k.materialised or node.op in STATS_OPS:
                ins = node.inputs[:1] if node.op in STATS_OPS else node.inputs
                deps = frozenset().union(*(_deps(k, t, memo) for t in ins if t))
                shape = k.shape(node.outputs[0])
                passes.append((("node", v), shape, deps))
        by_shape: dict[tuple, list[str]] = {}
        for t in k.writes:
            p = g.index.producer[t]
            if p in k.materialised and not any(c in k.members for c in g.index.consumers.get(t, [])):
                continue  # its own pass writes it straight to global memory
            by_shape.setdefault(k.shape(t), []).append(t)
        for shape, ts in by_shape.items():
            deps = frozenset().union(*(_deps(k, t, memo) for t in ts))
            chain = _forward_chain(k, ts[0]) if len(ts) == 1 else None
            if chain is not None and chain[0] not in k.materialised:
                # run in the anchor's own iteration space (its tile), store at the mapped index
                a = g.index.node[chain[0]].outputs[0]
                passes.append((("fwd", ts[0], chain), k.shape(a), deps))
            else:
                passes.append((("out", shape, ts), shape, deps))
        shared = _shared_frontier(k, passes)
        if shared:
            k.materialised |= shared
            continue
        promote = set()
        for v in k.nodes:
            node = g.index.node[v]
            if v in k.materialised or OPS[node.op].role not in ("anchor", "window"):
                continue
            t = node.outputs[0]
            using = [shape for _, shape, deps in passes if t in deps]
            if len(using) > 1 or any(s != k.shape(t) for s in using):
                promote.add(v)
            elif any(c in k.members for c in g.index.consumers.get(t, [])) and any(
                    t in deps and _tile_elems(k, shape, deps) < SHORT_TILE and _expensive(k, deps, t)
                    for _, shape, deps in passes):
                # computed per element (no tile: a [N, C, 1, 1] conv output) or in tiles shorter
                # than a vector (a 2x2 plane): alone in a loop of its own, so the expensive
                # epilogue after it runs as one vector loop over all of it (a conv's dot product
                # in the same loop left SiLU's exp one scalar call per element)
                promote.add(v)
        if not promote:
            return [p for p, _, _ in passes]
        k.materialised |= promote


#: Ops whose value costs far more than a load from kernel-local scratch (a libm call or an
#: anchor's dot product): a value several passes need is computed once (:func:`_shared_frontier`).
EXPENSIVE_OPS = frozenset({"Exp", "Erf", "Sigmoid", "Tanh", "Log", "Pow", "Gelu", "Softplus", "Mish", "Silu",
                           "Elu", "Selu", "Sin", "Cos"})


#: Tiles of fewer elements than this (one AVX-512 vector) do not carry an expensive epilogue.
SHORT_TILE = 16


def _tile_elems(k: Kernel, shape: tuple, deps) -> int:
    """Elements of the anchor tile a pass over ``shape`` runs its epilogue on (0: no tile)."""
    tiled = _anchors_for(k, shape, deps)
    if not tiled:
        return 0
    node = k.graph.index.node[k.graph.index.producer[tiled[0]]]
    return numel(shape[-anchors.tile_rank(k, node):])


def _expensive(k: Kernel, deps, after: Optional[str] = None) -> bool:
    """Whether some in-group tensor of ``deps`` (computed from ``after``, when given) is computed
    by an op of :data:`EXPENSIVE_OPS`."""
    g = k.graph
    memo: dict = {}
    return any(g.index.node[g.index.producer[d]].op in EXPENSIVE_OPS and (after is None or after in _deps(k, d, memo))
               for d in deps)


def _shared_frontier(k: Kernel, passes: list) -> set:
    """Elementwise nodes to materialise: the last tensors of an expensive chain (an anchor or a
    transcendental op upstream in the group) that more than one pass reads. Each pass would
    otherwise recompute the chain (an activation's exp per pass: efficientnet's conv + SiLU +
    global pool ran exp twice, whisper's conv + GELU + LayerNorm erf twice); materialised, the
    chain runs once, in a pass that has the anchor's tile."""
    g = k.graph
    count: dict[str, int] = {}
    for _, _, deps in passes:
        for t in deps:
            count[t] = count.get(t, 0) + 1
    shared = {t for t, n in count.items() if n > 1}
    memo: dict = {}
    out = set()
    for t in shared:
        v = g.index.producer[t]
        node = g.index.node[v]
        if v in k.materialised or OPS[node.op].role not in ("elementwise", "broadcast") or node.op in STATS_OPS:
            continue
        if any(c in k.members and any(o in shared for o in g.index.node[c].outputs if o)
               for c in g.index.consumers.get(t, [])):
            continue  # not the last shared tensor of its chain
        ops = {g.index.node[g.index.producer[d]].op for d in _deps(k, t, memo)}
        if ops & EXPENSIVE_OPS or any(OPS[o].role in ("anchor", "window") for o in ops):
            out.add(_before_layout(k, t, memo) or v)
    return out


def _before_layout(k: Kernel, t: str, memo: dict) -> Optional[str]:
    """The producer of the input of a layout op upstream of ``t`` when that input is an
    elementwise result of an expensive chain: materialised there, the chain runs in its own
    layout (contiguous, on the anchor's tile) rather than read through the transpose (whisper's
    conv + GELU + transpose + LayerNorm ran its erf over a stride-16 read)."""
    g = k.graph
    for d in _deps(k, t, memo):
        node = g.index.node[g.index.producer[d]]
        if node.op not in LAYOUT_MAPS:
            continue
        u = node.inputs[0]
        p = g.index.producer.get(u)
        if p in k.members and p not in k.materialised and OPS[g.index.node[p].op].role in ("elementwise", "broadcast") \
                and _expensive(k, _deps(k, u, memo)):
            return p
    return None


LAYOUT_MAPS = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


def _forward_chain(k: Kernel, t: str) -> Optional[list[str]]:
    """[anchor, node, ..., producer of t] when written tensor ``t`` is an anchor's output reshaped /
    transposed (and maybe passed through elementwise ops) -- each node on the chain has exactly one
    in-group input, and only layout maps change the shape -- with a shape different from the
    anchor's. Such a pass can loop over the anchor's tile and store at the forward-mapped index
    instead of materialising the anchor (e.g. the QKV projection + head split of attention)."""
    g = k.graph
    chain: list[str] = []
    cur = t
    while True:
        v = g.index.producer.get(cur)
        if v not in k.members or v in k.materialised:
            return None
        node = g.index.node[v]
        role = OPS[node.op].role
        chain.append(v)
        if role == "anchor":
            break
        inner = [u for u in node.inputs if u and g.index.producer.get(u) in k.members]
        if node.op == "Pad":
            if cur != t or _pad_begin(k, node) is None:
                return None  # only a constant pad that writes t: its border is filled apart
            inner = inner[:1] if inner and inner[0] == node.inputs[0] else []
        if not inner or node.outputs.index(cur) != 0:
            return None
        if node.op not in LAYOUT_MAPS and node.op != "Pad" and (
                role not in ("elementwise", "broadcast") or any(k.shape(u) != k.shape(cur) for u in inner)):
            return None
        if len(inner) > 1 and (node.op in LAYOUT_MAPS or any(
                g.index.node[g.index.producer[u]].op in LAYOUT_MAPS for c in chain for u in inner)):
            return None
        # several in-group inputs of the same shape (SiLU: x * sigmoid(x)): each is evaluated at
        # the index the chain reaches here; follow the one that leads to the anchor
        cur = next((u for u in inner if _reaches_anchor(k, u)), inner[0])
    chain.reverse()
    if node.op not in anchors.TILES or k.shape(node.outputs[0]) == k.shape(t):
        return None
    return chain


def _reaches_anchor(k: Kernel, t: str) -> bool:
    """Whether in-group tensor ``t`` is an anchor's output or computed from one in the group."""
    g = k.graph
    memo: dict = {}
    return any(OPS[g.index.node[g.index.producer[d]].op].role == "anchor" for d in _deps(k, t, memo))


def _pad_begin(k: Kernel, node) -> Optional[list]:
    """The leading pad of each axis of a constant-mode Pad with no negative pad, else None."""
    if attr_str(node.attributes.get("mode"), "constant") != "constant":
        return None
    xs = k.shape(node.inputs[0])
    pads = list(node.attributes["pads"]) if "pads" in node.attributes else \
        [int(p) for p in k.param_values(node.inputs[1]).reshape(-1)]
    axes = list(range(len(xs)))
    if len(node.inputs) > 3 and node.inputs[3]:
        axes = [int(a) % len(xs) for a in k.param_values(node.inputs[3]).reshape(-1)]
    if any(p < 0 for p in pads):
        return None
    begin = [0] * len(xs)
    for n, a in enumerate(axes):
        begin[a] = pads[n]
    return begin


def _pad_border(k: Kernel, node) -> None:
    """Store a constant Pad's value on its output's border (the elements no input element maps
    to): per row of the output, the whole row when the row is in the padding, else the head and
    tail of the row."""
    x, out = node.inputs[0], node.outputs[0]
    xs, os_, ct = k.shape(x), k.shape(out), k.ct(out)
    begin = _pad_begin(k, node)
    if len(node.inputs) > 2 and node.inputs[2]:
        cval = k.value(node.inputs[2], ("0",) * len(k.shape(node.inputs[2])))
    else:
        cval = lit(node.attributes.get("value", 0.0), ct)
    k.line(f"/* pass: the border of a constant Pad (its inside is stored by the next pass) */")
    with k.loops(os_[:-1]) as outer:  # serial: little work, not worth waking the threads
        inside = [f"{i} < {b + d}" if not b else f"({i} >= {b} && {i} < {b + d})"
                  for i, b, d, o in zip(outer, begin, xs, os_) if o != d or b]
        b, d, n = begin[-1], xs[-1], os_[-1]
        j = k.fresh("j")
        ranges = [(0, b), (b + d, n)]
        if inside:
            with k.block(f"if (!({' && '.join(inside)}))"):
                with k.block(f"for (long {j} = 0; {j} < {n}; {j}++)"):
                    k.store(out, tuple(outer) + (j,), cval)
            k.open("else")
        for lo, hi in ranges:
            if hi > lo:
                with k.block(f"for (long {j} = {lo}; {j} < {hi}; {j}++)"):
                    k.store(out, tuple(outer) + (j,), cval)
        if inside:
            k.close()


def _forward_index(k: Kernel, node, idx: tuple) -> tuple:
    """The output index of a layout op for input index ``idx`` (the inverse of its index map)."""
    x, out = node.inputs[0], node.outputs[0]
    xs, os_ = k.shape(x), k.shape(out)
    if node.op == "Pad":
        return tuple(f"{i} + {b}" if b else i for i, b in zip(idx, _pad_begin(k, node)))
    if node.op == "Transpose":
        perm = transpose_perm(node.attributes, len(xs))
        return tuple(idx[p] for p in perm)
    if node.op in ("Identity", "Dropout"):
        return tuple(idx)
    return reshape_index(idx, xs, os_, k.index)


def _emit_forward(k: Kernel, t: str, chain: list[str], deps: frozenset) -> None:
    """A pass over the anchor's tile; each layout op on the chain maps the index forward and its
    output value is registered (not recomputed), elementwise ops run as usual; t is stored."""
    g = k.graph
    a = g.index.node[chain[0]].outputs[0]
    last = g.index.node[chain[-1]]
    if last.op == "Pad":
        _pad_border(k, last)
    k.line(f"/* pass: in the anchor's iteration space, through {len(chain) - 1} op(s) to a mapped store */")
    split = _head_split(k, a, chain)

    def body(idx):
        cur, cur_idx = a, tuple(idx)
        for v in chain[1:]:
            node = g.index.node[v]
            out = node.outputs[0]
            if node.op in LAYOUT_MAPS or node.op == "Pad":
                for u in node.inputs[1:2] if node.op == "Pad" else node.inputs[1:]:
                    if u:
                        k.param_values(u)  # checked at run time, as the index map would
                val = k.value(cur, cur_idx)
                if v == split[0] and cur_idx[-1] in k.splits:  # the head split: the two loops' own indices
                    cur_idx = tuple(cur_idx[:-1]) + k.splits[cur_idx[-1]]
                else:
                    cur_idx = tuple("0" if d == 1 else k.index(i)
                                    for i, d in zip(_forward_index(k, node, cur_idx), k.shape(out)))
                k.bind(out, cur_idx, val)
            cur = out
        k.store(t, cur_idx, k.value(t, cur_idx))
    _emit_loop(k, k.shape(a), deps, body, split[1])


def _head_split(k: Kernel, a: str, chain: list[str]) -> tuple:
    """(the Reshape, d) when the first layout op on a forward chain splits the anchor's last dim N
    into (N/d, d) (attention's head split): the pass then runs its innermost loop as two, over
    N/d and d, and the stores of each d-run are contiguous whatever the transposes after it
    (one loop over N stored through ``/ d`` and ``% d`` stayed scalar: vit_ts's QKV projection
    kernels ran 0.6 µs slower than MatMul, Add and Transpose unfused); else (None, 0)."""
    g = k.graph
    for v in chain[1:]:
        node = g.index.node[v]
        if node.op not in LAYOUT_MAPS:
            continue
        xs, os_ = k.shape(node.inputs[0]), k.shape(node.outputs[0])
        if node.op == "Reshape" and xs == k.shape(a) and len(os_) == len(xs) + 1 and xs[:-1] == os_[:-2] \
                and os_[-2] > 1 and os_[-1] > 1:
            return v, os_[-1]
        return None, 0
    return None, 0


def _anchors_for(k: Kernel, shape: tuple, deps: frozenset) -> list[str]:
    """The anchor output of this pass's shape that gets a tile (vectorisable inner loops)."""
    out = []
    for t in sorted(deps, key=lambda t: k.graph.index.position[k.graph.index.producer[t]]):
        node = k.graph.index.node[k.graph.index.producer[t]]
        if node.op in anchors.TILES and k.shape(t) == shape and len(shape) and 1 < shape[-1] <= MAX_TILE:
            out.append(t)
    return out[:1]  # a group holds at most one anchor (cost.group_violation)


@contextlib.contextmanager
def _last_dim(k: Kernel, n: int, split: int = 0):
    """The innermost loop over ``n``; its index. With ``split`` (a divisor of n, :func:`_head_split`):
    two loops over (n / split, split), the index composed from theirs (``k.splits`` maps it back)."""
    if not split:
        with k.loops((n,)) as (j,):
            yield j
        return
    with k.loops((n // split, split)) as (h, e):
        j = k.index(f"{h}*{split} + {e}")
        k.splits[j] = (h, e)
        yield j


def _emit_loop(k: Kernel, shape: tuple, deps: frozenset, body, split: int = 0) -> None:
    """One pass: loops over ``shape``; an anchor's tile (its last d dims: a row, or a Conv's
    output plane) is computed before the inner loops that run the fused epilogue. ``split``: the
    last dim's loop runs as two (:func:`_last_dim`)."""
    tiled = _anchors_for(k, shape, deps)
    if not tiled and len(shape) == 4 and shape[2] * shape[3] >= 16 and _reads_per_channel(k, deps, shape):
        # an NCHW pass with per-channel constants (BatchNorm after a Concat: DenseNet): loops over
        # (n, c), the constants loaded once, then the plane (per element they were loaded and
        # BatchNorm's scale / sqrt(var + eps) recomputed: 57 such kernels took 60% of DenseNet)
        flat = _flat_plane(k, deps, shape)
        with k.loops(shape[:2], parallel=True, dynamic=True) as outer:  # channels one at a time
            _prime_channel_reads(k, deps, shape, outer[0], outer[1])
            if flat:  # one loop over the plane (index (n, c, 0, q), q < H*W): see _flat_plane
                with k.loops((shape[2] * shape[3],)) as (q,):
                    body(tuple(outer) + ("0", q))
            else:
                with k.loops(shape[2:]) as inner:
                    body(tuple(outer) + tuple(inner))
        return
    if not tiled:
        if split:
            with k.loops(shape[:-1], parallel=True) as outer:
                with _last_dim(k, shape[-1], split) as j:
                    body(tuple(outer) + (j,))
            return
        with k.loops(shape, parallel=True) as idx:
            body(idx)
        return
    (t,) = tiled
    node = k.graph.index.node[k.graph.index.producer[t]]
    blocking = anchors.conv_blocking(k, node) if node.op == "Conv" else None
    if blocking is not None:
        return _emit_conv_blocked(k, t, node, shape, blocking, body, deps)
    mb = anchors.matmul_blocking(k, node) if node.op in ("MatMul", "Gemm") else None
    if mb is not None:
        return _emit_matmul_blocked(k, t, node, shape, mb, body, split)
    d = anchors.tile_rank(k, node)
    with k.loops(shape[:-d], parallel=True) as outer:
        anchors.TILES[node.op](k, t, outer, d)
        if node.op in ("Conv", "MaxPool", "AveragePool"):  # outer = (batch, channel, ...)
            _prime_channel_reads(k, deps, shape, outer[0], outer[1])
        if d == 1:
            with _last_dim(k, shape[-1], split) as j:
                body(tuple(outer) + (j,))
        else:
            with k.loops(shape[-d:]) as inner:
                body(tuple(outer) + tuple(inner))
    k.drop_tile(t)


def _prime_channel_reads(k: Kernel, deps: frozenset, shape: tuple, n: str, m: str) -> None:
    """Before the row loops of one output channel's epilogue (a conv or pooling tile's), load the
    constants it reads per channel (BatchNorm's statistics, a [C, 1, 1] bias) once: read inside the loops they were
    loaded -- and BatchNorm's scale / sqrt(var + eps) recomputed -- per element, as GCC does not
    hoist loads through the kernel's restrict locals past the stores (ShuffleNet's conv + BN
    kernels ran 3-5x slower than their tile)."""
    rows = ("<row>", "<col>")[:len(shape) - 2]  # placeholders: the row loops' indices
    full = (n, m) + rows
    for d in sorted(deps):
        node = k.graph.index.node[k.graph.index.producer[d]]
        if k.shape(d) != shape:
            continue
        if node.op == "BatchNormalization":
            reads = [(u, (m,)) for u in node.inputs[1:5]]
        elif node.op in NARY or node.op in NARY_MORE:
            reads = [(u, bmap(full, shape, k.shape(u))) for u in node.inputs if u]
        else:
            continue
        for u, idx in reads:
            if not any(i in rows for i in idx) and u not in k.scratch and not k.has_tile(u) \
                    and k.graph.index.producer.get(u) not in k.members:
                k.value(u, idx)


def _reads_per_channel(k: Kernel, deps: frozenset, shape: tuple) -> bool:
    """Whether a pass over ``shape`` computes a BatchNormalization (its statistics are per channel)."""
    return any(k.shape(d) == shape and k.graph.index.node[k.graph.index.producer[d]].op == "BatchNormalization"
               for d in deps)


def _flat_plane(k: Kernel, deps: frozenset, shape: tuple) -> bool:
    """Whether a pass over an NCHW ``shape`` may run its plane as ONE loop (index (n, c, 0, q),
    q < H*W: the row-major offset of every (q / W, q % W)): every op in it is pointwise or a
    Concat along the channels, and every tensor it reads or writes has the trailing (H, W) of
    the pass or (1, 1) (BatchNorm's statistics: per channel). Shorter C than the row nest (a
    56-wide row loop vectorised with a remainder per row) and less of it to compile."""
    g = k.graph
    for d in deps:
        node = g.index.node[g.index.producer[d]]
        concat = node.op == "Concat" and node.attributes.get("axis", 0) % 4 == 1
        if not (node.op in _POINTWISE or concat) or len(k.shape(d)) != 4 or tuple(k.shape(d)[2:]) != tuple(shape[2:]):
            return False
        ins = [u for u in node.inputs if u]
        if node.op == "BatchNormalization":
            ins = ins[:1]
        for u in ins:
            tail = ((1, 1) + tuple(k.shape(u)))[-2:]
            if tail not in ((1, 1), tuple(shape[2:])) or (tail == (1, 1) and len(k.shape(u)) == 4 and concat):
                return False
    return True


#: Ops whose C form reads every input at the broadcast index of its own (bmap or per channel).
_POINTWISE = set(NARY) | set(UNARY) | set(STRUCTURED) | set(NARY_MORE) | set(UNARY_MORE)


def _flat_band(k: Kernel, t: str, shape: tuple, blk, deps: frozenset) -> bool:
    """Whether the epilogue of a blocked conv tile may run as ONE loop over its band of rows
    (index (n, m, first row, q) with q < rows * W): the tile's rows lie back to back (row pitch =
    output width: 1x1 convolutions at stride 1) and the epilogue is pointwise, every tensor it
    touches having the output's trailing (H, W) or (1, 1) -- then the row-major offset of
    (r0, q) is that of every (r0 + q / W, q % W). A 7- or 14-wide row loop vectorised poorly."""
    if len(shape) != 4 or blk.wq != shape[3] or shape[3] == 1:
        return False
    g = k.graph
    for d in deps:
        if d == t:
            continue
        node = g.index.node[g.index.producer[d]]
        if node.op not in _POINTWISE or k.shape(d) != shape:
            return False
        ins = [u for u in node.inputs if u]
        if node.op == "BatchNormalization":
            ins = ins[:1]  # the statistics are read per channel
        for u in ins:
            if u in deps:
                continue
            tail = ((1, 1) + tuple(k.shape(u)))[-2:]
            if tail not in ((1, 1), tuple(shape[2:])):
                return False
    return True


#: Blocked conv/matmul tiles are shared among the threads one at a time (``Kernel.loops``'s
#: ``dynamic``), not in fixed halves.
DYNAMIC_TILES = True


def _emit_conv_blocked(k: Kernel, t: str, node, shape: tuple, blk, body, deps: frozenset) -> None:
    """A pass over a Conv output with the register-blocked tile: loops over (batch, block of mb
    output channels, band of output rows), the tile, then per channel (its constants loaded,
    :func:`_prime_channel_reads`) the epilogue: one loop over the band (:func:`_flat_band`) or,
    per row of the tile, a loop over the row (read as ``(T[a] + r*wq)[j]``)."""
    view = anchors.conv_input_view(k, node, blk)
    weights = anchors.conv_weight_view(k, node, blk)
    bands = shape[2] // blk.rows
    nblocks = shape[1] // blk.mg * blk.blocks
    flat = _flat_band(k, t, shape, blk, deps)
    with k.loops((shape[0], bands, nblocks), parallel=True, dynamic=DYNAMIC_TILES) as (n, band, mi):
        valid = ""
        if mi == "0":
            m0 = "0"
        elif blk.padded:  # block j of group g: channels g*mg + j*mb ..., the last part padding
            j = k.index(f"{mi} % {blk.blocks}")
            m0 = k.index(f"({mi} / {blk.blocks})*{blk.mg} + {j}*{blk.mb}")
            valid = k.index(f"sf_min({blk.mb}, {blk.mg} - {j}*{blk.mb})")
        else:
            m0 = k.index(f"{mi}*{blk.mb}")
        r0 = k.index(f"{band}*{blk.rows}") if band != "0" else "0"
        arr = anchors.tile_conv_blocked(k, node, n, m0, r0, view, blk, weights, mi, valid)
        with k.loops((blk.mb,)) as (a,):
            if valid:
                k.line(f"if ({a} >= {valid}) break;")
            m = a if m0 == "0" else k.index(f"{m0} + {a}")
            _prime_channel_reads(k, deps, shape, n if shape[0] != 1 else "0", m if shape[1] != 1 else "0")
            if flat:
                prefix = tuple("0" if d == 1 else k.index(i) for i, d in zip((n, m, r0), shape[:3]))
                k.set_tile(t, prefix, f"{arr}[{a}]", 1)
                with k.loops((blk.rows * shape[3],)) as (q,):
                    body((n, m, r0, q))
                k.drop_tile(t)
            else:
                _conv_rows(k, t, shape, blk, body, arr, (n, m, a, r0))


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
    of mb rows), the tile, then per row of the block the epilogue's loop over the row."""
    bsrc = anchors.matmul_b_view(k, node, mb)
    with k.loops(tuple(shape[:-2]) + (shape[-2] // mb,), parallel=True, dynamic=DYNAMIC_TILES) as outer:
        batch, mi = tuple(outer[:-1]), outer[-1]
        i0 = k.index(f"{mi}*{mb}") if mi != "0" else "0"
        arr = anchors.tile_matmul_blocked(k, node, batch, i0, bsrc, mb)
        with k.loops((mb,)) as (a,):
            i = a if i0 == "0" else k.index(f"{i0} + {a}")
            prefix = tuple("0" if d == 1 else k.index(x) for x, d in zip(batch + (i,), shape[:-1]))
            k.set_tile(t, prefix, f"{arr}[{a}]", 1)
            with _last_dim(k, shape[-1], split) as j:
                body(batch + (i, j))
            k.drop_tile(t)


def _row_fusable(k: Kernel) -> Optional[tuple]:
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
        k.line(f"{k.ct(t)} {arr}[{shape[-1]}];")
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


def _emit_rows(k: Kernel, shape: tuple) -> None:
    """The row-fused kernel: per row, anchor tiles, then each reduction's statistics (scalars, an
    inner loop over the row), then one inner loop storing every written tensor. A MatMul anchor
    that takes the register-blocked tile runs over blocks of rows (the tile of a block, then the
    rows of the block), so fusing a row reduction into it keeps the fast tile."""
    g = k.graph
    memo: dict = {}
    pure = _pure_tensors(k)
    side = [t for t in k.writes if t in pure and (k.shape(t) != shape or g.tensors[t].dtype in _NARROW)]
    writes = [t for t in k.writes if t not in side]
    by_shape: dict[tuple, list[str]] = {}
    for t in side:
        by_shape.setdefault(k.shape(t), []).append(t)
    for sshape, ts in by_shape.items():  # pure side outputs: a plain pass each, before the rows
        sdeps = frozenset().union(*(_deps(k, t, memo) for t in ts))
        k.line(f"/* pass: {len(ts)} written tensor(s) of shape {list(sshape)} computed from global reads */")
        _emit_loop(k, sshape, sdeps, lambda idx, ts=ts: [k.store(t, idx, k.value(t, idx)) for t in ts])
    deps = frozenset().union(*(_deps(k, t, memo) for t in writes))
    tiled = _anchors_for(k, shape, deps)
    k.line(f"/* one row loop over {list(shape[:-1])}: row tiles, row statistics, outputs */")
    before = set(k.tiles)

    def row(outer):
        _row_invariants(k, shape, deps, pure, outer)
        _narrow_rows(k, shape, deps, pure, outer)
        for v in k.nodes:
            node = g.index.node[v]
            if node.op in STATS_OPS:
                reductions.STATS[node.op](k, node, row=tuple(outer))
            elif node.op in MATERIALISED_OPS:
                reductions.reduce_row(k, node, tuple(outer))
        with k.loops(shape[-1:]) as inner:
            idx = tuple(outer) + tuple(inner)
            for t in writes:
                k.store(t, idx, k.value(t, idx))
    anchor = g.index.node[g.index.producer[tiled[0]]] if tiled else None
    mb = anchors.matmul_blocking(k, anchor) if anchor is not None and anchor.op in ("MatMul", "Gemm") else None
    if mb is not None:
        (t,) = tiled
        bsrc = anchors.matmul_b_view(k, anchor, mb)
        with k.loops(tuple(shape[:-2]) + (shape[-2] // mb,), parallel=True) as blk:
            batch, mi = tuple(blk[:-1]), blk[-1]
            i0 = k.index(f"{mi}*{mb}") if mi != "0" else "0"
            arr = anchors.tile_matmul_blocked(k, anchor, batch, i0, bsrc, mb)
            with k.loops((mb,)) as (a,):
                i = a if i0 == "0" else k.index(f"{i0} + {a}")
                outer = batch + (i,)
                k.set_tile(t, tuple("0" if d == 1 else k.index(x) for x, d in zip(outer, shape[:-1])),
                           f"{arr}[{a}]", 1)
                row(outer)
    else:
        with k.loops(shape[:-1], parallel=True) as outer:
            for t in tiled:
                anchors.TILES[g.index.node[g.index.producer[t]].op](k, t, outer, 1)
            row(outer)
    for t in set(k.tiles) - before:
        k.drop_tile(t)  # the row's tiles and row copies end with the row loop


def render_kernel(k: Kernel) -> str:
    """The C function ``k<gid>`` of one group. An anchor whose output some op reads outside the
    anchor's tile (an index map between them) is materialised and the kernel rendered again."""
    forced: set = set()
    nodes, members, writes = k.nodes, k.members, k.writes
    parts = _components(k)
    while True:
        try:
            if len(parts) == 1:
                return _render_kernel(k, forced)
            for part in parts:  # each part as if alone, into the one function
                k.nodes = [v for v in nodes if v in part]
                k.members = set(part)
                k.writes = [t for t in writes if k.graph.index.producer[t] in part]
                k.materialised, k.stats, k.tiles = set(), {}, {}
                _render_body(k, forced & part)
            k.nodes, k.members, k.writes = nodes, members, writes
            return k.assemble()
        except UntiledRead as e:
            k.nodes, k.members, k.writes = nodes, members, writes
            if e.node in forced:
                raise EmitError(f"node {e.node!r}: internal error, tile read outside its tile") from None
            forced.add(e.node)
            k.reset()


def _components(k: Kernel) -> list[set]:
    """The group's nodes split into parts that share no in-group tensor (a horizontal group: two
    LayerNorms of independent inputs that read the same weights), in graph order. Each part is
    laid out on its own (a row loop each, where together they took the general passes: whisper's
    encoder and decoder LayerNorms ran 0.95 us fused, 0.43 us apart)."""
    g = k.graph
    parent = {v: v for v in k.nodes}

    def find(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v
    for v in k.nodes:
        for t in g.index.node[v].inputs:
            p = g.index.producer.get(t) if t else None
            if p in parent:
                parent[find(p)] = find(v)
    parts: dict[str, set] = {}
    for v in k.nodes:
        parts.setdefault(find(v), set()).add(v)
    return list(parts.values())


def _render_kernel(k: Kernel, forced: set) -> str:
    _render_body(k, forced)
    return k.assemble()


def _render_body(k: Kernel, forced: set) -> None:
    g = k.graph
    k.materialised |= forced
    for v in k.nodes:
        op = g.index.node[v].op
        if op not in OPS or op not in SUPPORTED:
            raise EmitError(f"node {v!r}: op {op!r} is not supported by the C emitter")
        for t in g.index.node[v].inputs + g.index.node[v].outputs:
            if t:
                ctype(g, t)
    rows = _row_fusable(k) if not forced else None
    if rows is not None:
        _emit_rows(k, rows)
        return
    passes = _plan_passes(k)
    memo: dict = {}
    for p in passes:
        if p[0] == "node":
            node = g.index.node[p[1]]
            deps = frozenset().union(*(_deps(k, t, memo) for t in node.inputs if t))
            if p[1] in k.materialised and node.op not in MATERIALISED_OPS:
                _materialise_inline(k, node, deps)
            elif node.op in STATS_OPS:
                reductions.STATS[node.op](k, node)
            else:
                reductions.reduce_pass(k, node)
        elif p[0] == "fwd":
            _emit_forward(k, p[1], p[2], _deps(k, p[1], memo))
        else:
            _, shape, ts = p
            deps = frozenset().union(*(_deps(k, t, memo) for t in ts))
            k.line(f"/* pass: {len(ts)} written tensor(s) of shape {list(shape)} */")
            _emit_loop(k, shape, deps, lambda idx, ts=ts: [k.store(t, idx, k.value(t, idx)) for t in ts])


def _materialise_inline(k: Kernel, node, deps) -> None:
    """An anchor/window output computed once into kernel-local scratch (the rare fallback)."""
    t = node.outputs[0]
    arr = k.alloc(k.ct(t), numel(k.shape(t)), "output of an anchor/window op needed by several passes")

    def body(idx):
        k.line(f"{arr}[{linear(k.shape(t), idx)}] = {k.value(t, idx)};")
    _emit_loop(k, k.shape(t), deps | {t}, body)
    k.bind_scratch(t, arr)
    k.forget(t)
