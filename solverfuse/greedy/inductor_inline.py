"""PyTorch Inductor's fusion with its lowering's recomputation: a covering plan.

:func:`solverfuse.greedy.inductor` reproduces Inductor as a partition: an op Inductor inlines
into the loops of several kernels (a pointwise value it does not store) is held once, by the
first, which writes it for the others. Inductor instead *recomputes* it in each consumer's loop:
``GraphLowering`` keeps a pointwise result as an unrealised ``StorageBox(Pointwise)`` whose
``inner_fn`` every consumer's loader calls, and only stores (realises) it when a rule says so.
:func:`inductor_kernels` does that, giving a ``solverfuse-plan/2`` covering:

* lowering: the ops :func:`realised` names are stored -- :func:`~.inductor_scheduler.realised_ops`
  (reductions, extern/window calls, Concat, graph outputs, values an extern call or gather reads
  from memory, reused values reading more than ``realize_reads_threshold`` = 4 buffers) plus the
  two CPU rules of ``StorageBox``: a reused value whose inlined expression uses a heavy op (exp,
  log, sigmoid, tanh: ``should_realize_on_reuse``) and a value whose expression reads more than
  ``realize_cpu_acc_reads_threshold`` = 12 buffers (``has_exceeded_max_reads``);
* each stored op is a scheduler node whose loop computes it and every unstored op (pointwise
  value or view) it reads, transitively: its kernel holds them all, so an op inlined into several
  consumers is in each of their kernels. Latest stored op first, an inlined producer joins a
  kernel while the kernel stays legal under our rules (:func:`solverfuse.cost.group_violation`),
  also where the kernel is then not convex: Inductor recomputes the residual stream in the loop
  that adds it to the MLP's output, which reads a value computed from it (a ``/2`` plan states
  that; its result, when some kernel reads it from memory, is written by a kernel no path from
  it leaves and re-enters: :class:`_Kernels`, :func:`_write_alone`); otherwise it is stored after
  all (read from memory, as a ``realize()`` forced later makes Inductor do);
* scheduler fusion as :func:`~.inductor_scheduler.inductor`'s, over these kernels: rounds of
  candidate pairs among kernels accessing a common tensor (at most 64 pairwise attempts per
  node), ranked by ``score_fusion`` (both or neither reducing and sharing data, shared bytes,
  proximity), fused while ``can_fuse`` (no extern call or Concat, at most ``max_fusion_size`` = 64
  scheduler nodes, one loop size, a common tensor, a legal union) and the kernels still run in
  some order (``will_fusion_create_cycle``);
* a kernel is legal as one pass or, when a row does not fit on chip, as a looped kernel
  (:func:`one_kernel_violation`): Inductor's CPU kernel runs a reduction and its consumers as
  loops one after another over each row, recomputing the inlined values in each loop (a softmax
  over 16M-float rows: one kernel of three loops, 4 x |X|);
* views only extern calls, gathers or Concat read, and output views, are placed as the
  partition places them (:func:`~.inductor_scheduler.fold_views`): folded into a call's strides
  (a free view kernel), copied, or written by their source's kernel.

A tensor is written by the kernel storing its op whenever some kernel reads it from memory or it
is a graph output.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> g = load_graph({"tensors": {"x": {"shape": [64, 64]}}, "inputs": ["x"], "outputs": ["y", "s"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "r", "op": "ReduceSum", "inputs": ["h"], "outputs": ["s"],
...                "attributes": {"axes": [0], "keepdims": 1}},
...               {"name": "b", "op": "Neg", "inputs": ["h"], "outputs": ["y"]}]})
>>> h100 = load_hardware("nvidia-h100")
>>> [(k.nodes, k.writes) for k in inductor_kernels(g, h100)]  # both loops run over 64 x 64: fused
[(('a', 'r', 'b'), ('s', 'y'))]
>>> tight = h100.model_copy(update={"register_budget": h100.kernel_base_registers + 2})  # 2 ops a kernel
>>> sorted((k.nodes, k.writes) for k in inductor_kernels(g, tight))  # relu recomputed in both
[(('a', 'b'), ('y',)), (('a', 'r'), ('s',))]
"""
from __future__ import annotations

from .. import cost
from ..graph import Graph
from ..hardware import Hardware
from ..mapping import loop_passes
from ..ops import MATERIALISED_INPUT_ROLES
from ..plans import convexity_violation, returns_to
from .inductor_scheduler import INDUCTOR_MAX_FUSION_SIZE, INDUCTOR_PAIRWISE_ATTEMPTS, INDUCTOR_ROUNDS, \
    INDUCTOR_VIEW_OPS, inductor, iteration_numel, reads_from_memory, realised_ops
from .merging import has_role
from .xla_recompute import Kernels

#: ``should_realize_on_reuse`` on CPU: a value with several users whose inlined expression uses
#: one of these is stored (our op names for ``exp``, ``log``, ``log1p``, ``sigmoid``, ``tanh``...).
INDUCTOR_HEAVY_OPS = frozenset({"Exp", "Log", "Log1p", "Sigmoid", "Tanh"})
#: ``config.realize_cpu_acc_reads_threshold``: a pointwise value whose expression reads more
#: buffers than this is stored (``has_exceeded_max_reads`` + ``realize_hint``).
INDUCTOR_ACC_READS = 12


def realised(graph: Graph) -> set[str]:
    """The ops Inductor's lowering stores on CPU: :func:`~.inductor_scheduler.realised_ops` plus
    a reused value whose inlined expression holds a heavy op (:data:`INDUCTOR_HEAVY_OPS`) and a
    value whose expression reads more than 12 buffers.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "e", "op": "Exp", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "r", "op": "Relu", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "n", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> sorted(realised(g))  # exp read by two consumers: stored on CPU
    ['e', 'n', 'r']
    """
    node, order, producer = graph.index.node, graph.index.order, graph.index.producer
    stored = set(realised_ops(graph))
    heavy: dict[str, bool] = {}
    reads: dict[str, frozenset] = {}
    for v in order:  # the same inlined-expression walk as realised_ops, with the extra rules
        mine: set[str] = set()
        hv = node[v].op in INDUCTOR_HEAVY_OPS
        ins = node[v].inputs[:1] if node[v].op in INDUCTOR_VIEW_OPS else node[v].inputs
        for t in ins:
            p = producer.get(t) if t else None
            if p is not None and p not in stored:
                mine |= reads[p]
                hv = hv or heavy[p]
            elif t and graph.tensors[t].shape:
                mine.add(t)
        reads[v], heavy[v] = frozenset(mine), hv
        if v in stored or node[v].op in INDUCTOR_VIEW_OPS:
            continue
        users = {w for w in graph.index.succs[v]}
        if (hv and len(users) > 1) or len(mine) > INDUCTOR_ACC_READS:
            stored.add(v)
    return stored


def one_kernel_violation(graph: Graph, nodes: list[str], hw: Hardware) -> str | None:
    """Why ``nodes`` cannot run as one Inductor kernel (None when they can): our rules and
    capacity as one pass, or else as a looped kernel -- Inductor's CPU kernel runs a reduction and
    its consumers as loops one after another over each row, re-reading the row
    (:func:`solverfuse.cost.kernel_violation` with :func:`solverfuse.mapping.loop_passes` passes).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 16777216]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "m", "op": "ReduceMax", "inputs": ["x"], "outputs": ["mx"],
    ...                "attributes": {"axes": [1], "keepdims": 1}},
    ...               {"name": "s", "op": "Sub", "inputs": ["x", "mx"], "outputs": ["y"]}]})
    >>> h100 = load_hardware("nvidia-h100")
    >>> cost.group_violation(g, ["m", "s"], h100) is None, one_kernel_violation(g, ["m", "s"], h100)
    (False, None)
    """
    why = cost.group_violation(graph, nodes, hw)
    if why is None or loop_passes(graph, nodes) < 2:
        return why
    return cost.kernel_violation(graph, nodes, hw, loop_passes(graph, nodes))


def _inputs_in_loop(graph: Graph, v: str) -> list[str]:
    """Producers of ``v`` that ``v``'s loop may compute (not read from memory)."""
    node, producer = graph.index.node[v], graph.index.producer
    if node.op == "Concat" or cost.role(graph, v) in MATERIALISED_INPUT_ROLES:
        return []
    ins = node.inputs[:1] if node.op in INDUCTOR_VIEW_OPS else node.inputs  # a view's data only
    return [producer[t] for t in ins if t and t in producer and not reads_from_memory(graph, v, t)]


def lowered_kernels(graph: Graph, hw: Hardware) -> dict[str, frozenset]:
    """Lowering: each stored op (:func:`realised`) with the unstored ops its loop computes, keyed
    by the stored op; an inlined producer that would make a kernel illegal is stored instead
    (and then has a kernel of its own). A kernel may be non-convex (see the module doc).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Neg", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Abs", "inputs": ["h"], "outputs": ["z"]}]})
    >>> sorted((s, sorted(m)) for s, m in lowered_kernels(g, load_hardware("nvidia-h100")).items())
    [('b', ['a', 'b']), ('c', ['a', 'c'])]
    """
    node, pos = graph.index.node, graph.index.position
    stored = realised(graph)
    todo = sorted(stored, key=pos.__getitem__)
    kernels: dict[str, frozenset] = {}
    while todo:
        s = todo.pop()  # latest first: a producer stored here is lowered after its consumers
        mine = {s}
        cand = sorted(set(_inputs_in_loop(graph, s)), key=pos.__getitem__)
        while cand:
            p = cand.pop()
            if p in mine or p in stored:
                continue
            trial = sorted(mine | {p}, key=pos.__getitem__)
            if one_kernel_violation(graph, trial, hw):
                if node[p].op not in INDUCTOR_VIEW_OPS:  # a view is an index expression, never stored:
                    stored.add(p)                        # placed as the partition places it
                    todo.append(p)
                    todo.sort(key=pos.__getitem__)
                continue
            mine.add(p)
            cand = sorted(set(cand) | (set(_inputs_in_loop(graph, p)) - mine), key=pos.__getitem__)
        kernels[s] = frozenset(mine)
    return kernels


class _Kernels(Kernels):
    """Kernels whose loops may recompute a value that also reaches them through other kernels
    (not convex): its result is written by the first kernel computing it that no path from it
    leaves and re-enters (:func:`~solverfuse.plans.returns_to`), which can run before the path."""

    def writer(self, v: str) -> int:
        hs = sorted(self.holders[v])
        return next((k for k in hs if not returns_to(self.graph, v, self.ops[k])), hs[0])


def inductor_kernels(graph: Graph, hw: Hardware) -> list[cost.Kernel]:
    """Inductor's kernels with its lowering's recomputation (see the module doc): a covering;
    a kernel whose rows do not fit on chip makes :func:`~solverfuse.mapping.loop_passes` passes."""
    pos = graph.index.position
    lowered = lowered_kernels(graph, hw)
    heads = sorted(lowered, key=pos.__getitem__)
    ks = _Kernels(graph, {i: sorted(lowered[s], key=pos.__getitem__) for i, s in enumerate(heads)})
    ks.holders = {}  # Kernels starts from a partition: here an inlined op is in several kernels
    for k, ops in ks.ops.items():
        for v in ops:
            ks.holders.setdefault(v, set()).add(k)
    stored_in = {i: {s} for i, s in enumerate(heads)}
    _place_views(graph, hw, ks, stored_in)
    _write_alone(graph, ks, stored_in)
    loop_numel = {s: iteration_numel(graph, s) for s in heads}

    def extern(k: int) -> bool:
        return any(cost.role(graph, v) == "anchor" or graph.index.node[v].op == "Concat" for v in ks.ops[k])

    def accessed(k: int) -> set[str]:
        nodes = ks.nodes(ks.ops[k])
        return set(cost.group_reads(graph, nodes)) | set(ks.writes(k))

    def shared(a: int, b: int) -> int:
        return sum(graph.nbytes(t) for t in accessed(a) & accessed(b))

    def loops(k: int) -> set[int]:
        return {loop_numel[s] for s in stored_in[k]}

    def can_fuse(a: int, b: int) -> bool:
        if a == b or extern(a) or extern(b) or not stored_in[a] or not stored_in[b]:
            return False
        if len(stored_in[a]) + len(stored_in[b]) > INDUCTOR_MAX_FUSION_SIZE or len(loops(a) | loops(b)) > 1:
            return False
        nodes = ks.nodes(ks.ops[a] | ks.ops[b])
        return shared(a, b) >= 1 and one_kernel_violation(graph, nodes, hw) is None

    def first(k: int) -> int:
        return min(pos[s] for s in stored_in[k]) if stored_in[k] else min(pos[v] for v in ks.ops[k])

    def last(k: int) -> int:
        return max(pos[v] for v in ks.ops[k])

    for _ in range(INDUCTOR_ROUNDS):
        before = len(ks.ops)
        users: dict[str, list[int]] = {}
        for k in sorted(ks.ops, key=first):
            for t in sorted(accessed(k)):
                users.setdefault(t, []).append(k)
        pairs: dict[tuple[int, int], None] = {}
        for group in users.values():
            for i, a in enumerate(group):
                for b in group[i + 1:i + 1 + INDUCTOR_PAIRWISE_ATTEMPTS]:
                    if (a, b) not in pairs and can_fuse(a, b):
                        pairs[(a, b)] = None

        def score(pair):
            a, b = pair
            mem = shared(a, b)
            ra, rb = has_role(graph, ks.ops[a], "reduction"), has_role(graph, ks.ops[b], "reduction")
            return (ra == rb and mem > 0, mem, -max(abs(first(a) - last(b)), abs(first(b) - last(a))))
        alias: dict[int, int] = {}

        def now(k: int) -> int:
            while k in alias:
                k = alias[k]
            return k
        for a0, b0 in sorted(pairs, key=score, reverse=True):
            a, b = now(a0), now(b0)
            if a == b or b in ks.sources(a) or not can_fuse(a, b):
                continue  # node1 may not read node2 (node2 would have to run first)
            old_a, old_b, ver_b = ks.ops[a], ks.ops[b], ks.version[b]
            ks.replace(a, old_a | old_b)
            ks.drop(b)
            if ks.acyclic():
                stored_in[a] |= stored_in.pop(b)
                alias[b] = a
                continue
            ks.ops[b], ks.version[b] = old_b, ver_b  # will_fusion_create_cycle: undo
            for v in old_b:
                ks.holders[v].add(b)
            ks.replace(a, old_a)
        if len(ks.ops) == before:
            break
    return [k if cost.group_violation(graph, k.nodes, hw) is None else k._replace(passes=loop_passes(graph, k.nodes))
            for k in ks.kernels()]


def _write_alone(graph: Graph, ks: _Kernels, stored_in: dict[int, set]) -> None:
    """An op whose result some kernel reads from memory while every kernel computing it also
    reads a value computed from it (a view an extern call reads through its strides, recomputed
    in a later loop) gets a kernel of its own that writes it (a copy; a view's is free)."""
    idx = graph.index
    changed = True
    while changed:
        changed = False
        for v in idx.order:
            hs = ks.holders.get(v)
            if not hs or any(not returns_to(graph, v, ks.ops[k]) for k in hs):
                continue
            need = any(t in idx.outputs or any(v not in ks.ops[j] for w in idx.consumers.get(t, [])
                                               for j in ks.holders.get(w, ()))
                       for t in idx.node[v].outputs if t)
            if need:
                k = max(ks.ops) + 1
                ks.ops[k], ks.version[k] = frozenset(), 0
                ks.replace(k, frozenset({v}))
                stored_in[k] = set()  # fused with nothing, as the partition's view copies
                changed = True


def _place_views(graph: Graph, hw: Hardware, ks: Kernels, stored_in: dict[int, set]) -> None:
    """Ops no loop computes (views only extern calls, gathers or Concat read; output views) as
    :func:`~.inductor_scheduler.fold_views` places them in the partition: with their source's
    stored op's kernel when the partition puts them there, else in kernels of their own (one
    per partition group: a view chain folded into one call, a copy)."""
    left = [v for v in graph.index.order if not ks.holders.get(v)]
    if not left:
        return
    where = {v: i for i, g in enumerate(inductor(graph, hw)) for v in g}
    owner = {s: k for k, ss in stored_in.items() for s in ss}
    fresh: dict[int, int] = {}
    nxt = max(ks.ops, default=-1) + 1
    producer = graph.index.producer
    for v in left:
        ks.holders.setdefault(v, set())
        src = producer.get(graph.index.node[v].inputs[0]) if graph.index.node[v].inputs else None
        mates = sorted((s for s in owner if where.get(s) == where[v]), key=lambda s: s != src)
        if mates:
            k = owner[mates[0]]
            ks.replace(k, ks.ops[k] | {v})
            continue
        if where[v] not in fresh:
            fresh[where[v]] = nxt
            ks.ops[nxt], ks.version[nxt] = frozenset(), 0
            stored_in[nxt] = set()
            nxt += 1
        k = fresh[where[v]]
        ks.replace(k, ks.ops[k] | {v})
    pos = graph.index.position
    # a view the partition copies on its own (a chain's head reading an extern call's output)
    # is a buffer other kernels read; any other view a placed kernel reads is computed in it
    # (an index expression: a copy loop or a call's strides recompute it)
    copies = {v for k in fresh.values() for v in ks.ops[k] if len(ks.ops[k]) == 1
              and graph.index.node[v].inputs and producer.get(graph.index.node[v].inputs[0]) in owner}
    heads = set(owner) | copies
    for k in fresh.values():
        nodes = ks.nodes(ks.ops[k])
        mine = set(nodes)
        cand = sorted({p for v in nodes for p in _inputs_in_loop(graph, v)} - mine, key=pos.__getitem__)
        while cand:
            p = cand.pop()
            if p in mine or p in heads or graph.index.node[p].op not in INDUCTOR_VIEW_OPS:
                continue
            trial = sorted(mine | {p}, key=pos.__getitem__)
            if cost.group_violation(graph, trial, hw) or convexity_violation(graph, trial):
                continue
            mine.add(p)
            cand = sorted(set(cand) | (set(_inputs_in_loop(graph, p)) - mine), key=pos.__getitem__)
        ks.holders.update({v: ks.holders.get(v, set()) for v in mine})
        ks.replace(k, frozenset(mine))
