"""solverfuse: optimal operator-fusion planning with CP-SAT.

Pipeline (one stage per module, in data-flow order): graph/onnx_import -> ops -> hardware ->
mapping -> cost -> plan -> greedy / formulations + solve -> compare -> emit.

>>> import solverfuse
>>> g = solverfuse.load_graph({"tensors": {"x": {"shape": [64]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
>>> solverfuse.cost.q_min(g)
512
"""
from . import cost
from .errors import (ArgumentError, EmitError, FileError, GraphError, HardwareError, InternalError, Interrupted,
                     PlanError, ResourceError, SolverfuseError)
from .graph import Graph, Node, Tensor
from .sources import load_graph
from .hardware import Hardware, load_hardware
from .plans import Group, Plan, build_plan, load_plan, save_plan, validate

__all__ = ["cost", "Graph", "Node", "Tensor", "load_graph", "Hardware", "load_hardware", "Plan",
           "Group", "build_plan", "load_plan", "save_plan", "validate", "SolverfuseError",
           "GraphError", "HardwareError", "PlanError", "EmitError", "ArgumentError", "FileError",
           "ResourceError", "InternalError", "Interrupted"]
__version__ = "0.1.0"
from .api import plan  # noqa: E402  (the library entry point; defined after the models it returns)

__all__.append("plan")
