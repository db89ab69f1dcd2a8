"""The whole program: a plan becomes one C function per group plus a driver that runs them in order.

Only the tensors the cost model says cross a group boundary (``cost.group_reads`` /
``cost.group_writes``) live in global buffers, passed in by the caller as ``void *B[]`` (buffer
``i`` is row ``i`` of :func:`buffer_table`). Inside a group every other tensor is a value
computed *on demand at an index* (:meth:`Kernel.value`): an elementwise/broadcast chain becomes
scalar temporaries in one loop (common subexpressions shared), layout ops are index maps, and an
anchor (MatMul/Gemm/Conv) accumulates a tile of its output (a row; a Conv's output plane; a
register-blocked block of channels/rows x positions) in a stack array that the fused epilogue
reads. The modules form one chain, each building only on those before it: :mod:`~.cexpr` (C
types, literals, index arithmetic), :mod:`~.ctext` and :mod:`~.chelpers` (fixed C text) ->
:mod:`~.kernel` (the kernel builder) -> op lowerings (:mod:`~.elementwise`, :mod:`~.reductions`,
:mod:`~.anchors` with the tiles of :mod:`~.tiles`, :mod:`~.gemm_tiles`, :mod:`~.conv_tiles`,
:mod:`~.pool_tiles`, gathered in :mod:`~.lowering`) -> one pass's loop nest (:mod:`~.channels`,
:mod:`~.passes`) -> the row loop (:mod:`~.rows`) and forward stores (:mod:`~.forward`) ->
:mod:`~.schedule` (how a group's loops are arranged) -> this module (buffers, whole-file render)
-> :mod:`~.build` (compile, load, run). A looped kernel (a group the plan runs as several passes)
is laid out by :mod:`~.looped`, one loop nest per pass, and so is a one-pass stream that ends in
reductions (``looped.streams_in_one_loop``: one loop stores and accumulates).
Any other kernel takes one of three shapes:

* **row loop** (``rows.emit_rows``) -- every written tensor has one shape S and every reduction is
  a Softmax/LayerNormalization over its last axis: one loop over the rows of S computes the anchor
  tile, each reduction's statistics as row scalars, then every output of the row;
* **forward store** (``forward.emit_forward``) -- an anchor's output reshaped/transposed into the
  written tensor (attention head split): the loop runs over the anchor's tile and stores at the
  forward-mapped index;
* **passes** (the general case) -- one loop nest per Reduce*/statistics pass, then one per shape
  of written tensors; statistics and reduced values sit in kernel-local scratch indexed by row,
  and an anchor/window output needed by several passes (or at another shape) is materialised in
  kernel-local scratch rather than recomputed (said in a comment in the C).

With threads, ``sf_run`` opens one OpenMP parallel region for the kernels
(:mod:`~.team`): a kernel's parallel loops are shared among that team and the threads meet at a
spinning barrier after each kernel, instead of a region per loop; a kernel whose body does not fit
runs between two regions, with its own.

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
from ..errors import EmitError, InternalError
from ..graph import Graph
from ..ops import DTYPE_SIZES, numel
from ..files import write_atomic
from ..plans import validate
from .arena import Slot, layout, slot_bytes
from .cexpr import CSIZES, ctype, param_check
from .chelpers import helper_text
from .ctext import ARENA, COUNTER_PRELUDE, PRELUDE, TIMING, header
from .kernel import Kernel
from .sharing import kernel_work, parallel_groups
from .lowering import code_for_op
from .looped import render_looped, streams_in_one_loop
from .schedule import render_kernel
from .team import SYNC

#: The team's return code and its reading of ``sf_error`` (written by any thread of the team).
TEAM_RC = "static SF_UNUSED int sf_team_rc;\n#define SF_ERROR() __atomic_load_n(&sf_error, __ATOMIC_RELAXED)"


def _driver(entries: list[tuple[str, str, str]], threads: int) -> str:
    """``sf_run``'s body after its entry: the kernel calls in order. Each run of consecutive
    kernels whose parallel loops the team can share ("all"; view groups' checks, "view", go with
    them) runs in one parallel region (:mod:`~solverfuse.emit.team`); a serial kernel or one the
    team cannot run ("alone") runs between regions -- a serial kernel on the calling thread with
    no barrier (small models of tiny serial kernels paid a barrier, often a futex wake, for
    each: BERT at 2 threads went from 7 to 96 us). A run of view groups alone opens no region.
    Entries: (how, its lines in the team, its lines alone)."""
    out: list[str] = []
    n = 0
    while n < len(entries):
        end = n
        while end < len(entries) and entries[end][0] != "alone":
            end += 1
        if not any(e[0] == "all" for e in entries[n:end]):
            out += [e[2] for e in entries[n:max(end, n + 1)]]
            n = max(end, n + 1)
            continue
        body = "\n".join(e[1] for e in entries[n:end]).replace("\n    ", "\n            ")
        out.append(f"    sf_team_rc = 0;\n    #pragma omp parallel num_threads({threads})\n    {{\n"
                   "        int r = 0;\n        do {\n"
                   f"        {body}\n        }} while (0);\n"
                   "        if (r) __atomic_store_n(&sf_team_rc, r, __ATOMIC_RELAXED);\n    }\n"
                   "    if ((rc = sf_team_rc)) return rc;\n    if (sf_error) return sf_error;")
        n = end
    return "\n".join(out)


@dataclass(frozen=True)
class BufferInfo:
    """One global buffer: the tensor, its role (``input``/``constant``/``boundary``/``output``)."""
    tensor: str
    role: str
    dtype: str
    shape: tuple[int, ...]


#: Ops that only reinterpret their input's bytes under another shape (row-major order kept).
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def view_aliases(plan, graph: Graph) -> dict[str, str]:
    """Tensor -> the tensor whose buffer it is, for every tensor written by a *view group*: a group
    made only of view ops (:data:`VIEW_OPS`) that writes no graph output. Such a group moves no
    bytes and launches no kernel; its readers read the source buffer under the new shape. (A view
    group that writes a graph output stays a kernel: a copy into the caller's output array.)

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.plans import build_plan
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 6]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "f", "op": "Flatten", "inputs": ["x"], "outputs": ["h"], "attributes": {"axis": 0}},
    ...               {"name": "e", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> view_aliases(build_plan(g, "nvidia-h100", [["f"], ["e"]], strategy="m"), g)
    {'h': 'x'}
    """
    alias: dict[str, str] = {}
    outputs = graph.index.outputs
    for grp in plan.groups:
        nodes = [graph.index.node[v] for v in grp.nodes]
        writes = grp.writes
        if not writes or any(n.op not in VIEW_OPS for n in nodes) or any(t in outputs for t in writes):
            continue
        members = set(grp.nodes)
        for t in writes:
            src = t
            while graph.index.producer.get(src) in members:
                src = graph.index.node[graph.index.producer[src]].inputs[0]
            a, b = graph.tensors[t], graph.tensors[src]
            if a.dtype != b.dtype or numel(a.shape) != numel(b.shape):
                raise InternalError(f"tensor {t!r}: a view of {src!r} with another size or dtype")
            alias[t] = alias.get(src, src)
    return alias


def buffer_table(plan, graph: Graph) -> list[BufferInfo]:
    """Global buffers in index order: graph inputs, constants, then each group's writes (a view
    group's writes share their source's buffer: :func:`view_aliases`).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.plans import build_plan
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "e", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> [(b.tensor, b.role) for b in buffer_table(build_plan(g, "nvidia-h100", [["r"], ["e"]], strategy="m"), g)]
    [('x', 'input'), ('h', 'boundary'), ('y', 'output')]
    """
    alias = view_aliases(plan, graph)
    used: dict[str, None] = {}
    for grp in plan.groups:
        for t in cost.group_reads(graph, grp.nodes):
            used[alias.get(t, t)] = None
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
        for t in grp.writes:
            if t not in alias:
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


def _view_group(graph: Graph, nodes, gi: int, buffers: dict, team: bool = False) -> str:
    """The driver's lines for a view group: no kernel; only the run-time check of its shape
    parameters (not counted: the group moves no data). ``team``: the lines run on every thread
    of the run's team (each reads the same values) and leave it together on a mismatch."""
    ops = sorted({graph.index.node[v].op for v in nodes})
    lines = [f"    /* group {gi}: {len(nodes)} view op(s) ({', '.join(ops)}): no kernel, its output "
             "shares its input's buffer */"]
    checked = []
    for v in nodes:
        for t in graph.index.node[v].inputs[1:]:
            if t and t in buffers and graph.index.producer.get(t) not in set(nodes) and t not in checked:
                checked.append(t)
    for t in checked:
        b = buffers[t]
        ct = ctype(graph, t)
        body = param_check(graph, t, b, f"((const {ct} *)B[{b}])[q]")
        if team:
            body = [ln.replace("return 1;", "r = 1;") for ln in body] + ["if (r) break;"]
        lines.append("    {\n" + "\n".join("        " + ln for ln in body) + "\n    }")
    return "\n".join(lines)


def _lifetimes(plan, graph: Graph, alias: dict) -> dict[str, tuple[int, int]]:
    """(first, last) group index of every tensor written or read by a group; a view's readers
    extend the life of the buffer it aliases."""
    life: dict[str, tuple[int, int]] = {}

    def touch(t, gi):
        a, b = life.get(t, (gi, gi))
        life[t] = (min(a, gi), max(b, gi))
    for gi, grp in enumerate(plan.groups):
        for t in grp.writes:
            touch(alias.get(t, t), gi)
        for t in cost.group_reads(graph, grp.nodes):
            touch(alias.get(t, t), gi)
    return life


def render(plan, graph: Optional[Graph] = None, *, threads: int = 1, counters: bool = False,
           units: int = 1, team: bool = True) -> dict[str, str]:
    """Render a plan as C: ``model.c``, ``model.h`` and ``buffers.json`` (file name -> text).

    The plan is validated first; raises EmitError naming the node (or tensor) for an op (or
    dtype) the emitter does not support. ``threads > 1`` adds OpenMP pragmas on outer loops;
    ``counters`` renders the instrumented variant (serial). ``units > 1`` spreads the kernels
    over that many more translation units ``kernels<j>.c`` (compiled in parallel; not with
    ``counters``); ``model.c`` then keeps the driver, the arena and the weight packing.
    ``team`` (with threads): the kernels run in one parallel region per run
    (:mod:`~solverfuse.emit.team`); False gives every parallel loop a region of its own.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.plans import build_plan
    >>> g = load_graph({"tensors": {"x": {"shape": [256, 4096]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "s", "op": "Softmax", "inputs": ["x"], "outputs": ["y"]}]})
    >>> src = render(build_plan(g, "nvidia-h100", [["s"]], strategy="m"), g, threads=4)["model.c"]
    >>> "one row loop over [256]" in src, "num_threads(4)" in src, "malloc(" in src
    (True, True, False)
    """
    graph = graph or plan.graph
    if graph is None:
        raise EmitError("plan has no embedded graph and none was given")
    validate(plan, graph)  # the emitter relies on convex groups in an executable order
    threads = 1 if counters else max(1, int(threads))
    team = team and threads > 1
    table = buffer_table(plan, graph)
    buffers = {b.tensor: i for i, b in enumerate(table)}
    alias = view_aliases(plan, graph)
    buffers.update({t: buffers[src] for t, src in alias.items() if src in buffers})
    for b in table:
        ctype(graph, b.tensor)
    funcs = []
    driver: list[tuple[str, str, str]] = []  # (how it runs: "all"/"view" in the team or "alone", C lines in the team, alone)
    func_helpers: list[frozenset] = []
    helpers: set[str] = set()
    seen: dict[str, str] = {}  # kernel text with buffers renumbered locally -> function name
    nb = len(table)
    slots: list[Slot] = []    # arena slots: boundary buffers, then every kernel's scratch and packs
    slot_index: list[int] = []  # B/X index of each slot
    private: dict[int, int] = {}  # X index -> bytes of a kernel's thread-private scratch (Kernel.alloc)
    life = _lifetimes(plan, graph, alias)
    for i, b in enumerate(table):
        if b.role == "boundary":
            first, last = life[b.tensor]
            slots.append(Slot(i, numel(b.shape) * DTYPE_SIZES[b.dtype], first, last))
            slot_index.append(i)
    padded = frozenset(t for t, i in buffers.items() if table[i].role == "boundary")
    prepare: list[str] = []
    pack_sources: set[int] = set()
    nslots = nb
    views = [any(t in alias for t in grp.writes) for grp in plan.groups]
    shared_threads = parallel_groups([kernel_work(graph, grp.nodes) for grp in plan.groups], views, threads)
    for gi, grp in enumerate(plan.groups):
        if views[gi]:
            driver.append(("view" if team else "alone", _view_group(graph, grp.nodes, gi, buffers, team=True),
                           _view_group(graph, grp.nodes, gi, buffers)))
            continue
        k = Kernel(graph, grp.nodes, gi, buffers, counters=counters, threads=threads if shared_threads[gi] else 1,
                   lower=code_for_op, first_slot=nslots, padded=padded, writes=grp.writes)
        text = render_looped(k, grp.passes) if grp.passes > 1 or streams_in_one_loop(k) else render_kernel(k)
        helpers |= k.helpers
        for kind, ct, _, n in k.slot_decls:
            if kind == "private":  # placed below, all at one offset
                private[nslots] = max(n, 1) * CSIZES[ct]
            else:
                span = (gi, gi) if kind == "scratch" else (0, len(plan.groups))
                slots.append(Slot(nslots, max(n, 1) * CSIZES[ct], *span))
                slot_index.append(nslots)
            nslots += 1
        prepare += ["    " + ln for ln in k.prepare_lines]
        pack_sources |= {buffers[t] for t in k.packed_sources}
        about = f"/* group {gi}: {len(grp.nodes)} op(s): {', '.join(sorted({graph.index.node[v].op for v in grp.nodes}))} */"
        if counters:
            funcs.append(about + "\n" + text)
            rd = list(dict.fromkeys(buffers[t] for t in k.reads if t not in k.gathered))
            wr = [buffers[t] for t in k.writes]
            arr = lambda xs: "(const int[]){" + (", ".join(map(str, xs)) or "0") + "}"
            # gather j of Kernel.mark_gathered: its data buffer and output elements
            gd = [buffers[t] for t, vs in k.gathered.items() for _ in vs]
            gn = [numel(graph.tensors[graph.index.node[v].outputs[0]].shape) for vs in k.gathered.values() for v in vs]
            call = (f"sf_counted({gi}, k{gi}, X, {arr(rd)}, {len(rd)}, {arr(wr)}, {len(wr)}, {arr(gd)}, "
                    f"(const long long[]){{{', '.join(map(str, gn)) or '0'}}}, {len(gd)})")
        else:
            shared = k.team_text() if team else None
            how = "all" if shared is not None and k.threads > 1 else "alone"
            before = len(funcs)
            name, args = _shared_kernel(shared or text, gi, seen, funcs, about)
            if len(funcs) > before:
                func_helpers.append(frozenset(k.helpers))
            call = f"{name}((void *const[]){{{', '.join(f'X[{a}]' for a in args)}}})" if args else f"{name}(X)"
            if name != f"k{gi}":
                same = f"    /* group {gi}: the same code as {name} */"
                driver.append(("view" if how == "all" else "alone", same, same))
        if counters:
            how = "alone"
        driver.append((how, f"    if (sf_sync((r = {call}) || SF_ERROR())) break;",
                       f"    if ((rc = {call})) return rc;\n    if (sf_error) return sf_error;"))
    if private:  # every kernel's thread-private scratch in one region, live through the run
        slots.append(Slot(-1, max(private.values()), 0, len(plan.groups)))
    arena_bytes, offsets = layout(slots)
    offset, size = [-1] * nslots, [0] * nslots
    for i, off, sl in zip(slot_index, offsets, slots):
        offset[i], size[i] = off, slot_bytes(sl.nbytes)
    for i, n in private.items():
        offset[i], size[i] = offsets[-1], slot_bytes(n)
    consts = [
        "const long long sf_numel[SF_NUM_BUFFERS + 1] = {" + ", ".join([str(numel(b.shape)) for b in table] + ["0"]) + "};",
        "const long long sf_isize[SF_NUM_BUFFERS + 1] = {" + ", ".join([str(DTYPE_SIZES[b.dtype]) for b in table] + ["0"]) + "};",
        "const int sf_is_input[SF_NUM_BUFFERS + 1] = {" + ", ".join([str(int(b.role in ("input", "constant"))) for b in table] + ["0"]) + "};",
    ]
    arena = ARENA.format(nslots=nslots, nbytes=max(arena_bytes, 64), offsets=", ".join(map(str, offset + [-1])),
                         sizes=", ".join(map(str, size + [0])),
                         sources=", ".join(map(str, sorted(pack_sources) + [-1])), npack=len(pack_sources),
                         prepare="\n".join(prepare) or "    (void)X;")
    run = ("int sf_run(void *const *B)\n{\n    int rc = 0;\n    void *X[SF_NUM_SLOTS + 1];\n"
           "    if ((rc = sf_enter(B, X))) return rc;\n    sf_error = 0;\n" + _driver(driver, threads) + "\n    return rc;\n}\n")
    sync = [SYNC, TEAM_RC] if team else []
    no_counters = "" if counters else "int sf_counters(long long *out)\n{\n    (void)out;\n    return -1;\n}\n"
    files: dict[str, str] = {}
    units = 1 if counters else max(1, min(int(units), len(funcs)))
    if units == 1:
        files["model.c"] = "\n".join([PRELUDE, "static int sf_error;"] + sync + consts + ([COUNTER_PRELUDE] if counters else [])
                                     + [helper_text(h) for h in sorted(helpers)] + [arena] + funcs
                                     + [run, TIMING, no_counters])
    else:
        bins: list[list[int]] = [[] for _ in range(units)]
        load = [0] * units
        for i in sorted(range(len(funcs)), key=lambda i: -len(funcs[i])):  # largest first, to the lightest unit
            j = load.index(min(load))
            bins[j].append(i)
            load[j] += len(funcs[i])
        protos = []
        for j, members in enumerate(bins):
            members.sort()
            texts = [re.sub(r"SF_NOINLINE static int (k\d+)\(", r"SF_KERNEL int \1(", funcs[i], count=1) for i in members]
            protos += [re.search(r"SF_KERNEL int (k\d+)\(", t).group(1) for t in texts]
            used = sorted(set().union(*(func_helpers[i] for i in members)))
            files[f"kernels{j}.c"] = "\n".join([PRELUDE, "extern int sf_error;"] + sync[:1] + [helper_text(h) for h in used] + texts)
        main_helpers = sorted(h for h in helpers if h in ("sf_conv_pack", "sf_pack_b"))  # the packing
        files["model.c"] = "\n".join([PRELUDE, "SF_HIDDEN int sf_error;"] + sync + consts + [helper_text(h) for h in main_helpers]
                                     + [arena] + [f"SF_KERNEL int {f}(void *const *B);" for f in sorted(protos)]
                                     + [run, TIMING, no_counters])
    names = [{"index": i, "tensor": b.tensor, "role": b.role, "dtype": b.dtype, "shape": list(b.shape)}
             for i, b in enumerate(table)]
    return {**files, "model.h": header(nb, len(plan.groups), counters),
            "buffers.json": json.dumps({"buffers": names, "groups": [g.name for g in plan.groups],
                                        "views": {t: buffers[t] for t in alias if t in buffers}},
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
