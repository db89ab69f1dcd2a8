"""How a group's kernel is laid out: which values are recomputed, which are materialised, and
the loop nests (*passes*) that run them -- a row loop, a forward-mapped store, or passes.

:func:`render_kernel` is the entry point (called by :func:`solverfuse.emit.program.render` per group).
The rules, in the order they are tried:

1. :func:`~solverfuse.emit.rows.row_fusable` -> :func:`~solverfuse.emit.rows.emit_rows`: one loop
   over rows; anchor row tile, reduction
   statistics and last-axis Reduce* as row scalars, then all outputs of the row (Softmax /
   LayerNorm + producers and consumers, MatMul + Softmax, residual + LayerNorm + GELU, x - mean(x));
2. otherwise per pass (:func:`_plan_passes`): Reduce*/statistics passes in graph order, then one
   pass per shape of written tensors -- or, for an anchor reshaped/transposed into the written
   tensor, :func:`~solverfuse.emit.forward.emit_forward` (loop over the anchor's tile, store at the
   mapped index); each pass's loop nest is :func:`~solverfuse.emit.passes.emit_loop`;
3. an anchor/window output needed by several passes or at another shape is materialised in
   kernel-local scratch (:func:`_materialise_inline`); so are elementwise values whose inline
   form would cost more than a scratch load: an expensive chain or a value read through a
   Concat / strided Transpose that several passes read (:func:`_shared_frontier`), expensive
   math before a Pad (:func:`_padded_math`) or broadcast into a larger pass
   (:func:`_broadcast_math`), transposed rows feeding row statistics (:func:`_strided_rows`).

>>> sorted(STATS_OPS)
['LayerNormalization', 'LogSoftmax', 'ScaledDotProductAttention', 'Softmax', 'VarMean']
"""
from __future__ import annotations

from typing import Optional

from ..dag import UnionFind
from ..errors import EmitError
from ..ops import OPS, numel, transpose_perm
from . import reductions
from .cexpr import ctype, linear
from .forward import LAYOUT_MAPS, emit_forward, forward_chain
from .kernel import Kernel, UntiledRead, inline_deps
from .lowering import SUPPORTED
from .channels import POINTWISE
from .passes import MATERIALISED_OPS, STATS_OPS, Post, anchors_for, emit_loop
from .rows import emit_rows, row_fusable
from .tiles import tile_rank

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
                deps = frozenset().union(*(inline_deps(k, t, memo) for t in ins if t))
                shape = k.shape(node.outputs[0])
                passes.append((("node", v), shape, deps))
        by_shape: dict[tuple, list[str]] = {}
        for t in k.writes:
            p = g.index.producer[t]
            if p in k.materialised and not any(c in k.members for c in g.index.consumers.get(t, [])):
                continue  # its own pass writes it straight to global memory
            parts = concat_parts(k, t)
            if parts is not None:
                for n, (u, _, _) in enumerate(parts):
                    passes.append((("cat", t, n), k.shape(u), inline_deps(k, u, memo)))
                continue
            by_shape.setdefault(k.shape(t), []).append(t)
        for shape, ts in by_shape.items():
            deps = frozenset().union(*(inline_deps(k, t, memo) for t in ts))
            chain = forward_chain(k, ts[0]) if len(ts) == 1 else None
            if chain is not None and chain[0] not in k.materialised:
                # run in the anchor's own iteration space (its tile), store at the mapped index
                a = g.index.node[chain[0]].outputs[0]
                passes.append((("fwd", ts[0], chain), k.shape(a), deps))
            elif (cut := concat_split(k, shape, deps, memo)) is not None:
                for n, (u, _, _) in enumerate(cut[1]):
                    passes.append((("catpost", shape, tuple(ts), n), k.shape(u), inline_deps(k, u, memo)))
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
        promote |= _padded_math(k, passes) | _strided_rows(k) | _broadcast_math(k, passes)
        if not promote:
            return [p for p, _, _ in passes]
        k.materialised |= promote


def _strided_rows(k: Kernel) -> set:
    """In-group Transposes that move the last axis and feed a row-statistics op (LayerNorm,
    Softmax) of the group: materialised, the rows lie contiguous in scratch for the statistics
    and the output pass; inline, each row was read at the transpose's stride twice (ConvNeXt's
    depthwise conv + permute + LayerNorm over rows of 16 channels)."""
    g = k.graph
    out = set()
    for v in k.nodes:
        node = g.index.node[v]
        if node.op not in STATS_OPS or not node.inputs:
            continue
        p = g.index.producer.get(node.inputs[0])
        if p not in k.members or p in k.materialised:
            continue
        tr = g.index.node[p]
        xs = k.shape(tr.inputs[0])
        if tr.op == "Transpose" and len(xs) > 1 and transpose_perm(tr.attributes, len(xs))[-1] != len(xs) - 1:
            out.add(p)
    return out


#: Largest input of a Pad (bytes) that a forward-mapped pass through it materialises in scratch
#: when expensive math computes it (:func:`_padded_math`): half an L2. Conv 1x1 16->96 + SiLU +
#: Pad alone, paired, 1 thread: materialised 2.5 / 7.1 / 13.2 / 22.7 / 58.6 us on 4x4 / 7x7 /
#: 10x10 / 14x14 / 28x28 planes, stored through the Pad 4.0 / 17.7 / 20.9 / 43.5 / 99.4 us; on
#: 56x56 (1.2 MB of scratch) 228 vs 216 us.
PAD_SCRATCH_BYTES = 512 * 1024


def _padded_math(k: Kernel, passes: list) -> set:
    """The data inputs' producers of the Pads that passes evaluate inline when an expensive op
    computes that input: materialised, the math runs in a pass at its own shape (one vector loop),
    and the pass over the padded shape copies it. Inline, every element of the padded shape
    chose between the pad value and the math, one scalar exp each (EfficientNet's conv + SiLU +
    Pad on a 2x2 plane: 12 us fused, 7 unfused). Also for a pass forward-mapped through the Pad
    (:func:`~solverfuse.emit.forward.emit_forward`) up to :data:`PAD_SCRATCH_BYTES`: its math ran
    per row of the plane, short rows (4 wide) and a store at the padded index per element."""
    g = k.graph
    out = set()
    memo: dict = {}
    for kind, shape, deps in passes:
        for d in deps:
            node = g.index.node[g.index.producer[d]]
            if node.op != "Pad" or not node.inputs:
                continue
            # a forward-mapped pass runs at the anchor's shape and stores through the Pad
            fwd = kind[0] == "fwd" and 4 * numel(k.shape(node.inputs[0])) <= PAD_SCRATCH_BYTES
            if k.shape(d) != shape and not fwd:
                continue
            p = g.index.producer.get(node.inputs[0])
            if p in k.members and p not in k.materialised and _expensive(k, inline_deps(k, node.inputs[0], memo)):
                out.add(p)
    return out


def _broadcast_math(k: Kernel, passes: list) -> set:
    """Elementwise nodes a pass evaluates inline at a smaller shape than its own, broadcast into
    it, when an expensive op computes them: materialised, the math runs once per element of its
    own shape (a vector loop) and the pass reads the result. Inline, it ran once per element of
    the pass: EfficientNet's squeeze-excitation gate (1x1 conv on the pooled [1, C, 1, 1] vector,
    Sigmoid, Mul with the [1, C, H, W] map) took one scalar exp per element of the map, 3-19x the
    unfused kernels' time."""
    g = k.graph
    out = set()
    memo: dict = {}
    for _, shape, deps in passes:
        for d in deps:
            v = g.index.producer[d]
            node = g.index.node[v]
            if v in k.materialised or OPS[node.op].role not in ("elementwise", "broadcast") or node.op in STATS_OPS:
                continue
            if 2 * numel(k.shape(d)) > numel(shape) or not _expensive(k, inline_deps(k, d, memo)):
                continue
            # the last small tensor of its chain: a consumer in the pass at a larger shape
            if any(c in k.members and any(o in deps and numel(k.shape(o)) > numel(k.shape(d))
                                          for o in g.index.node[c].outputs if o)
                   for c in g.index.consumers.get(d, [])):
                out.add(v)
    return out


#: Ops whose value costs far more than a load from kernel-local scratch (a libm call or an
#: anchor's dot product): a value several passes need is computed once (:func:`_shared_frontier`).
EXPENSIVE_OPS = frozenset({"Exp", "Erf", "Sigmoid", "Tanh", "Log", "Pow", "Gelu", "Softplus", "Mish", "Silu",
                           "Elu", "Selu", "Sin", "Cos"})


#: Tiles of fewer elements than this (one AVX-512 vector) do not carry an expensive epilogue.
SHORT_TILE = 16


def _tile_elems(k: Kernel, shape: tuple, deps) -> int:
    """Elements of the anchor tile a pass over ``shape`` runs its epilogue on (0: no tile)."""
    tiled = anchors_for(k, shape, deps)
    if not tiled:
        return 0
    node = k.graph.index.node[k.graph.index.producer[tiled[0]]]
    return numel(shape[-tile_rank(k, node):])


def _expensive(k: Kernel, deps, after: Optional[str] = None) -> bool:
    """Whether some in-group tensor of ``deps`` (computed from ``after``, when given) is computed
    by an op of :data:`EXPENSIVE_OPS`."""
    g = k.graph
    memo: dict = {}
    return any(g.index.node[g.index.producer[d]].op in EXPENSIVE_OPS and (after is None or after in inline_deps(k, d, memo))
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
        later = [c for c in g.index.consumers.get(t, [])
                 if c in k.members and any(o in shared for o in g.index.node[c].outputs if o)]
        deps = inline_deps(k, t, memo)
        if later:  # not the last shared tensor of its chain; a gathered one before a statistics op is
            if all(g.index.node[c].op in STATS_OPS for c in later) and any(_gathered(k, d) for d in deps):
                out.add(v)
            continue
        ops = {g.index.node[g.index.producer[d]].op for d in deps}
        if ops & EXPENSIVE_OPS or any(OPS[o].role in ("anchor", "window") for o in ops):
            out.add(_before_layout(k, t, memo) or v)
        elif any(_gathered(k, d) for d in deps):
            out.add(v)
    return out


def _gathered(k: Kernel, t: str) -> bool:
    """Whether in-group tensor ``t`` is a Concat (a choice of input per element) or a Transpose
    that moves the last axis (a strided read): a value computed through one that several passes
    read is materialised once, contiguous (:func:`_shared_frontier`). Inline, CLIP's patch
    embedding (conv output reshaped, transposed, concatenated with the class token, plus the
    position embedding, then two LayerNorms) read the transposed conv output through the Concat's
    choice five times per element: 5.3 us fused, 3.1 us unfused."""
    node = k.graph.index.node[k.graph.index.producer[t]]
    if node.op == "Concat":
        return True
    if node.op != "Transpose":
        return False
    xs = k.shape(node.inputs[0])
    return len(xs) > 1 and transpose_perm(node.attributes, len(xs))[-1] != len(xs) - 1


def _before_layout(k: Kernel, t: str, memo: dict) -> Optional[str]:
    """The producer of the input of a layout op upstream of ``t`` when that input is an
    elementwise result of an expensive chain: materialised there, the chain runs in its own
    layout (contiguous, on the anchor's tile) rather than read through the transpose (whisper's
    conv + GELU + transpose + LayerNorm ran its erf over a stride-16 read)."""
    g = k.graph
    for d in inline_deps(k, t, memo):
        node = g.index.node[g.index.producer[d]]
        if node.op not in LAYOUT_MAPS:
            continue
        u = node.inputs[0]
        p = g.index.producer.get(u)
        if p in k.members and p not in k.materialised and OPS[g.index.node[p].op].role in ("elementwise", "broadcast") \
                and _expensive(k, inline_deps(k, u, memo)):
            return p
    return None


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


#: Elements from which a global tensor that two parts of elementwise ops of a group both read keeps
#: them in one part (:func:`_components`).
SHARED_STREAM_MIN = 1 << 16
#: The op roles whose reads of a shared large input keep their parts together.
STREAM_ROLES = frozenset({"elementwise", "broadcast"})


def _components(k: Kernel) -> list[set]:
    """The group's nodes split into parts that share no in-group tensor (a horizontal group: two
    LayerNorms of independent inputs that read the same weights), in graph order. Each part is
    laid out on its own (a row loop each, where together they took the general passes: whisper's
    encoder and decoder LayerNorms ran 0.95 us fused, 0.43 us apart) -- except parts of
    elementwise ops only that read the same global tensor of at least ``SHARED_STREAM_MIN``
    elements: apart, each part's loop read it from memory again (the branches motif at 2x LLC:
    x twice, ~1.3x the plan's bytes, 64% of the triad); together one loop reads it once and
    computes both (97%, same run).

    >>> from solverfuse import zoo
    >>> def parts(g):
    ...     return len(_components(Kernel(g, [n.name for n in g.nodes], 0, {t: i for i, t in enumerate(g.tensors)},
    ...                                   counters=False, threads=1, lower=None)))
    >>> parts(zoo.branches(256, 256)), parts(zoo.branches(8, 8))
    (1, 2)
    """
    g = k.graph
    uf = UnionFind(k.nodes)
    for v in k.nodes:
        for t in g.index.node[v].inputs:
            p = g.index.producer.get(t) if t else None
            if p in uf.parent:
                uf.union(p, v)
    # parts of elementwise ops only that read the same large global tensor: one part
    streamed: dict[str, str] = {}  # such a tensor -> a node of the first part reading it
    elementwise = {}
    for v in k.nodes:
        info = OPS.get(g.index.node[v].op)  # an unsupported op is reported when its part renders
        elementwise[uf.find(v)] = elementwise.get(uf.find(v), True) and info is not None and info.role in STREAM_ROLES
    for v in k.nodes:
        if elementwise[uf.find(v)]:
            for t in g.index.node[v].inputs:
                if t and g.index.producer.get(t) not in uf.parent and numel(k.shape(t)) >= SHARED_STREAM_MIN:
                    uf.union(streamed.setdefault(t, v), v)
    parts: dict[str, set] = {}
    for v in k.nodes:
        parts.setdefault(uf.find(v), set()).add(v)
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
    rows = row_fusable(k) if not forced else None
    if rows is not None:
        emit_rows(k, rows)
        return
    passes = _plan_passes(k)
    memo: dict = {}
    for p in passes:
        if p[0] == "node":
            node = g.index.node[p[1]]
            deps = frozenset().union(*(inline_deps(k, t, memo) for t in node.inputs if t))
            if p[1] in k.materialised and node.op not in MATERIALISED_OPS:
                _materialise_inline(k, node, deps)
            elif node.op in STATS_OPS:
                reductions.STATS[node.op](k, node)
            else:
                reductions.reduce_pass(k, node)
        elif p[0] == "fwd":
            emit_forward(k, p[1], p[2], inline_deps(k, p[1], memo))
        elif p[0] == "cat":
            _emit_concat_part(k, p[1], concat_parts(k, p[1])[p[2]], memo)
        elif p[0] == "catpost":
            _emit_concat_post(k, p[1], p[2], p[3], memo)
        else:
            _, shape, ts = p
            deps = frozenset().union(*(inline_deps(k, t, memo) for t in ts))
            k.line(f"/* pass: {len(ts)} written tensor(s) of shape {list(shape)} */")
            emit_loop(k, shape, deps, lambda idx, ts=ts: [k.store(t, idx, k.value(t, idx)) for t in ts],
                      writes=tuple(ts))


def concat_parts(k: Kernel, t: str) -> Optional[list]:
    """(input, axis, offset) per non-empty input when written tensor ``t`` is the output of an
    in-group Concat along axis 0 or 1 (not materialised) that no other op of the group reads, else None. Its pass is then one pass per input over the
    input's own shape, each storing straight into its slice of ``t``: an in-group anchor feeding
    the Concat keeps its tile and stores there (at the Concat's shape it was materialised into
    scratch and copied: SqueezeNet's fire modules), an input from outside is one contiguous copy.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [1, 2, 4]}, "y": {"shape": [1, 3, 4]}, "z": {"shape": [1, 5, 4]}},
    ...     "inputs": ["x", "y"], "outputs": ["z"],
    ...     "nodes": [{"name": "c", "op": "Concat", "inputs": ["x", "y"], "outputs": ["z"], "attributes": {"axis": 1}}]})
    >>> concat_parts(Kernel(g, ["c"], 0, {"x": 0, "y": 1, "z": 2}, counters=False, threads=1, lower=None), "z")
    [('x', 1, 0), ('y', 1, 2)]
    """
    g = k.graph
    v = g.index.producer.get(t)
    if v not in k.members or v in k.materialised:
        return None
    node = g.index.node[v]
    if node.op != "Concat" or len(k.shape(t)) == 0 or any(c in k.members for c in g.index.consumers.get(t, [])):
        return None  # read in the group too: one pass writes it and computes its readers
    axis = node.attributes.get("axis", 0) % len(k.shape(t))
    if axis > 1:
        return None  # the passes may run the dims after the channel as one flat index (flat_band)
    parts, off = [], 0
    for u in node.inputs:
        size = k.shape(u)[axis]
        if size:
            parts.append((u, axis, off))
        off += size
    return parts


def concat_split(k: Kernel, shape: tuple, deps: frozenset, memo: dict) -> Optional[tuple]:
    """(Concat output, its :func:`concat_parts`-style parts, the tensors after it) when a pass
    over ``shape`` evaluates an in-group Concat along the channels and, after it, only pointwise
    ops of its shape (BatchNorm, Mul, Add, Relu after DenseNet's Concat), else None. The pass
    then runs as one pass per input of the Concat (:func:`_emit_concat_post`): each over the
    input's own channels, the ops after the Concat computed at the channel shifted by the input's
    offset -- no per-element choice of the input, and an in-group conv feeding the Concat keeps
    its tile (in one pass over the Concat's shape it was materialised into scratch and read back).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [1, 2, 4, 4]}, "y": {"shape": [1, 3, 4, 4]}},
    ...     "inputs": ["x", "y"], "outputs": ["r"],
    ...     "nodes": [{"name": "c", "op": "Concat", "inputs": ["x", "y"], "outputs": ["z"], "attributes": {"axis": 1}},
    ...               {"name": "n", "op": "Relu", "inputs": ["z"], "outputs": ["r"]}]})
    >>> k = Kernel(g, ["c", "n"], 0, {"x": 0, "y": 1, "z": 2, "r": 3}, counters=False, threads=1, lower=None)
    >>> c, parts, post = concat_split(k, (1, 5, 4, 4), frozenset({"z", "r"}), {})
    >>> c, parts, sorted(post)
    ('z', [('x', 1, 0), ('y', 1, 2)], ['r', 'z'])
    """
    g = k.graph
    cats = [d for d in deps if k.shape(d) == shape and g.index.node[g.index.producer[d]].op == "Concat"]
    if len(cats) != 1 or len(shape) < 2:
        return None
    (c,) = cats
    node = g.index.node[g.index.producer[c]]
    if node.attributes.get("axis", 0) % len(shape) != 1:
        return None
    parts, off = [], 0
    for u in node.inputs:
        if u and k.shape(u)[1]:
            parts.append((u, 1, off))
        off += k.shape(u)[1] if u else 0
    if len(parts) < 2:
        return None
    below = frozenset().union(*(inline_deps(k, u, memo) for u, _, _ in parts))
    post = deps - below
    for d in post:
        if d != c and (k.shape(d) != shape or g.index.node[g.index.producer[d]].op not in POINTWISE):
            return None
    return c, parts, post


def _emit_concat_post(k: Kernel, shape: tuple, ts: tuple, n: int, memo: dict) -> None:
    """Input ``n`` of the Concat of a pass over ``shape`` writing ``ts`` (:func:`concat_split`):
    a pass over the input's shape whose body binds the Concat's element at the shifted channel
    to the input's and computes every tensor of ``ts`` there."""
    deps = frozenset().union(*(inline_deps(k, t, memo) for t in ts))
    c, parts, post = concat_split(k, shape, deps, memo)
    u, _, off = parts[n]
    k.line(f"/* pass: {len(ts)} written tensor(s) of shape {list(shape)}, channels {off}.. from Concat input {u!r} */")

    def body(idx):
        at = (idx[0], k.index(f"{idx[1]} + {off}") if off else idx[1]) + tuple(idx[2:])
        k.bind(c, at, k.value(u, idx))
        for t in ts:
            k.store(t, at, k.value(t, at))
    emit_loop(k, k.shape(u), inline_deps(k, u, memo), body, post=Post(shape, post, off))


def _emit_concat_part(k: Kernel, t: str, part: tuple, memo: dict) -> None:
    """One input of a Concat stored into its slice of the output ``t`` (:func:`concat_parts`)."""
    u, axis, off = part
    k.line(f"/* pass: Concat input {u!r} into its slice of {t!r} (at {off} along axis {axis}) */")
    deps = inline_deps(k, u, memo)
    shape = k.shape(u)
    if k.graph.index.producer.get(u) not in k.members and not k.counters and numel(shape[:axis]) == 1 \
            and k.ct(u) == k.ct(t):
        # an input from outside whose slice is one contiguous run of t: one flat copy loop
        dst, src = k.ptr(t, "w"), k.ptr(u, "r")
        base = off * numel(shape[axis + 1:])
        with k.loops((numel(shape),), parallel=True) as (q,):
            k.line(f"{dst}[{base} + {q}] = {src}[{q}];")
        return

    def body(idx):
        at = tuple(idx[:axis]) + (k.index(f"{idx[axis]} + {off}") if off else idx[axis],) + tuple(idx[axis + 1:])
        k.store(t, at, k.value(u, idx))
    emit_loop(k, shape, deps, body)


def _materialise_inline(k: Kernel, node, deps) -> None:
    """An anchor/window output computed once into kernel-local scratch (the rare fallback)."""
    t = node.outputs[0]
    arr = k.alloc(k.ct(t), numel(k.shape(t)), "output of an anchor/window op needed by several passes")

    def body(idx):
        k.line(f"{arr}[{linear(k.shape(t), idx)}] = {k.value(t, idx)};")
    emit_loop(k, k.shape(t), deps | {t}, body)
    k.bind_scratch(t, arr)
    k.forget(t)