"""Forward-mapped stores: a written tensor that is an anchor's output reshaped / transposed (maybe
through elementwise ops and a constant Pad) is stored from a pass over the *anchor's* tile, each
layout op mapping the index forward, instead of materialising the anchor (the QKV projection +
head split of attention). :func:`forward_chain` finds such a chain (the schedule asks it per
written shape), :func:`emit_forward` emits the pass.

>>> sorted(LAYOUT_MAPS)[:3]
['Dropout', 'Flatten', 'Identity']
"""
from __future__ import annotations

from typing import Optional

from ..ops import OPS, transpose_perm
from . import anchors
from .cexpr import attr_str, lit, reshape_index
from .kernel import Kernel, inline_deps
from .passes import emit_loop

LAYOUT_MAPS = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


def forward_chain(k: Kernel, t: str) -> Optional[list[str]]:
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
    return any(OPS[g.index.node[g.index.producer[d]].op].role == "anchor" for d in inline_deps(k, t, memo))


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
    k.line("/* pass: the border of a constant Pad (its inside is stored by the next pass) */")
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


def emit_forward(k: Kernel, t: str, chain: list[str], deps: frozenset) -> None:
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
    emit_loop(k, k.shape(a), deps, body, split[1])


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
