"""ONNX -> Relax with every binding traced back to the ONNX node that emitted it.

:func:`import_traced` runs TVM's own Relax ONNX frontend (``tvm.relax.frontend.onnx``) with one
change that does not alter the program: each node's converted result is bound right away
(``bb.emit``) instead of being left as an unbound call that the next node's conversion would bind.
So every binding of ``main``'s dataflow block is emitted while exactly one ONNX node is converted,
and :attr:`Traced.owner` maps each binding var to the index of that node in ``model.graph.node``.
Nodes that emit nothing (the frontend folded them to a constant or a shape, or returned an input
unchanged, as for Identity/Dropout) own no binding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import onnx  # noqa: F401 -- the annotations' types
import tvm  # noqa: F401
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ..errors import GraphError


@dataclass
class Traced:
    """A Relax module imported from ONNX, with binding ownership (see module docstring)."""
    mod: "tvm.IRModule"
    #: binding var -> index of the ONNX node whose conversion emitted it
    owner: dict = field(default_factory=dict)
    #: ONNX node index -> its output tensor names
    outputs: list[list[str]] = field(default_factory=list)


class _TracingImporter(onnx_frontend.ONNXGraphImporter):
    """The frontend's importer, binding each node's result as soon as it is converted."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.results: list[list] = []

    def _convert_operator(self, op_name, inputs, attrs, opset):
        out = super()._convert_operator(op_name, inputs, attrs, opset)
        if isinstance(out, relax.Tuple):
            out = relax.Tuple([self._bind(f) for f in out.fields])
            self.results.append(list(out.fields))
        else:
            out = self._bind(out)
            self.results.append([out])
        return out

    def _bind(self, expr):
        if isinstance(expr, relax.Call) and isinstance(expr.ty, (relax.TensorType, relax.TupleType)):
            return self.bb.emit(expr)
        return expr


def _opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def import_traced(model: "onnx.ModelProto", shapes: Optional[dict[str, list[int]]] = None) -> Traced:
    """Import ``model`` with Relax's ONNX frontend, recording which node emitted each binding.

    ``shapes`` fixes input shapes (name -> dims), e.g. the solverfuse Graph's input shapes, so both
    sides see the same static shapes. Raises GraphError for models the frontend cannot convert.
    """
    if any(n.op_type == "If" for n in model.graph.node):
        raise GraphError("model has an If node: tracing supports straight-line graphs only")
    imp = _TracingImporter(shapes or {}, "float32")
    try:
        mod = imp.from_onnx(model.graph, _opset(model))
    except Exception as e:  # noqa: BLE001 -- any converter failure of the third-party frontend
        first = (str(e).strip().splitlines() or [""])[0]
        raise GraphError(f"TVM's ONNX frontend cannot import this model: {type(e).__name__}: {first}") from None
    if len(imp.results) != len(model.graph.node):
        raise GraphError(f"traced {len(imp.results)} conversions for {len(model.graph.node)} nodes")
    bindings = [b for blk in mod["main"].body.blocks for b in blk.bindings]
    pos = {b.var: i for i, b in enumerate(bindings)}
    owner: dict = {}
    end = -1
    for k, results in enumerate(imp.results):
        last = max((pos[r] for r in results if isinstance(r, relax.Var) and r in pos), default=-1)
        for j in range(end + 1, last + 1):
            owner[bindings[j].var] = k
        end = max(end, last)
    return Traced(mod=mod, owner=owner, outputs=[list(n.output) for n in model.graph.node])
