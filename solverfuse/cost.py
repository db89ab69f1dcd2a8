"""The one cost model: traffic, legality (fusion rules + capacity), roofline time, Q_min.

Everything that scores or checks a plan -- the CP-SAT objective, the greedy baselines, reports,
benchmarks and the emitter's byte counters -- calls these functions. Costs are charged *as
compilers execute* (``formulations/reality.md``):

* ``group_traffic(G)`` = bytes of every tensor ``G`` reads from outside (each tensor counted once
  per group, so horizontal fusion de-duplicates a shared input) + bytes of every tensor produced in
  ``G`` that a node outside ``G`` reads or that is a graph output; except that
* a tensor ``G`` reads only as the data operand of gathers (op table ``gather_data_input``) or of
  windows (Slice, aten's Select) costs the bytes those ops pick -- the sum of their output bytes --
  capped at its size (:func:`read_bytes`, :func:`partial_reader`): a real kernel loads the rows it
  gathers and the window it slices, not the whole tensor (Llama's rotary halves, BERT's position
  ids);
* a group of view ops only (op table ``view``: Reshape, Flatten, Squeeze, Unsqueeze, Identity)
  that writes no graph output is metadata: it moves 0 bytes and launches no kernel
  (:func:`free_view_group`); one that writes a graph output is a copy, charged normally.
* ``q_min`` = every source tensor some node reads, once (gather-aware, see :func:`q_min`) + every
  graph output, once.

>>> from solverfuse.graph import load_graph
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> group_traffic(g, ["a"]), group_traffic(g, ["a", "b"]), unfused_traffic(g), q_min(g)
(2048, 2048, 4096, 2048)
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from .graph import Graph
from .hardware import Hardware
from .mapping import capacity_violation, loop_capacity_violation, loop_passes, loop_shape_violation, pass_nodes
from .rules import facts, gather_data_reader, rule_violation


#: Ops whose output is a window of their data operand (input 0): each output element is a distinct
#: input element, so a kernel reads only the output's bytes of it.
WINDOW_OPS = frozenset({"Slice", "Select"})


def partial_reader(graph: Graph, node: str, tensor: str) -> bool:
    """Whether ``node`` reads only the part of ``tensor`` its output picks: ``tensor`` is only its
    data operand (input 0) and it is a gather (``rules.gather_data_reader``) or a window
    (:data:`WINDOW_OPS`). Such a read costs the output's bytes, capped at the tensor's size.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 6]}, "st": {"shape": [1], "dtype": "int64",
    ...     "constant": True, "value": [1]}, "en": {"shape": [1], "dtype": "int64", "constant": True,
    ...     "value": [3]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "s", "op": "Slice", "inputs": ["x", "st", "en"], "outputs": ["y"]}]})
    >>> partial_reader(g, "s", "x"), partial_reader(g, "s", "st"), group_traffic(g, ["s"])
    (True, False, 112)
    """
    if gather_data_reader(graph, node, tensor):
        return True
    n = graph.index.node[node]
    return n.op in WINDOW_OPS and bool(n.inputs) and n.inputs[0] == tensor and tensor not in n.inputs[1:]


def role(graph: Graph, node: str) -> str:
    """Fusion role of a node (``opaque`` for ops the table does not know)."""
    return facts(graph, node).role


class GroupCost(NamedTuple):
    """What one group of a partition costs: the tensors it reads from global memory (each once,
    first-use order), those it writes (graph order) and its traffic in bytes."""
    reads: list
    writes: list
    traffic: int


class _Table(NamedTuple):
    """The graph's structure as the cost functions read it, derived once per graph index: each
    op's distinct non-empty inputs and its non-empty outputs; the ops a free view group may hold
    (views writing no graph output); for every tensor some gather reads as data, each consumer
    with the output whose bytes it gathers (None: it reads the tensor otherwise); the traffic of
    each op alone, once asked."""
    ins: dict
    outs: dict
    free: frozenset
    gather: dict
    single: dict  # op -> traffic of the op alone, filled on demand


def _table(graph: Graph) -> _Table:
    memo = graph.index.memo
    hit = memo.get("cost")
    if hit is None:
        index = graph.index
        ins, outs, free, data = {}, {}, set(), set()
        outputs = index.outputs
        for n in graph.nodes:
            ins[n.name] = tuple(dict.fromkeys(t for t in n.inputs if t))
            outs[n.name] = tuple(t for t in n.outputs if t)
            f = facts(graph, n.name)
            if f.view and not any(t in outputs for t in n.outputs):
                free.add(n.name)
            if n.inputs and (f.gather_data_input or n.op in WINDOW_OPS):
                data.add(n.inputs[0])
        gather = {t: tuple((c, index.node[c].outputs[0] if partial_reader(graph, c, t) else None)
                           for c in index.consumers.get(t, [])) for t in data}
        hit = memo["cost"] = _Table(ins, outs, frozenset(free), gather, {})
    return hit


def group_cost(graph: Graph, nodes: Sequence[str]) -> GroupCost:
    """:func:`group_reads`, :func:`group_writes` and :func:`group_traffic` of one group, in one
    pass over its ops (what a plan records for each group).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> group_cost(g, ["a"]), group_cost(g, ["a", "b"])
    (GroupCost(reads=['x'], writes=['h'], traffic=2048), GroupCost(reads=['x'], writes=['y'], traffic=2048))
    """
    if not isinstance(nodes, (list, tuple)):
        nodes = list(nodes)
    tb = _table(graph)
    index = graph.index
    producer, consumers, outputs = index.producer, index.consumers, index.outputs
    ins, outs, free = tb.ins, tb.outs, tb.free
    members = set(nodes)
    reads: dict[str, None] = {}
    writes = []
    is_free = True
    for v in nodes:
        for t in ins[v]:
            if t not in reads and producer.get(t) not in members:
                reads[t] = None
        for t in outs[v]:
            if t in outputs or not members.issuperset(consumers.get(t, ())):
                writes.append(t)
        if is_free and v not in free:
            is_free = False
    if is_free:
        return GroupCost(list(reads), writes, 0)
    nbytes, gather = index.nbytes, tb.gather
    traffic = 0
    for t in writes:
        traffic += nbytes[t]
    for t in reads:
        traffic += _gathered(nbytes, members, t, gather[t]) if t in gather else nbytes[t]
    return GroupCost(list(reads), writes, traffic)


def _gathered(nbytes: dict, members, tensor: str, readers: tuple) -> int:
    size = nbytes[tensor]
    total = 0
    for c, out in readers:
        if c in members:
            if out is None:
                return size
            total += nbytes[out]
    return min(size, total)


def group_reads(graph: Graph, nodes: Iterable[str]) -> list[str]:
    """Tensors a group reads from global memory, each once, in first-use order."""
    if not isinstance(nodes, (list, tuple)):
        nodes = list(nodes)
    ins, producer = _table(graph).ins, graph.index.producer
    members = set(nodes)
    out: dict[str, None] = {}
    for v in nodes:
        for t in ins[v]:
            if t not in out and producer.get(t) not in members:
                out[t] = None
    return list(out)


def group_writes(graph: Graph, nodes: Iterable[str]) -> list[str]:
    """Tensors a group must write to global memory: read outside it, or graph outputs."""
    if not isinstance(nodes, (list, tuple)):
        nodes = list(nodes)
    outs, consumers, outputs = _table(graph).outs, graph.index.consumers, graph.index.outputs
    members = set(nodes)
    return [t for v in nodes for t in outs[v]
            if t in outputs or not members.issuperset(consumers.get(t, ()))]


def free_view_group(graph: Graph, nodes: Iterable[str]) -> bool:
    """Whether a group is metadata only: every op a view, no graph output written (0 bytes, no
    kernel)."""
    free = _table(graph).free
    return all(v in free for v in nodes)


def read_bytes(graph: Graph, members: set[str] | frozenset[str], tensor: str) -> int:
    """Bytes a group of ``members`` pays to read ``tensor`` from outside (ignoring the view rule):
    its size, or -- when every member reading it reads only part of it (:func:`partial_reader`:
    gather data, a Slice's window) -- the bytes picked (sum of those readers' output bytes) capped
    at its size."""
    readers = _table(graph).gather.get(tensor)
    if readers is None:
        return graph.nbytes(tensor)
    return _gathered(graph.index.nbytes, members, tensor, readers)


def group_read_bytes(graph: Graph, nodes: Sequence[str]) -> dict[str, int]:
    """What a group pays per tensor it reads from outside (the emitter's read counters)."""
    if free_view_group(graph, nodes):
        return {t: 0 for t in group_reads(graph, nodes)}
    members = set(nodes)
    return {t: read_bytes(graph, members, t) for t in group_reads(graph, nodes)}


def group_write_bytes(graph: Graph, nodes: Sequence[str]) -> dict[str, int]:
    """What a group pays per tensor it writes (the emitter's write counters)."""
    free = free_view_group(graph, nodes)
    return {t: 0 if free else graph.nbytes(t) for t in group_writes(graph, nodes)}


def group_traffic(graph: Graph, nodes: Sequence[str]) -> int:
    """Global-memory bytes of one group's kernel (reads + writes), as compilers execute it
    (:func:`group_cost`; an op alone's is computed once per graph)."""
    if len(nodes) == 1:
        single = _table(graph).single
        v = next(iter(nodes))
        hit = single.get(v)
        if hit is None:
            hit = single[v] = group_cost(graph, [v]).traffic
        return hit
    return group_cost(graph, nodes).traffic


def plan_traffic(graph: Graph, groups: Iterable[Sequence[str]]) -> int:
    """Traffic of a plan: the sum over its groups."""
    return sum(group_traffic(graph, g) for g in groups)


def unfused_traffic(graph: Graph) -> int:
    """Traffic with one op per kernel (computed once per graph)."""
    memo = graph.index.memo
    hit = memo.get("cost.unfused_traffic")
    if hit is None:
        hit = memo["cost.unfused_traffic"] = plan_traffic(graph, [[n] for n in graph.index.order])
    return hit


def plan_floor(graph: Graph, nodes: Sequence[str]) -> int:
    """A lower bound on the traffic of every plan of the ops ``nodes`` (all of them, in any legal
    groups): what one kernel of all of them would pay, except that reads and writes only view ops
    make are dropped (a free view group pays neither). Equals ``group_traffic(nodes)`` when no view
    op is among them.

    Why it is a bound: a tensor from outside read by a non-view op ``c`` is read by ``c``'s group,
    which is not free and pays at least the gather-aware cost restricted to its own readers; summed
    over groups that is at least the cost restricted to all non-view readers (``min`` is
    subadditive). A tensor produced by a non-view op (or a graph output) and needed outside ``nodes``
    is written by its producer's group, which is not free.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 8]}, "s": {"shape": [2], "dtype": "int64",
    ...     "constant": True, "value": [8, 4]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Reshape", "inputs": ["x", "s"], "outputs": ["h"]},
    ...               {"name": "e", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
    >>> plan_floor(g, ["r", "e"]), group_traffic(g, ["r", "e"]), plan_traffic(g, [["r"], ["e"]])
    (128, 272, 256)
    """
    members = set(nodes)
    nonview = {v for v in nodes if not facts(graph, v).view}
    outputs = graph.index.outputs
    total = 0
    for t in group_reads(graph, nodes):
        if any(c in nonview for c in graph.index.consumers.get(t, [])):
            total += read_bytes(graph, nonview, t)
    for t in group_writes(graph, nodes):
        if graph.index.producer[t] in nonview or t in outputs:
            if t in outputs or any(c not in members for c in graph.index.consumers.get(t, [])):
                total += graph.nbytes(t)
    return total


def q_min(graph: Graph) -> int:
    """Lower bound: every source tensor some node reads, once, plus every graph output, once.

    A source's read is its *data floor*: its size, or less when no plan has to read all of it --
    when every consumer reads only part of it (:func:`partial_reader`: gather data, a window; then
    the sum of all those readers' output bytes, capped at its size), as a view's shape operand (0: a free view group reads nothing), or
    as a view's data (then, unless that view writes a graph output, what its output's readers must
    pay, recursively: the view itself may be free). Computed once per graph.
    """
    cached = graph.index.memo.get("cost.q_min")
    if cached is None:
        cached = graph.index.memo["cost.q_min"] = _q_min(graph)
    return cached


def _q_min(graph: Graph) -> int:
    memo: dict[str, int] = {}
    outputs = graph.index.outputs

    def floor(t: str) -> int:
        hit = memo.get(t)
        if hit is not None:
            return hit
        size = graph.nbytes(t)
        total = 0
        for c in graph.index.consumers.get(t, []):
            node = graph.index.node[c]
            f = facts(graph, c)
            if f.view and t not in node.inputs[:1]:
                continue
            if f.view and not any(o in outputs for o in node.outputs):
                total += sum(floor(o) for o in node.outputs if o)
            elif partial_reader(graph, c, t):
                total += graph.nbytes(node.outputs[0])
            else:
                total = size
            if total >= size:
                break
        memo[t] = min(size, total)
        return memo[t]

    read = {t for n in graph.nodes for t in n.inputs if t and graph.is_source(t)}
    return sum(floor(t) for t in read) + \
        sum(graph.nbytes(t) for t in dict.fromkeys(graph.outputs) if not graph.is_source(t))


def group_violation(graph: Graph, nodes: Sequence[str], hw: Hardware) -> str | None:
    """Why a group breaks a fusion rule (:func:`solverfuse.rules.rule_violation`) or a capacity
    limit (:func:`solverfuse.mapping.capacity_violation`); None when it is legal.

    Convexity needs the rest of the plan and is checked by :func:`solverfuse.plans.validate`.
    """
    if len(nodes) < 2:
        return None
    return rule_violation(graph, nodes) or capacity_violation(graph, list(nodes), hw)


def group_flops(graph: Graph, nodes: Iterable[str]) -> int:
    return sum(graph.flops(v) for v in nodes)


def group_time(graph: Graph, nodes: Sequence[str], hw: Hardware) -> float:
    """Roofline time of a group in seconds: max(bytes / bandwidth, flops / peak) + launch overhead
    (0 for a free view group: no kernel); the bandwidth is :meth:`Hardware.bandwidth` of its bytes.
    :func:`group_time_ps` is the same in exact integer picoseconds."""
    if free_view_group(graph, nodes):
        return 0.0
    dtype = graph.tensors[graph.index.node[nodes[0]].outputs[0]].dtype
    nbytes = group_traffic(graph, nodes)
    return max(nbytes / hw.bandwidth(nbytes), group_flops(graph, nodes) / hw.peak(dtype)) + hw.launch_overhead_s


def plan_time(graph: Graph, groups: Iterable[Sequence[str]], hw: Hardware) -> float:
    """Predicted time of a plan: its groups run one after another."""
    return sum(group_time(graph, g, hw) for g in groups)


# ---- plans with recomputation and looped reductions (``formulations/covering.md``) -------------

class Kernel(NamedTuple):
    """One group of a covering plan: the ops it computes (an op may be in several kernels), the
    tensors it writes (each needed tensor is written by exactly one kernel) and its passes (1, or
    :func:`solverfuse.mapping.loop_passes` for a looped reduction kernel)."""
    nodes: tuple
    writes: tuple
    passes: int = 1


def produced(graph: Graph, nodes: Iterable[str]) -> list[str]:
    """Tensors the ops ``nodes`` produce (graph order of their producers)."""
    return [t for v in nodes for t in graph.index.node[v].outputs if t]


def split_pieces(graph: Graph, members: set[str] | frozenset[str], tensor: str) -> tuple | None:
    """When a kernel of ``members`` reads ``tensor`` only to split it -- its one member reader
    is a Split of it, directly or through views (Reshape, ...) whose outputs only that chain reads
    and some member uses a piece -- the Split's outputs (None otherwise). A real kernel then
    loads only the pieces it uses:
    GPT-2's fused QKV projection split into q, k, v, each head layout recomputed in a kernel of
    its own (Inductor), reads a third of it per kernel (:func:`kernel_reads`,
    :func:`write_bytes`). A partition's group pays the whole tensor as before: each piece is
    used inside, written, or dead (charged as read).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [6]}, "n": {"shape": [3], "dtype": "int64",
    ...     "constant": True, "value": [2, 2, 2]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "s", "op": "Split", "inputs": ["x", "n"], "outputs": ["a", "b", "c"]},
    ...               {"name": "e", "op": "Exp", "inputs": ["a"], "outputs": ["y"]},
    ...               {"name": "f", "op": "Concat", "inputs": ["b", "c"], "outputs": ["z"],
    ...                "attributes": {"axis": 0}}]})
    >>> split_pieces(g, {"s", "e"}, "x"), kernel_traffic(g, ["s", "e"], ["y"]), kernel_traffic(g, ["s", "e"], ["y", "b"])
    (('a', 'b', 'c'), 40, 56)
    """
    index = graph.index
    t = tensor
    while True:
        users = [c for c in index.consumers.get(t, ()) if c in members]
        if len(users) != 1:
            return None
        node = index.node[users[0]]
        if not node.inputs or node.inputs[0] != t or t in node.inputs[1:]:
            return None
        if node.op == "Split":
            # a kernel that uses no piece (it only writes pieces) loads the whole tensor: else the
            # same op set would pay less as several kernels, one per piece written
            pieces = tuple(node.outputs)
            if not any(c in members for o in pieces if o for c in index.consumers.get(o, ())):
                return None
            return pieces
        out = [o for o in node.outputs if o]
        if not facts(graph, node.name).view or len(out) != 1 or out[0] in index.outputs \
                or not members.issuperset(index.consumers.get(out[0], ())):
            return None
        t = out[0]


def _piece_read(graph: Graph, members, piece: str) -> int:
    """What reading a piece of a split costs a kernel that does not write it: its bytes when a
    member uses it or nothing does (dead), else 0 (:func:`write_bytes` charges it if written)."""
    cons = graph.index.consumers.get(piece, ())
    if any(c in members for c in cons) or (not cons and piece not in graph.index.outputs):
        return graph.nbytes(piece)
    return 0


def kernel_reads(graph: Graph, nodes: Sequence[str], passes: int = 1) -> list[tuple[str, int]]:
    """(tensor, bytes) of every read from global memory of a kernel, pass by pass: with one pass
    :func:`group_reads` at the gather-aware :func:`read_bytes`, except that a tensor the kernel
    only splits (:func:`split_pieces`) costs the pieces it uses (a piece it only writes is charged
    by :func:`write_bytes`); a looped kernel reads, in each pass, what that pass's ops
    (:func:`solverfuse.mapping.pass_nodes`) need from outside the kernel."""
    members = set(nodes)
    if passes == 1:
        out = []
        for t in group_reads(graph, nodes):
            pieces = split_pieces(graph, members, t) if t not in graph.index.outputs else None
            out.append((t, read_bytes(graph, members, t) if pieces is None else
                        sum(_piece_read(graph, members, o) for o in pieces if o)))
        return out
    out = []
    for ops in pass_nodes(graph, nodes):
        inside = set(ops)
        out += [(t, read_bytes(graph, inside, t)) for t in group_reads(graph, ops)
                if graph.index.producer.get(t) not in members]
    return out


def write_bytes(graph: Graph, nodes: Sequence[str], tensor: str, passes: int = 1) -> int:
    """What a (not free) one-pass kernel of ``nodes`` pays to write ``tensor``: its bytes, plus
    -- for a piece of a tensor it only splits (:func:`split_pieces`) that no member uses -- the
    piece's read. With :func:`kernel_reads` this charges each piece a kernel loads once, whether
    it uses it, writes it or both; the covering formulation prices each write by it."""
    size = graph.nbytes(tensor)
    if passes != 1:
        return size
    index = graph.index
    split = index.producer.get(tensor)
    if split is None or index.node[split].op != "Split" or split not in nodes:
        return size
    members = set(nodes)
    if any(c in members for c in index.consumers.get(tensor, ())):
        return size
    t = index.node[split].inputs[0]
    while index.producer.get(t) in members:  # back through the views to the tensor read
        if not facts(graph, index.producer[t]).view:
            return size
        t = index.node[index.producer[t]].inputs[0]
    if t in index.outputs or split_pieces(graph, members, t) is None:
        return size
    return 2 * size


def kernel_free(graph: Graph, nodes: Iterable[str], writes: Iterable[str]) -> bool:
    """A kernel of views only that writes no graph output is metadata: 0 bytes, no launch."""
    outputs = graph.index.outputs
    return all(facts(graph, v).view for v in nodes) and not any(t in outputs for t in writes)


def kernel_traffic(graph: Graph, nodes: Sequence[str], writes: Sequence[str], passes: int = 1) -> int:
    """Bytes of one kernel of a covering plan: every pass's reads + its stated writes, as compilers
    execute (gather-aware reads, free view kernels). For a partition's group with its
    :func:`group_writes` and one pass this is :func:`group_traffic`.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [2, 8]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "m", "op": "ReduceMax", "inputs": ["x"], "outputs": ["mx"]},
    ...               {"name": "s", "op": "Sub", "inputs": ["x", "mx"], "outputs": ["y"]}]})
    >>> kernel_traffic(g, ["m", "s"], ["y"]), kernel_traffic(g, ["m", "s"], ["y"], passes=2)
    (128, 192)
    """
    if kernel_free(graph, nodes, writes):
        return 0
    return sum(b for _, b in kernel_reads(graph, nodes, passes)) + \
        sum(write_bytes(graph, nodes, t, passes) for t in writes)


def covering_traffic(graph: Graph, kernels: Iterable[Kernel]) -> int:
    """Traffic of a covering plan: the sum over its kernels."""
    return sum(kernel_traffic(graph, k.nodes, k.writes, k.passes) for k in kernels)


def kernel_violation(graph: Graph, nodes: Sequence[str], hw: Hardware, passes: int = 1) -> str | None:
    """Why a kernel of ``passes`` passes breaks a rule or capacity (None when legal): one pass is
    :func:`group_violation`; a looped kernel makes exactly :func:`solverfuse.mapping.loop_passes`
    passes (at least 2), keeps the fusion rules, runs each pass as one loop nest that reads the
    pass's inputs once, as :func:`kernel_reads` charges
    (:func:`solverfuse.mapping.loop_shape_violation`), and every pass fits
    (:func:`solverfuse.mapping.loop_capacity_violation`)."""
    if passes == 1:
        return group_violation(graph, nodes, hw)
    need = loop_passes(graph, nodes)
    if need < 2 or passes != need:
        return f"a looped kernel of these ops makes {need} passes, not {passes}"
    return rule_violation(graph, nodes) or loop_shape_violation(graph, nodes) or \
        loop_capacity_violation(graph, list(nodes), hw)


def looped_violation(graph: Graph, nodes: Sequence[str], hw: Hardware) -> str | None:
    """Why a group is illegal both as one pass and as a looped kernel (None when either is legal).
    Monotone under subsets (the covering formulation prunes on it): a group that cannot loop
    (:func:`solverfuse.mapping.loop_shape_violation`) is legal only as one pass, whose footprint
    bounds the looped one's, and each of its subsets fits one pass or loops within that bound."""
    if len(nodes) < 2:
        return None
    why = rule_violation(graph, nodes)
    if why:
        return why
    shape = loop_shape_violation(graph, nodes)
    if shape is None:
        return loop_capacity_violation(graph, list(nodes), hw)
    one = capacity_violation(graph, list(nodes), hw)
    return one and f"{one}; not looped: {shape}"


# ---- run time in exact integer picoseconds (the ``time`` objective) --------------------------------

PS = 10 ** 12  # picoseconds per second


def kernel_time_ps(graph: Graph, nodes: Sequence[str], writes: Sequence[str], hw: Hardware, passes: int = 1) -> int:
    """Roofline time of one kernel in integer picoseconds: ``max(ceil(bytes / bandwidth),
    ceil(flops / peak)) + launch overhead``, with every pass's recomputed flops counted; 0 for a
    free view kernel (no launch). The bandwidth is the one of the kernel's working set, its bytes
    (:meth:`solverfuse.hardware.Hardware.bandwidth`: a kernel whose reads + writes fit in L2 or L3
    runs at that cache's bandwidth where the profile states one, else at DRAM's). Exact integers,
    so a solver's objective can equal it (``formulations/time.md``).

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    >>> hw = load_hardware("nvidia-h100")
    >>> kernel_time_ps(g, ["a"], ["y"], hw) == -(-2048 * PS // int(hw.dram_bandwidth)) + round(hw.launch_overhead_s * PS)
    True
    """
    if kernel_free(graph, nodes, writes):
        return 0
    ops = [v for p in pass_nodes(graph, nodes) for v in p] if passes > 1 else list(nodes)
    flops = sum(graph.flops(v) for v in ops)
    dtype = graph.tensors[graph.index.node[nodes[0]].outputs[0]].dtype
    nbytes = kernel_traffic(graph, nodes, writes, passes)
    mem = -(-nbytes * PS // max(1, int(hw.bandwidth(nbytes))))
    compute = -(-flops * PS // max(1, int(hw.peak(dtype))))
    return max(mem, compute) + launch_ps(hw)


def launch_ps(hw: Hardware) -> int:
    """A kernel's launch overhead in integer picoseconds.

    >>> from solverfuse.hardware import load_hardware
    >>> launch_ps(load_hardware("nvidia-h100")) > 0
    True
    """
    return round(hw.launch_overhead_s * PS)


def group_time_ps(graph: Graph, nodes: Sequence[str], hw: Hardware) -> int:
    """:func:`kernel_time_ps` of a partition's group (its writes: :func:`group_writes`)."""
    return kernel_time_ps(graph, nodes, group_writes(graph, nodes), hw)


def plan_time_ps(graph: Graph, groups: Iterable[Sequence[str]], hw: Hardware) -> int:
    """Predicted time of a partition in picoseconds: its kernels one after another."""
    return sum(group_time_ps(graph, g, hw) for g in groups)


def covering_time_ps(graph: Graph, kernels: Iterable[Kernel], hw: Hardware) -> int:
    """Predicted time of a covering plan in picoseconds."""
    return sum(kernel_time_ps(graph, k.nodes, k.writes, hw, k.passes) for k in kernels)
