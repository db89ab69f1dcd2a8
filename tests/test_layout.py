"""Layout: the DAG utilities have one home, ``solverfuse/dag.py``.

A plain syntactic guard (it reads the package's source with ``ast``), not a proof: it catches the
shapes the copies had -- a union-find's ``find``/``union`` or a union-find class, a reachability
bitset built by a backward sweep (``for ... in reversed(...)`` or ``range(n - 1, -1, -1)`` with
``|=`` inside), Kahn's in-degree counting, and networkx cycle searches.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "solverfuse"
HOME = "dag.py"


def _is_backward_loop(loop: ast.For) -> bool:
    it = loop.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name):
        if it.func.id == "reversed":
            return True
        if it.func.id == "range" and len(it.args) == 3:
            step = it.args[2]
            return isinstance(step, ast.UnaryOp) and isinstance(step.op, ast.USub)
    return False


def copies(package: Path = PACKAGE) -> list[str]:
    """``file:line what`` for every DAG utility defined outside ``dag.py`` (first line per file)."""
    found: dict[tuple[str, str], int] = {}
    for path in sorted(package.rglob("*.py")):
        if path.name == HOME and path.parent == package:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        name = str(path.relative_to(package))
        where = lambda node, what: found.setdefault((name, what), node.lineno)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("find", "union"):
                where(node, f"union-find function {node.name!r}")
            elif isinstance(node, ast.ClassDef) and any(k in node.name.lower() for k in ("unionfind", "disjointset")):
                where(node, f"union-find class {node.name!r}")
            elif isinstance(node, ast.For) and _is_backward_loop(node) and any(
                    isinstance(n, ast.AugAssign) and isinstance(n.op, ast.BitOr) for n in ast.walk(node)):
                where(node, "reachability bitsets built by a backward sweep")
            elif isinstance(node, ast.Name) and node.id in ("indeg", "indegree", "in_degree"):
                where(node, "Kahn's in-degree counting (a topological sort)")
            elif isinstance(node, ast.Attribute) and node.attr in ("find_cycle", "simple_cycles"):
                where(node, f"a cycle search ({node.attr})")
    return [f"{name}:{line} {what}" for (name, what), line in sorted(found.items())]


def test_dag_utilities_are_defined_once():
    assert copies() == []


def test_the_guard_sees_a_copy(tmp_path):
    """The guard is not vacuous: a module with a private union-find and bitset sweep is flagged."""
    (tmp_path / "dag.py").write_text("def find(x):\n    return x\n")
    (tmp_path / "copy.py").write_text(
        "def find(p, a):\n    return a\n\n"
        "def reach(succs):\n    desc = [0] * len(succs)\n"
        "    for i in range(len(succs) - 1, -1, -1):\n        for j in succs[i]:\n"
        "            desc[i] |= 1 << j | desc[j]\n    return desc\n\n"
        "def order(n):\n    indeg = [0] * n\n    return indeg\n")
    assert {c.split(" ", 1)[1] for c in copies(tmp_path)} == {
        "union-find function 'find'", "reachability bitsets built by a backward sweep",
        "Kahn's in-degree counting (a topological sort)"}
