"""ScaledDotProductAttention (aten's CPU flash-attention call) as C: a statistics pass computes,
per query row, the scores against every key, their max and normaliser, and leaves the row's
probabilities in kernel-local scratch (batch x Lq x Lk floats; doubles for a float64 attention) with the row's logsumexp; each
output element is then the probability-weighted sum of a column of V. Work is
Lq*Lk*(Dq + Dv) per batch; nothing is recomputed per output element.

Inputs q [..., Lq, Dq], k [..., Lk, Dq], v [..., Lk, Dv], optional mask broadcastable to
[..., Lq, Lk] (bool: keep where true; float: added to the scores); attributes ``scale`` (default
1/sqrt(Dq)) and ``causal`` (key j > query i masked). A fully masked row gives NaN, as the math
reference does.

>>> sorted(ATTENTION_STATS), sorted(ATTENTION_EXPR)
(['ScaledDotProductAttention'], ['ScaledDotProductAttention'])
"""
from __future__ import annotations

import math

from ..errors import EmitError
from ..ops import numel
from .cexpr import bmap, linear
from .elementwise import exp_fn, stat_type


def _setup(k, node):
    q, kk, v = (k.shape(t) for t in node.inputs[:3])
    batch = tuple(q[:-2])
    for t, s in zip(node.inputs[1:3], (kk, v)):
        if len(s) != len(q) or any(d not in (1, b) for d, b in zip(s[:-2], batch)):
            raise EmitError(f"node {node.name!r}: attention input {t!r} of shape {list(s)} does not "
                            f"broadcast to the query batch {list(batch)} (grouped heads are not emitted)")
    scale = float(node.attributes.get("scale", 1.0 / math.sqrt(q[-1])))
    return batch, q[-2], kk[-2], q[-1], v[-1], scale


def sdpa_stats(k, node, row=None):
    """The attention probabilities (scratch [..., Lq, Lk]) and logsumexp (scratch [..., Lq])."""
    if row is not None:
        raise EmitError(f"node {node.name!r}: attention has no row-loop form")
    batch, lq, lk, dq, _dv, scale = _setup(k, node)
    qt, kt = node.inputs[0], node.inputs[1]
    mask = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else None
    causal = node.attributes.get("causal", 0)
    pshape, rshape = batch + (lq, lk), batch + (lq,)
    ft = stat_type(k, qt)  # double scores and probabilities for a float64 attention
    probs = k.alloc(ft, numel(pshape), "attention probabilities of each query row")
    lse = k.alloc(ft, numel(rshape), "attention logsumexp of each query row")
    k.line(f"/* pass: {node.op} scores, row max and normaliser */")
    with k.loops(rshape, parallel=True) as idx:
        bi, i = tuple(idx[:-1]), idx[-1]
        m, s = k.fresh("m"), k.fresh("s")
        k.line(f"{ft} {m} = -INFINITY; double {s} = 0;")
        with k.loops((lk,)) as (j,):
            d = k.fresh("d")
            k.line(f"double {d} = 0;")
            with k.loops((dq,), simd=f"reduction(+:{d})") as (c,):
                qv = k.value(qt, bi + (i, c))
                kv = k.value(kt, bmap(bi + (j, c), batch + (lk, dq), k.shape(kt)))
                k.line(f"{d} += (double){qv} * {kv};")
            sc = k.fresh("sc")
            k.line(f"{ft} {sc} = ({ft})({d} * {scale!r});")
            if mask is not None:
                mv = k.value(mask, bmap(bi + (i, j), pshape, k.shape(mask)))
                if k.graph.tensors[mask].dtype == "bool":
                    k.line(f"if (!{mv}) {sc} = -INFINITY;")
                else:
                    k.line(f"{sc} += {mv};")
            if causal:
                k.line(f"if ({j} > {i}) {sc} = -INFINITY;")
            k.line(f"{probs}[{linear(pshape, bi + (i, j))}] = {sc};")
            k.line(f"if ({sc} > {m}) {m} = {sc};")
        with k.loops((lk,)) as (j,):
            at = f"{probs}[{linear(pshape, bi + (i, j))}]"
            k.line(f"{at} = {exp_fn(ft)}({at} - {m}); {s} += {at};")
        inv = k.fresh("inv")
        k.line(f"const {ft} {inv} = ({ft})(1.0 / {s});")
        with k.loops((lk,)) as (j,):
            k.line(f"{probs}[{linear(pshape, bi + (i, j))}] *= {inv};")
        k.line(f"{lse}[{linear(rshape, idx)}] = ({ft})((double){m} + log({s}));")
    k.stats[node.name] = {"probs": probs, "lse": lse}


def sdpa_expr(k, node, pos, idx):
    """Output 0 at [..., i, e]: sum over keys j of P[..., i, j] * v[..., j, e]; output 1: the
    row's logsumexp."""
    batch, lq, lk, _dq, dv, _ = _setup(k, node)
    st = k.stats[node.name]
    if pos == 1:
        return f"{st['lse']}[{k.index(linear(batch + (lq,), idx))}]"
    bi, i, e = tuple(idx[:-2]), idx[-2], idx[-1]
    vt = node.inputs[2]
    acc, j = k.fresh("acc"), k.fresh("j")
    k.line(f"double {acc} = 0;")
    with k.block(f"for (long {j} = 0; {j} < {lk}; {j}++)"):
        p = f"{st['probs']}[{linear(batch + (lq, lk), bi + (i, j))}]"
        k.line(f"{acc} += (double){p} * {k.value(vt, bmap(bi + (j, e), batch + (lk, dv), k.shape(vt)))};")
    return f"({k.ct(node.outputs[0])}){acc}"


ATTENTION_STATS = {"ScaledDotProductAttention": sdpa_stats}
ATTENTION_EXPR = {"ScaledDotProductAttention": sdpa_expr}
