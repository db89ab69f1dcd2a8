"""A Concat along the channels with pointwise ops after it in the same group (DenseNet: the new
layer's conv output concatenated to the block's features, then the next layer's BatchNorm, Mul,
Add, ReLU over all of it): one pass per input of the Concat, each over the input's own channels,
the ops after the Concat computed at the shifted channel -- an in-group conv feeding the Concat
keeps its tile (no scratch copy), an outside input is read once. Against ONNX Runtime at 1 and
2 threads with odd channel counts and batch 2, three inputs, an input that is itself computed
in the group, under AddressSanitizer, and the byte counters against the cost model's rules."""
from __future__ import annotations

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph, model_counts, run_plan


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-concat-post-cache")



def _dense(n=1, c_in=5, c_new=3, h=11, w=13, k=3, ci=7):
    """features f [n, c_in, h, w] (from outside), a [n, ci, h, w] -> conv k x k -> e [n, c_new];
    Concat(f, e) -> BatchNorm -> Mul [C, 1, 1] -> Add [C, 1, 1] -> Relu; outputs the Concat and the ReLU."""
    c = c_in + c_new
    t = {"f": [n, c_in, h, w], "a": [n, ci, h, w], "wt": const((c_new, ci, k, k)), "bt": const((c_new,)),
         "e": [n, c_new, h, w], "cat": [n, c, h, w], "s": const((c,)), "bb": const((c,)), "m": const((c,)), "v": const((c,)),
         "mk": const((c, 1, 1)), "ak": const((c, 1, 1)), "bn": [n, c, h, w], "p": [n, c, h, w], "q": [n, c, h, w],
         "y": [n, c, h, w]}
    nodes = [("conv", "Conv", ["a", "wt", "bt"], ["e"], {"kernel_shape": [k, k], "pads": [k // 2] * 4}),
             ("cat", "Concat", ["f", "e"], ["cat"], {"axis": 1}),
             ("bn", "BatchNormalization", ["cat", "s", "bb", "m", "v"], ["bn"], {"epsilon": 1e-3}),
             ("mul", "Mul", ["bn", "mk"], ["p"]),
             ("add", "Add", ["p", "ak"], ["q"]),
             ("r", "Relu", ["q"], ["y"])]
    return graph(t, ["f", "a"], ["cat", "y"], nodes)


GROUP = [["conv", "cat", "bn", "mul", "add", "r"]]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dims", [dict(), dict(n=2, c_in=9, c_new=5, k=1, h=17, w=6), dict(h=3, w=4),
                                  dict(c_in=21, c_new=11, ci=16, h=37, w=41)])
@pytest.mark.usefixtures("small_kernels_parallel")  # the last case's passes shared by 2 threads
def test_concat_then_batchnorm_one_pass_per_input(threads, dims, cache):
    g = _dense(**dims)
    plan, _, _ = check(g, GROUP, cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    k = src[src.index("/* group 0:"):]
    if threads > 1 and dims.get("h") == 37:
        for part in k.split("from Concat input")[1:]:  # each input's pass shared by the threads
            assert "#pragma omp" in part.split("/* pass")[0], k
    c_in = dims.get("c_in", 5)
    assert "channels 0.. from Concat input 'f'" in k and f"channels {c_in}.. from Concat input 'e'" in k, k
    assert "sf_conv_tile" in k and "kernel-local scratch, output of an anchor" not in k
    assert " < " + str(c_in) + ")" not in k.split("from Concat input 'e'")[1]  # no per-element choice of the input


def test_three_inputs_one_computed_in_the_group(cache):
    """Concat(Relu(x), conv(a), z) -> BatchNorm -> Relu: the first input's ReLU, the conv's tile
    and the outside input each in their own pass."""
    t = {"x": [1, 4, 9, 10], "a": [1, 6, 9, 10], "z": [1, 3, 9, 10], "wt": const((5, 6, 3, 3)),
         "rx": [1, 4, 9, 10], "e": [1, 5, 9, 10], "cat": [1, 12, 9, 10], "s": const((12,)), "bb": const((12,)),
         "m": const((12,)), "v": const((12,)), "bn": [1, 12, 9, 10], "y": [1, 12, 9, 10]}
    nodes = [("rx", "Relu", ["x"], ["rx"]),
             ("conv", "Conv", ["a", "wt"], ["e"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
             ("cat", "Concat", ["rx", "e", "z"], ["cat"], {"axis": 1}),
             ("bn", "BatchNormalization", ["cat", "s", "bb", "m", "v"], ["bn"], {"epsilon": 1e-5}),
             ("r", "Relu", ["bn"], ["y"])]
    g = graph(t, ["x", "a", "z"], ["y"], nodes)
    plan, _, _ = check(g, [[n[0] for n in nodes]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    k = render(plan, g)["model.c"]
    for off, u in ((0, "rx"), (4, "e"), (9, "z")):
        assert f"channels {off}.. from Concat input {u!r}" in k


def test_concat_post_counters_match_the_cost_model(cache):
    g = _dense()
    for groups in (GROUP, [["conv"], ["cat", "bn", "mul", "add", "r"]]):
        plan, prog, _, _, _ = run_plan(g, groups, cache, counters=True)
        assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
        assert sum(c["read_bytes"] + c["written_bytes"] for c in prog.counters) == plan.traffic_bytes


def test_concat_post_sanitized(cache):
    """Each input's pass writes inside the outputs only (AddressSanitizer build), batch 2."""
    check(_dense(n=2, c_in=3, c_new=2, h=7, w=9), GROUP, cache, rtol=1e-4, atol=1e-5, engine="onnxruntime",
          sanitize=True)


@pytest.mark.parametrize("axis", [1, -1])
def test_two_dim_concat_then_bias_and_relu(axis, cache):
    """Rank 2 (features of a batch of 3, axis 1 written as -1 too): Concat(Relu(a), b) -> Add [9] -> Relu."""
    t = {"a": [3, 5], "b": [3, 4], "ra": [3, 5], "cat": [3, 9], "k": const((9,)), "s": [3, 9], "y": [3, 9]}
    nodes = [("ra", "Relu", ["a"], ["ra"]), ("cat", "Concat", ["ra", "b"], ["cat"], {"axis": axis}),
             ("add", "Add", ["cat", "k"], ["s"]), ("r", "Relu", ["s"], ["y"])]
    g = graph(t, ["a", "b"], ["y"], nodes)
    plan, _, _ = check(g, [[n[0] for n in nodes]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime")
    k = render(plan, g)["model.c"]
    assert "channels 0.. from Concat input 'ra'" in k and "channels 5.. from Concat input 'b'" in k
