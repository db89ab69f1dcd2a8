"""PyTorch Inductor's scheduler fusion as a baseline (see :func:`inductor`)."""
from __future__ import annotations

import re

from .. import cost
from ..errors import PlanError
from ..graph import Graph
from ..hardware import Hardware
from ..ops import MATERIALISED_INPUT_ROLES, OPS, numel
from ..plans import order_groups
from .merging import Partition, has_role


INDUCTOR_MAX_FUSION_SIZE = 64
INDUCTOR_ROUNDS = 10
INDUCTOR_PAIRWISE_ATTEMPTS = 64
#: Ops Inductor never makes a kernel of: views and no-op copies, lowered as index expressions
#: (``split`` lowers to one slice view per output).
INDUCTOR_VIEW_OPS = frozenset({"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Expand", "Identity",
                               "Flatten", "Slice", "Select", "Split"})
#: ``config.realize_reads_threshold``: a pointwise value read by several consumers is stored
#: (realised) when its inlined expression reads more buffers than this; else each recomputes it.
INDUCTOR_REALIZE_READS = 4
#: Roles Inductor always stores to a buffer of their own (reductions, extern and window calls).
INDUCTOR_STORED_ROLES = frozenset({"reduction", "anchor", "opaque", "window"})


def reads_from_memory(graph: Graph, consumer: str, tensor: str) -> bool:
    """Whether ``consumer`` needs ``tensor`` in a buffer (an extern call's or a ConcatKernel's
    argument, a gather's data); an in-loop consumer computes it in place instead.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 4]}, "w": {"shape": [4, 4], "constant": True}},
    ...     "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "e", "op": "Exp", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "mm", "op": "MatMul", "inputs": ["h", "w"], "outputs": ["y"]}]})
    >>> reads_from_memory(g, "mm", "h"), reads_from_memory(g, "e", "x")
    (True, False)
    """
    n = graph.index.node[consumer]
    if n.op == "Concat" or cost.role(graph, consumer) in MATERIALISED_INPUT_ROLES:
        return True
    info = OPS.get(n.op)
    return bool(info is not None and info.gather_data_input and n.inputs and n.inputs[0] == tensor)


def _through_views(graph: Graph) -> dict[str, list[tuple[str, str]]]:
    """For every op: (consumer, tensor it reads) pairs, looking through views (a view's
    consumers read its source), in graph order; a graph output or an unread view reads as ('', '')."""
    node, succs, order = graph.index.node, graph.index.succs, graph.index.order
    outputs = set(graph.outputs)
    eff: dict[str, list[tuple[str, str]]] = {}
    for v in reversed(order):
        out: list[tuple[str, str]] = []
        if any(t in outputs for t in node[v].outputs) or not succs[v]:
            out.append(("", ""))
        for w in succs[v]:
            if node[w].op in INDUCTOR_VIEW_OPS:
                out += eff[w] if eff[w] else [("", "")]
            else:
                out += [(w, t) for t in node[w].inputs if t in node[v].outputs]
        eff[v] = list(dict.fromkeys(out))
    return eff


def realised_ops(graph: Graph) -> set[str]:
    """The non-view ops Inductor's lowering stores to a buffer -- its scheduler nodes; every other
    op is inlined into the loops of its consumers (recomputed in each when there are several).

    Stored: reductions, extern and window calls (and a Concat), graph outputs, an op an extern
    call, a ConcatKernel or a gather's data needs in memory (:func:`reads_from_memory`, looking
    through views), and an op read by several consumers whose inlined expression reads more than
    ``realize_reads_threshold`` = 4 buffers (``StorageBox.mark_reuse``).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "e", "op": "Exp", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "r", "op": "Relu", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "n", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> sorted(realised_ops(g))
    ['n', 'r']
    """
    node, order = graph.index.node, graph.index.order
    eff = _through_views(graph)
    producer = graph.index.producer
    stored: set[str] = set()
    reads: dict[str, frozenset[str]] = {}   # buffers the op's inlined expression reads
    for v in order:
        if node[v].op in INDUCTOR_VIEW_OPS:
            src = node[v].inputs[0] if node[v].inputs else ""
            p = producer.get(src)
            reads[v] = reads[p] if p is not None and p not in stored else frozenset({src} - {""})
            continue
        mine: set[str] = set()
        for t in node[v].inputs:
            p = producer.get(t) if t else None
            if p is not None and p not in stored:
                mine |= reads[p]
            elif t and graph.tensors[t].shape:  # a scalar constant is an immediate
                mine.add(t)
        reads[v] = frozenset(mine)
        users = eff[v]
        if (node[v].op == "Concat" or cost.role(graph, v) in INDUCTOR_STORED_ROLES
                or any(w == "" or reads_from_memory(graph, w, t) for w, t in users)
                or (len({w for w, _ in users}) > 1 and len(reads[v]) > INDUCTOR_REALIZE_READS)):
            stored.add(v)
    return stored


def inline_homes(graph: Graph, stored: set[str]) -> dict[str, str]:
    """For each op Inductor inlines (a view read in some loop included): the stored op whose loop
    computes it -- that of its first in-loop consumer (graph order, through views); stored ops map
    to themselves; a view only memory-reading calls read has none.

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4]}}, "inputs": ["x"], "outputs": ["y", "z"],
    ...     "nodes": [{"name": "e", "op": "Exp", "inputs": ["x"], "outputs": ["h"]},
    ...               {"name": "r", "op": "Relu", "inputs": ["h"], "outputs": ["y"]},
    ...               {"name": "n", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    >>> sorted(inline_homes(g, realised_ops(g)).items())
    [('e', 'r'), ('n', 'n'), ('r', 'r')]
    """
    node, order, pos = graph.index.node, graph.index.order, graph.index.position
    eff = _through_views(graph)
    home: dict[str, str] = {}
    for v in reversed(order):
        if node[v].op in INDUCTOR_VIEW_OPS:
            users = sorted({w for w, t in eff[v] if w in home and not reads_from_memory(graph, w, t)},
                           key=pos.__getitem__)
            if users:
                home[v] = home[users[0]]
            continue
        if v in stored:
            home[v] = v
            continue
        users = sorted({w for w, _ in eff[v] if w in home}, key=pos.__getitem__)
        home[v] = home[users[0]] if users else v
    return home


def iteration_numel(graph: Graph, v: str) -> int:
    """The loop a stored op runs: its output's elements, a reduction's input's (Inductor's CPU
    backend fuses two scheduler nodes only when they run the same loop).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 8]}}, "inputs": ["x"], "outputs": ["s"],
    ...     "nodes": [{"name": "r", "op": "ReduceSum", "inputs": ["x"], "outputs": ["s"],
    ...                "attributes": {"axes": [1], "keepdims": 1}}]})
    >>> iteration_numel(g, "r")
    32
    """
    n = graph.index.node[v]
    t = n.inputs[0] if cost.role(graph, v) == "reduction" and n.inputs and n.inputs[0] else n.outputs[0]
    return numel(graph.tensors[t].shape)


def _accessed(graph: Graph, nodes: list[str]) -> set[str]:
    return set(cost.group_reads(graph, nodes)) | set(cost.group_writes(graph, nodes))


def inductor(graph: Graph, hw: Hardware) -> list[list[str]]:
    """PyTorch Inductor's scheduler fusion (``torch/_inductor/scheduler.py``, ``fuse_nodes``).

    Lowering first (``GraphLowering``): only the ops :func:`realised_ops` names are stored to a
    buffer and become scheduler nodes; every other op (pointwise values, views) is computed inside
    the loop of the stored op :func:`inline_homes` names, so it starts in that op's group (latest
    op first, when our rules accept it and the group stays within 64 ops). A value several
    kernels read is recomputed in each by Inductor; a partition holds it once, in the first.

    Then the scheduler. Reproduced rules: up to 10 rounds of ``fuse_nodes_once`` until the
    number of nodes stops changing. Each round collects candidate pairs among nodes that use a common buffer (within
    each buffer's user list, in order, at most 64 pairwise attempts per node --
    ``max_fusion_buffer_group_pairwise_attempts``), keeps the pairs ``can_fuse`` accepts, sorts
    them by ``score_fusion``: (both or neither a reduction and sharing data, shared bytes,
    proximity in the original order), best first, and fuses each pair whose (current) nodes
    still ``can_fuse`` and where ``will_fusion_create_cycle`` is false. ``can_fuse`` refuses a
    node with itself, extern kernels, more than ``max_fusion_size`` = 64 ops, a pair sharing no
    data (``score_fusion_memory_threshold`` = 1 byte: horizontal fusion needs a common buffer),
    a pair whose first node reads the second; vertical fusions (the second reads the first)
    and horizontal ones (common reads) are both allowed.

    Shared bytes (``score_fusion_memory``) are the bytes of the tensors both groups access in
    global memory (:func:`cost.group_reads` / :func:`cost.group_writes` of each).

    The CPU backend's ``can_fuse`` (``_can_fuse_horizontal_impl`` / outer-loop fusion) needs
    both nodes to run one loop: here the stored ops of both groups iterate over the same number
    of elements (a reduction: its input's) -- llama's rotary ``neg`` half (8 columns) never joins
    the full-width (16) query kernel, nor the one-head key kernel the two-head query kernel.

    Adaptations: Conv/MatMul/Gemm are extern kernels (aten/cuBLAS/cuDNN) in Inductor's default
    mode (no ``max_autotune`` templates) and so never fused; so is a Concat (on CPU ``aten.cat``
    lowers to a ``ConcatKernel``: each input's kernel writes its slice of the output buffer, and
    the consumers read that buffer -- llama's rotary ``cat``, vit's class-token ``cat``). Inductor's backend checks
    (``can_fuse_vertical``: compatible loop sizes) are replaced by our op table's rules and
    capacity model, :func:`cost.group_violation`.
    """
    part = Partition(graph, hw)
    stored = realised_ops(graph)
    home = inline_homes(graph, stored)
    for v in reversed(graph.index.order):  # lowering: an inlined op runs in its consumer's loop
        if v in home and home[v] != v:
            a, b = part.gid[v], part.gid[home[v]]
            if a != b and len(part.members[a]) + len(part.members[b]) <= INDUCTOR_MAX_FUSION_SIZE \
                    and part.why_not([a, b]) is None:
                part.merge([a, b])
    loop_numel = {v: iteration_numel(graph, v) for v in stored}
    accessed_memo, reduction_memo, extern_memo = part.memo(), part.memo(), part.memo()
    loops_memo = part.memo()

    def loops(g: int) -> set[int]:
        if g not in loops_memo:
            loops_memo[g] = {loop_numel[v] for v in part.members[g] if v in loop_numel}
        return loops_memo[g]

    def accessed(g: int) -> set[str]:
        if g not in accessed_memo:
            accessed_memo[g] = _accessed(graph, part.members[g])
        return accessed_memo[g]

    def is_reduction(g: int) -> bool:
        if g not in reduction_memo:
            reduction_memo[g] = has_role(graph, part.members[g], "reduction")
        return reduction_memo[g]

    def extern(g: int) -> bool:
        if g not in extern_memo:
            extern_memo[g] = any(cost.role(graph, v) == "anchor" or graph.index.node[v].op == "Concat"
                                 for v in part.members[g])
        return extern_memo[g]

    def shared(a: int, b: int) -> int:
        sa, sb = accessed(a), accessed(b)
        common = sa & sb if len(sa) <= len(sb) else sb & sa
        return sum(graph.nbytes(t) for t in common)

    fusible: dict[tuple[int, int], tuple[int, int, bool]] = {}

    def can_fuse(a: int, b: int) -> bool:
        if a == b or extern(a) or extern(b):
            return False
        if len(part.members[a]) + len(part.members[b]) > INDUCTOR_MAX_FUSION_SIZE:
            return False
        if len(loops(a) | loops(b)) > 1:
            return False  # the backend's can_fuse: both run the same loop (same numel)
        # The answer depends on the two groups only: kept until either changes (most pairs
        # are asked again, unchanged, in every round).
        va, vb = part.version.get(a, 0), part.version.get(b, 0)
        hit = fusible.get((a, b))
        if hit is None or hit[0] != va or hit[1] != vb:
            ok = shared(a, b) >= 1 and cost.group_violation(graph, part.nodes([a, b]), hw) is None
            hit = fusible[(a, b)] = (va, vb, ok)
        return hit[2]

    for _ in range(INDUCTOR_ROUNDS):
        before = len(part.members)
        users: dict[str, list[int]] = {}
        for g in sorted(part.members, key=part.first.__getitem__):
            for t in sorted(accessed(g)):
                users.setdefault(t, []).append(g)
        pairs: dict[tuple[int, int], None] = {}
        tried: set[tuple[int, int]] = set()  # no group changes while the pairs are collected
        for gs in users.values():
            for i, a in enumerate(gs):
                for b in gs[i + 1:i + 1 + INDUCTOR_PAIRWISE_ATTEMPTS]:
                    if (a, b) not in tried:
                        tried.add((a, b))
                        if can_fuse(a, b):
                            pairs[(a, b)] = None

        def score(pair):
            a, b = pair
            mem = shared(a, b)
            lo_a, hi_a = part.first[a], part.pos[part.members[a][-1]]
            lo_b, hi_b = part.first[b], part.pos[part.members[b][-1]]
            return (is_reduction(a) == is_reduction(b) and mem > 0, mem,
                    -max(abs(lo_a - hi_b), abs(lo_b - hi_a)))
        ranked = sorted(pairs, key=score, reverse=True)
        # Pairs name the groups by their first op, resolved to the current group when fused.
        heads = [(part.members[a][0], part.members[b][0]) for a, b in ranked]
        for va, vb in heads:
            a, b = part.gid[va], part.gid[vb]
            if b in part.pred(a):
                continue  # can_fuse: node1 may not depend on node2 (node2 would have to run first)
            if can_fuse(a, b) and part.cycle_through([a, b]) is None:
                part.merge([a, b])
        if len(part.members) == before:
            break
    return fold_views(graph, hw, part.groups())


def fold_views(graph: Graph, hw: Hardware, groups: list[list[str]]) -> list[list[str]]:
    """Place view ops as Inductor's lowering does: a view is never a kernel of its own.

    Inductor inlines a view (reshape, permute, unsqueeze, expand, slice, select, a no-op clone)
    into the index expressions of the kernels that read it, and folds a view feeding an extern
    call (mm, conv, attention) into the call's operand strides. Reproduced, in reverse
    topological order: a view joins the group of its consumers (the earliest consumer's group
    when they run in several -- Inductor recomputes it in each); a view read only by ops that take
    their inputs from memory (extern calls, gathers) or by such views forms a view-only group with
    them (one per call); a view read only by Concats is a kernel of its own (it writes that slice of
    the ConcatKernel's buffer), with the views only it reads -- except that when such a chain reshapes after a transpose (the attention
    output's ``view -> permute -> view`` into the output projection), no stride expresses it and
    Inductor copies the extern call's output first: the chain's views before the transpose that
    read an extern call's output form a kernel of their own. A placement our rules reject (capacity, convexity) leaves the view alone.

    >>> from solverfuse.graph import load_graph
    >>> from solverfuse.hardware import load_hardware
    >>> g = load_graph({"tensors": {"x": {"shape": [4, 8]}, "w": {"shape": [8, 8], "constant": True},
    ...     "s": {"shape": [2], "dtype": "int64", "constant": True, "value": [8, 4]}},
    ...     "inputs": ["x"], "outputs": ["z"],
    ...     "nodes": [{"name": "t", "op": "Transpose", "inputs": ["w"], "outputs": ["wt"]},
    ...               {"name": "mm", "op": "MatMul", "inputs": ["x", "wt"], "outputs": ["y"]},
    ...               {"name": "r", "op": "Reshape", "inputs": ["y", "s"], "outputs": ["y2"]},
    ...               {"name": "e", "op": "Exp", "inputs": ["y2"], "outputs": ["z"]}]})
    >>> fold_views(g, load_hardware("nvidia-h100"), [["t"], ["mm"], ["r"], ["e"]])
    [['t'], ['mm'], ['r', 'e']]
    """
    node, succs, pos = graph.index.node, graph.index.succs, graph.index.position
    views = [v for v in graph.index.order if node[v].op in INDUCTOR_VIEW_OPS]
    if not views:
        return groups
    where: dict[str, int] = {v: i for i, g in enumerate(groups) for v in g}
    is_view = set(views)
    view_group: set[int] = set()
    to_concat: set[str] = set()
    fresh = len(groups)
    for v in reversed(views):
        cons = succs[v]
        src = graph.index.producer.get(node[v].inputs[0]) if node[v].inputs else None
        if not cons and node[v].op != "Identity" and src is not None and src in where and src not in is_view \
                and cost.role(graph, src) not in MATERIALISED_INPUT_ROLES:
            where[v] = where[src]  # an output view: the kernel computing its source writes it
            # (an output clone is a no-op Inductor removes: it stays alone)
            continue
        if not cons or any(w not in where for w in cons):
            where[v], fresh = fresh, fresh + 1
            continue
        if all(w in to_concat for w in cons):
            to_concat.add(v)  # computed in the loop that writes the slice
            where[v] = where[min(cons, key=pos.__getitem__)]
            continue
        if all(node[w].op == "Concat" or w in to_concat for w in cons):
            to_concat.add(v)  # each ConcatKernel input is a kernel writing its slice
            where[v], fresh = fresh, fresh + 1
            continue
        plain = [w for w in cons if cost.role(graph, w) not in MATERIALISED_INPUT_ROLES
                 and not (w in is_view and where[w] in view_group)]
        if plain:
            first = min(plain, key=pos.__getitem__)
            where[v] = where[first]
        else:
            into = [where[w] for w in cons if w in is_view and where[w] in view_group]
            if into:
                where[v] = into[0]
            else:
                where[v], fresh = fresh, fresh + 1
                view_group.add(where[v])
    for gid in view_group:
        members = [v for v in views if where[v] == gid]
        first_t = min((pos[v] for v in members if node[v].op == "Transpose"), default=None)
        if first_t is None or not any(node[v].op in ("Reshape", "Flatten") and pos[v] > first_t
                                      and not any(node[c].op == "Identity" and first_t < pos[c] < pos[v]
                                                  for c in members)
                                      for v in members):
            continue  # no reshape after the transpose, or a clone (a copy) already between them
        for v in members:  # a reshape after a transpose is no stride: the chain's head is copied
            p = graph.index.producer.get(node[v].inputs[0]) if node[v].inputs else None
            if p is not None and cost.role(graph, p) in MATERIALISED_INPUT_ROLES and pos[v] < first_t:
                where[v], fresh = fresh, fresh + 1
    out: dict[int, list[str]] = {}
    for v in graph.index.order:
        out.setdefault(where[v], []).append(v)
    folded = list(out.values())
    for k, g in enumerate(folded):
        if len(g) > 1 and any(v in is_view for v in g) and cost.group_violation(graph, g, hw):
            folded[k] = [v for v in g if v not in is_view]
            folded += [[v] for v in g if v in is_view]
    folded = [g for g in folded if g]
    for _ in range(len(views) + 1):
        try:
            order_groups(graph, folded)
            return folded
        except PlanError as e:  # a view that makes its group non-convex stays alone
            names = re.findall(r"'([^']+)'", str(e))
            grp = next((g for g in folded if names and names[0] in g), None)
            moved = next((v for v in names if grp is not None and v in grp and v in is_view), None)
            if moved is None:
                break
            grp.remove(moved)
            folded.append([moved])
    return groups  # the placements made the groups cyclic: keep the scheduler's partition
