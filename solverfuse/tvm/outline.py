"""Make TVM fuse along a solverfuse plan: outline the plan's groups as primitive functions.

:func:`apply_plan` takes the pre-fusion Relax module (:func:`solverfuse.tvm.fuseops.prefusion` of
a traced import) and a plan on the solverfuse Graph of the same model, and does what FuseOps does
with its own partition: each group's ``call_tir`` bindings become one private Relax function with
``Primitive`` set (constants lifted to parameters, every value used outside returned), called from
``main`` in a topological order of the groups; FuseTIR then merges each such function into one
PrimFunc. Only the partition differs from TVM's own build; every later pass is the same.

A kernel whose ONNX node has no solverfuse node (TVM keeps an inference Dropout as a copy kernel)
joins the group of the kernel that produces its input, or stays alone if that one is not grouped.
"""
from __future__ import annotations

import tvm
from tvm import ir, relax

from .. import dag
from ..errors import PlanError
from ..plans import Plan
from .fuseops import Prepared, is_call_tir, main_bindings

_MOVABLE = (relax.TupleGetItem,)


@relax.expr_functor.mutator
class _Subst(relax.PyExprMutator):
    """Replaces variables by others (a map keyed by the old Var)."""

    def __init__(self, remap: dict):
        super().__init__()
        self.remap = remap

    def visit_var_(self, op):
        return self.remap.get(op, op)

    def visit_dataflow_var_(self, op):
        return self.remap.get(op, op)


def _free_vars(value) -> list:
    """Relax variables a binding value reads, in first-use order."""
    return list(relax.analysis.free_vars(value))


def _outline(bindings: list, used_outside: set) -> tuple:
    """A Primitive function computing ``bindings``; returns (function, args, output vars)."""
    defined = {b.var for b in bindings}
    args: list = []
    for b in bindings:
        for v in _free_vars(b.value):
            if v not in defined and v not in args:
                args.append(v)
        if is_call_tir(b.value) and len(b.value.args) > 1:
            args.extend(f for f in b.value.args[1].fields if isinstance(f, ir.expr.Constant)
                        and not any(f.same_as(a) for a in args))
    params = [relax.Var(f"p{i}", a.ty) for i, a in enumerate(args)]
    var_remap = {a: p for a, p in zip(args, params) if not isinstance(a, ir.expr.Constant)}
    const_remap = [(a, p) for a, p in zip(args, params) if isinstance(a, ir.expr.Constant)]
    outs = [b.var for b in bindings if b.var in used_outside]
    fbb = relax.BlockBuilder()
    with fbb.function("f", params=params, attrs={"Primitive": True}, private=True):
        with fbb.dataflow():
            for b in bindings:
                value = _Subst(var_remap).visit_expr(b.value)
                if is_call_tir(value) and len(value.args) > 1:
                    fields = [next((p for c, p in const_remap if c.same_as(f)), f) for f in value.args[1].fields]
                    value = relax.Call(value.op, [value.args[0], relax.Tuple(fields), *value.args[2:]],
                                       value.attrs, value.ty_args)
                var_remap[b.var] = fbb.emit_output(value) if b.var in outs else fbb.emit(value)
        fbb.emit_func_output(var_remap[outs[0]] if len(outs) == 1 else relax.Tuple([var_remap[o] for o in outs]))
    mod = fbb.get()
    return mod[mod.get_global_var("f")], args, outs


def apply_plan(prep: Prepared, plan: Plan) -> "tvm.IRModule":
    """TVM's pre-fusion module of ``prep`` with ``main``'s kernels fused along ``plan`` instead of
    by FuseOps (FuseTIR and the later passes are what remains: :func:`solverfuse.tvm.build.build`).

    ``plan`` must be a plan for ``prep.graph`` (same sha256); raises PlanError otherwise.

    >>> import numpy as np
    >>> from onnx import helper, TensorProto
    >>> from solverfuse.plans import build_plan
    >>> from solverfuse.tvm import build, count_kernels, prepare, run
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    >>> prep = prepare(helper.make_model(helper.make_graph([helper.make_node("Exp", ["x"], ["h"], name="exp"),
    ...     helper.make_node("Relu", ["h"], ["y"], name="relu")], "g", [x], [y]),
    ...     opset_imports=[helper.make_opsetid("", 17)]))
    >>> mod = apply_plan(prep, build_plan(prep.graph, "nvidia-h100", [["exp", "relu"]], strategy="manual"))
    >>> count_kernels(mod), run(build(mod), [np.zeros((4, 8), np.float32)])[0][0, :3]
    (1, array([1., 1., 1.], dtype=float32))
    """
    if plan.graph_sha256 != prep.graph.digest():
        raise PlanError("the plan was made for another graph than this model's")
    pre, owners, node_of_onnx = prep.pre, prep.owners, prep.node_of_onnx
    bindings = main_bindings(pre)
    group_of_node = {v: gi for gi, g in enumerate(plan.groups) for v in g.nodes}
    # unit of each binding: ("g", group index) for kernels and their tuple reads, ("b", i) otherwise
    unit: list[tuple] = []
    for i, b in enumerate(bindings):
        k = owners[i] if i < len(owners) else None
        node = node_of_onnx[k] if k is not None else None
        fusable = is_call_tir(b.value) or isinstance(b.value, _MOVABLE)
        unit.append(("g", group_of_node[node]) if fusable and node in group_of_node else ("b", i))
    # A kernel of an ONNX node solverfuse elided (an inference Dropout TVM keeps as a copy) joins
    # its producer's group: left alone it would sit on a path out of that group and back in.
    where = {b.var: i for i, b in enumerate(bindings)}
    for i, b in enumerate(bindings):
        k = owners[i] if i < len(owners) else None
        if unit[i][0] == "b" and (k is None or node_of_onnx[k] is None) and \
                (is_call_tir(b.value) or isinstance(b.value, _MOVABLE)):
            src = next((where[v] for v in _free_vars(b.value) if v in where and unit[where[v]][0] == "g"), None)
            if src is not None:
                unit[i] = unit[src]
    members: dict[tuple, list[int]] = {}
    for i, u in enumerate(unit):
        members.setdefault(u, []).append(i)
    # a group without a kernel, or with one kernel only, stays as plain bindings
    for u, idx in list(members.items()):
        if u[0] == "g" and sum(is_call_tir(bindings[i].value) for i in idx) < 2:
            del members[u]
            for i in idx:
                unit[i] = ("b", i)
                members[("b", i)] = [i]
    units = list(members)
    num = {u: k for k, u in enumerate(units)}
    succ: list[set[int]] = [set() for _ in units]
    for i, b in enumerate(bindings):
        for v in _free_vars(b.value):
            j = where.get(v)
            if j is not None and unit[j] != unit[i]:
                succ[num[unit[j]]].add(num[unit[i]])
    order = [units[k] for k in dag.topological_order(succ, key=lambda k: members[units[k]][0])]
    if len(order) != len(members):
        raise PlanError("the plan's groups form a cycle among TVM's bindings")
    used_by: dict = {}
    for i, b in enumerate(bindings):
        for v in _free_vars(b.value):
            used_by.setdefault(v, set()).add(unit[i])
    func = pre["main"]
    for v in relax.analysis.free_vars(func.body.body):
        used_by.setdefault(v, set()).add(("out",))

    mod = tvm.IRModule({gv: f for gv, f in pre.functions.items() if gv.name_hint != "main"})
    bb = relax.BlockBuilder(mod)
    attrs = {k: func.attrs[k] for k in func.attrs.keys()} if func.attrs else None
    with bb.function("main", params=list(func.params), attrs=attrs, pure=True):
        with bb.dataflow():
            for u in order:
                idx = members[u]
                if u[0] == "b":
                    bb.emit_normalized(bindings[idx[0]])
                    continue
                group = [bindings[i] for i in idx]
                outside = {b.var for b in group if used_by.get(b.var, set()) - {u}}
                fn, args, outs = _outline(group, outside)
                gv = bb.add_func(fn, f"fused_sf{u[1]}")
                call = bb.normalize(relax.Call(gv, args))
                if len(outs) == 1:
                    bb.emit_normalized(relax.VarBinding(outs[0], call))
                else:
                    tup = bb.emit(call)
                    for j, o in enumerate(outs):
                        bb.emit_normalized(relax.VarBinding(o, bb.normalize(relax.TupleGetItem(tup, j))))
        bb.emit_func_output(func.body.body)
    return bb.get()

