"""The package's layout rules, checked on its source: imports flow one way (no cycle among
``solverfuse`` modules, function-level imports included), no module imports a ``_private`` name
from another, and the C emitter supports exactly the ops of the op table."""
from __future__ import annotations

import ast
from pathlib import Path

from solverfuse.emit import lowering
from solverfuse.ops import OPS

ROOT = Path(__file__).resolve().parents[1] / "solverfuse"

#: Known offenders (importing module, imported module, name): none.
PRIVATE_ALLOWED: set[tuple[str, str, str]] = set()
#: Known import cycles outside emit/ (each a sorted tuple of the modules of one cycle).
CYCLES_ALLOWED: set[tuple[str, ...]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(mod: str, path: Path, modules: dict) -> list[tuple[str, str, int]]:
    """(imported solverfuse module, imported name or '', line) of every import statement,
    wherever it is (module level or inside a function); ``if TYPE_CHECKING:`` blocks skipped."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    out.append((a.name, "", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in modules:
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in modules:
                    out.append((sub, "", node.lineno))  # a submodule, not a name
                else:
                    out.append((target, a.name, node.lineno))
    return out


def _graph():
    modules = _modules()
    return modules, {m: _imports(m, p, modules) for m, p in modules.items()}


def _cycles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(tuple(sorted(comp)))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    modules, imports = _graph()
    edges = {m: {t for t, _, _ in imps if t != m} for m, imps in imports.items()}
    # a package's __init__ importing its own submodules is the usual re-export, not a cycle
    for m in modules:
        if modules[m].name == "__init__.py":
            edges[m] = {t for t in edges[m] if not t.startswith(m + ".")}
    found = set(_cycles(edges)) - CYCLES_ALLOWED
    assert not found, f"import cycles among solverfuse modules: {sorted(found)}"


def test_cycle_detector_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_private_name_imported_across_modules():
    _, imports = _graph()
    found = {(m, t, name) for m, imps in imports.items() for t, name, _ in imps
             if name.startswith("_") and t != m}
    extra = found - PRIVATE_ALLOWED
    assert not extra, f"imports of private names from another module: {sorted(extra)}"


def test_emit_has_no_import_back_up_the_chain():
    """The emitter's one-way chain, in its stated order: a module imports only earlier ones."""
    chain = ["cexpr", "ctext", "ctile", "conv_helpers", "row_helpers", "chelpers", "arena", "sharing", "kernel",
             "elementwise", "norm_stats", "reductions", "tiles",
             "gemm_tiles", "conv_tiles", "pool_tiles", "anchors", "lowering",
             "channels", "passes", "forward", "rows", "schedule", "program", "build", "backend"]
    _, imports = _graph()
    for i, m in enumerate(chain):
        for t, _, line in imports[f"solverfuse.emit.{m}"]:
            if t.startswith("solverfuse.emit."):
                other = t.rsplit(".", 1)[1]
                assert other not in chain[i:], f"emit/{m}.py:{line} imports {other}, later in the chain"


def test_emitter_supports_exactly_the_op_table():
    """Every op of ``solverfuse.ops.OPS`` has a C lowering or is listed as not emitted (on
    purpose, documented); the emitter lowers no op the table does not know."""
    ops = set(OPS)
    missing = ops - lowering.SUPPORTED - lowering.NOT_EMITTED
    assert not missing, f"ops of the op table with no C lowering and not listed in NOT_EMITTED: {sorted(missing)}"
    unknown = lowering.SUPPORTED - ops
    assert not unknown, f"C lowerings for ops the op table does not list: {sorted(unknown)}"
    assert not lowering.SUPPORTED & lowering.NOT_EMITTED
    assert lowering.NOT_EMITTED <= ops
