"""A Conv with a one-position output plane whose kernel covers its input (a 1x1 conv on a 1x1
plane: DenseNet's classifier, squeeze-excite; a kernel as large as the unpadded input) runs as a
matrix-vector product per batch row with the one-row MatMul tile (``sf_mm_tile1``, filters
packed in panels), bias and fused epilogue applied per output channel. Against ONNX Runtime at 1
and 2 threads (the threads sharing the output channels), odd channel counts, batch > 1, filters
computed at run time, an epilogue (ReLU, Sigmoid) and a squeeze-excite block; under
AddressSanitizer; and the byte counters against the cost model's rules."""
from __future__ import annotations

import pytest

from solverfuse.emit.program import render

from .emit_helpers import check, const, graph, model_counts, run_plan


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-conv-gemv-cache")



def _classifier(n=1, c=37, m=29, sp=(1, 1), bias=True, act="Relu", const_w=True):
    """x [n, c, *sp] -> Conv (kernel = sp, no pad) -> [n, m, 1, 1] -> act."""
    t = {"x": [n, c, *sp], "w": const((m, c, *sp)) if const_w else [m, c, *sp], "b": const((m,)),
         "e": [n, m, 1, 1], "y": [n, m, 1, 1]}
    conv = ("conv", "Conv", ["x", "w", "b"] if bias else ["x", "w"], ["e"], {"kernel_shape": list(sp)})
    nodes = [conv, ("act", act, ["e"], ["y"])]
    return graph(t, ["x"] if const_w else ["x", "w"], ["y"], nodes)


def _kernel_text(plan, g, threads=1):
    src = render(plan, g, threads=threads)["model.c"]
    return src[src.index("/* group 0:"):src.index("int sf_run")]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", [dict(), dict(n=3, c=19, m=70, bias=False), dict(n=2, c=6, m=33, sp=(3, 5)),
                                  dict(c=5, m=3, act="Sigmoid"), dict(n=2, c=11, m=40, const_w=False),
                                  dict(c=512, m=600)])
@pytest.mark.usefixtures("small_kernels_parallel")  # the 512 x 600 case shared by 2 threads
def test_conv_on_one_position_is_a_gemv(threads, case, cache):
    g = _classifier(**case)
    plan, _, _ = check(g, [["conv", "act"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime", threads=threads)
    k = _kernel_text(plan, g, threads)
    assert "sf_mm_tile1(" in k and "continue;" not in k, k  # the tile, not the window loop
    if threads > 1 and case.get("m") == 600:
        assert "schedule(guided)" in k and "sf_min(" in k, k  # the threads share the output channels


def test_kernel_with_padding_or_groups_keeps_the_window_loop(cache):
    """A 3x3 kernel with padding on a 1x1 plane, and a grouped 1x1 conv: not one dot product
    over x's row -- the general forms, still right."""
    t = {"x": [1, 8, 1, 1], "w": const((6, 8, 3, 3)), "e": [1, 6, 1, 1], "y": [1, 6, 1, 1]}
    g = graph(t, ["x"], ["y"], [("conv", "Conv", ["x", "w"], ["e"], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
                                 ("act", "Relu", ["e"], ["y"])])
    plan, _, _ = check(g, [["conv", "act"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    assert "sf_mm_tile1(" not in _kernel_text(plan, g)
    t = {"x": [1, 8, 1, 1], "w": const((6, 4, 1, 1)), "e": [1, 6, 1, 1], "y": [1, 6, 1, 1]}
    g = graph(t, ["x"], ["y"], [("conv", "Conv", ["x", "w"], ["e"], {"kernel_shape": [1, 1], "group": 2}),
                                 ("act", "Relu", ["e"], ["y"])])
    plan, _, _ = check(g, [["conv", "act"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    assert "sf_mm_tile1(" not in _kernel_text(plan, g)


def _squeeze_excite(c=24, r=6, h=9, w=7):
    """x -> GlobalAveragePool -> Conv 1x1 (c -> r) -> Relu -> Conv 1x1 (r -> c) -> Sigmoid -> Mul x."""
    t = {"x": [1, c, h, w], "p": [1, c, 1, 1], "w1": const((r, c, 1, 1)), "b1": const((r,)), "e1": [1, r, 1, 1],
         "a1": [1, r, 1, 1], "w2": const((c, r, 1, 1)), "b2": const((c,)), "e2": [1, c, 1, 1], "s": [1, c, 1, 1],
         "y": [1, c, h, w]}
    nodes = [("gap", "GlobalAveragePool", ["x"], ["p"]),
             ("c1", "Conv", ["p", "w1", "b1"], ["e1"], {"kernel_shape": [1, 1]}),
             ("r1", "Relu", ["e1"], ["a1"]),
             ("c2", "Conv", ["a1", "w2", "b2"], ["e2"], {"kernel_shape": [1, 1]}),
             ("sg", "Sigmoid", ["e2"], ["s"]),
             ("mul", "Mul", ["x", "s"], ["y"])]
    return graph(t, ["x"], ["y"], nodes)


@pytest.mark.parametrize("groups", [[["gap"], ["c1", "r1"], ["c2", "sg"], ["mul"]],
                                    [["gap"], ["c1", "r1"], ["c2", "sg", "mul"]]])
def test_squeeze_excite(groups, cache):
    g = _squeeze_excite()
    plan, _, _ = check(g, groups, cache, rtol=1e-4, atol=1e-5, engine="onnxruntime")
    assert "sf_mm_tile1(" in render(plan, g)["model.c"]


def test_gemv_counters_match_the_cost_model(cache):
    """Instrumented builds keep the plain forms; their counted bytes are the cost model's."""
    for g, groups in ((_classifier(n=2, c=6, m=33, sp=(3, 5)), [["conv", "act"]]),
                      (_squeeze_excite(), [["gap"], ["c1", "r1"], ["c2", "sg", "mul"]])):
        plan, prog, _, _, _ = run_plan(g, groups, cache, counters=True)
        assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
        assert sum(c["read_bytes"] + c["written_bytes"] for c in prog.counters) == plan.traffic_bytes


def test_gemv_sanitized(cache):
    """The tile and the epilogue stay inside their buffers (AddressSanitizer build), M not a
    multiple of the panel width, filters packed at run time too."""
    for case in (dict(c=7, m=45), dict(n=2, c=9, m=3, const_w=False)):
        check(_classifier(**case), [["conv", "act"]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime",
              sanitize=True)
