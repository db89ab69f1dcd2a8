"""Per-channel and flat-plane helpers for a pass over an NCHW shape: the constants an epilogue
reads once per output channel (BatchNorm statistics, a [C, 1, 1] bias) loaded before the
channel's loops, and whether the plane (or a blocked conv tile's band of rows) may run as one
flat loop instead of a row nest.

They are apart from :mod:`~solverfuse.emit.passes` (which calls them) because they decide only
*how the inner loops of one channel look*, not which loops a pass has.

>>> "BatchNormalization" in POINTWISE, "Conv" in POINTWISE
(True, False)
"""
from __future__ import annotations

from ..ops import numel
from .cexpr import bmap
from .elementwise import NARY, STRUCTURED, UNARY
from .indexing import NARY_MORE, UNARY_MORE
from .kernel import Kernel

def prime_channel_reads(k: Kernel, deps: frozenset, shape: tuple, n: str, m: str) -> None:
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


def reads_per_channel(k: Kernel, deps: frozenset, shape: tuple) -> bool:
    """Whether a pass over ``shape`` computes a BatchNormalization (its statistics are per channel)."""
    return any(k.shape(d) == shape and k.graph.index.node[k.graph.index.producer[d]].op == "BatchNormalization"
               for d in deps)


def flat_plane(k: Kernel, deps: frozenset, shape: tuple) -> bool:
    """Whether a pass over an NCHW ``shape`` may run its plane as ONE loop (index (n, c, 0, q),
    q < H*W: the row-major offset of every (q / W, q % W)): every op in it is pointwise or a
    Concat along the channels, and every tensor it reads or writes has the trailing (H, W) of
    the pass or (1, 1) (BatchNorm's statistics: per channel). Shorter C than the row nest (a
    56-wide row loop vectorised with a remainder per row) and less of it to compile."""
    g = k.graph
    for d in deps:
        node = g.index.node[g.index.producer[d]]
        concat = node.op == "Concat" and node.attributes.get("axis", 0) % 4 == 1
        if not (node.op in POINTWISE or concat) or len(k.shape(d)) != 4 or tuple(k.shape(d)[2:]) != tuple(shape[2:]):
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
POINTWISE = set(NARY) | set(UNARY) | set(STRUCTURED) | set(NARY_MORE) | set(UNARY_MORE)


def flat_pass(k: Kernel, deps: frozenset, shape: tuple) -> bool:
    """Whether a pass over ``shape`` with no tile may run as ONE loop over all its elements
    (index q at the last dim over 1, 0 elsewhere, q < numel: the row-major offset of every
    element):
    every op in it is pointwise at the pass's shape, and every tensor its ops read has the pass's
    shape or one element. For short rows only (the last dim under 64), where the row nest
    vectorised badly: EfficientNet's Sigmoid over [1, 96, 4, 4] ran at 4 ns an element.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.emit.kernel import Kernel
    >>> from solverfuse.emit.lowering import code_for_op
    >>> g = load_graph({"tensors": {"x": {"shape": [1, 96, 4, 4]}, "b": {"shape": [1, 96, 1, 1]}},
    ...     "inputs": ["x", "b"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "s", "op": "Sigmoid", "inputs": ["x"], "outputs": ["y"]},
    ...               {"name": "a", "op": "Add", "inputs": ["x", "b"], "outputs": ["z"]}]})
    >>> kern = lambda v: Kernel(g, [v], 0, {}, counters=False, threads=1, lower=code_for_op)
    >>> flat_pass(kern("s"), frozenset({"y"}), (1, 96, 4, 4))
    True
    >>> flat_pass(kern("a"), frozenset({"z"}), (1, 96, 4, 4))  # a per-channel bias
    False
    """
    if sum(n > 1 for n in shape) < 2 or shape[-1] >= 64 or not deps:
        return False
    g = k.graph
    for d in deps:
        node = g.index.node[g.index.producer[d]]
        if node.op not in POINTWISE or tuple(k.shape(d)) != tuple(shape):
            return False
        if any(tuple(k.shape(u)) != tuple(shape) and numel(k.shape(u)) != 1 for u in node.inputs if u):
            return False
    return True


def flat_band(k: Kernel, t: str, shape: tuple, blk, deps: frozenset) -> bool:
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
        if node.op not in POINTWISE or k.shape(d) != shape:
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
