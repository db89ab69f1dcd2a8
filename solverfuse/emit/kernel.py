"""The kernel builder: the C function of one group being written -- its lines and loop nesting,
scalar temporaries with common-subexpression sharing, global loads/stores, kernel-local scratch,
anchor tiles -- and :meth:`Kernel.assemble`, which turns it into the function text.

It does not know any op: :meth:`Kernel.value` asks the ``lower`` function it was built with
(:func:`solverfuse.emit.lowering.code_for_op`) for an in-group producer's element, so op
lowerings build on this module and never the other way round. Everything a lowering or the
schedule changes goes through a method here (``line``/``open``/``close``/``block``/``loops``,
``bind``/``forget``, ``set_tile``/``drop_tile``, ``bind_scratch``, ``use_helper``, ``reset``).

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
>>> k = Kernel(g, ["r"], 0, {"x": 0, "y": 1}, counters=False, threads=1,
...            lower=lambda k, node, pos, idx: f"fmaxf({k.value(node.inputs[0], idx)}, 0)")
>>> with k.loops([4]) as (i,):
...     k.store("y", (i,), k.value("y", (i,)))
>>> [ln.strip() for ln in k.lines][1:4]
['const float v2 = b0[i1];', 'const float v3 = fmaxf(v2, 0);', 'b1[i1] = v3;']
>>> k.assemble().splitlines()[3].strip()
'const float *restrict b0 = (const float *)B[0];'
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional, Sequence

from .. import cost
from ..errors import InternalError
from ..graph import Graph
from ..rules import gather_data_reader
from .cexpr import ctype, hoist_point, is_simple, linear, param_check
from .sharing import parallel_dims
from .team import team_body

#: ``lower(kernel, node, output position, index) -> C expression`` of one output element.
Lowering = Callable[..., str]


class UntiledRead(Exception):
    """An anchor's output was read at an index outside its current tile (e.g. through a channel
    shuffle): the schedule materialises that anchor instead of recomputing it per element."""

    def __init__(self, node: str):
        super().__init__(node)
        self.node = node


#: Ops whose output an untiled read must not recompute per element (an inner product each).
_RECOMPUTE_EXPENSIVE = ("Conv", "MatMul", "Gemm")
#: The OpenMP schedule of a loop of whole tiles (:meth:`Kernel.loops`' ``dynamic``): guided, each
#: grab half of what is left over the threads, down to one tile. Taken one at a time (dynamic), the
#: threads alternated tiles: neighbouring tiles' shared output and input lines moved between the
#: cores and each thread's streams restarted at every tile (SqueezeNet's stem, 37 bands of 3 rows
#: of 111: 0.38-0.40 ms, guided 0.33, static 0.32-0.34). Whole models at 2 threads, paired rounds
#: (Zen 4, 15-40 rounds; guided against dynamic): ShuffleNet 0.85-0.93 of the time, DenseNet-121
#: 0.92-0.96, SqueezeNet 0.99, Inception v1 0.98, ResNet-50 and AlexNet 1.00, VGG-19 0.99-1.02 (A-A
#: controls 0.96-1.02). A thread that starts late still gets its share: the grabs shrink as the
#: loop runs out.
TILE_SCHEDULE = "guided"


def gathered_reads(graph: Graph, nodes: Sequence[str]) -> dict[str, tuple]:
    """Tensors a group reads only as the data operand of gathers (``rules.gather_data_reader``:
    Gather, GatherElements, GatherND) -> those gather nodes: the cost model charges them the bytes
    gathered (capped at their size), not their size, and the counters count them so.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"e": {"shape": [9, 4]}, "i": {"shape": [3], "dtype": "int64"}},
    ...     "inputs": ["e", "i"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "g", "op": "Gather", "inputs": ["e", "i"], "outputs": ["y"]},
    ...               {"name": "h", "op": "Gather", "inputs": ["e", "i"], "outputs": ["z"]}]})
    >>> gathered_reads(g, ["g", "h"])
    {'e': ('g', 'h')}
    """
    members = set(nodes)
    out = {}
    for t in cost.group_reads(graph, nodes):
        users = [c for c in dict.fromkeys(graph.index.consumers.get(t, [])) if c in members]
        if users and all(gather_data_reader(graph, c, t) for c in users):
            out[t] = tuple(users)
    return out


class Kernel:
    """The C function of one group: buffers, loops, scalar temporaries with CSE, scratch.

    ``stats`` (row statistics of Softmax/LayerNorm, filled by :mod:`~solverfuse.emit.reductions`)
    and ``materialised`` (nodes given a pass of their own, decided by
    :mod:`~solverfuse.emit.schedule`) are slots each owned by that one module."""

    def __init__(self, graph: Graph, nodes: Sequence[str], gid: int, buffers: dict[str, int], *,
                 counters: bool, threads: int, lower: Lowering, first_slot: int = 0,
                 padded: frozenset = frozenset(), writes: Optional[Sequence[str]] = None):
        self.graph, self.gid, self.buffers = graph, gid, buffers
        self.nodes = sorted(nodes, key=graph.index.position.__getitem__)
        self.members = set(nodes)
        self.reads = cost.group_reads(graph, nodes)
        # as the plan states: a /2 plan's recomputed ops write less than cost.group_writes
        self.writes = cost.group_writes(graph, nodes) if writes is None else list(writes)
        self.counters = counters
        # the caller decides which kernels share the threads (sharing.parallel_groups: too little
        # work runs serial, a small kernel between parallel ones stays in their region)
        self.threads = max(1, threads)
        self.gathered = gathered_reads(graph, nodes)
        self.lower = lower
        self.first_slot = first_slot   # arena slots of this kernel: B[first_slot], B[first_slot + 1], ...
        self.padded = padded           # global tensors followed by readable slack (arena.SLACK bytes)
        self.reset()

    def reset(self) -> None:
        """Forget everything written so far (the schedule renders the group again)."""
        self.lines: list[str] = []
        self.invariants: list[tuple[str, str]] = []  # (line, declaration after it): see invariant
        self.invariant_names: dict[tuple, str] = {}   # (array, index, line) -> its declared name
        self.depth = 1
        self.cache: dict = {}
        self.saved: list[dict] = []               # caches of the blocks opened with open()
        self.n = 0
        self.used: dict[int, str] = {}           # buffer index -> "r"/"w"
        self.scratch: dict[str, str] = {}         # tensor -> C array
        self.redirect: dict = {}                  # tensor -> (block array, its index, the index stored there)
        self.redirected: set = set()              # the tensors stored through redirect
        self.slot_decls: list[tuple[str, str, str, int]] = []  # (kind, C type, name, elements)
        self.prepare_lines: list[str] = []        # C run once per set of constants (packs)
        self.packed_sources: list[str] = []       # the constants those packs read
        self.stats: dict[str, dict[str, str]] = {}  # node -> statistic -> C array
        self.materialised: set[str] = set()       # nodes computed by a pass of their own
        self.tiles: dict[str, tuple] = {}         # anchor tensor -> (row index prefix, tile array, rank)
        self.checked: list[str] = []              # parameter tensors checked against compiled values
        self.helpers: set[str] = set()            # shared helper functions the kernel calls
        self.hoisted: dict[str, str] = {}         # one-element tensor -> its value, loaded at entry
        self.splits: dict[str, tuple] = {}        # index of a loop run as two -> their indices (schedule)
        self.carry_rows = False                   # a plain serial row loop: a row may compute the next
                                                  # row's statistics (rows sets it, norm_stats reads it)

    # ---- text
    def fresh(self, prefix: str) -> str:
        """A new C name ``prefix<n>``."""
        self.n += 1
        return f"{prefix}{self.n}"

    def line(self, text: str) -> None:
        """One line at the current nesting depth."""
        self.lines.append("    " * self.depth + text)

    def pragma(self, text: str) -> None:
        """A preprocessor line (column 0)."""
        self.lines.append(text)

    def open(self, header: str) -> None:
        """``header {``; the temporaries declared until the matching :meth:`close` are forgotten then."""
        self.line(header + " {")
        self.saved.append(dict(self.cache))
        self.depth += 1

    def close(self) -> None:
        """``}`` of the innermost :meth:`open`."""
        self.depth -= 1
        self.cache = self.saved.pop()
        self.line("}")

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        """``header {`` ... ``}``; temporaries declared inside are forgotten after it."""
        self.open(header)
        try:
            yield
        finally:
            self.close()

    @contextlib.contextmanager
    def loops(self, shape: Sequence[int], parallel: bool = False,
              simd: Optional[str] = None, dynamic: bool = False) -> Iterator[tuple[str, ...]]:
        """Nested loops over ``shape`` (size-1 dims get index ``0``); yields the index tuple.
        ``simd`` (e.g. ``"reduction(+:s)"``) marks the innermost loop ``#pragma omp simd``: a
        reduction the compiler may then reorder into vector lanes (it may not without it).
        ``dynamic`` (loops whose every iteration is a whole tile): the threads take iterations
        as they go (``TILE_SCHEDULE``), so a thread that starts late (its core busy with another
        job) does not hold the others at the end of the loop with a fixed half of the work."""
        idx, dims = [], []
        for d in shape:
            if d == 1:
                idx.append("0")
            else:
                v = self.fresh("i")
                idx.append(v)
                dims.append((v, d))
        outer = parallel_dims([d for _, d in dims], self.threads, dynamic) if parallel and self.threads > 1 else 0
        mark = None
        with contextlib.ExitStack() as stack:
            if outer and dynamic:
                self.line("#pragma omp parallel for " + (f"collapse({outer}) " if outer > 1 else "")
                          + f"schedule({TILE_SCHEDULE}) num_threads({self.threads})")
                for v, d in dims:
                    stack.enter_context(self.block(f"for (long {v} = 0; {v} < {d}; {v}++)"))
            elif outer and len(dims) == 1:
                # one dim: threads take contiguous chunks; the loop inside a chunk stays a plain
                # unit-stride loop with a hoisted bound, which the compiler vectorises
                (v, d), = dims
                step = -(-d // self.threads)
                step = -(-step // 64) * 64 if d > 64 * self.threads else step  # whole cache lines
                c, hi = self.fresh("c"), self.fresh("hi")
                self.line(f"#pragma omp parallel for schedule(static) num_threads({self.threads})")
                stack.enter_context(self.block(f"for (long {c} = 0; {c} < {d}; {c} += {step})"))
                self.line(f"const long {hi} = sf_min({c} + {step}, {d});")
                if simd is not None:
                    mark = len(self.lines)
                    self.line(f"#pragma omp simd {simd}")
                stack.enter_context(self.block(f"for (long {v} = {c}; {v} < {hi}; {v}++)"))
            else:
                if outer:
                    # the leading dims only, never the innermost: it stays a simple vector loop
                    self.line("#pragma omp parallel for " + (f"collapse({outer}) " if outer > 1 else "")
                              + f"schedule(static) num_threads({self.threads})")
                for n, (v, d) in enumerate(dims):
                    if simd is not None and n == len(dims) - 1:
                        mark = len(self.lines)
                        self.line(f"#pragma omp simd {simd}")
                    stack.enter_context(self.block(f"for (long {v} = 0; {v} < {d}; {v}++)"))
            yield tuple(idx)
        if mark is not None and any("#pragma omp" in ln for ln in self.lines[mark + 1:]):
            del self.lines[mark]  # no OpenMP construct may be nested in a simd loop

    def tmp(self, ct: str, expr: str, prefix: str = "v", may_be_unused: bool = False) -> str:
        """``expr`` as a const temporary of type ``ct`` (itself when already simple);
        ``may_be_unused`` marks it ``SF_UNUSED`` (strict builds turn an unused one into an error)."""
        if is_simple(expr):
            return expr
        name = self.fresh(prefix)
        self.line(f"{'SF_UNUSED ' if may_be_unused else ''}const {ct} {name} = {expr};")
        return name

    def invariant(self, ct: str, array: str, index: str) -> str:
        """``array[index]``, an index naming enclosing loop variables only, as a const temporary
        declared right after the innermost of those variables is defined (after a collapsed nest
        of loops, never inside it), not at the current line: a row statistic read in a loop over
        the row is loaded once per row. GCC left such loads in the loop and did not vectorise it
        (gpt2's Gemm + Add + LayerNorm output pass ran scalar).

        >>> from solverfuse import zoo
        >>> from solverfuse.emit.lowering import whole_graph_kernel
        >>> k = whole_graph_kernel(zoo.softmax_rows(2, 8))
        >>> with k.loops((4, 8)) as (i, j):
        ...     k.line(f"y[{i}*8 + {j}] = x[{i}*8 + {j}] - {k.invariant('float', 'm', i)};")
        >>> for ln in k._body(): print(ln)
            for (long i1 = 0; i1 < 4; i1++) {
                SF_UNUSED const float v3 = m[i1];
                for (long i2 = 0; i2 < 8; i2++) {
                    y[i1*8 + i2] = x[i1*8 + i2] - v3;
                }
            }
        """
        at = hoist_point(self.lines, index)
        if at is None:
            return self.tmp(ct, f"{array}[{index}]", may_be_unused=True)
        line, indent = at
        key = (array, index, line)
        if key in self.invariant_names:  # read again in the same row (a value computed twice)
            return self.invariant_names[key]
        name = self.invariant_names[key] = self.fresh("v")
        # inserted when the function is assembled, after that line (unique: it defines a fresh
        # name), not now: builders keep line indices (marks) into self.lines while they emit.
        # SF_UNUSED: a caller may take both of a row's statistics and use one (VarMean's outputs)
        self.invariants.append((line, f"{indent}SF_UNUSED const {ct} {name} = {array}[{index}];"))
        return name

    def index(self, expr: str) -> str:
        """An index expression as a (shared) temporary when it is not already simple."""
        if is_simple(expr):
            return expr
        key = ("idx", expr)
        if key not in self.cache:
            # SF_UNUSED: a reshape's source index may name a dim a broadcast read then drops
            name = self.fresh("t")
            self.line(f"const long SF_UNUSED {name} = {expr};")
            self.cache[key] = name
        return self.cache[key]

    # ---- global memory
    def ptr(self, tensor: str, mode: str) -> str:
        """The kernel's pointer to a global buffer, marked read (``"r"``) or written (``"w"``)."""
        b = self.buffers[tensor]
        self.used[b] = mode
        return f"b{b}"

    def load(self, tensor: str, idx: Sequence[str]) -> str:
        """C expression of a global element (counted in instrumented builds)."""
        p = self.ptr(tensor, "r")
        shape = self.graph.tensors[tensor].shape
        if not self.counters and tensor not in self.gathered and all(d == 1 for d in shape):
            # a scalar (a constant factor, an epsilon) loaded once at entry: GCC does not hoist the
            # load out of a loop that stores through another pointer (restrict on block-scope
            # pointers is not trusted), and then leaves the loop scalar -- measured 2x on
            # [Mul by a scalar, Softmax] over 4,912-float rows. The instrumented build keeps the
            # load in place, so a looped kernel's counters still mark it once per pass.
            if tensor not in self.hoisted:
                self.hoisted[tensor] = self.fresh("c")
            return self.hoisted[tensor]
        off = linear(shape, idx)
        if self.counters and tensor not in self.gathered:  # a gathered read is counted by its Gather
            return f"SFR({p}, {self.buffers[tensor]}, {off})"
        return f"{p}[{off}]"

    def mark_gathered(self, node, idx: Sequence[str]) -> None:
        """In an instrumented build, mark output element ``idx`` of gather ``node`` computed: it
        reads one element of the gathered data (the counters charge those, capped at its size)."""
        if self.counters and node.name in self.gathered.get(node.inputs[0], ()):
            j = [v for t in self.gathered for v in self.gathered[t]].index(node.name)
            self.line(f"SFG({j}, {linear(self.graph.tensors[node.outputs[0]].shape, idx)});")

    def store(self, tensor: str, idx: Sequence[str], value: str) -> None:
        """Store ``value`` to a global element (counted in instrumented builds), or, where
        ``redirect`` names the tensor at this index, to its stack block (written later by a
        streaming copy, :func:`solverfuse.emit.passes.emit_loop`)."""
        blk = self.redirect.get(tensor)
        if blk is not None and tuple(idx) == blk[2]:
            self.redirected.add(tensor)
            self.line(f"{blk[0]}[{blk[1]}] = {value};")
            return
        p = self.ptr(tensor, "w")
        off = linear(self.graph.tensors[tensor].shape, idx)
        target = f"SFW({p}, {self.buffers[tensor]}, {off})" if self.counters else f"{p}[{off}]"
        self.line(f"{target} = {value};")

    def store_within(self, tensor: str, loop: Sequence[int], idx: Sequence[str], store: bool = True) -> None:
        """Inside a loop nest over ``loop`` at ``idx``: compute and store ``tensor`` (a shape the
        loop reaches by broadcasting, :func:`solverfuse.mapping.within`) once per element -- at
        the loop indices that are 0 along the dims it broadcasts -- so a pass that writes tensors
        of several such shapes still reads its inputs in one loop nest. ``store=False`` computes
        it only (its reads are made, as charged; nothing is written).

        >>> from solverfuse.graph import load_graph
        >>> g = load_graph({"tensors": {"x": {"shape": [2, 1]}}, "inputs": ["x"], "outputs": ["y"],
        ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
        >>> k = Kernel(g, ["r"], 0, {"x": 0, "y": 1}, counters=False, threads=1,
        ...            lower=lambda k, node, pos, idx: f"fmaxf({k.value(node.inputs[0], idx)}, 0)")
        >>> k.store_within("y", (2, 8), ("i", "j"))
        >>> k.lines[0].strip(), k.lines[-2].strip()
        ('if (j == 0) {', 'b1[i] = v2;')
        """
        shape = self.shape(tensor)
        r = len(loop) - len(shape)
        at = tuple("0" if d == 1 else idx[r + j] for j, d in enumerate(shape))
        conds = [f"{idx[d]} == 0" for d in range(len(loop)) if loop[d] > 1 and (d < r or shape[d - r] == 1)]
        with contextlib.ExitStack() as guard:
            if conds:
                guard.enter_context(self.block(f"if ({' && '.join(conds)})"))
            v = self.value(tensor, at)
            if store:
                self.store(tensor, at, v)
            else:
                self.line(f"(void){v};")

    def alloc(self, ct: str, n: int, why: str, private: bool = False) -> str:
        """A kernel-local scratch array of ``n`` elements: an arena slot live during this kernel.
        ``private``: one part per thread, each used by its thread only; every kernel's private
        scratch then starts at the same address (the program's one region of them), so a thread's
        part lies in lines that only that thread used before."""
        name = self.fresh("s")
        self.slot_decls.append(("private" if private else "scratch", ct, name, n))
        self.line(f"/* {name}: kernel-local scratch, {why} */")
        return name

    def packed(self, ct: str, n: int, why: str, call: str, sources: dict[str, str]) -> str:
        """A read-only array of ``n`` elements derived from graph constants once per set of
        constants (weights packed into the layout a tile reads), not at every run: ``call`` is the
        C statement that fills it, with ``{dst}`` for the array and ``{name}`` for each constant
        tensor of ``sources`` (name -> tensor). Returns the array's C name in this kernel."""
        name = self.fresh("w")
        slot = self.first_slot + len(self.slot_decls)
        self.slot_decls.append(("packed", ct, name, n))
        args = {key: f"(const {self.ct(t)} *)X[{self.buffers[t]}]" for key, t in sources.items()}
        self.packed_sources += [t for t in sources.values() if t not in self.packed_sources]
        self.prepare_lines.append(call.format(dst=f"({ct} *)X[{slot}]", **args))
        self.line(f"/* {name}: {why}, packed once per set of constants */")
        return name

    def is_constant(self, tensor: str) -> bool:
        """Whether ``tensor`` is a graph constant held in a global buffer (fixed across runs)."""
        return bool(self.graph.tensors[tensor].constant) and tensor in self.buffers \
            and self.graph.index.producer.get(tensor) is None

    def use_helper(self, name: str) -> None:
        """The kernel calls the shared C helper ``name`` (:func:`solverfuse.emit.chelpers.helper_text`)."""
        self.helpers.add(name)

    # ---- values
    def ct(self, tensor: str) -> str:
        """C type of a tensor."""
        return ctype(self.graph, tensor)

    def shape(self, tensor: str) -> tuple[int, ...]:
        """Shape of a tensor."""
        return tuple(self.graph.tensors[tensor].shape)

    def bind(self, tensor: str, idx: Sequence[str], value: str) -> None:
        """From here on (in this block), ``tensor`` at ``idx`` is the C expression ``value``."""
        key = tuple("0" if d == 1 else i for i, d in zip(idx, self.shape(tensor)))
        self.cache[("v", tensor, key)] = value

    def forget(self, tensor: str) -> None:
        """Drop every value of ``tensor`` computed so far (it is read from scratch from now on)."""
        self.cache = {key: v for key, v in self.cache.items() if not (key[0] == "v" and key[1] == tensor)}

    def bind_scratch(self, tensor: str, array: str) -> None:
        """From here on, ``tensor`` is read from the kernel-local array ``array``."""
        self.scratch[tensor] = array

    def set_tile(self, tensor: str, prefix: tuple, array: str, rank: int) -> None:
        """``tensor`` at (prefix..., j...) is ``array[linear(j...)]`` over its last ``rank`` dims."""
        self.tiles[tensor] = (prefix, array, rank)

    def has_tile(self, tensor: str) -> bool:
        """Whether ``tensor`` currently has a tile (or row copy)."""
        return tensor in self.tiles

    def drop_tile(self, tensor: str) -> None:
        """The tile of ``tensor`` ends (its loop closed)."""
        del self.tiles[tensor]

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
                    and self.graph.index.node[producer].op in _RECOMPUTE_EXPENSIVE:
                raise UntiledRead(producer)  # else it would be recomputed per element
        ct = self.ct(tensor)
        producer = self.graph.index.producer.get(tensor)
        if tensor in self.scratch:
            expr = f"{self.scratch[tensor]}[{linear(self.shape(tensor), idx)}]"
        elif producer is None or producer not in self.members:
            expr = self.load(tensor, idx)
        else:
            node = self.graph.index.node[producer]
            expr = self.lower(self, node, node.outputs.index(tensor), idx)
            if self.graph.tensors[tensor].dtype == "bool":
                # a computed bool (0/1) as an int: a byte-typed temporary in a float loop makes GCC
                # size the vectors by bytes (64 lanes), more than a short row has, and leave the
                # loop scalar (an attention row's IsNaN + Where)
                ct = "int"
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

    # ---- the function
    def assemble(self) -> str:
        """The C function ``k<gid>``: buffer pointers, parameter checks, arena slots, the body."""
        return self._function(self._body())

    def _body(self) -> list[str]:
        """The body's lines with the :meth:`invariant` declarations after their lines."""
        after: dict[str, list[str]] = {}
        for line, decl in self.invariants:
            after.setdefault(line, []).append(decl)
        out = []
        for ln in self.lines:
            out.append(ln)
            out += after.pop(ln, [])
        if after:
            raise InternalError(f"kernel {self.gid}: the line of a hoisted load is gone: {next(iter(after))!r}")
        return out

    def team_text(self) -> Optional[str]:
        """The C function ``k<gid>`` for every thread of the run's team to call
        (:func:`solverfuse.emit.team.team_body`), or None when this kernel runs serial or its
        body does not fit (it then runs outside the team, as :meth:`assemble` has it)."""
        if self.threads < 2:
            return None
        body = team_body(self._body())
        return None if body is None else self._function(body)

    def _function(self, body: list[str]) -> str:
        g = self.graph
        head = [f"SF_NOINLINE static int k{self.gid}(void *const *B)", "{", "    (void)B;"]
        for b, mode in sorted(self.used.items()):
            t = next(t for t, i in self.buffers.items() if i == b)
            ct = ctype(g, t)
            if mode == "r":
                head.append(f"    const {ct} *restrict b{b} = (const {ct} *)B[{b}];")
            else:
                head.append(f"    {ct} *restrict b{b} = ({ct} *)B[{b}];")
        for t, name in self.hoisted.items():
            head.append(f"    const {ctype(g, t)} {name} = b{self.buffers[t]}[0];")
        for t in self.checked:
            b = self.buffers[t]
            if b not in self.used:
                ct = ctype(g, t)
                head.append(f"    const {ct} *restrict b{b} = (const {ct} *)B[{b}];")
                self.used[b] = "r"
            ld = f"SFR(b{b}, {b}, q)" if self.counters else f"b{b}[q]"
            head += ["    " + ln for ln in param_check(g, t, b, ld)]
        for j, (kind, ct, name, n) in enumerate(self.slot_decls):
            const = "const " if kind == "packed" else ""
            head.append(f"    {const}{ct} *restrict {name} = ({const}{ct} *)B[{self.first_slot + j}]; (void){name};")
        return "\n".join(head + body + ["    return 0;", "}"])


def inline_deps(k: Kernel, tensor: str, memo: dict) -> frozenset:
    """In-group tensors evaluated inline when ``tensor`` is requested (materialised ones stop)."""
    if tensor in memo:
        return memo[tensor]
    p = k.graph.index.producer.get(tensor)
    if not tensor or p not in k.members or p in k.materialised:
        out = frozenset()
    else:
        node = k.graph.index.node[p]
        out = frozenset([tensor]).union(*(inline_deps(k, t, memo) for t in node.inputs if t))
    memo[tensor] = out
    return out
