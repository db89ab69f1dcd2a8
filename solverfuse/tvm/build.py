"""Build a fused Relax module for ``llvm`` and run it in the Relax VM: TVM's FuseOps partition or
a solverfuse plan (:func:`~solverfuse.tvm.outline.apply_plan`), through the same later passes."""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .fuseops import OPT_LEVEL, TARGET


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
