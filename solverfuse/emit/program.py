"""The whole program: a plan becomes one C function per group plus a driver that runs them in order.

Only the tensors the cost model says cross a group boundary (``cost.group_reads`` /
``cost.group_writes``) live in global buffers, passed in by the caller as ``void *B[]`` (buffer
``i`` is row ``i`` of :func:`buffer_table`). Inside a group every other tensor is a value
computed *on demand at an index* (:meth:`Kernel.value`): an elementwise/broadcast chain becomes
scalar temporaries in one loop (common subexpressions shared), layout ops are index maps, and an
anchor (MatMul/Gemm/Conv) accumulates a tile of its output (a row; a Conv's output plane; a
register-blocked block of channels/rows x positions) in a stack array that the fused epilogue
reads. The modules form one chain, each building only on those before it: :mod:`~.cexpr` (C
types, literals, index arithmetic) and :mod:`~.ctext` (fixed C text) -> :mod:`~.kernel` (the kernel
builder) -> op lowerings (:mod:`~.elementwise`, :mod:`~.reductions`, :mod:`~.anchors`, gathered in
:mod:`~.lowering`) -> :mod:`~.schedule` (how a group's loops are arranged) -> this module (buffers,
whole-file render) -> :mod:`~.build` (compile, load, run). A kernel takes one of three shapes:

* **row loop** (``schedule._emit_rows``) -- every written tensor has one shape S and every reduction is
  a Softmax/LayerNormalization over its last axis: one loop over the rows of S computes the anchor
  tile, each reduction's statistics as row scalars, then every output of the row;
* **forward store** (``schedule._emit_forward``) -- an anchor's output reshaped/transposed into the
  written tensor (attention head split): the loop runs over the anchor's tile and stores at the
  forward-mapped index;
* **passes** (the general case) -- one loop nest per Reduce*/statistics pass, then one per shape
  of written tensors; statistics and reduced values sit in kernel-local scratch indexed by row,
  and an anchor/window output needed by several passes (or at another shape) is materialised in
  kernel-local scratch rather than recomputed (said in a comment in the C).

No user string reaches the C text: buffers, kernels and temporaries are numbered; the tensor
names are listed in ``buffers.json`` next to the source.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.plans import build_plan
>>> g = load_graph({"tensors": {"x": {"shape": [4, 8]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "e", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> files = render(build_plan(g, "nvidia-h100", [["r", "e"]], strategy="manual"), g)
>>> sorted(files), files["model.c"].count("static int k"), "b1[" in files["model.c"]
(['buffers.json', 'model.c', 'model.h'], 1, True)
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import cost
from ..errors import EmitError
from ..graph import Graph
from ..ops import DTYPE_SIZES, numel
from ..plans import validate, write_atomic
from .cexpr import ctype
from .ctext import COUNTER_PRELUDE, PRELUDE, TIMING, header, helper_text
from .kernel import Kernel
from .lowering import code_for_op
from .schedule import render_kernel


@dataclass(frozen=True)
class BufferInfo:
    """One global buffer: the tensor, its role (``input``/``constant``/``boundary``/``output``)."""
    tensor: str
    role: str
    dtype: str
    shape: tuple[int, ...]


def buffer_table(plan, graph: Graph) -> list[BufferInfo]:
    """Global buffers in index order: graph inputs, constants, then each group's writes.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.plans import build_plan
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "e", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> [(b.tensor, b.role) for b in buffer_table(build_plan(g, "nvidia-h100", [["r"], ["e"]], strategy="m"), g)]
    [('x', 'input'), ('h', 'boundary'), ('y', 'output')]
    """
    used: dict[str, None] = {}
    for grp in plan.groups:
        for t in cost.group_reads(graph, grp.nodes):
            used[t] = None
    out, seen = [], set()

    def add(t, role):
        if t not in seen:
            seen.add(t)
            info = graph.tensors[t]
            out.append(BufferInfo(t, role, info.dtype, tuple(info.shape)))
    for t in graph.inputs:
        if t in used:
            add(t, "input")
    for t, info in graph.tensors.items():
        if info.constant and t in used:
            add(t, "constant")
    outputs = set(graph.outputs)
    for grp in plan.groups:
        for t in cost.group_writes(graph, grp.nodes):
            add(t, "output" if t in outputs else "boundary")
    return out


def _shared_kernel(text: str, gi: int, seen: dict, funcs: list, about: str) -> tuple[str, list[int]]:
    """Renumber a kernel's buffers locally (in order of first use) so that groups with the same
    code -- repeated blocks of a network -- share one C function (less to compile); returns the
    function to call and the global buffers to pass, in local order."""
    local: dict[int, int] = {}

    def loc(m):
        if m.group(1) is not None:
            return f"b{local.setdefault(int(m.group(1)), len(local))}"
        return f"B[{local.setdefault(int(m.group(2)), len(local))}]"
    canon = re.sub(r"\bb(\d+)\b|\bB\[(\d+)\]", loc, text).replace(f"static int k{gi}(", "static int KERNEL(", 1)
    if canon not in seen:
        seen[canon] = f"k{gi}"
        funcs.append(about + "\n" + canon.replace("static int KERNEL(", f"static int k{gi}(", 1))
    return seen[canon], [g for g, _ in sorted(local.items(), key=lambda kv: kv[1])]


def render(plan, graph: Optional[Graph] = None, *, threads: int = 1, counters: bool = False) -> dict[str, str]:
    """Render a plan as C: ``model.c``, ``model.h`` and ``buffers.json`` (file name -> text).

    The plan is validated first; raises EmitError naming the node (or tensor) for an op (or
    dtype) the emitter does not support. ``threads > 1`` adds OpenMP pragmas on outer loops;
    ``counters`` renders the instrumented variant (serial).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.plans import build_plan
    >>> g = load_graph({"tensors": {"x": {"shape": [8, 16]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "s", "op": "Softmax", "inputs": ["x"], "outputs": ["y"]}]})
    >>> src = render(build_plan(g, "nvidia-h100", [["s"]], strategy="m"), g, threads=4)["model.c"]
    >>> "one row loop over [8]" in src, "num_threads(4)" in src, "malloc" in src
    (True, True, False)
    """
    graph = graph or plan.graph
    if graph is None:
        raise EmitError("plan has no embedded graph and none was given")
    validate(plan, graph)  # the emitter relies on convex groups in an executable order
    threads = 1 if counters else max(1, int(threads))
    table = buffer_table(plan, graph)
    buffers = {b.tensor: i for i, b in enumerate(table)}
    for b in table:
        ctype(graph, b.tensor)
    funcs, driver = [], []
    helpers: set[str] = set()
    seen: dict[str, str] = {}  # kernel text with buffers renumbered locally -> function name
    for gi, grp in enumerate(plan.groups):
        k = Kernel(graph, grp.nodes, gi, buffers, counters=counters, threads=threads, lower=code_for_op)
        text = render_kernel(k)
        helpers |= k.helpers
        about = f"/* group {gi}: {len(grp.nodes)} op(s): {', '.join(sorted({graph.index.node[v].op for v in grp.nodes}))} */"
        if counters:
            funcs.append(about + "\n" + text)
            rd = [buffers[t] for t in k.reads]
            wr = [buffers[t] for t in k.writes]
            arr = lambda xs: "(const int[]){" + (", ".join(map(str, xs)) or "0") + "}"
            call = f"sf_counted({gi}, k{gi}, B, {arr(rd)}, {len(rd)}, {arr(wr)}, {len(wr)})"
        else:
            name, args = _shared_kernel(text, gi, seen, funcs, about)
            call = f"{name}((void *const[]){{{', '.join(f'B[{a}]' for a in args)}}})" if args else f"{name}(B)"
            if name != f"k{gi}":
                driver.append(f"    /* group {gi}: the same code as {name} */")
        driver.append(f"    if ((rc = {call})) return rc;\n    if (sf_error) return sf_error;")
    nb = len(table)
    consts = [
        "const long long sf_numel[SF_NUM_BUFFERS + 1] = {" + ", ".join([str(numel(b.shape)) for b in table] + ["0"]) + "};",
        "const long long sf_isize[SF_NUM_BUFFERS + 1] = {" + ", ".join([str(DTYPE_SIZES[b.dtype]) for b in table] + ["0"]) + "};",
        "const int sf_is_input[SF_NUM_BUFFERS + 1] = {" + ", ".join([str(int(b.role in ("input", "constant"))) for b in table] + ["0"]) + "};",
    ]
    run = "int sf_run(void *const *B)\n{\n    int rc = 0;\n    sf_error = 0;\n" + "\n".join(driver) + "\n    return rc;\n}\n"
    no_counters = "" if counters else "int sf_counters(long long *out)\n{\n    (void)out;\n    return -1;\n}\n"
    source = "\n".join([PRELUDE] + consts + ([COUNTER_PRELUDE] if counters else [])
                       + [helper_text(h) for h in sorted(helpers)] + funcs
                       + [run, TIMING, no_counters])
    names = [{"index": i, "tensor": b.tensor, "role": b.role, "dtype": b.dtype, "shape": list(b.shape)}
             for i, b in enumerate(table)]
    return {"model.c": source, "model.h": header(nb, len(plan.groups), counters),
            "buffers.json": json.dumps({"buffers": names, "groups": [g.name for g in plan.groups]},
                                       indent=1, ensure_ascii=False) + "\n"}


def write_source(files: dict[str, str], outdir) -> list[str]:
    """Write rendered files into ``outdir`` (created if needed), each atomically; EmitError on I/O
    failure. Render first, then write: a failed render leaves no file behind.

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> [os.path.basename(p) for p in write_source({"model.h": "/* h */"}, d)]
    ['model.h']
    """
    out = Path(outdir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            write_atomic(out / name, text)
    except OSError as e:
        raise EmitError(f"{out}: cannot write ({e.strerror or e})") from None
    return [str(out / name) for name in files]
