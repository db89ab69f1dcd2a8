"""Greedy baselines: the fusion plans production compilers would make, scored by our cost model.

Each strategy is a function ``(graph, hw) -> list of groups`` registered in :data:`STRATEGIES`;
:func:`greedy_plan` turns its partition into a validated :class:`~solverfuse.plans.Plan`. Every
baseline accepts a merge only if :func:`solverfuse.cost.group_violation` allows the merged group
(the op table's rules + capacity: the same legality as the optimal planner) and the merge keeps
every group convex with an acyclic quotient graph (:meth:`Partition.why_not`).

One module per baseline: ``merging`` (the shared merge bookkeeping: legality + cycle check), ``tvm_fuse_ops``,
``xla_priority``, ``inductor_scheduler``, ``guide_flow``; ``xla_recompute`` is XLA's priority fusion
with producer duplication and ``inductor_inline`` Inductor's lowering recomputing inlined pointwise
values in every consumer's loop, both covering plans (:data:`RECOMPUTING`, :func:`recomputing_plan`).

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> unfused(g, None)
[['a'], ['b']]
>>> greedy_plan(g, "nvidia-h100", "unfused").traffic_bytes
4096
"""
from __future__ import annotations

from typing import Callable, Optional, Union

from ..errors import PlanError
from ..graph import Graph
from ..hardware import Hardware, load_hardware
from ..plans import Plan, build_covering_plan, build_plan
from .guide_flow import guide, memory_bound
from .inductor_inline import inductor_kernels
from .inductor_scheduler import INDUCTOR_MAX_FUSION_SIZE, INDUCTOR_PAIRWISE_ATTEMPTS, INDUCTOR_ROUNDS, inductor
from .merging import Partition, has_role
from .tvm_fuse_ops import TVM_KIND, TVM_KIND_OVERRIDE, TVM_MAX_FUSED_OPS, tvm, tvm_kind
from .xla_priority import XLA_LAUNCH_OVERHEAD_S, XLA_MAX_OPERANDS_AND_OUTPUTS, xla
from .xla_recompute import xla_kernels


def unfused(graph: Graph, hw: Optional[Hardware]) -> list[list[str]]:
    """No fusion: one op per kernel (what an eager framework launches)."""
    return [[v] for v in graph.index.order]


#: Every baseline by name, in the order reports list them.
STRATEGIES: dict[str, Callable[[Graph, Hardware], list[list[str]]]] = {
    "unfused": unfused,
    "tvm": tvm,
    "xla": xla,
    "inductor": inductor,
    "guide": guide,
}


#: Baselines that recompute as their compiler does (a covering: an op may be in several kernels),
#: by the name of the partition baseline they refine. Kept apart from :data:`STRATEGIES`, whose
#: partitions also seed the solver.
RECOMPUTING: dict[str, Callable[[Graph, Hardware], list]] = {
    "xla": xla_kernels,
    "inductor": inductor_kernels,
}


def recomputing_plan(graph: Graph, hardware: Union[str, Hardware], name: str) -> Plan:
    """Run the recomputing baseline ``name`` (:data:`RECOMPUTING`) and return its validated plan,
    strategy ``<name>-recompute`` (a ``/1`` plan when it happens to recompute nothing).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> p = recomputing_plan(g, "nvidia-h100", "xla"); p.strategy, p.traffic_bytes
    ('xla-recompute', 2048)
    """
    if name not in RECOMPUTING:
        raise PlanError(f"unknown recomputing strategy {name!r} ({', '.join(RECOMPUTING)})")
    hw = load_hardware(hardware)
    return build_covering_plan(graph, hw, RECOMPUTING[name](graph, hw), strategy=f"{name}-recompute",
                               status="heuristic")


def greedy_plan(graph: Graph, hardware: Union[str, Hardware], name: str) -> Plan:
    """Run the baseline ``name`` and return its validated plan (status ``heuristic``)."""
    if name not in STRATEGIES:
        raise PlanError(f"unknown greedy strategy {name!r} ({', '.join(STRATEGIES)})")
    hw = load_hardware(hardware)
    return build_plan(graph, hw, STRATEGIES[name](graph, hw), strategy=name, status="heuristic")


__all__ = ["STRATEGIES", "RECOMPUTING", "greedy_plan", "recomputing_plan", "xla_kernels", "inductor_kernels", "Partition", "has_role", "unfused", "tvm", "xla", "inductor",
           "guide", "tvm_kind", "memory_bound", "TVM_KIND", "TVM_KIND_OVERRIDE", "TVM_MAX_FUSED_OPS",
           "XLA_LAUNCH_OVERHEAD_S", "XLA_MAX_OPERANDS_AND_OUTPUTS", "INDUCTOR_MAX_FUSION_SIZE",
           "INDUCTOR_PAIRWISE_ATTEMPTS", "INDUCTOR_ROUNDS"]
