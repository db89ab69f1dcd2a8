"""The instrumented byte counters of the emitted C equal the cost model per kernel on the patterns
of real compiler plans that read only part of a tensor: several embedding gathers in one kernel
(GPT-2's token + position embeddings), a gather with repeated indices, and (covering plans) ops
recomputed in several kernels. References are bytes counted by hand; the counter build measures
what the emitted code really touches, independently of the model."""
from __future__ import annotations

import numpy as np
import pytest

from solverfuse import cost
from solverfuse.cost import Kernel
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.hardware import load_hardware
from solverfuse.plans import build_covering_plan, build_plan

from .emit_helpers import graph

H100 = load_hardware("nvidia-h100")

#: token + position embeddings summed, and a second reader of the token rows (GPT-2's first kernel)
EMB = graph({"wte": {"shape": [64, 32], "constant": True}, "wpe": {"shape": [16, 32], "constant": True},
             "ids": {"shape": [1, 8], "dtype": "int64"}, "pos": {"shape": [1, 8], "dtype": "int64"},
             "a": [1, 8, 32], "b": [1, 8, 32], "y": [1, 8, 32], "z": [1, 8, 32]},
            ["ids", "pos"], ["y", "z"],
            [("ga", "Gather", ["wte", "ids"], ["a"]), ("gb", "Gather", ["wpe", "pos"], ["b"]),
             ("add", "Add", ["a", "b"], ["y"]), ("relu", "Relu", ["a"], ["z"])], name="emb")
ROWS = 8 * 32 * 4  # one gather's output: 8 rows of 32 floats


def _run(g, plan, tmp_path, seed=3):
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path, counters=True)
    ins, cs = random_inputs(g, seed=seed), constants(g, seed=seed)
    out = prog.run(ins, cs)
    ref = reference_outputs(g, ins, cs, engine="reference")
    for t in g.outputs:
        np.testing.assert_allclose(out[t], ref[t], rtol=1e-5, atol=1e-6, err_msg=t)
    return [(c["read_bytes"], c["written_bytes"]) for c in prog.counters]


def test_two_gathers_in_one_kernel_count_both_tables(tmp_path):
    """One kernel of both gathers: ids and pos (64 B each), 8 rows of each table (the wpe table
    is 2 KiB, 1 KiB gathered), y and z written. The counter build once counted only one table."""
    plan = build_plan(EMB, H100, [["ga", "gb", "add", "relu"]], strategy="manual")
    hand = (64 + 64 + ROWS + ROWS, 2 * ROWS)
    assert plan.groups[0].traffic_bytes == sum(hand)
    assert _run(EMB, plan, tmp_path) == [hand]


def test_gathers_recomputed_in_a_covering(tmp_path):
    """The token gather recomputed in the kernel of the ReLU: each kernel reads its own rows."""
    plan = build_covering_plan(EMB, H100, [Kernel(("ga", "gb", "add"), ("y",)), Kernel(("ga", "relu"), ("z",))],
                               strategy="manual")
    assert len(plan.groups) == 2
    hand = {("ga", "gb", "add"): (64 + 64 + 2 * ROWS, ROWS), ("ga", "relu"): (64 + ROWS, ROWS)}
    want = [hand[tuple(g.nodes)] for g in plan.groups]
    assert [g.traffic_bytes for g in plan.groups] == [r + w for r, w in want]
    assert _run(EMB, plan, tmp_path) == want


def test_repeated_gather_indices_count_again(tmp_path):
    """GatherElements with every index 0 reads the same element 8 times: charged 8 elements (the
    model's gathered bytes: repeated indices count again), not the 1 distinct element."""
    g = graph({"d": [1, 32], "i": {"shape": [1, 8], "dtype": "int64", "constant": True, "value": [0] * 8},
               "y": [1, 8]}, ["d"], ["y"], [("ge", "GatherElements", ["d", "i"], ["y"], {"axis": 1})])
    plan = build_plan(g, H100, [["ge"]], strategy="manual")
    assert plan.groups[0].traffic_bytes == 8 * 4 + 64 + 8 * 4
    assert _run(g, plan, tmp_path) == [(8 * 4 + 64, 8 * 4)]


#: Llama's rotate_half on rows: two windows of q (disjoint halves), a ReLU of the first half
ROT = graph({"q": [16, 2], "a0": {"shape": [1], "dtype": "int64", "constant": True, "value": [0]},
             "a1": {"shape": [1], "dtype": "int64", "constant": True, "value": [8]},
             "a2": {"shape": [1], "dtype": "int64", "constant": True, "value": [16]},
             "s1": [8, 2], "s2": [8, 2], "n": [8, 2], "y": [16, 2], "z": [8, 2]},
            ["q"], ["y", "z"],
            [("sl1", "Slice", ["q", "a0", "a1"], ["s1"]), ("sl2", "Slice", ["q", "a1", "a2"], ["s2"]),
             ("neg", "Neg", ["s2"], ["n"]), ("cat", "Concat", ["n", "s1"], ["y"], {"axis": 0}),
             ("relu", "Relu", ["s1"], ["z"])], name="rot")
HALF = 8 * 2 * 4


@pytest.mark.parametrize("groups", [[["sl1"], ["sl2", "neg"], ["cat"], ["relu"]],
                                    [["sl1", "sl2", "neg", "cat", "relu"]]])
def test_windows_read_what_they_slice_in_a_partition(groups, tmp_path):
    """A Slice's kernel loads its window (half of q: 64 B) and the two int64 bounds it checks
    (16 B); a kernel of both halves loads all of q once. The model charged q whole (128 B) per
    slicing kernel before; the emitted code never read the other half."""
    plan = build_plan(ROT, H100, groups, strategy="manual")
    hand = {("sl1",): (HALF + 16, HALF), ("sl2", "neg"): (HALF + 16, HALF), ("cat",): (2 * HALF, 2 * HALF),
            ("relu",): (HALF, HALF), ("sl1", "sl2", "neg", "cat", "relu"): (2 * HALF + 24, 3 * HALF)}
    want = [hand[tuple(g.nodes)] for g in plan.groups]
    assert [g.traffic_bytes for g in plan.groups] == [r + w for r, w in want]
    assert _run(ROT, plan, tmp_path) == want


def test_windows_recomputed_in_a_covering(tmp_path):
    """The first window recomputed in the ReLU's kernel: that kernel loads only its half."""
    plan = build_covering_plan(ROT, H100, [Kernel(("sl1", "sl2", "neg", "cat"), ("y",)), Kernel(("sl1", "relu"), ("z",))],
                               strategy="manual")
    hand = {("sl1", "sl2", "neg", "cat"): (2 * HALF + 24, 2 * HALF), ("sl1", "relu"): (HALF + 16, HALF)}
    want = [hand[tuple(g.nodes)] for g in plan.groups]
    assert [g.traffic_bytes for g in plan.groups] == [r + w for r, w in want]
    assert _run(ROT, plan, tmp_path) == want


#: GPT-2's fused QKV projection: reshaped, split in three, each piece given its head layout
QKV = graph({"p": [4, 24], "shp": {"shape": [3], "dtype": "int64", "constant": True, "value": [4, 3, 8]},
             "sz": {"shape": [3], "dtype": "int64", "constant": True, "value": [1, 1, 1]},
             "r": [4, 3, 8], "q": [4, 1, 8], "k": [4, 1, 8], "v": [4, 1, 8],
             "qt": [1, 8, 4], "kt": [1, 8, 4], "vt": [1, 8, 4]},
            ["p"], ["qt", "kt", "vt"],
            [("view", "Reshape", ["p", "shp"], ["r"]), ("split", "Split", ["r", "sz"], ["q", "k", "v"], {"axis": 1}),
             ("tq", "Transpose", ["q"], ["qt"], {"perm": [1, 2, 0]}),
             ("tk", "Transpose", ["k"], ["kt"], {"perm": [1, 2, 0]}),
             ("tv", "Transpose", ["v"], ["vt"], {"perm": [1, 2, 0]})], name="qkv")
PIECE = 4 * 8 * 4   # one of q, k, v: 128 B of the 384 B projection
PARAMS = 24 + 24    # the reshape's shape and the split sizes (int64[3] each), loaded by the kernel


def test_split_recomputed_per_piece_reads_only_its_piece(tmp_path):
    """Inductor's reading of GPT-2: the split recomputed in the kernel of each head layout. Each
    kernel loads its third of p (the emitted code, like Inductor's, never touches the others);
    the model charged all of p per kernel before (3 x 384 B for 384 B)."""
    plan = build_covering_plan(QKV, H100, [Kernel(("view", "split", t), (o,))
                                           for t, o in (("tq", "qt"), ("tk", "kt"), ("tv", "vt"))],
                               strategy="manual")
    assert len(plan.groups) == 3
    want = [(PIECE + PARAMS, PIECE)] * 3
    assert [g.traffic_bytes for g in plan.groups] == [r + w for r, w in want]
    assert _run(QKV, plan, tmp_path) == want


def test_split_pieces_written_or_used_are_each_read_once(tmp_path):
    """A kernel that splits p, lays out q and writes the raw k and v for other kernels loads all
    of p once (q used, k and v written); the partition of one group and of one op each keep the
    whole-tensor charge."""
    plan = build_covering_plan(QKV, H100, [Kernel(("view", "split", "tq"), ("qt", "k", "v")),
                                           Kernel(("tk",), ("kt",)), Kernel(("tv",), ("vt",))], strategy="manual")
    hand = {("view", "split", "tq"): (3 * PIECE + PARAMS, 3 * PIECE), ("tk",): (PIECE, PIECE), ("tv",): (PIECE, PIECE)}
    want = [hand[tuple(g.nodes)] for g in plan.groups]
    assert [g.traffic_bytes for g in plan.groups] == [r + w for r, w in want]
    assert _run(QKV, plan, tmp_path) == want
    whole = build_plan(QKV, H100, [["view", "split", "tq", "tk", "tv"]], strategy="manual")
    assert whole.groups[0].traffic_bytes == 3 * PIECE + PARAMS + 3 * PIECE
    assert _run(QKV, whole, tmp_path / "w") == [(3 * PIECE + PARAMS, 3 * PIECE)]
    assert cost.kernel_traffic(QKV, whole.groups[0].nodes, whole.groups[0].writes) == whole.groups[0].traffic_bytes


def test_real_gpt2_covering_counts_what_the_model_predicts(tmp_path):
    """torch.compile's real GPT-2 kernels read as a covering (the QKV split recomputed per head
    layout, both embeddings gathered in each kernel that recomputes the residual stream), and the
    same kernels as a partition: every kernel's counters equal the model's bytes, and the kernels
    holding the split read a third of the projection each. Needs torch + transformers."""
    pytest.importorskip("torch", reason="torch is not installed (pip install 'solverfuse[torch]')")
    pytest.importorskip("transformers", reason="transformers is not installed (the torch model set needs it)")
    import solverfuse.torch as st
    from solverfuse.torch.models import MODELS
    model, inputs = MODELS["gpt2"]()
    real = st.inductor_plan(model, inputs, H100)
    g = real.graph
    ins, cs = random_inputs(g, seed=0), constants(g, seed=0)
    for n, plan in enumerate((real.covering, real.plan)):
        prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path / str(n), counters=True)
        prog.run(ins, cs)
        assert [c["read_bytes"] + c["written_bytes"] for c in prog.counters] == [k.traffic_bytes for k in plan.groups]
    splits = [k for k in real.covering.groups if any(g.index.node[v].op == "Split" for v in k.nodes)]
    assert len(splits) == 3
    for k in splits:
        (t,) = [t for t in cost.group_reads(g, k.nodes) if g.index.producer.get(t) and g.nbytes(t) > 1000]
        assert dict(cost.kernel_reads(g, k.nodes))[t] * 3 == g.nbytes(t)
