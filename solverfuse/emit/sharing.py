"""How the threads share a program's work: which kernels run on them (a group's work,
:func:`kernel_work`, against ``PARALLEL_MIN_WORK``; a run of parallel kernels against
``REGION_MIN_WORK``: :func:`parallel_groups`) and how many leading loops of a parallel loop
nest they share (:func:`parallel_dims`); a run of helper calls split into one contiguous share
per thread (:func:`thread_runs`). The thresholds are speed choices, measured in
``benchmarks/``; :class:`~solverfuse.emit.kernel.Kernel` and
:func:`~solverfuse.emit.program.render` read them here at the time they run.

>>> parallel_dims([5, 24], 2, dynamic=True), parallel_dims([5, 24], 2)
(2, 1)
"""
from __future__ import annotations

from typing import Sequence

from .. import cost
from ..graph import Graph
from ..ops import numel

#: Below this much work (flops + elements read and written) a kernel runs on one thread: waking
#: a sleeping worker costs 16-22 us on the benchmark host (passive waits, a KVM guest), so a kernel
#: of a few microseconds gains little from a second thread. At 2^18, fused kernels of small models
#: crossed it where their unfused parts did not: EfficientNet's optimal plan ran 1.96x its unfused
#: plan at 2 threads, 1.07x at 2^20 (same run conditions); the light models did not slow down.
PARALLEL_MIN_WORK = 1 << 20

#: Below this much work in all, a run of consecutive parallel kernels (one parallel region of
#: :mod:`~.team`, one worker wake-up) runs serial too: a region pays the 16-22 us wake once, and
#: saves half its kernels' time. A tiny model with one kernel just over PARALLEL_MIN_WORK (ResNet
#: from a transformers config: one 1.2e6-work stem conv) ran 44 us at 1 thread, 71-124 us at 2.
REGION_MIN_WORK = 1 << 22


#: At most this many consecutive small groups between two parallel ones run on the threads too
#: (:func:`parallel_groups`): serial, they would end the region and the next would wake the worker
#: again; in it they cost a barrier each with both threads awake.
ABSORB_MAX = 2


def parallel_groups(works: Sequence[int], views: Sequence[bool], threads: int) -> list[bool]:
    """Which groups of a plan run on the threads, from each group's :func:`kernel_work` and
    whether it is a view group (no kernel; it does not end a region): those of at least
    ``PARALLEL_MIN_WORK`` whose run of consecutive parallel groups does at least
    ``REGION_MIN_WORK`` in all; and up to ``ABSORB_MAX`` small groups between two parallel ones
    (AlexNet's max pools between its convolutions: one region per run instead of four).

    >>> parallel_groups([1 << 21, 5, 1 << 21, 1 << 21], [False, True, False, False], 2)
    [True, False, True, True]
    >>> parallel_groups([1 << 21, 5, 1 << 21], [False, False, False], 2)
    [False, False, False]
    >>> parallel_groups([1 << 23, 5, 1 << 23, 5, 5, 5, 1 << 23], [False] * 7, 2)
    [True, True, True, False, False, False, True]
    """
    big = [threads > 1 and not v and w >= PARALLEL_MIN_WORK for w, v in zip(works, views)]
    out = [False] * len(big)
    i = 0
    while i < len(big):
        if not big[i]:
            i += 1
            continue
        end = i
        while end < len(big) and (big[end] or views[end]):
            end += 1
        if sum(w for w, b in zip(works[i:end], big[i:end]) if b) >= REGION_MIN_WORK:
            out[i:end] = big[i:end]
        i = end
    kernels = [i for i, v in enumerate(views) if not v]
    shared = [k for k in range(len(kernels)) if out[kernels[k]]]  # positions in ``kernels``
    for p, q in zip(shared, shared[1:]):  # two parallel groups with 1..ABSORB_MAX kernels between
        if 1 < q - p <= ABSORB_MAX + 1:
            for k in range(p + 1, q):
                out[kernels[k]] = True
    return out


#: Work per flop of a convolution with one output channel per group (depthwise): its one-channel
#: tile loads an input vector for every multiply-add (a dense conv's tile: 7 loads for 12), and its
#: per-channel copy and epilogue are paid on a plane of a few dozen positions: ShuffleNet's 3x3
#: depthwise convs ran at 10-36 GFLOP/s, its dense 1x1 convs at 46-76 (1 thread, Zen 3). At flops
#: x 1 its 544-channel 7x7 ones (0.05 ms each) ran serial at 2 threads between parallel 1x1 convs,
#: splitting their region; x 4: ShuffleNet at 2 threads 3.18 -> 3.09 ms (medians of 11 alternated
#: rounds), the MobileNet-v2, EfficientNet and ConvNeXt exports unchanged (0.089, 0.089, 0.037 ms).
DEPTHWISE_FLOP_WEIGHT = 4


def kernel_work(graph: Graph, nodes: Sequence[str]) -> int:
    """Flops plus elements read and written of a group: what decides whether threads pay off (the
    flops of a depthwise convolution ``DEPTHWISE_FLOP_WEIGHT`` times).

    >>> from solverfuse.graph import load_graph
    >>> g = load_graph({"tensors": {"x": {"shape": [8, 16]}}, "inputs": ["x"], "outputs": ["y"],
    ...     "nodes": [{"name": "r", "op": "Relu", "inputs": ["x"], "outputs": ["y"]}]})
    >>> kernel_work(g, ["r"])
    384
    >>> g = load_graph({"tensors": {"x": {"shape": [1, 4, 5, 5]}, "w": {"shape": [4, 1, 3, 3], "constant": True}},
    ...     "inputs": ["x"], "outputs": ["y"], "nodes": [{"name": "c", "op": "Conv", "inputs": ["x", "w"],
    ...     "outputs": ["y"], "attributes": {"group": 4, "pads": [1, 1, 1, 1]}}]})
    >>> kernel_work(g, ["c"]) - (100 + 36 + 100), g.flops("c")   # 4 x its flops (4 channels x 25 x 9 x 2)
    (7200, 1800)
    """
    tensors = list(cost.group_reads(graph, nodes)) + list(cost.group_writes(graph, nodes))
    flops = cost.group_flops(graph, nodes) \
        + (DEPTHWISE_FLOP_WEIGHT - 1) * cost.group_flops(graph, [v for v in nodes if _depthwise(graph, v)])
    return flops + sum(numel(graph.tensors[t].shape) for t in tensors)


def _depthwise(graph: Graph, v: str) -> bool:
    """Whether node ``v`` is a convolution with one output channel per group (its weight's first
    dimension equals the group count)."""
    node = graph.index.node[v]
    group = int(node.attributes.get("group", 1))
    return node.op == "Conv" and group > 1 and graph.tensors[node.inputs[1]].shape[0] == group


def parallel_dims(trips: Sequence[int], threads: int, dynamic: bool = False) -> int:
    """How many leading loops of a parallel nest (trip counts ``trips``, outermost first) the
    threads share: the outermost alone when its trip count gives every thread work, else as many
    leading loops as it takes -- never the innermost of several (collapsing it into the parallel
    index stops vectorisation); a single loop is split into per-thread chunks. 0: too few
    iterations to share. ``dynamic`` (every iteration of the nest a whole tile, no vector loop
    among them, the threads taking them as they go): as many leading loops as it takes for
    the shares to come out even -- a trip count that is a multiple of the threads, or at least 8
    per thread. Inception v1's 55x55 3x3 conv has 5 bands of rows x 24 blocks of channels: 5
    bands on 2 threads are 3 + 2 (the kernel took 0.6 of its 1-thread time), 120 tiles 60 + 60.
    A single loop of whole tiles is shared from one tile per thread (BERT's FFN output + LayerNorm:
    2 tiles of 64 rows, which ran serial under the plain loop's 2 per thread).

    >>> parallel_dims([64, 3136], 2), parallel_dims([3, 3136], 2), parallel_dims([3], 2)
    (1, 1, 0)
    >>> parallel_dims([1 * 32, 8], 2, dynamic=True), parallel_dims([7, 3], 4, dynamic=True)
    (1, 2)
    >>> parallel_dims([2], 2, dynamic=True), parallel_dims([1], 2, dynamic=True)
    (1, 0)
    """
    if not trips:
        return 0
    if len(trips) == 1:
        return 1 if trips[0] >= (threads if dynamic else 2 * threads) else 0
    n, total = 0, 1
    if dynamic:
        while n < len(trips) and not (n and (total % threads == 0 or total >= 8 * threads)):
            total *= trips[n]
            n += 1
        return n if total >= threads else 0
    while n < len(trips) - 1 and total < 2 * threads:
        total *= trips[n]
        n += 1
    return n if total >= threads else 0


def thread_runs(k, n: int, call, fill: str = "") -> None:
    """The C call ``call(first, count)`` over items 0..``n``-1 (planes of a conv input copy,
    blocks of rows of a packed matmul A), then the statement ``fill``: with threads, each thread
    takes one contiguous run of items (a serial copy took 10-20% of a 3x3 conv's time at 2
    threads on 13x13 planes) and the first run's thread also fills: one parallel loop, one barrier
    after it in the run's team. ``k``: the :class:`~solverfuse.emit.kernel.Kernel` emitting it."""
    if k.threads == 1 or n < k.threads:
        if fill:
            k.line(fill)
        k.line(call("0", str(n)))
        return
    step = -(-n // k.threads)
    c = k.fresh("c")
    k.line(f"#pragma omp parallel for schedule(static) num_threads({k.threads})")
    with k.block(f"for (long {c} = 0; {c} < {n}; {c} += {step})"):
        k.line(call(c, f"sf_min({step}, {n} - {c})"))
        if fill:
            k.line(f"if ({c} == 0) {fill}")
