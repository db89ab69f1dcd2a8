"""Brute-force oracle: the least-traffic (or least-time) legal plan of a small graph, by enumerating
partitions.

Independent of the CP-SAT formulations and their presolve: it walks every set partition of the
ops (ops in graph order; each op joins an existing group or opens a new one), prunes a branch as
soon as a group breaks ``cost.group_violation`` (fusion rules and capacity only get worse when a
group grows: ``formulations/reality.md``), and keeps a complete partition only if ``plans.order_groups`` finds an
execution order (an acyclic quotient, which also implies every group is convex). Exponential:
meant for graphs of up to about 10 ops, to check the solver.

>>> from solverfuse.graph import load_graph
>>> from solverfuse.hardware import load_hardware
>>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y"],
...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]}]})
>>> brute_force(g, load_hardware("nvidia-h100"))
(2048, [['a', 'b']], 2)
"""
from __future__ import annotations

import heapq
from itertools import combinations
from typing import Sequence

from . import cost
from .errors import PlanError
from .graph import Graph
from .hardware import Hardware
from .mapping import loop_passes, pass_nodes
from .plans import order_groups


def _joined(graph: Graph, ops: Sequence[str]) -> bool:
    """Whether ``ops`` are connected through tensors (one produces what another reads, or both read
    it): the groups the formulations' columns span."""
    touch = {v: {t for t in graph.index.node[v].inputs + graph.index.node[v].outputs if t} for v in ops}
    seen, todo = {ops[0]}, [ops[0]]
    while todo:
        v = todo.pop()
        for u in ops:
            if u not in seen and touch[u] & touch[v]:
                seen.add(u)
                todo.append(u)
    return len(seen) == len(ops)


def _least(graph: Graph, hw: Hardware, max_ops: int, score, keep=lambda groups: True) -> tuple:
    """(least ``score(groups)``, one partition reaching it, number of legal partitions seen) over
    every legal partition (``keep`` filters them further): the one enumeration both objectives use."""
    nodes = list(graph.index.order)
    if len(nodes) > max_ops:
        raise ValueError(f"brute force is for graphs of at most {max_ops} ops, this one has {len(nodes)}")
    best: list = [None, None]
    legal = 0
    groups: list[list[str]] = []

    def rec(i: int) -> None:
        nonlocal legal
        if i == len(nodes):
            if not keep(groups):
                return
            try:
                order_groups(graph, groups)
            except PlanError:
                return
            legal += 1
            t = score(groups)
            if best[0] is None or t < best[0]:
                best[0], best[1] = t, [list(g) for g in groups]
            return
        v = nodes[i]
        for g in groups:
            g.append(v)
            if cost.group_violation(graph, g, hw) is None:
                rec(i + 1)
            g.pop()
        groups.append([v])
        rec(i + 1)
        groups.pop()

    rec(0)
    return best[0], best[1], legal


def brute_force(graph: Graph, hw: Hardware, max_ops: int = 11) -> tuple[int, list[list[str]], int]:
    """(least traffic, one optimal partition, number of legal partitions seen)."""
    return _least(graph, hw, max_ops, lambda groups: cost.plan_traffic(graph, groups))


def kernel_time(graph: Graph, hw: Hardware, nodes: list[str]) -> int:
    """Picoseconds of one group by the time objective's definition (``formulations/time.md``),
    written out here rather than taken from the solver: 0 for a group of views writing no graph
    output; else ``max(ceil(B * 1e12 / bw), ceil(F * 1e12 / peak)) + launch`` with ``B`` the
    group's bytes (``cost.group_traffic``), ``bw`` the bandwidth of the smallest cache level its
    ``B`` bytes fit in (DRAM's when none or when the level states none), ``F`` its ops' flops and
    ``peak`` the peak of its first op's dtype."""
    views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
    outputs = set(graph.outputs)
    if all(graph.index.node[v].op in views and not outputs & set(graph.index.node[v].outputs) for v in nodes):
        return 0
    b = cost.group_traffic(graph, nodes)
    bw = hw.dram_bandwidth
    if hw.l3_bytes is not None and b <= hw.l3_bytes and hw.l3_bandwidth:
        bw = hw.l3_bandwidth
    if b <= hw.l2_bytes and hw.l2_bandwidth:
        bw = hw.l2_bandwidth
    f = sum(graph.flops(v) for v in nodes)
    dtype = graph.tensors[graph.index.node[nodes[0]].outputs[0]].dtype
    peak = hw.peak_flops.get(dtype, hw.peak_flops.get("float32", max(hw.peak_flops.values())))
    ps = 10 ** 12
    return max(-(-b * ps // int(bw)), -(-f * ps // int(peak))) + round(hw.launch_overhead_s * ps)


def brute_force_time(graph: Graph, hw: Hardware, max_ops: int = 9, connected: bool = False) -> tuple[int, list[list[str]], int]:
    """(least predicted time in picoseconds (:func:`kernel_time` summed), one fastest partition,
    number of legal partitions seen) over every legal partition -- groups need not be connected,
    so two kernels that share no tensor may merge to save a launch. ``connected``: only partitions
    whose every group is connected (ops joined through tensors one produces and another reads, or
    both read), the space the solver searches.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}, "y": {"shape": [4]}}, "inputs": ["x", "y"],
    ...     "outputs": ["a", "b"], "nodes": [{"name": "p", "op": "Relu", "inputs": ["x"], "outputs": ["a"]},
    ...                                     {"name": "q", "op": "Relu", "inputs": ["y"], "outputs": ["b"]}]})
    >>> hw = load_hardware("nvidia-h100")
    >>> brute_force_time(g, hw)[1], brute_force_time(g, hw, connected=True)[1]
    ([['p', 'q']], [['p'], ['q']])
    """
    return _least(graph, hw, max_ops, lambda groups: sum(kernel_time(graph, hw, g) for g in groups),
                  keep=(lambda groups: all(_joined(graph, g) for g in groups)) if connected else (lambda groups: True))


def _cheapest_covering(graph: Graph, hw: Hardware, max_ops: int, weigh, keep=lambda combo: True) -> tuple:
    """The shortest path of :func:`brute_force_covering`, kernels weighed by ``weigh(ops, writes,
    passes)``, over the kernels whose ops ``keep`` accepts."""
    nodes = list(graph.index.order)
    if len(nodes) > max_ops:
        raise ValueError(f"brute force is for graphs of at most {max_ops} ops, this one has {len(nodes)}")
    tensors = [t for v in nodes for t in graph.index.node[v].outputs if t]
    tbit = {t: 1 << i for i, t in enumerate(tensors)}
    outputs = graph.index.outputs
    kernels = []  # (op mask, needed tensor mask, [(write mask, writes, cost)], nodes, passes)
    for size in range(1, len(nodes) + 1):
        for combo in combinations(nodes, size):
            if not keep(combo):
                continue
            for passes in sorted({1, loop_passes(graph, combo)}):
                if cost.kernel_violation(graph, list(combo), hw, passes) is not None:
                    continue
                need = sum(tbit[t] for t in cost.group_reads(graph, combo) if t in tbit)
                out = [t for v in combo for t in graph.index.node[v].outputs
                       if t and (t in outputs or graph.index.consumers.get(t))]
                options = [(sum(tbit[t] for t in ws), ws, weigh(combo, ws, passes))
                           for k in range(len(out) + 1) for ws in combinations(out, k)]
                kernels.append((sum(1 << nodes.index(v) for v in combo), need, options, combo, passes))
    full = (1 << len(nodes)) - 1
    goal_t = sum(tbit[t] for t in outputs if t in tbit)
    start = (0, 0)
    dist = {start: 0}
    back: dict = {}
    heap = [(0, start)]
    while heap:
        d, state = heapq.heappop(heap)
        if d > dist[state]:
            continue
        ops, mem = state
        if ops == full and mem & goal_t == goal_t:
            plan = []
            while state in back:
                state, kern = back[state]
                plan.append(kern)
            return d, plan[::-1]
        for opmask, need, options, combo, passes in kernels:
            if need & ~mem:
                continue
            for wmask, ws, c in options:
                if wmask & mem:
                    continue
                nxt = (ops | opmask, mem | wmask)
                if nxt == state:
                    continue
                nd = d + c
                if nd < dist.get(nxt, nd + 1):
                    dist[nxt] = nd
                    back[nxt] = (state, cost.Kernel(combo, ws, passes))
                    heapq.heappush(heap, (nd, nxt))
    raise ValueError("bug: no covering found, but every op alone is one")


def brute_force_covering(graph: Graph, hw: Hardware, max_ops: int = 7) -> tuple[int, list[cost.Kernel]]:
    """(least traffic, one optimal covering plan as kernels in execution order) over every plan
    with recomputation and looped reductions (``formulations/covering.md``).

    A plan is a *sequence* of kernels; this is a shortest path (Dijkstra) over states (ops covered
    so far, tensors in memory so far). From a state, a kernel may run when every tensor it reads
    from outside is a source or in memory; it is any set of ops legal as one pass or as a looped
    kernel (``cost.kernel_violation``), not only connected or convex ones (a path may leave it and
    come back through tensors earlier kernels wrote; it computes its ops in graph order), and it
    writes any subset of the tensors it produces that are not yet in memory, at ``cost.kernel_traffic``. The goal: every
    op covered and every graph output in memory. Writes nobody reads cost at least 0, so allowing
    them does not change the optimum. Shares nothing with the CP-SAT covering model but the cost
    model; exponential in the number of ops.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> brute_force_covering(g, load_hardware("nvidia-h100"))[0]
    3072
    """
    return _cheapest_covering(graph, hw, max_ops, lambda ops, ws, passes: cost.kernel_traffic(graph, ops, ws, passes))


def covering_kernel_time(graph: Graph, hw: Hardware, nodes, writes, passes: int = 1) -> int:
    """Picoseconds of one kernel of a covering by the time objective's definition
    (``formulations/time.md``), written out here rather than taken from the solver: 0 for a kernel
    of views writing no graph output; else ``max(ceil(B * 1e12 / bw), ceil(F * 1e12 / peak)) +
    launch`` with ``B`` its bytes (``cost.kernel_traffic``: every pass's reads and its writes),
    ``bw`` the bandwidth of the smallest cache level ``B`` fits in (DRAM's when none or when the
    level states none), ``F`` the flops of every op of every pass (a looped kernel recomputes the
    ops of each pass: ``mapping.pass_nodes``) and ``peak`` the peak of its first op's dtype."""
    views = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
    if all(graph.index.node[v].op in views for v in nodes) and not set(writes) & set(graph.outputs):
        return 0
    b = cost.kernel_traffic(graph, list(nodes), list(writes), passes)
    bw = hw.dram_bandwidth
    if hw.l3_bytes is not None and b <= hw.l3_bytes and hw.l3_bandwidth:
        bw = hw.l3_bandwidth
    if b <= hw.l2_bytes and hw.l2_bandwidth:
        bw = hw.l2_bandwidth
    ops = [v for p in pass_nodes(graph, list(nodes)) for v in p] if passes > 1 else list(nodes)
    f = sum(graph.flops(v) for v in ops)
    dtype = graph.tensors[graph.index.node[nodes[0]].outputs[0]].dtype
    peak = hw.peak_flops.get(dtype, hw.peak_flops.get("float32", max(hw.peak_flops.values())))
    ps = 10 ** 12
    return max(-(-b * ps // int(bw)), -(-f * ps // int(peak))) + round(hw.launch_overhead_s * ps)


def brute_force_covering_time(graph: Graph, hw: Hardware, max_ops: int = 6,
                              connected: bool = False) -> tuple[int, list[cost.Kernel]]:
    """(least predicted time in picoseconds (:func:`covering_kernel_time` summed), one fastest
    covering plan as kernels in execution order) over every plan with recomputation and looped
    reductions -- the shortest path of :func:`brute_force_covering` with kernels timed instead of
    weighed: a kernel is any set of ops (convex or not) legal as one pass or looped
    (``cost.kernel_violation``), writing any subset of the tensors it produces not yet in memory.
    ``connected``: only kernels whose ops are joined through tensors (one produces what another
    reads, or both read it), the space the covering formulation's columns span.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}, "y": {"shape": [4]}}, "inputs": ["x", "y"],
    ...     "outputs": ["a", "b"], "nodes": [{"name": "p", "op": "Relu", "inputs": ["x"], "outputs": ["a"]},
    ...                                     {"name": "q", "op": "Relu", "inputs": ["y"], "outputs": ["b"]}]})
    >>> hw = load_hardware("nvidia-h100")
    >>> [k.nodes for k in brute_force_covering_time(g, hw)[1]], len(brute_force_covering_time(g, hw, connected=True)[1])
    ([('p', 'q')], 2)
    """

    return _cheapest_covering(graph, hw, max_ops, lambda ops, ws, passes: covering_kernel_time(graph, hw, ops, ws, passes),
                              keep=(lambda combo: _joined(graph, combo)) if connected else (lambda combo: True))
