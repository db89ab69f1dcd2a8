"""The C renderer: a plan becomes one C function per group plus a driver that runs them in order.

Only the tensors the cost model says cross a group boundary (``cost.group_reads`` /
``cost.group_writes``) live in global buffers, passed in by the caller as ``void *B[]`` (buffer
``i`` is row ``i`` of :func:`buffer_table`). Inside a group every other tensor is a value
computed *on demand at an index* (:meth:`Kernel.value`): an elementwise/broadcast chain becomes
scalar temporaries in one loop (common subexpressions shared), layout ops are index maps, and an
anchor (MatMul/Gemm/Conv) accumulates a tile of its output (a row; a Conv's output plane; a
register-blocked block of channels/rows x positions) in a stack array that the fused epilogue
reads. The per-op C lives in :mod:`solverfuse.emit.kernels` (``code_for_op``, a table op -> C
expression) and :mod:`solverfuse.emit.anchors` (ops that read
materialised inputs: anchors and their tiles, windows, Gather); how a group's loops are arranged
is decided in :mod:`solverfuse.emit.schedule`. A kernel takes one of three shapes:

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

import contextlib
import json
import math
import re
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from .. import cost
from ..errors import EmitError
from ..graph import Graph
from ..ops import DTYPE_SIZES, numel
from ..plans import validate

#: C type of each supported dtype (bool is one byte, as in NumPy).
CTYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t",
          "int16": "int16_t", "int8": "int8_t", "uint8": "uint8_t", "uint16": "uint16_t",
          "uint32": "uint32_t", "uint64": "uint64_t", "bool": "uint8_t"}
#: Return codes of the generated functions.
RC_MESSAGES = {1: "a shape/axes parameter tensor differs from the value the program was built for",
               2: "out of memory", 3: "an index tensor holds an out-of-range index"}


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
        for t in grp.writes:  # as the plan states (a /2 plan's recomputed ops write less)
            add(t, "output" if t in outputs else "boundary")
    return out


def ctype(graph: Graph, tensor: str) -> str:
    """C type of a tensor; EmitError for a dtype the emitter does not support.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"m": {"shape": [2], "dtype": "bool"}}, "inputs": ["m"],
    ...     "outputs": ["y"], "nodes": [{"name": "n", "op": "Not", "inputs": ["m"], "outputs": ["y"]}]})
    >>> ctype(g, "m"), ctype(g, "y")
    ('uint8_t', 'uint8_t')
    """
    dtype = graph.tensors[tensor].dtype
    if dtype not in CTYPES:
        raise EmitError(f"tensor {tensor!r}: dtype {dtype} is not supported by the C emitter")
    return CTYPES[dtype]


def lit(value, ct: str) -> str:
    """A C literal of type ``ct``.

    >>> lit(0.5, "float"), lit(float("-inf"), "float"), lit(3, "int64_t"), lit(-2**63, "int64_t")
    ('0.5f', '(-INFINITY)', '3', '(-9223372036854775807LL - 1)')
    """
    if ct in ("float", "double"):
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        return repr(v) + ("f" if ct == "float" else "")
    v = int(value)
    if v == -2 ** 63:
        return "(-9223372036854775807LL - 1)"
    if v >= 2 ** 63:
        return f"{v}ULL"
    return str(v) if -2 ** 31 < v < 2 ** 31 else f"{v}LL"


def _simple(expr: str) -> bool:
    return expr.isidentifier() or expr.lstrip("-").isdigit()


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides.

    >>> strides((2, 3, 4))
    [12, 4, 1]
    """
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def linear(shape: Sequence[int], idx: Sequence[str]) -> str:
    """C expression of the row-major offset of ``idx`` in ``shape`` (size-1 dims skipped).

    >>> linear((4, 1, 8), ("i0", "0", "j"))
    'i0*8 + j'
    """
    terms = []
    for d, s, i in zip(shape, strides(shape), idx):
        if d == 1 or i == "0":
            continue
        i = i if _simple(i) else f"({i})"
        terms.append(i if s == 1 else f"{i}*{s}")
    return " + ".join(terms) or "0"


def bmap(idx: Sequence[str], out_shape: Sequence[int], in_shape: Sequence[int]) -> tuple[str, ...]:
    """Index of a broadcast input (right-aligned; size-1 dims read index 0).

    >>> bmap(("i", "j", "k"), (2, 3, 4), (3, 1))
    ('j', '0')
    """
    r = len(out_shape) - len(in_shape)
    return tuple("0" if d == 1 else idx[r + j] for j, d in enumerate(in_shape))


def attr_str(v, default: str) -> str:
    """A string attribute (ONNX may give bytes)."""
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


class UntiledRead(Exception):
    """An anchor's output was read at an index outside its current tile (e.g. through a channel
    shuffle): the schedule materialises that anchor instead of recomputing it per element."""

    def __init__(self, node: str):
        super().__init__(node)
        self.node = node


class Kernel:
    """The C function of one group: buffers, loops, scalar temporaries with CSE, scratch."""

    def __init__(self, graph: Graph, nodes: Sequence[str], gid: int, buffers: dict[str, int], *,
                 counters: bool, threads: int, writes: Optional[Sequence[str]] = None):
        self.graph, self.gid, self.buffers = graph, gid, buffers
        self.nodes = sorted(nodes, key=graph.index.position.__getitem__)
        self.members = set(nodes)
        self.reads = cost.group_reads(graph, nodes)
        self.writes = cost.group_writes(graph, nodes) if writes is None else list(writes)
        self.counters, self.threads = counters, threads
        self.lines: list[str] = []
        self.depth = 1
        self.cache: dict = {}
        self.n = 0
        self.used: dict[int, str] = {}           # buffer index -> "r"/"w"
        self.scratch: dict[str, str] = {}         # tensor -> C array
        self.scratch_decl: list[tuple[str, str, int]] = []
        self.stats: dict[str, dict[str, str]] = {}  # node -> statistic -> C array
        self.materialised: set[str] = set()       # nodes computed by a pass of their own
        self.tiles: dict[str, tuple] = {}         # anchor tensor -> (row index prefix, tile array)
        self.checked: list[str] = []              # parameter tensors checked against compiled values
        self.helpers: set[str] = set()            # shared helper functions the kernel calls

    # ---- text
    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        """``header {`` ... ``}``; temporaries declared inside are forgotten after it."""
        self.line(header + " {")
        saved = dict(self.cache)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.cache = saved
            self.line("}")

    @contextlib.contextmanager
    def loops(self, shape: Sequence[int], parallel: bool = False,
              simd: Optional[str] = None) -> Iterator[tuple[str, ...]]:
        """Nested loops over ``shape`` (size-1 dims get index ``0``); yields the index tuple.
        ``simd`` (e.g. ``"reduction(+:s)"``) marks the innermost loop ``#pragma omp simd``: a
        reduction the compiler may then reorder into vector lanes (it may not without it)."""
        idx, dims = [], []
        for d in shape:
            if d == 1:
                idx.append("0")
            else:
                v = self.fresh("i")
                idx.append(v)
                dims.append((v, d))
        if parallel and self.threads > 1 and dims:
            self.line(f"#pragma omp parallel for collapse({min(len(dims), 3)}) schedule(static) "
                      f"num_threads({self.threads})")
        mark = None
        with contextlib.ExitStack() as stack:
            for n, (v, d) in enumerate(dims):
                if simd is not None and n == len(dims) - 1:
                    mark = len(self.lines)
                    self.line(f"#pragma omp simd {simd}")
                stack.enter_context(self.block(f"for (long {v} = 0; {v} < {d}; {v}++)"))
            yield tuple(idx)
        if mark is not None and any("#pragma omp" in ln for ln in self.lines[mark + 1:]):
            del self.lines[mark]  # no OpenMP construct may be nested in a simd loop

    def tmp(self, ct: str, expr: str, prefix: str = "v") -> str:
        if _simple(expr):
            return expr
        name = self.fresh(prefix)
        self.line(f"const {ct} {name} = {expr};")
        return name

    def index(self, expr: str) -> str:
        """An index expression as a (shared) temporary when it is not already simple."""
        if _simple(expr):
            return expr
        key = ("idx", expr)
        if key not in self.cache:
            self.cache[key] = self.tmp("long", expr, "t")
        return self.cache[key]

    # ---- global memory
    def ptr(self, tensor: str, mode: str) -> str:
        b = self.buffers[tensor]
        self.used[b] = mode
        return f"b{b}"

    def load(self, tensor: str, idx: Sequence[str]) -> str:
        p = self.ptr(tensor, "r")
        off = linear(self.graph.tensors[tensor].shape, idx)
        return f"SFR({p}, {self.buffers[tensor]}, {off})" if self.counters else f"{p}[{off}]"

    def store(self, tensor: str, idx: Sequence[str], value: str) -> None:
        p = self.ptr(tensor, "w")
        off = linear(self.graph.tensors[tensor].shape, idx)
        target = f"SFW({p}, {self.buffers[tensor]}, {off})" if self.counters else f"{p}[{off}]"
        self.line(f"{target} = {value};")

    def alloc(self, ct: str, n: int, why: str) -> str:
        name = self.fresh("s")
        self.scratch_decl.append((ct, name, n))
        self.line(f"/* {name}: kernel-local scratch, {why} */")
        return name

    # ---- values
    def ct(self, tensor: str) -> str:
        return ctype(self.graph, tensor)

    def shape(self, tensor: str) -> tuple[int, ...]:
        return tuple(self.graph.tensors[tensor].shape)

    def value(self, tensor: str, idx: Sequence[str]) -> str:
        """C expression (a temporary) of ``tensor`` at ``idx``, computing it if it is in-group."""
        idx = tuple("0" if d == 1 else self.index(i) for i, d in zip(idx, self.shape(tensor)))
        key = ("v", tensor, idx)
        if key in self.cache:
            return self.cache[key]
        tile = self.tiles.get(tensor)
        if tile is not None:
            if idx[:-tile[2]] == tile[0]:
                return f"{tile[1]}[{linear(self.shape(tensor)[-tile[2]:], idx[-tile[2]:])}]"
            producer = self.graph.index.producer.get(tensor)
            if producer in self.members and tensor not in self.scratch \
                    and self.graph.index.node[producer].op in ("Conv", "MatMul", "Gemm"):
                raise UntiledRead(producer)  # else it would be recomputed per element
        ct = self.ct(tensor)
        producer = self.graph.index.producer.get(tensor)
        if tensor in self.scratch:
            expr = f"{self.scratch[tensor]}[{linear(self.shape(tensor), idx)}]"
        elif producer is None or producer not in self.members:
            expr = self.load(tensor, idx)
        else:
            node = self.graph.index.node[producer]
            from .kernels import code_for_op  # (kernels builds on this module)
            expr = code_for_op(self, node, node.outputs.index(tensor), idx)
        out = self.tmp(ct, expr)
        self.cache[key] = out
        return out

    def param_values(self, tensor: str):
        """The compiled-in value of a shape/axes parameter input; the kernel checks it at run time
        (so a program is never run with parameters it was not built for)."""
        if tensor and tensor not in self.checked and tensor in self.buffers \
                and self.graph.index.producer.get(tensor) not in self.members:
            self.checked.append(tensor)
        return self.graph.constant_value(tensor)


def _assemble(k: Kernel) -> str:
    g = k.graph
    head = [f"SF_NOINLINE static int k{k.gid}(void *const *B)", "{", "    (void)B;"]
    for b, mode in sorted(k.used.items()):
        t = next(t for t, i in k.buffers.items() if i == b)
        ct = ctype(g, t)
        if mode == "r":
            head.append(f"    const {ct} *restrict b{b} = (const {ct} *)B[{b}];")
        else:
            head.append(f"    {ct} *restrict b{b} = ({ct} *)B[{b}];")
    for t in k.checked:
        b = k.buffers[t]
        value = g.constant_value(t)
        if b not in k.used:
            ct = ctype(g, t)
            head.append(f"    const {ct} *restrict b{b} = (const {ct} *)B[{b}];")
            k.used[b] = "r"
        flat = value.reshape(-1)
        ct = ctype(g, t)
        head.append(f"    static const {ct} p{b}[{max(len(flat), 1)}] = "
                    f"{{{', '.join(lit(x, ct) for x in flat.tolist()) or '0'}}};")
        ld = f"SFR(b{b}, {b}, q)" if k.counters else f"b{b}[q]"
        head.append(f"    for (long q = 0; q < {len(flat)}; q++) if ({ld} != p{b}[q]) return 1;")
    for ct, name, n in k.scratch_decl:
        head.append(f"    {ct} *{name} = ({ct} *)malloc(sizeof({ct}) * {max(n, 1)});")
    tail = []
    if k.scratch_decl:
        names = [name for _, name, _ in k.scratch_decl]
        head.append(f"    if ({' || '.join('!' + n for n in names)}) {{ "
                    + " ".join(f"free({n});" for n in names) + " return 2; }")
        tail = [f"    free({n});" for n in names]
    return "\n".join(head + k.lines + tail + ["    return 0;", "}"])


PRELUDE = r"""#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tgmath.h>
#include "model.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) \
    && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
/* glibc's libmvec has vector variants of these (linked through -lm): declaring them lets -O3
   vectorise the loops that call them instead of making one scalar call per element. */
#define SF_SIMD __attribute__((__simd__("notinbranch")))
SF_SIMD float expf(float); SF_SIMD float logf(float); SF_SIMD float erff(float);
SF_SIMD float tanhf(float); SF_SIMD float sinf(float); SF_SIMD float cosf(float);
SF_SIMD float powf(float, float);
#endif

/* A kernel inlined into sf_run (one call site) was measured up to 10x slower (GCC 12). */
#if defined(__GNUC__)
#define SF_NOINLINE __attribute__((noinline))
#else
#define SF_NOINLINE
#endif

/* Accumulation inside an anchor's tile: a fused multiply-add where the hardware has one (the
   order of a dot product's roundings is the implementation's choice; between ops it is not). */
#if defined(__FMA__)
#define SF_FMA(a, b, c) fmaf(a, b, c)
#else
#define SF_FMA(a, b, c) ((a) * (b) + (c))
#endif

static int sf_error;
static inline long sf_fdiv(long a, long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static inline long sf_cdiv(long a, long b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static inline long sf_min(long a, long b) { return a < b ? a : b; }
static inline long sf_max(long a, long b) { return a > b ? a : b; }
"""

COUNTER_PRELUDE = r"""
/* Instrumented build: every global element touched is marked once per kernel. */
static unsigned char *sf_rmap[SF_NUM_BUFFERS + 1], *sf_wmap[SF_NUM_BUFFERS + 1];
#define SFR(p, i, o) (sf_rmap[i][o] = 1, (p)[o])
#define SFW(p, i, o) (*(sf_wmap[i][o] = 1, &(p)[o]))
static long long sf_cnt[2 * SF_NUM_GROUPS + 1];

static int sf_counted(int g, int (*kern)(void *const *), void *const *B,
                      const int *rd, int nrd, const int *wr, int nwr)
{
    int rc = 0;
    for (int i = 0; i < nrd; i++) sf_rmap[rd[i]] = calloc(sf_numel[rd[i]] + 1, 1);
    for (int i = 0; i < nwr; i++) sf_wmap[wr[i]] = calloc(sf_numel[wr[i]] + 1, 1);
    for (int i = 0; i < nrd; i++) if (!sf_rmap[rd[i]]) rc = 2;
    for (int i = 0; i < nwr; i++) if (!sf_wmap[wr[i]]) rc = 2;
    if (!rc) rc = kern(B);
    sf_cnt[2 * g] = sf_cnt[2 * g + 1] = 0;
    for (int i = 0; i < nrd; i++) {
        for (long long e = 0; sf_rmap[rd[i]] && e < sf_numel[rd[i]]; e++)
            sf_cnt[2 * g] += sf_rmap[rd[i]][e] * sf_isize[rd[i]];
        free(sf_rmap[rd[i]]); sf_rmap[rd[i]] = 0;
    }
    for (int i = 0; i < nwr; i++) {
        for (long long e = 0; sf_wmap[wr[i]] && e < sf_numel[wr[i]]; e++)
            sf_cnt[2 * g + 1] += sf_wmap[wr[i]][e] * sf_isize[wr[i]];
        free(sf_wmap[wr[i]]); sf_wmap[wr[i]] = 0;
    }
    return rc;
}

int sf_counters(long long *out)
{
    for (int i = 0; i < 2 * SF_NUM_GROUPS; i++) out[i] = sf_cnt[i];
    return 0;
}
"""

TIMING = r"""
int sf_time(void *const *B, int repeats, double *seconds)
{
    for (int r = 0; r < repeats; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = sf_run(B);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (rc) return rc;
        seconds[r] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    return 0;
}
"""


def _header(nbuf: int, ngroups: int, counters: bool) -> str:
    return f"""/* Generated by solverfuse: fused kernels of one plan. Buffer i is row i of buffers.json. */
#ifndef SOLVERFUSE_MODEL_H
#define SOLVERFUSE_MODEL_H
#define SF_NUM_BUFFERS {nbuf}
#define SF_NUM_GROUPS {ngroups}
#define SF_COUNTERS {int(counters)}
extern const long long sf_numel[SF_NUM_BUFFERS + 1];
extern const long long sf_isize[SF_NUM_BUFFERS + 1];
extern const int sf_is_input[SF_NUM_BUFFERS + 1];
/* Run every kernel in plan order on the global buffers B[0..SF_NUM_BUFFERS-1]; 0 on success. */
int sf_run(void *const *B);
/* Run `repeats` times; seconds[r] is the wall time of run r measured inside C. */
int sf_time(void *const *B, int repeats, double *seconds);
/* Bytes read and written per group in the last run (instrumented builds only): 2 per group. */
int sf_counters(long long *out);
#endif
"""


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
    from .schedule import render_kernel
    threads = 1 if counters else max(1, int(threads))
    table = buffer_table(plan, graph)
    buffers = {b.tensor: i for i, b in enumerate(table)}
    for b in table:
        ctype(graph, b.tensor)
    funcs, driver = [], []
    helpers: set[str] = set()
    seen: dict[str, str] = {}  # kernel text with buffers renumbered locally -> function name
    for gi, grp in enumerate(plan.groups):
        if grp.passes > 1:
            raise EmitError(f"group {grp.name!r} is a looped kernel of {grp.passes} passes; the C emitter "
                            "does not emit looped kernels yet")
        k = Kernel(graph, grp.nodes, gi, buffers, counters=counters, threads=threads, writes=grp.writes)
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
    from .anchors import _helper_text
    source = "\n".join([PRELUDE] + consts + ([COUNTER_PRELUDE] if counters else [])
                       + [_helper_text(h) for h in sorted(helpers)] + funcs
                       + [run, TIMING, no_counters])
    names = [{"index": i, "tensor": b.tensor, "role": b.role, "dtype": b.dtype, "shape": list(b.shape)}
             for i, b in enumerate(table)]
    return {"model.c": source, "model.h": _header(nb, len(plan.groups), counters),
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
    from pathlib import Path
    from ..files import write_atomic
    out = Path(outdir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            write_atomic(out / name, text)
    except OSError as e:
        raise EmitError(f"{out}: cannot write ({e.strerror or e})") from None
    return [str(out / name) for name in files]
