"""solverfuse inside PyTorch (the optional extra ``solverfuse[torch]``).

* :func:`from_module` / :func:`from_exported_program`: ``torch.export`` graphs -> :class:`~solverfuse.Graph`
  (node names = FX node names, weights with their data);
* :func:`inductor_plan`: the fusion real ``torch.compile`` (Inductor, CPU) makes, as a Plan with
  strategy ``inductor-real`` over the same Graph, and :func:`edge_agreement` with a reproduction;
* ``torch.compile(model, backend="solverfuse", options={...})``: Inductor fusing along a solverfuse
  plan; :func:`last_report` says which planned groups became one kernel and why not.

Importing this package registers the backend. The core package never imports it.

>>> import torch, solverfuse.torch
>>> "solverfuse" in torch._dynamo.list_backends(exclude_tags=())
True
"""
from ..graph import Graph
from .backend import GroupOutcome, Report, last_report, register, solverfuse_backend
from .fx_import import (export_for_inductor, from_exported_program, from_graph_module, from_module,
                        graph_unknown_ops, load_exported)
from .inductor_real import Kernel, RealPlan, edge_agreement, inductor_plan, plan_from_exported

register()


def graph_from_pt2(path) -> "Graph":
    """The Graph of a saved ExportedProgram (``torch.export.save``), decomposed as Inductor does."""
    from pathlib import Path
    ep, _ = load_exported(path)
    return from_exported_program(ep, Path(path).stem)


def real_plan_from_pt2(path, hardware="detect") -> RealPlan:
    """:func:`inductor_plan` for a saved ExportedProgram (example inputs: zeros of its shapes)."""
    from pathlib import Path
    ep, inputs = load_exported(path)
    return plan_from_exported(ep, inputs, hardware, name=Path(path).stem)

__all__ = ["from_module", "from_exported_program", "from_graph_module", "export_for_inductor",
           "graph_unknown_ops", "load_exported", "inductor_plan", "plan_from_exported", "edge_agreement",
           "RealPlan", "Kernel", "solverfuse_backend", "last_report", "Report", "GroupOutcome", "register",
           "graph_from_pt2", "real_plan_from_pt2"]
