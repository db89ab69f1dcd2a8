"""The emitter's op table: op -> how one output element is computed (:func:`code_for_op`), and
the set of ops the emitter supports, which must be exactly the op table's (``solverfuse.ops.OPS``)
less the ops in :data:`NOT_EMITTED`.

Per-element lowerings come from :mod:`~solverfuse.emit.elementwise` (elementwise, broadcasting,
layout ops), :mod:`~solverfuse.emit.reductions` (the element of a Softmax/LayerNorm from its row
statistics) and :mod:`~solverfuse.emit.anchors` (anchors, windows, Gather, per element). Reduce*
and global pooling have no per-element form: the schedule gives them a pass of their own.

>>> sorted(SUPPORTED - set(ELEMENT)), sorted(NOT_EMITTED)
(['GlobalAveragePool', 'GlobalMaxPool', 'ReduceL2', 'ReduceMax', 'ReduceMean', 'ReduceMin', 'ReduceProd', 'ReduceSum', 'ReduceSumSquare'], ['ScatterElements', 'ScatterND'])
"""
from __future__ import annotations

from ..errors import EmitError
from .anchors import SPECIAL_ANCHORS
from .cexpr import bmap
from .elementwise import INDEX_MAPS, NARY, STRUCTURED, UNARY, erf_gelu
from .indexing import INDEXING, NARY_MORE, UNARY_MORE
from .kernel import Kernel
from .reductions import REDUCE_OPS, STATS, STATS_EXPR

#: Ops of the op table the C emitter refuses (with a one-line error naming the node); documented
#: here so that the guard test can tell "not emitted on purpose" from "forgotten".
#: Scatters write data-dependent places (no per-element form); they plan as opaque ops.
#: The ATen-only rows are emitted and checked against numpy / torch in tests/test_emit_aten.py.
NOT_EMITTED: frozenset = frozenset({"ScatterND", "ScatterElements"})


def _unary(template):
    def lower(k, node, pos, idx):
        return template(node.attributes, k.value(node.inputs[0], idx), k.ct(node.outputs[pos]))
    return lower


def _nary(template):
    def lower(k, node, pos, idx):
        oshape = k.shape(node.outputs[pos])
        ins = [t for t in node.inputs if t]
        vals = [k.value(t, bmap(idx, oshape, k.shape(t))) for t in ins]
        return template(k, node.attributes, vals, k.ct(node.outputs[pos]), [k.ct(t) for t in ins])
    return lower


#: op -> ``lower(kernel, node, output position, index) -> C expression`` (may emit statements
#: first). Where two tables name an op the earlier wins: UNARY, NARY, structured/anchors/index
#: maps, statistics.
ELEMENT: dict = {**STATS_EXPR, **SPECIAL_ANCHORS, **INDEX_MAPS, **STRUCTURED, **INDEXING}
ELEMENT.update({op: _nary(f) for op, f in {**NARY, **NARY_MORE}.items()})
ELEMENT.update({op: _unary(f) for op, f in {**UNARY, **UNARY_MORE}.items()})


def _mul_or_gelu(lower_mul):
    """Mul, or, where it ends an exact GELU written out as ops, ``sf_geluf`` of its input
    (:func:`~solverfuse.emit.elementwise.erf_gelu`)."""
    def lower(k, node, pos, idx):
        found = erf_gelu(k, node)
        if found is None:
            return lower_mul(k, node, pos, idx)
        x, folded = found
        for c in folded:
            k.param_values(c)
        return f"sf_geluf({k.value(x, idx)})"
    return lower


ELEMENT["Mul"] = _mul_or_gelu(ELEMENT["Mul"])

#: Every op the C emitter can render.
SUPPORTED = frozenset(ELEMENT) | frozenset(STATS) | REDUCE_OPS


def code_for_op(k, node, pos: int, idx: tuple[str, ...]) -> str:
    """C expression of output ``pos`` of ``node`` at index ``idx`` (may emit statements first).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.emit.kernel import Kernel
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "n", "op": "Neg", "inputs": ["x"], "outputs": ["y"]}]})
    >>> k = Kernel(g, ["n"], 0, {"x": 0, "y": 1}, counters=False, threads=1, lower=code_for_op)
    >>> code_for_op(k, g.index.node["n"], 0, ("i",)), k.lines
    ('(-v1)', ['    const float v1 = b0[i];'])
    """
    lower = ELEMENT.get(node.op)
    if lower is None:
        raise EmitError(f"node {node.name!r}: op {node.op!r} is not supported by the C emitter")
    return lower(k, node, pos, idx)


def whole_graph_kernel(graph) -> Kernel:
    """A serial kernel of every node of ``graph`` with this module's lowering, buffer i the
    graph's i-th tensor: what the emitter's doctests and tools inspect a group's C through.

    >>> from solverfuse import zoo
    >>> k = whole_graph_kernel(zoo.residual_layernorm_gelu(2, 8))
    >>> len(k.nodes), k.threads
    (7, 1)
    """
    return Kernel(graph, [n.name for n in graph.nodes], 0, {t: i for i, t in enumerate(graph.tensors)},
                  counters=False, threads=1, lower=code_for_op)

