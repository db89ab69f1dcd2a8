"""Lower bounds on the predicted run time (``cost.kernel_time_ps``) of every legal plan.

The time objective's search space is the connected groups (as for traffic), but under time a
group of two pieces that share no tensor can beat the pieces: it saves a launch and overlaps one
piece's memory time with the other's compute. So the connected optimum is not a bound by itself.
``formulations/time.md`` derives the two bounds computed here:

* :func:`time_floor_ps` -- valid for every plan, partition or covering (any groups, connected or
  not): ``max(memory floor, compute floor) + K_min x launch``, where the memory floor charges the
  traffic bound's bytes at the fastest bandwidth except the bytes some kernel of a known least
  working set must move (every graph output, every source read in full), charged at that working
  set's bandwidth; the compute floor is every non-view op's flops at the highest peak; ``K_min``
  (:func:`min_kernels`) is a set of ops no two of which may share a kernel.
* :func:`merge_pair` -- the condition under which the connected optimum *is* the global one: if no
  two ops with no path between them and no tensor in common may share a kernel, no legal group has
  two pieces (and a group with a free piece is never faster than without it), so every plan's time
  is at least the connected optimum's.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> from solverfuse import cost
>>> g = load_graph({"tensors": {"x": {"shape": [1 << 20]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> hw = load_hardware("nvidia-h100")
>>> time_floor_ps(g, hw, cost.q_min(g)) == cost.plan_time_ps(g, [["a", "b"]], hw), merge_pair(g, hw)
(True, None)
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Optional, Sequence

from . import cost, dag
from .graph import Graph
from .hardware import Hardware
from .rules import facts

Violation = Callable[[Graph, Sequence[str], Hardware], Optional[str]]
#: Graphs with more ops than this skip the pairwise checks (``min_kernels`` answers 1,
#: ``merge_pair`` answers "unknown").
PAIR_OPS = 400


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _needs_kernel(graph: Graph, v: str) -> bool:
    """Whether op ``v`` runs in a kernel that is not free in every plan (a non-view op, or a view
    writing a graph output)."""
    return not facts(graph, v).view or any(t in graph.index.outputs for t in graph.index.node[v].outputs)


def pinned_bytes(graph: Graph) -> dict[str, tuple[int, int]]:
    """Tensors whose bytes some kernel of a known least working set must move, in every plan:
    tensor -> (bytes, least working set). Each graph output is written once, at its size, by a
    kernel that is not free and holds its producer ``p``; each source read by an op ``c`` that is
    neither a view nor a gather reading it as data is read at its size by a kernel holding ``c``.
    That kernel also reads ``c``'s (``p``'s) other such sources in full (every copy of an op reads
    its sources from memory, so this holds for coverings too), so its working set is at least their
    sum (for a source: the least such sum over its readers).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}, "b": {"shape": [1], "constant": True}},
    ...     "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Add", "inputs": ["x", "b"], "outputs": ["y"]}]})
    >>> sorted(pinned_bytes(g).items())
    [('b', (4, 20)), ('x', (16, 20)), ('y', (16, 36))]
    """

    def held(v: str) -> list[str]:
        """Op ``v``'s sources it reads in full (none for a view)."""
        if facts(graph, v).view:
            return []
        node = graph.index.node[v]
        return [t for t in dict.fromkeys(node.inputs) if t and graph.is_source(t) and not cost.partial_reader(graph, v, t)
                and node.op != "Split"]  # a kernel may load only the pieces it uses

    def ws(v: str) -> int:
        return sum(graph.nbytes(t) for t in held(v))

    out: dict[str, tuple[int, int]] = {}
    for n in graph.nodes:
        for t in held(n.name):
            least = ws(n.name)
            out[t] = (graph.nbytes(t), min(out[t][1], least) if t in out else least)
    for t in dict.fromkeys(graph.outputs):
        if not graph.is_source(t):
            out[t] = (graph.nbytes(t), graph.nbytes(t) + ws(graph.index.producer[t]))
    return out


def memory_floor_ps(graph: Graph, hw: Hardware, traffic_bound: int) -> int:
    """A lower bound on the sum of the kernels' memory terms, given that every plan moves at least
    ``traffic_bound`` bytes: the pinned bytes (:func:`pinned_bytes`) at the bandwidth of their
    least working set, the rest at the fastest.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    >>> hw = load_hardware("nvidia-h100")
    >>> memory_floor_ps(g, hw, 2048) == -(-2048 * cost.PS // int(hw.dram_bandwidth))
    True
    """
    pinned = pinned_bytes(graph)
    fast = max(1, int(hw.bandwidth(0)))
    known = sum(b for b, _ in pinned.values())
    total = Fraction(max(0, traffic_bound - known) * cost.PS, fast)
    for b, w in pinned.values():
        total += Fraction(b * cost.PS, max(1, int(hw.bandwidth(w))))
    return _ceil(total)


def compute_floor_ps(graph: Graph, hw: Hardware, nodes: Optional[Sequence[str]] = None) -> int:
    """Every non-view op's flops (views may ride free) at the profile's highest peak."""
    flops = sum(graph.flops(v) for v in (graph.index.order if nodes is None else nodes) if not facts(graph, v).view)
    return -(-flops * cost.PS // max(1, max(int(p) for p in hw.peak_flops.values())))


def _hull(graph: Graph, a: str, b: str) -> list[str]:
    pos = graph.index.position
    i, j = sorted((pos[a], pos[b]))
    bits = (graph.index.desc[i] & graph.index.anc[j]) | (1 << i) | (1 << j)
    return [graph.index.order[k] for k in dag.bits(bits)]


def min_kernels(graph: Graph, hw: Hardware, nodes: Optional[Sequence[str]] = None,
                violation: Violation = cost.group_violation, convex: bool = True) -> int:
    """A lower bound on the number of kernels that are not free, in every plan of ``nodes``: the
    size of a set of ops that need a kernel and no two of which may share one (their hull -- every
    op on a path between them, which a convex group holding both holds -- breaks ``violation``;
    with ``convex=False``, for coverings whose kernels may be non-convex, the pair alone does),
    found greedily (opaque and anchor ops first). 0 when no op needs a kernel.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [8, 8]}, "w": {"shape": [8, 8], "constant": True}},
    ...     "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "m", "op": "MatMul", "inputs": ["x", "w"], "outputs": ["h"]},
    ...               {"name": "n", "op": "MatMul", "inputs": ["h", "w"], "outputs": ["y"]}]})
    >>> min_kernels(g, load_hardware("nvidia-h100"))
    2
    """
    ops = [v for v in (graph.index.order if nodes is None else nodes) if _needs_kernel(graph, v)]
    if not ops:
        return 0
    if len(ops) > PAIR_OPS:
        return 1
    rank = {"opaque": 0, "anchor": 1}
    ops.sort(key=lambda v: (rank.get(facts(graph, v).role, 2), graph.index.position[v]))
    clique: list[str] = []
    for v in ops:
        if all(violation(graph, _hull(graph, u, v) if convex else [u, v], hw) is not None for u in clique):
            clique.append(v)
    return len(clique)


def merge_pair(graph: Graph, hw: Hardware, nodes: Optional[Sequence[str]] = None,
               violation: Violation = cost.group_violation, convex: bool = True) -> Optional[tuple[str, ...]]:
    """Two ops that need a kernel, with no path between them and no tensor in common, that may
    share one (so a group of two pieces that are not free is legal); ``()`` when unknown (too many
    ops to look, or ops of dtypes with different peaks); None when no such pair exists: then the
    connected optimum is the optimum of every partition (``formulations/time.md``). With
    ``convex=False`` (coverings, whose kernels may be non-convex) a path between the two does not
    join them: a kernel may hold both and not the ops on the path.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}, "y": {"shape": [4]}}, "inputs": ["x", "y"],
    ...     "outputs": ["a", "b"], "nodes": [{"name": "p", "op": "Relu", "inputs": ["x"], "outputs": ["a"]},
    ...                                     {"name": "q", "op": "Relu", "inputs": ["y"], "outputs": ["b"]}]})
    >>> merge_pair(g, load_hardware("nvidia-h100"))
    ('p', 'q')
    """
    ops = [v for v in (graph.index.order if nodes is None else nodes) if _needs_kernel(graph, v)]
    if len(ops) > PAIR_OPS:
        return ()
    # a kernel's flops run at the peak of its first op's dtype: with several peaks, a split can
    # slow a piece's compute down, so the argument below does not hold
    if len({hw.peak(graph.tensors[graph.index.node[v].outputs[0]].dtype) for v in ops}) > 1:
        return ()
    pos = graph.index.position
    desc = graph.index.desc
    touch = {v: {t for t in graph.index.node[v].inputs + graph.index.node[v].outputs if t} for v in ops}
    for i, a in enumerate(ops):
        for b in ops[i + 1:]:
            pa, pb = sorted((pos[a], pos[b]))
            if (convex and desc[pa] >> pb & 1) or touch[a] & touch[b]:
                continue
            if violation(graph, [a, b], hw) is None:
                return (a, b)
    return None


def time_floor_ps(graph: Graph, hw: Hardware, traffic_bound: int, violation: Violation = cost.group_violation,
                  convex: bool = True) -> int:
    """A lower bound on the predicted time of every plan of ``graph`` (partition or covering, any
    groups) that moves at least ``traffic_bound`` bytes: ``max(memory floor, compute floor) +
    K_min x launch`` (``formulations/time.md``). ``violation``: ``cost.group_violation`` for
    partitions, ``cost.looped_violation`` when looped kernels are allowed; ``convex=False`` for
    coverings (:func:`min_kernels`)."""
    return max(memory_floor_ps(graph, hw, traffic_bound), compute_floor_ps(graph, hw)) + \
        min_kernels(graph, hw, violation=violation, convex=convex) * cost.launch_ps(hw)


def part_floor_ps(graph: Graph, hw: Hardware, nodes: Sequence[str]) -> int:
    """A lower bound on the time of every plan of the ops ``nodes`` alone (a part the solver did
    not model): its traffic floor (``cost.plan_floor``) at the fastest bandwidth, its compute floor,
    and one launch if an op needs a kernel."""
    mem = -(-cost.plan_floor(graph, list(nodes)) * cost.PS // max(1, int(hw.bandwidth(0))))
    need = any(_needs_kernel(graph, v) for v in nodes)
    return max(mem, compute_floor_ps(graph, hw, nodes)) + (cost.launch_ps(hw) if need else 0)


__all__ = ["time_floor_ps", "memory_floor_ps", "compute_floor_ps", "min_kernels", "merge_pair", "pinned_bytes",
           "part_floor_ps"]
