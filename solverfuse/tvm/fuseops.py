"""The partition Apache TVM's Relax ``FuseOps`` really makes, mapped onto solverfuse node names.

:func:`fuseops_partition` imports an ONNX model with Relax's ONNX frontend
(:func:`~solverfuse.tvm.relax_import.import_traced`, which records the ONNX node behind every
binding), runs the passes ``tvm.compile`` runs for ``llvm`` up to fusion -- DispatchSampling,
DispatchSortScan, LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps -- at opt level 3, and
reads every kernel call site of the fused ``main``: a call to a ``Primitive`` fused function (its
body's bindings are one kernel) or a lone ``call_tir``. Before FuseOps each pre-fusion binding's
call gets a span whose line is that binding's index; FuseOps copies spans when it moves bindings
into fused functions, so each kernel is replayed against the pre-fusion bindings and so against
ONNX nodes. :func:`fuseops_plan` turns that into a validated ``tvm-real`` Plan on the solverfuse
Graph of the same model, scored by the one cost model.

An ONNX node whose bindings land in several kernels (e.g. a ReduceMean lowered to sum + divide)
belongs to the kernel that computes its output. Graph nodes TVM computes at compile time
(FoldConstant, or the frontend folding a constant-only subgraph) are kept as one-op groups and
listed in :attr:`RealPartition.folded`; they are never dropped.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional, Union

import onnx
import tvm
from tvm import ir, relax

from .. import cost
from ..errors import PlanError
from ..graph import Graph
from ..hardware import Hardware, load_hardware
from ..onnx_import import import_onnx
from ..plans import Plan, build_plan, order_groups
from .relax_import import Traced, import_traced

#: The pass context every TVM build here uses (``tvm.compile``'s FuseOps reads opt_level).
OPT_LEVEL = 3
TARGET = "llvm"


@dataclass
class RealPartition:
    """TVM's real partition of one model, on solverfuse node names."""
    graph: Graph
    #: kernels (fused functions and lone call_tir) in call order, as solverfuse node lists
    groups: list[list[str]]
    #: graph nodes TVM evaluates at compile time (FoldConstant / the frontend): one-op groups here
    folded: list[str] = field(default_factory=list)
    #: graph nodes whose TVM bindings span several kernels (assigned to their output's kernel)
    split: list[str] = field(default_factory=list)
    #: graph nodes no ONNX node maps to (importer-made helper nodes): one-op groups here
    unmapped: list[str] = field(default_factory=list)
    #: TVM kernels that compute nothing of the solverfuse graph (e.g. a layout copy TVM added)
    extra_kernels: int = 0


def prefusion(mod: "tvm.IRModule") -> "tvm.IRModule":
    """``tvm.compile``'s llvm pipeline up to (not including) FuseOps, at :data:`OPT_LEVEL`."""
    with tvm.target.Target(TARGET), tvm.transform.PassContext(opt_level=OPT_LEVEL):
        seq = tvm.transform.Sequential([
            relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(),
            relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant()])
        return seq(mod)


def fuse_ops(mod: "tvm.IRModule") -> "tvm.IRModule":
    """TVM's own ``FuseOps`` at :data:`OPT_LEVEL`."""
    with tvm.target.Target(TARGET), tvm.transform.PassContext(opt_level=OPT_LEVEL):
        return relax.transform.FuseOps()(mod)


def main_bindings(mod: "tvm.IRModule") -> list:
    """Every binding of ``main``, in order."""
    return [b for blk in mod["main"].body.blocks for b in blk.bindings]


@relax.expr_functor.mutator
class _Tagger(relax.PyExprMutator):
    """Tags each binding of ``main`` (see :func:`tag_bindings`)."""

    def __init__(self, mod):
        super().__init__(mod)
        self.index = 0
        self.seen: set = set()

    def visit_var_binding_(self, binding):
        v = binding.value
        if isinstance(v, relax.Call):
            args = list(v.args)
            if is_call_tir(v):
                if args[0] in self.seen:
                    prim = self.builder_.get()[args[0]].with_attr("solverfuse_binding", self.index)
                    args[0] = self.builder_.add_func(prim, f"{args[0].name_hint}_b{self.index}")
                self.seen.add(args[0])
            v = relax.Call(v.op, args, v.attrs, v.ty_args,
                           span=ir.Span(ir.SourceName("solverfuse"), self.index, self.index, 0, 0))
        self.index += 1
        super().visit_var_binding_(relax.VarBinding(binding.var, v))


def is_call_tir(value) -> bool:
    """Whether an expression is a ``call_tir``."""
    return isinstance(value, relax.Call) and isinstance(value.op, ir.Op) and value.op.name == "relax.call_tir"


def tag_bindings(mod: "tvm.IRModule") -> "tvm.IRModule":
    """A copy of ``mod`` whose ``main`` binding calls carry their index as span line, and whose
    ``call_tir`` bindings each call their own PrimFunc (a renamed copy where one is shared), so
    FuseOps cannot merge two call sites into one deduplicated fused function."""
    tagger = _Tagger(tvm.IRModule(dict(mod.functions)))
    main = tagger.visit_expr(mod["main"])
    out = tagger.builder_.get()
    out[out.get_global_var("main")] = main
    return out


def is_kernel_call(mod: "tvm.IRModule", value) -> bool:
    """Whether a binding value launches a kernel: ``call_tir`` or a call to a fused function."""
    if not isinstance(value, relax.Call):
        return False
    if isinstance(value.op, ir.GlobalVar):
        f = mod[value.op]
        return isinstance(f, relax.Function) and bool(f.attrs) and "Primitive" in f.attrs.keys()
    return is_call_tir(value)


def kernels(mod: "tvm.IRModule") -> list[list[int]]:
    """The kernels of a fused module as lists of pre-fusion binding indices (span lines)."""
    out = []
    for b in main_bindings(mod):
        v = b.value
        if not is_kernel_call(mod, v):
            continue
        if isinstance(v.op, ir.GlobalVar):
            body = main_bindings_of(mod[v.op])
            out.append([x.value.span.line for x in body
                        if isinstance(x.value, relax.Call) and x.value.span is not None])
        else:
            out.append([v.span.line])
    return out


def main_bindings_of(func) -> list:
    """Every binding of a Relax function's body, in order."""
    return [b for blk in func.body.blocks for b in blk.bindings]


def binding_owners(bindings: list, traced: Traced) -> list[Optional[int]]:
    """The ONNX node index behind each binding of a module derived from ``traced.mod``.

    A binding a later pass created (LegalizeOps emits helpers just before the binding they serve)
    belongs to the owner of the next binding the import made."""
    out: list[Optional[int]] = [traced.owner.get(b.var) for b in bindings]
    nxt: Optional[int] = None
    for i in range(len(out) - 1, -1, -1):
        if out[i] is None:
            out[i] = nxt
        else:
            nxt = out[i]
    return out


def graph_node_of(graph: Graph, model: "onnx.ModelProto") -> list[Optional[str]]:
    """For each ONNX node, the solverfuse node computing its first output (None if none does)."""
    alias = {n.output[0]: n.input[0] for n in model.graph.node
             if n.op_type in ("Identity", "Dropout") and n.input and n.output}
    renamed: dict[str, str] = {}
    for o in graph.outputs:
        src = o
        while src in alias:
            src = alias[src]
        if src != o:
            renamed[src] = o
    out = []
    for n in model.graph.node:
        t = next((t for t in n.output if t), None)
        p = graph.index.producer.get(renamed.get(t, t)) if t else None
        if p is None and t in graph.index.producer:
            p = graph.index.producer[t]
        out.append(p)
    return out


@dataclass
class Prepared:
    """One ONNX model on both sides: its solverfuse Graph and TVM's pre-fusion Relax module, with
    each pre-fusion binding's ONNX node (``owners``) and each ONNX node's graph node."""
    model: "onnx.ModelProto"
    graph: Graph
    traced: Traced
    pre: "tvm.IRModule"
    owners: list
    node_of_onnx: list


def prepare(model: Union[str, os.PathLike, "onnx.ModelProto"], graph: Optional[Graph] = None) -> Prepared:
    """Import ``model`` into solverfuse (unless ``graph`` is given) and into Relax (traced, with the
    Graph's input shapes), and run TVM's passes up to FuseOps (:func:`prefusion`)."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(os.fspath(model))
    graph = graph or import_onnx(model)
    traced = import_traced(model, {t: list(graph.tensors[t].shape) for t in graph.inputs})
    pre = tag_bindings(prefusion(traced.mod))
    return Prepared(model=model, graph=graph, traced=traced, pre=pre,
                    owners=binding_owners(main_bindings(pre), traced),
                    node_of_onnx=graph_node_of(graph, model))


def fuseops_partition(model: Union[str, os.PathLike, "onnx.ModelProto", Prepared],
                      graph: Optional[Graph] = None) -> RealPartition:
    """TVM's real FuseOps partition of an ONNX model, as groups of solverfuse node names.

    ``graph`` is the solverfuse import of the same model (imported here if not given); its input
    shapes are given to TVM's frontend so both sides see the same static shapes.

    >>> from onnx import helper, TensorProto
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    >>> m = helper.make_model(helper.make_graph([helper.make_node("Exp", ["x"], ["h"], name="exp"),
    ...     helper.make_node("Relu", ["h"], ["y"], name="relu")], "g", [x], [y]),
    ...     opset_imports=[helper.make_opsetid("", 17)])
    >>> fuseops_partition(m).groups
    [['exp', 'relu']]
    >>> p = fuseops_plan(m); p.strategy, p.group_nodes()
    ('tvm-real', [['exp', 'relu']])
    """
    prep = model if isinstance(model, Prepared) else prepare(model, graph)
    graph, onnx_of_binding, node_of_onnx = prep.graph, prep.owners, prep.node_of_onnx
    post = fuse_ops(prep.pre)

    # Each kernel -> the ONNX nodes it computes; an ONNX node -> the last kernel computing part of it.
    home: dict[int, int] = {}
    touched: dict[int, set[int]] = {}
    ks = kernels(post)
    for kid, lines in enumerate(ks):
        for line in lines:
            k = onnx_of_binding[line] if 0 <= line < len(onnx_of_binding) else None
            if k is not None:
                home[k] = kid
                touched.setdefault(k, set()).add(kid)
    group_of: dict[str, int] = {}
    split = []
    for k, v in enumerate(node_of_onnx):
        if v is not None and k in home:
            if v in group_of and group_of[v] != home[k]:
                continue  # the graph node's first ONNX producer decides
            group_of[v] = home[k]
            if len(touched[k]) > 1:
                split.append(v)
    mapped = {v for v in node_of_onnx if v is not None}
    folded = [v for v in graph.index.order if v in mapped and v not in group_of]
    unmapped = [v for v in graph.index.order if v not in mapped]
    by_kernel: dict[int, list[str]] = {}
    for v in graph.index.order:
        if v in group_of:
            by_kernel.setdefault(group_of[v], []).append(v)
    groups = [by_kernel[k] for k in sorted(by_kernel)] + [[v] for v in folded + unmapped]
    return RealPartition(graph=graph, groups=groups, folded=folded, split=split, unmapped=unmapped,
                         extra_kernels=len(ks) - len(by_kernel))


def partition_problems(graph: Graph, groups: list[list[str]], hw: Hardware) -> list[str]:
    """Every group our rules reject, as ``group <first op> [ops]: <rule>`` lines (empty if legal)."""
    out = []
    for g in groups:
        why = cost.group_violation(graph, g, hw)
        if why:
            out.append(f"group {g[0]!r} ({len(g)} ops: {', '.join(g[:6])}{', ...' if len(g) > 6 else ''}): {why}")
    if not out:
        try:
            order_groups(graph, groups)
        except PlanError as e:
            out.append(str(e))
    return out


def fuseops_plan(model: Union[str, os.PathLike, "onnx.ModelProto"], hardware: Union[str, Hardware] = "nvidia-h100",
                 graph: Optional[Graph] = None) -> Plan:
    """TVM's real FuseOps partition of ``model`` as a validated ``tvm-real`` Plan.

    Raises PlanError naming each group and the rule it breaks if our rules reject TVM's own
    partition (a gap in our rules, reported rather than patched over).
    """
    hw = load_hardware(hardware)
    real = fuseops_partition(model, graph)
    bad = partition_problems(real.graph, real.groups, hw)
    if bad:
        raise PlanError(f"TVM's real partition breaks our rules: {'; '.join(bad)}")
    return build_plan(real.graph, hw, real.groups, strategy="tvm-real", status="heuristic")


def edge_agreement(graph: Graph, a: list[list[str]], b: list[list[str]]) -> tuple[float, list[tuple[str, str]]]:
    """Share of producer->consumer edges two partitions treat alike (both fuse or both cut), and
    the edges they disagree on.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [8]}}, "inputs": ["x"], "outputs": ["z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Neg", "inputs": ["y"], "outputs": ["z"]}]})
    >>> edge_agreement(g, [["a", "b", "c"]], [["a", "b"], ["c"]])
    (0.5, [('b', 'c')])
    """
    ga = {v: i for i, grp in enumerate(a) for v in grp}
    gb = {v: i for i, grp in enumerate(b) for v in grp}
    edges = [(u, w) for u in graph.index.order for w in graph.index.succs[u]]
    differ = [(u, w) for u, w in edges if (ga[u] == ga[w]) != (gb[u] == gb[w])]
    return (1.0 - len(differ) / len(edges) if edges else 1.0), differ
