"""The graph zoo: builders load, shapes and ops are right, seeds are deterministic."""
from __future__ import annotations

import pytest

from solverfuse import cost, zoo
from solverfuse.graph import parse_graph
from solverfuse.hardware import load_hardware


def test_bert_structure_and_shapes():
    g = zoo.bert_block(layers=2, hidden=64, seq=16, heads=4)
    ops = [n.op for n in g.nodes]
    # per layer: q, k, v, scores, context, out-proj, fc1, fc2 = 8 MatMuls; 2 LayerNorms; 1 Erf
    assert ops.count("MatMul") == 16 and ops.count("LayerNormalization") == 4 and ops.count("Erf") == 2
    assert ops.count("Softmax") == 2 and "Pow" not in ops and "Where" not in ops
    assert g.tensors["l0.scores"].shape == [1, 4, 16, 16]          # [batch, heads, seq, seq]
    assert g.tensors["l0.k_heads.transpose"].shape == [1, 4, 16, 16]  # K^T: [b, h, d=16, s=16]
    assert g.tensors["l0.fc1.add_bias"].shape == [1, 16, 256]       # 4x hidden MLP
    assert g.tensors[g.outputs[0]].shape == [1, 16, 64]
    # post-LN: the layer's last op is a LayerNormalization fed by the residual add
    last = g.index.node[g.index.producer[g.outputs[0]]]
    assert last.op == "LayerNormalization" and last.inputs[0] == "l1.out_residual"


def test_gpt2_structure_causal_mask_and_pre_ln():
    g = zoo.gpt2_block(layers=2, hidden=64, seq=8, heads=2)
    ops = [n.op for n in g.nodes]
    assert ops.count("Split") == 2 and ops.count("Where") == 2 and ops.count("Pow") == 2
    assert ops.count("Tanh") == 2 and ops.count("LayerNormalization") == 5   # 2 per layer + ln_f
    mask = g.constant_value("causal_mask")
    assert mask.shape == (1, 1, 8, 8) and mask[0, 0, 0, 1] == False and mask[0, 0, 7, 0] == True  # noqa: E712
    assert int(mask.sum()) == 8 * 9 // 2
    # pre-LN: the first op reading the block input is a LayerNormalization
    assert g.index.node[g.index.consumers["x"][0]].op == "LayerNormalization"
    assert g.tensors["l0.c_attn.add_bias"].shape == [1, 8, 192]
    assert g.tensors["l0.causal"].shape == [1, 2, 8, 8]


def test_default_transformer_blocks_have_the_issue_sizes():
    for g in (zoo.bert_block(), zoo.gpt2_block()):
        assert g.tensors["x"].shape == [1, 128, 768]
        assert g.tensors["l1.softmax"].shape == [1, 12, 128, 128]


def test_bad_dimensions_are_refused():
    with pytest.raises(ValueError):
        zoo.bert_block(hidden=100, heads=12)


@pytest.mark.parametrize("n", [1, 7, 100, 1000])
def test_synthetic_has_exact_op_count_and_valid_shapes(n):
    g = zoo.synthetic_graph(n, seed=3)
    assert len(g.nodes) == n
    assert all(g.tensors[t].shape is not None for t in g.tensors)
    assert g.outputs and all(t in g.index.producer for t in g.outputs)
    # every produced tensor is either read or an output: nothing is computed for nothing
    for node in g.nodes:
        for t in node.outputs:
            assert g.index.consumers.get(t) or t in g.outputs


def test_synthetic_mix_is_realistic():
    g = zoo.synthetic_graph(1000, seed=0)
    roles = {cost.role(g, v) for v in g.index.order}
    assert {"elementwise", "broadcast", "injective", "reduction", "anchor", "gather"} <= roles
    # siblings: some tensor has two or more readers
    assert any(len(c) >= 2 for c in g.index.consumers.values())
    # layered, not a chain and not flat: depth well below the op count, well above 1
    depth: dict[str, int] = {}
    for v in g.index.order:
        depth[v] = 1 + max((depth[p] for p in g.index.preds[v]), default=0)
    assert 20 < max(depth.values()) < 1000


def test_synthetic_is_deterministic_per_seed():
    a, b, c = zoo.synthetic_graph(300, seed=5), zoo.synthetic_graph(300, seed=5), zoo.synthetic_graph(300, seed=6)
    assert a.digest() == b.digest() and a.digest() != c.digest()


def test_synthetic_10000_builds():
    # how fast is measured by benchmarks/speed.py, not asserted here (a shared machine's noise)
    g = zoo.synthetic_graph(10_000)
    assert len(g.nodes) == 10_000 and len(g.index.order) == 10_000


def test_synthetic_round_trips_through_json():
    g = zoo.synthetic_graph(1000, seed=2)
    assert parse_graph(g.to_json()).digest() == g.digest()


def test_motifs_ops_shapes_and_traffic():
    # traffic computed by hand for 4x8 float32 tensors (128 bytes each)
    g = zoo.elementwise_chain(4, 8)
    assert g.tensors["y"].shape == [4, 8]
    assert cost.q_min(g) == 128 + 128 + 4 * 4          # x, y and four scalar constants, once each
    g = zoo.center(4, 8)
    assert cost.unfused_traffic(g) == (128 + 16) + (128 + 16 + 128)
    assert cost.q_min(g) == 256
    g = zoo.branches(4, 8)
    assert sorted(g.outputs) == ["y1", "y2"] and len(g.index.consumers["x"]) == 2
    g = zoo.softmax_rows(4, 8)
    assert [n.op for n in g.nodes] == ["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"]
    g = zoo.matmul_bias_relu(4, 8, k=16)
    assert g.tensors["w"].shape == [16, 8] and g.tensors["y"].shape == [4, 8]
    for name, build in zoo.MOTIFS.items():
        g = build(8, 16)
        assert len(g.nodes) >= 2, name


@pytest.mark.parametrize("profile", ["intel-xeon-8480", "aws-graviton3", "nvidia-h100", "detect"])
def test_l1_overflow_overflows_only_when_everything_is_fused(profile):
    hw = load_hardware(profile)
    g = zoo.l1_overflow(4, hw)
    every = [n.name for n in g.nodes]
    assert "L1" in (cost.group_violation(g, every, hw) or "")
    assert cost.group_violation(g, ["layernorm", "scale"], hw) is None
    assert cost.group_violation(g, ["scale", "y"], hw) is None
