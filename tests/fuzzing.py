"""Malformed-input generators and the one-line-error oracle shared by tests/test_fuzz.py (bounded,
hypothesis) and benchmarks/fuzz.py (long runs with counts per class and outcome).

A case is a valid document (graph, plan or hardware profile) with one mutation: a value replaced
(by another type, a negative, a huge or a nested value), a key deleted or added, the top level
retyped, or the bytes broken (truncated, not UTF-8, a 5000-digit integer, 3000-deep nesting).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

GRAPH: dict = {
    "format": "solverfuse-graph/1", "name": "fuzz",
    "tensors": {"x": {"shape": [4, 8]}, "w": {"shape": [8, 8], "constant": True},
                "b": {"shape": [8], "constant": True, "fill": 0.5},
                "ax": {"shape": [1], "dtype": "int64", "constant": True, "value": [1]}},
    "inputs": ["x"], "outputs": ["y", "z"],
    "nodes": [
        {"name": "mm", "op": "Gemm", "inputs": ["x", "w", "b"], "outputs": ["h"],
         "attributes": {"transA": 0, "transB": 1, "alpha": 1.0}},
        {"name": "act", "op": "Tanh", "inputs": ["h"], "outputs": ["t"]},
        {"name": "sm", "op": "Softmax", "inputs": ["t"], "outputs": ["y"], "attributes": {"axis": -1}},
        {"name": "rm", "op": "ReduceMean", "inputs": ["t", "ax"], "outputs": ["r"],
         "attributes": {"keepdims": 1}},
        {"name": "tr", "op": "Transpose", "inputs": ["r"], "outputs": ["z0"], "attributes": {"perm": [1, 0]}},
        {"name": "cu", "op": "MyOp", "inputs": ["z0"], "outputs": ["z"], "category": "memory", "flops": 8},
    ]}
GRAPH["tensors"]["z"] = {"shape": [1, 4]}

MUTATIONS = ("replace", "delete", "insert", "retype", "truncate", "not-utf8", "huge-int", "deep")
SPECIAL = [None, True, False, 0, -1, -5, 2**70, 1.5, float("nan"), float("inf"), "", "yes", "x" * 300,
           [], {}, [True, 8], [0], [-1, 8], [2**40, 2**40], {"a": 1}, "float32"]


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (dict keys and list positions), depth first."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, prefix + (i,))
    return out


def _parent(doc: Any, path: tuple):
    for k in path[:-1]:
        doc = doc[k]
    return doc


def mutate(doc: dict, kind: str, where: int, value: Any) -> bytes:
    """The document's bytes after one mutation of ``kind`` at place ``where`` (an index into
    :func:`paths`, taken modulo their number) with ``value``."""
    doc = copy.deepcopy(doc)
    ps = [p for p in paths(doc) if p] or [()]
    path = ps[where % len(ps)]
    if kind == "retype":
        doc = value
    elif kind in ("replace", "insert", "delete") and path:
        parent = _parent(doc, path)
        if kind == "replace":
            parent[path[-1]] = value
        elif kind == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[f"extra{where}"] = value
        else:
            parent.insert(path[-1], value)
    text = json.dumps(doc, ensure_ascii=False)
    if kind == "truncate":
        return text.encode()[: max(1, where % max(2, len(text)))]
    if kind == "not-utf8":
        return b"\xff\xfe" + text.encode("utf-16-le")
    if kind == "huge-int":
        return text.replace("8", "9" * 5000, 1).encode()
    if kind == "deep":
        return ("[" * 3000 + "1" + "]" * 3000).encode() if where % 2 else \
            text.replace("{", '{"deep": ' + "[" * 3000 + "]" * 3000 + ", ", 1).encode()
    return text.encode()


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def check_cli(result, folder: Path, before: set[str], outputs: tuple = ()) -> str:
    """Assert a CliRunner result is a success or exit 2 with exactly one ``error:`` line, no
    traceback, and (on failure) no new file in ``folder``; return "ok" or "error"."""
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"escaped: {type(result.exception).__name__}: {result.exception}"
    assert "Traceback" not in result.output, result.output[-2000:]
    if result.exit_code == 0:
        return "ok"
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "internal error" not in lines[0], lines[0]
    assert files_in(folder) == before, sorted(files_in(folder) - before)
    return "error"


def check_library(fn, *args, **kwargs) -> str:
    """Call ``fn``: "ok" on success, "error" on a one-line SolverfuseError; anything else fails."""
    from solverfuse.errors import SolverfuseError
    try:
        fn(*args, **kwargs)
    except SolverfuseError as e:
        assert "\n" not in str(e) and str(e), repr(e)
        return "error"
    return "ok"


def valid_plan(tmp: Optional[Path] = None) -> dict:
    """A valid plan document of :data:`GRAPH` (graph embedded)."""
    from solverfuse.graph import load_graph
    from solverfuse.plans import build_plan, plan_to_json
    g = load_graph(GRAPH)
    p = build_plan(g, "nvidia-h100", [["mm", "act", "sm"], ["rm"], ["tr"], ["cu"]], strategy="manual")
    return json.loads(plan_to_json(p))


def valid_hardware() -> dict:
    from solverfuse.hardware import load_hardware
    return load_hardware("nvidia-h100").model_dump(mode="json")


__all__ = ["GRAPH", "MUTATIONS", "SPECIAL", "paths", "mutate", "check_cli", "check_library",
           "valid_plan", "valid_hardware", "files_in"]
