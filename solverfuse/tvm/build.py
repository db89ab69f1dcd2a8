"""Build a fused Relax module for ``llvm`` and run it in the Relax VM: TVM's FuseOps partition or
a solverfuse plan (:func:`~solverfuse.tvm.outline.apply_plan`), through the same later passes."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .fuseops import OPT_LEVEL, TARGET

#: metadata key naming the ConstantOfShape weights of a lightened transformer export
LIGHTENED_KEY = "solverfuse.lightened"


def materialise_weights(model, seed: int = 0):
    """A copy of a "light" ONNX model whose ConstantOfShape weights hold seeded random data.

    The onnx package's light models (and lightened exports, which list their weights under
    :data:`LIGHTENED_KEY`) store every weight as one repeated value, which makes most outputs
    uniform whatever the kernels compute; numerics checks need real data. Weights of rank >= 2
    get N(0, 1/fan_in) (fan-in = product of all but the first dim, or the larger dim of a matrix),
    1-D ones (biases, norm scales, BatchNorm statistics) 1 + U(-0.1, 0.1), so variances stay positive.
    """
    import json
    import onnx
    from onnx import helper, numpy_helper
    props = {p.key: p.value for p in model.metadata_props}
    listed = set(json.loads(props[LIGHTENED_KEY])) if LIGHTENED_KEY in props else None
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes, made = [], []
    for n in out.graph.node:
        value = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "value"), None)
        dtype = numpy_helper.to_array(value).dtype if value is not None else np.dtype(np.float32)
        wanted = n.output[0] in listed if listed is not None else dtype.kind == "f"
        if n.op_type == "ConstantOfShape" and wanted and n.input[0] in consts:
            dims = tuple(int(d) for d in consts[n.input[0]])
            if len(dims) >= 2:
                fan = max(dims) if len(dims) == 2 else int(np.prod(dims[1:]))
                arr = rng.standard_normal(dims) / np.sqrt(max(fan, 1))
            else:
                arr = 1.0 + rng.uniform(-0.1, 0.1, dims)
            made.append(numpy_helper.from_array(arr.astype(dtype), n.output[0]))
        else:
            nodes.append(n)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(made)
    if out.ir_version < 4:  # initializers must also be graph inputs there
        out.graph.input.extend(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in made)
    return out


def seeded_inputs(graph, seed: int = 0) -> list[np.ndarray]:
    """Random inputs for a solverfuse Graph's inputs: N(0, 1) floats, integers in [0, 8)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in graph.inputs:
        info = graph.tensors[t]
        dt = np.dtype(info.dtype if info.dtype != "bool" else "bool")
        out.append(rng.standard_normal(info.shape).astype(dt) if dt.kind == "f"
                   else rng.integers(0, 8, info.shape).astype(dt))
    return out


def lower_passes() -> "tvm.transform.Pass":
    """``tvm.compile``'s llvm pipeline after FuseOps: FuseTIR, dataflow lowering, finalisation."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu_generic
    target = tvm.target.Target(TARGET)
    return tvm.transform.Sequential([relax.transform.FuseTIR()] + cpu_generic.dataflow_lower_passes(target)
                                    + cpu_generic.finalize_passes(target))


def build(fused: "tvm.IRModule"):
    """Compile a module whose ``main`` is already partitioned (FuseOps or apply_plan) for llvm."""
    target = tvm.target.Target(TARGET)
    with target, tvm.transform.PassContext(opt_level=OPT_LEVEL):
        return tvm.compile(fused, target=target, relax_pipeline=lower_passes())


def count_kernels(fused: "tvm.IRModule") -> int:
    """Kernel launches of ``main`` after FuseTIR (call_tir bindings)."""
    with tvm.transform.PassContext(opt_level=OPT_LEVEL):
        mod = relax.transform.FuseTIR()(fused)
    return sum(1 for blk in mod["main"].body.blocks for b in blk.bindings
               if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
               and b.value.op.name == "relax.call_tir")


def run(exe, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``main`` on the CPU and return its outputs as numpy arrays."""
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


def median_seconds(exe, inputs: list[np.ndarray], repeat: int = 10, number: int = 3) -> float:
    """Median wall time of one ``main`` call (TVM's time_evaluator; threads from TVM_NUM_THREADS)."""
    vm = relax.VirtualMachine(exe, tvm.cpu())
    args = [tvm.runtime.tensor(x) for x in inputs]
    res = vm.time_evaluator("main", tvm.cpu(), number=number, repeat=repeat)(*args)
    return float(np.median(res.results))
