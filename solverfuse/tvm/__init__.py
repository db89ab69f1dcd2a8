"""solverfuse inside Apache TVM (optional extra ``solverfuse[tvm]``; the core never imports this).

* :func:`fuseops_plan` -- the partition TVM's Relax FuseOps really makes on an ONNX model, mapped
  onto solverfuse node names, as a validated ``tvm-real`` Plan (a ``compare`` row);
* :func:`apply_plan` -- TVM's pre-fusion module fused along a solverfuse plan instead (outlined
  Primitive functions, then FuseTIR), built for ``llvm`` and run in the Relax VM by
  :mod:`solverfuse.tvm.build`.

Modules: ``relax_import`` (ONNX -> Relax, every binding traced to its ONNX node) -> ``fuseops``
(TVM's passes up to FuseOps, the real partition) -> ``outline`` (a plan's groups as fused
functions) -> ``build`` (FuseTIR + the rest of ``tvm.compile``'s llvm pipeline, VM runs, timing).
"""
from .build import build, count_kernels, median_seconds, run
from .fuseops import (Prepared, RealPartition, edge_agreement, fuse_ops, fuseops_partition, fuseops_plan,
                      partition_problems, prepare)
from .outline import apply_plan


def real_plan(source, graph, hardware):
    """The ``tvm-real`` plan of the ONNX model at ``source`` on its already imported ``graph``
    (the hook :func:`solverfuse.compare.real_plans` calls)."""
    return fuseops_plan(source, hardware, graph=graph)


__all__ = ["Prepared", "RealPartition", "apply_plan", "build", "count_kernels", "edge_agreement", "fuse_ops",
           "fuseops_partition", "fuseops_plan", "median_seconds", "partition_problems", "prepare", "real_plan",
           "run"]
