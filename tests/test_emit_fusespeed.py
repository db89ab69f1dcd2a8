"""Fused kernels that keep the unfused anchor's fast path (issue 15: fusion never slower than no
fusion): each shape of group against ONNX Runtime / the reference evaluator, the instrumented byte
counters against the cost model, and the C form the speed depends on."""
from __future__ import annotations

import re

import pytest

from solverfuse import cost
from solverfuse.emit.program import render
from solverfuse.emit.schedule import PAD_SCRATCH_BYTES

from .emit_helpers import HW, check, const, graph, model_counts


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-fusespeed")


def _scalar(v, dtype="float32"):
    return {"shape": [1], "constant": True, "value": [v], "dtype": dtype}


def _masked_scores(causal_cast: bool):
    """GPT-2's attention scores: Q.K^T + Where(mask, 0, -inf), Softmax, NaN rows (fully masked) to
    0; ``causal_cast``: the mask is built in the group too (Cast, And, Expand) and written out."""
    t = {"q": [1, 2, 8, 8], "k": [1, 2, 8, 8], "m": {"shape": [1, 1, 8, 8], "dtype": "bool"},
         "zero": _scalar(0.0), "ninf": _scalar(float("-inf")),
         "pad": {"shape": [1, 1, 1, 8], "dtype": "int64"},
         "es": {"shape": [4], "dtype": "int64", "constant": True, "value": [1, 1, 8, 8]}}
    nodes = []
    mask = "m"
    outs = ["p"]
    if causal_cast:
        nodes += [("cast", "Cast", ["pad"], ["padb"], {"to": 9}), ("and", "And", ["m", "padb"], ["mk"]),
                  ("exp", "Expand", ["mk", "es"], ["mask"])]
        mask = "mask"
        outs.append("mk")
    nodes += [("mm", "MatMul", ["q", "k"], ["s"]), ("wh", "Where", [mask, "zero", "ninf"], ["bias"]),
              ("add", "Add", ["s", "bias"], ["a"]), ("sm", "Softmax", ["a"], ["pr"], {"axis": -1}),
              ("nan", "IsNaN", ["pr"], ["isn"]), ("fix", "Where", ["isn", "zero", "pr"], ["p"])]
    inputs = ["q", "k", "m"] + (["pad"] if causal_cast else [])
    return graph(t, inputs, outs, nodes, name="masked_scores")


@pytest.mark.parametrize("causal_cast", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_masked_attention_scores_run_as_one_row_loop(causal_cast, threads, cache):
    """The whole masked-score group is one row loop on the blocked MatMul tile: the byte mask's
    Where is computed once per row into a float row by a branch-free bit select, the pure mask
    chain written beside it (another shape, a byte type) in a pass of its own."""
    g = _masked_scores(causal_cast)
    groups = [list(g.index.order)]
    plan, prog, out = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    assert "one row loop" in src and "sf_mm_tile8(" in src
    assert "-(uint32_t)(" in src  # the bit select
    assert ("computed from global reads" in src) == causal_cast
    if threads == 1:
        plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
        assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
        check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


def test_masked_scores_with_double_values(cache):
    """The bit select on 8-byte values (a double Where)."""
    t = {"x": {"shape": [3, 6], "dtype": "float64"}, "m": {"shape": [1, 6], "dtype": "bool"},
         "zero": _scalar(0.0, "float64"), "big": _scalar(-1e300, "float64")}
    g = graph(t, ["x", "m"], ["y"], [("wh", "Where", ["m", "zero", "big"], ["b"]), ("add", "Add", ["x", "b"], ["a"]),
                                     ("sm", "Softmax", ["a"], ["y"], {"axis": -1})])
    plan, prog, _ = check(g, [list(g.index.order)], cache, rtol=1e-6, atol=1e-9, counters=True)
    src = render(plan, g)["model.c"]
    assert "one row loop" in src and "-(uint64_t)(" in src
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)


def _conv_silu(cin, cout, hw, *, kernel=1, group=1, tail=None):
    """Conv + bias + SiLU (x * sigmoid(x)) and an optional tail op reading the SiLU output."""
    t = {"x": [1, cin, hw, hw], "w": {"shape": [cout, cin // group, kernel, kernel], "constant": True},
         "b": {"shape": [cout], "constant": True}}
    pad = kernel // 2
    nodes = [("c", "Conv", ["x", "w", "b"], ["h"], {"pads": [pad] * 4, "group": group}),
             ("s", "Sigmoid", ["h"], ["g"]), ("m", "Mul", ["h", "g"], ["a"])]
    outs = ["a"]
    if tail == "pad":
        t["pads"] = {"shape": [8], "dtype": "int64", "constant": True, "value": [0, 0, 0, 1, 0, 0, 2, 1]}
        t["cv"] = {"shape": [], "constant": True, "value": 0.5}
        nodes.append(("p", "Pad", ["a", "pads", "cv"], ["y"], {"mode": "constant"}))
        outs = ["y"]
    elif tail == "pool":
        nodes.append(("gap", "GlobalAveragePool", ["a"], ["y"]))
        outs = ["a", "y"]
    return graph(t, ["x"], outs, nodes, name=f"conv_silu_{tail}")


@pytest.mark.parametrize("threads,hw", [(1, 10), (2, 10), (1, 76)])
def test_conv_silu_pad_stores_through_the_pad(threads, hw, cache):
    """Conv + SiLU + constant Pad (efficientnet's expand conv before a strided depthwise one): the
    epilogue runs on the conv tile, never per element of the padded shape with a branch. Up to
    PAD_SCRATCH_BYTES of SiLU output (10x10) it is stored contiguous in scratch and the padded
    pass copies it (the SiLU over the tile's whole plane, not per 10-wide row); above (76x76) the
    epilogue stores at the padded index and the border is filled apart (no scratch)."""
    g = _conv_silu(8, 24, hw, tail="pad")
    groups = [list(g.index.order)]
    plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    small = 4 * 24 * hw * hw <= PAD_SCRATCH_BYTES
    assert ("the border of a constant Pad" in src and "mapped store" in src) != small
    assert ("output of an anchor/window op needed by several passes" in src) == small
    for choice in re.findall(r"float (p\d+) = [^;]+;\n\s*if \((.*?)\1 = ", src, re.S):
        assert "sf_expf" not in choice[1]
    if threads == 1 and hw == 10:
        plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
        assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
        check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


@pytest.mark.parametrize("hw", [2, 8])
def test_conv_silu_pool_computes_the_activation_once(hw, cache):
    """Depthwise conv + SiLU written out and globally pooled (squeeze-excite): the SiLU output,
    read by two passes, is computed once into scratch (not once per pass); on a 2x2 plane the conv
    is computed apart first so that the exp runs as one loop over every channel."""
    g = _conv_silu(16, 16, hw, kernel=3, group=16, tail="pool")
    groups = [list(g.index.order)]
    plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
    src = render(plan, g)["model.c"]
    body = src[src.index("static int k0("):]
    assert body.count("sf_expf(") == 1 and "exp(" not in body  # one SiLU loop (the prelude's float exp)
    check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=2)
    check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


def test_pointwise_conv_on_a_1x1_plane_keeps_the_activation_a_vector_loop(cache):
    """A [1, C, 1, 1] conv (squeeze-excite's expand) has no tile: its dot products run in a loop of
    their own, the SiLU after it in another (one exp per channel in a vector loop)."""
    g = _conv_silu(24, 40, 1)
    groups = [list(g.index.order)]
    plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
    src = render(plan, g)["model.c"]
    assert "output of an anchor/window op" in src


@pytest.mark.parametrize("threads", [1, 2])
def test_horizontal_group_lays_out_each_part_alone(threads, cache):
    """Two residual + LayerNorm chains of independent inputs and shapes that share the weights
    (whisper's encoder and decoder norms, fused for the shared reads): each part gets its own row
    loop in the one kernel (together they took the general passes, stats recomputed per pass)."""
    t = {"x": [1, 16, 32], "r": [1, 16, 32], "ids": {"shape": [1, 4], "dtype": "int64"},
         "emb": {"shape": [24, 32], "constant": True}, "pos": [1, 4, 32],
         "g": {"shape": [32], "constant": True}, "b": {"shape": [32], "constant": True}}
    g = graph(t, ["x", "r", "ids", "pos"], ["h", "y", "z"], [
        ("a1", "Add", ["b", "x"], ["u"]), ("a2", "Add", ["r", "u"], ["h"]),
        ("ln1", "LayerNormalization", ["h", "g", "b"], ["y"]),
        ("ga", "Gather", ["emb", "ids"], ["e"]), ("a3", "Add", ["e", "pos"], ["v"]),
        ("ln2", "LayerNormalization", ["v", "g", "b"], ["z"])], name="two_norms")
    groups = [list(g.index.order)]
    plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    assert src.count("static int k") == 1 and src.count("one row loop") == 2
    if threads == 1:
        plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
        assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)
        check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", sanitize=True)


def test_embedding_row_checks_the_gather_index_once_per_row(cache):
    """Position embeddings (their ids computed in the group) + token embeddings + LayerNorm (an
    embedding layer) in one row loop: the Gather's index is checked once per row, before the
    row's loops, and the counters still see the gathered rows."""
    t = {"tok": [1, 6, 16], "posw": {"shape": [12, 16], "constant": True},
         "g": {"shape": [16], "constant": True}, "b": {"shape": [16], "constant": True},
         "ids": {"shape": [1, 6], "dtype": "int64"},
         "two": {"shape": [], "dtype": "int64", "constant": True, "value": 2},
         "twelve": {"shape": [], "dtype": "int64", "constant": True, "value": 12}}
    g = graph(t, ["tok", "ids"], ["y"], [
        ("p", "Add", ["ids", "two"], ["p0"]), ("m", "Mod", ["p0", "twelve"], ["pos"]),
        ("ep", "Gather", ["posw", "pos"], ["c"]), ("s", "Add", ["tok", "c"], ["e"]),
        ("ln", "LayerNormalization", ["e", "g", "b"], ["y"])], name="embeddings")
    groups = [list(g.index.order)]
    assert cost.group_violation(g, groups[0], HW) is None
    for threads in (1, 2):
        plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g)["model.c"]
    body = src[src.index("static int k0("):]
    assert "one row loop" in body
    assert "sf_error = 3" not in body[body.index("#pragma omp simd"):]  # the check sits before the row's loops
    plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)


@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [0, 2, 3, 1]])
def test_head_split_store_runs_the_row_as_heads_by_head_dim(perm, cache):
    """A projection + bias + head split (Reshape [1, 17, 32] -> [1, 17, 4, 8]) + Transpose (Q/V:
    heads first; K^T: head dim before the sequence): the pass over the projection's rows runs each
    row as 4 heads x 8, storing a head's 8 values with the loops' own indices (no / and % per
    element), and matches ONNX Runtime; 17 rows take the one-row tile."""
    t = {"x": [1, 17, 32], "w": {"shape": [32, 32], "constant": True}, "b": {"shape": [32], "constant": True},
         "s": {"shape": [4], "dtype": "int64", "constant": True, "value": [1, 17, 4, 8]}}
    g = graph(t, ["x"], ["y"], [("mm", "MatMul", ["x", "w"], ["h"]), ("ad", "Add", ["b", "h"], ["a"]),
                                ("rs", "Reshape", ["a", "s"], ["r"]),
                                ("tr", "Transpose", ["r"], ["y"], {"perm": perm})], name="head_split")
    groups = [list(g.index.order)]
    for threads in (1, 2):
        plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g)["model.c"]
    assert "mapped store" in src and " / 8" not in src and "% 8" not in src
    plan, prog, _ = check(g, groups, cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", counters=True)
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == model_counts(g, plan)


@pytest.mark.parametrize("threads", [1, 2])
def test_squeeze_excite_gate_runs_at_its_own_shape(threads, cache):
    """Squeeze-excitation's expand step in one group: a 1x1 conv on the pooled [1, 12, 1, 1]
    vector, Sigmoid, and the Mul that scales the [1, 48, 8, 8] map by the gate. The Sigmoid runs
    once per channel in a pass of its own, not once per element of the map inside the Mul's pass
    (one scalar exp per element: 3-19x the unfused kernels on EfficientNet)."""
    t = {"x": [1, 48, 8, 8], "p": [1, 12, 1, 1], "w": {"shape": [48, 12, 1, 1], "constant": True},
         "b": {"shape": [48], "constant": True}}
    nodes = [("c", "Conv", ["p", "w", "b"], ["h"]), ("s", "Sigmoid", ["h"], ["gate"]),
             ("m", "Mul", ["x", "gate"], ["y"])]
    g = graph(t, ["x", "p"], ["y"], nodes, name="se_gate")
    plan, _, _ = check(g, [["c", "s", "m"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    body = src[src.index("static int k0("):src.index("int sf_run(")]
    head, sep, tail = body.partition("/* pass: 1 written tensor(s) of shape [1, 48, 8, 8] */")
    assert sep and "sf_expf" in head and "sf_expf" not in tail


@pytest.mark.parametrize("threads", [1, 2])
def test_patch_embedding_concat_is_evaluated_once(threads, cache):
    """CLIP's patch embedding in one group: a patch conv, its output flattened and transposed to
    tokens, the class token concatenated in front, the position embedding added, then two
    LayerNorms (the pre-LayerNorm and the first block's). The token rows (through the transpose
    and the Concat's choice of input) are computed once into contiguous scratch, not in each of
    the five loops that read them (5.3 us fused vs 3.1 unfused on clip_vision_ts)."""
    t = {"x": [1, 3, 16, 16], "w": const([32, 3, 4, 4]), "cls": const([1, 1, 32]), "pos": const([1, 17, 32]),
         "g1": const([32]), "b1": const([32]), "g2": const([32]), "b2": const([32]),
         "sh": {"shape": [3], "dtype": "int64", "constant": True, "value": [1, 32, -1]}}
    nodes = [("conv", "Conv", ["x", "w"], ["c"], {"strides": [4, 4]}),
             ("rs", "Reshape", ["c", "sh"], ["r"]), ("tr", "Transpose", ["r"], ["p"], {"perm": [0, 2, 1]}),
             ("cat", "Concat", ["cls", "p"], ["e"], {"axis": 1}), ("add", "Add", ["e", "pos"], ["h"]),
             ("ln1", "LayerNormalization", ["h", "g1", "b1"], ["n1"], {"axis": -1}),
             ("ln2", "LayerNormalization", ["n1", "g2", "b2"], ["y"], {"axis": -1})]
    g = graph(t, ["x"], ["n1", "y"], nodes, name="patch_embedding")
    plan, _, _ = check(g, [[n[0] for n in nodes]], cache, rtol=1e-4, atol=1e-5, engine="onnxruntime",
                       threads=threads)
    src = render(plan, g, threads=threads)["model.c"]
    assert len(re.findall(r"float c\d+ = 0;", src)) == 1  # the Concat's choice, in one loop
