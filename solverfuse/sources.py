"""Load a graph from any source: the one dispatcher above the readers.

:func:`solverfuse.graph.load_graph` reads the graph format (JSON text or file, a dict, a Graph, a
networkx DiGraph); :func:`solverfuse.onnx_import.import_onnx` reads ONNX models; a saved
ExportedProgram (``.pt2``) is read by :mod:`solverfuse.torch` (the ``torch`` extra). This module
sits above all of them, so none of them imports another to dispatch (no import cycle).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

from .errors import GraphError
from .graph import Graph
from .graph import load_graph as load_graph_format


def load_graph(source: Union[str, os.PathLike, dict, Graph, Any]) -> Graph:
    """A graph from a path (``.json``, ``.onnx``, ``.pt2``), JSON text, a dict, a Graph or a
    networkx DiGraph.

    >>> load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]}).index.order
    ['r']
    """
    if isinstance(source, (str, os.PathLike)) and not (isinstance(source, str) and source.lstrip().startswith("{")):
        suffix = Path(source).suffix.lower()
        if suffix == ".onnx":
            from .onnx_import import import_onnx
            return import_onnx(Path(source))
        if suffix == ".pt2":
            try:
                from . import torch as sf_torch
            except ImportError as e:
                raise GraphError(f"{source}: reading a .pt2 file needs torch "
                                 f"(pip install 'solverfuse[torch]'): {e}") from None
            return sf_torch.graph_from_pt2(Path(source))
    return load_graph_format(source)
