"""solverfuse: optimal operator-fusion planning with CP-SAT.

Pipeline (one stage per module, in data-flow order): graph/onnx_import -> ops -> hardware ->
mapping -> cost -> plan -> greedy / formulations + solve -> compare -> emit.

The names below are imported on first use (PEP 562), so ``import solverfuse`` itself loads
nothing heavy: the command line installs its signal handling before pydantic, numpy and the op
table load (a Ctrl-C in the first second is one line, not a traceback).

>>> import solverfuse
>>> g = solverfuse.load_graph({"tensors": {"x": {"shape": [64]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
>>> solverfuse.cost.q_min(g)
512
"""
from importlib import import_module

__version__ = "0.1.0"

#: Public name -> the module defining it (a module's own name: the module).
_HOME = {"cost": ".cost", "Graph": ".graph", "Node": ".graph", "Tensor": ".graph", "load_graph": ".sources",
         "Hardware": ".hardware", "load_hardware": ".hardware", "Plan": ".plans", "Group": ".plans",
         "build_plan": ".plans", "load_plan": ".plans", "save_plan": ".plans", "validate": ".plans",
         "plan": ".api", "sweep": ".api", **{name: ".errors" for name in (
             "SolverfuseError", "GraphError", "HardwareError", "PlanError", "EmitError", "ArgumentError",
             "FileError", "ResourceError", "InternalError", "Interrupted")}}

__all__ = ["cost", "Graph", "Node", "Tensor", "load_graph", "Hardware", "load_hardware", "Plan",
           "Group", "build_plan", "load_plan", "save_plan", "validate", "SolverfuseError",
           "GraphError", "HardwareError", "PlanError", "EmitError", "ArgumentError", "FileError",
           "ResourceError", "InternalError", "Interrupted", "plan", "sweep"]


def __getattr__(name: str):
    """A public name, or a submodule, imported when first asked for."""
    home = _HOME.get(name)
    if home is not None:
        module = import_module(home, __name__)
        value = module if home == "." + name else getattr(module, name)
    else:
        try:
            value = import_module("." + name, __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value
