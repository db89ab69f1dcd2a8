"""Kernels the real torch.compile generates are legal under our rules (no torch needed).

Each fixture in ``tests/data/torch_kernels`` is the subgraph of one kernel Inductor (torch 2.13,
CPU) generated for a model of the torch set, as :func:`solverfuse.torch.inductor_plan` read it
from the scheduler: its ops, and the tensors they read and write outside it. Our rules used to
reject all three (a real compiler's kernel that does not spill must be legal):

* resnet: two batch norms + residual add + relu, one loop -- counted 42 registers > 32 while the
  16 ``unsqueeze`` views and the per-channel ``weight / sqrt(var + eps)`` ops were counted;
* t5: the relative position bias (bucket arithmetic, embedding lookup, permute) -- 37 registers;
* bert: word + position + token-type lookups (indices computed in the kernel), add, LayerNorm --
  "data-dependent node 'gather' cannot share a kernel".
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from solverfuse import cost
from solverfuse.graph import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.mapping import group_footprint
from solverfuse.plans import build_plan, validate

DATA = Path(__file__).resolve().parent / "data" / "torch_kernels"
XEON = load_hardware("intel-xeon-8480")  # 32 ZMM registers, 4 for the kernel's own constants


def _kernel(name: str):
    return load_graph(json.loads((DATA / f"{name}.json").read_text()))


@pytest.mark.parametrize("name", ["resnet_bn_bn_add_relu", "t5_position_bias", "bert_embeddings_layernorm"])
def test_a_real_inductor_kernel_is_one_legal_group(name):
    g = _kernel(name)
    nodes = [n.name for n in g.nodes]
    assert cost.group_violation(g, nodes, XEON) is None
    plan = build_plan(g, XEON, [nodes], strategy="inductor-real", status="heuristic")
    validate(plan, g, XEON)
    assert len(plan.groups) == 1


def test_resnet_kernel_registers_by_hand():
    """Registers = 4 (base) + 1 per value computed per element: per batch norm ``x - mean``,
    ``* scale``, ``* weight``, ``+ bias`` (4 each, 8), the residual add and the relu: 14. Views
    (unsqueeze) compute nothing; ``1 / sqrt(var + eps)`` and its casts are functions of the weights
    (one more load each, counted by the op that reads them)."""
    g = _kernel("resnet_bn_bn_add_relu")
    nodes = [n.name for n in g.nodes]
    weights = {t for t, info in g.tensors.items() if info.constant}
    for n in g.nodes:  # graph order: a value computed from weights only is a weight
        if all(t in weights for t in n.inputs if t):
            weights.update(n.outputs)
    computed = [n.op for n in g.nodes if n.op in ("Sub", "Mul", "Add", "Relu")
                and not all(t in weights for t in n.inputs if t)]
    assert sorted(computed) == ["Add"] * 3 + ["Mul"] * 4 + ["Relu"] + ["Sub"] * 2
    assert group_footprint(g, nodes, XEON).registers == 4 + 10
    tight = XEON.model_copy(update={"register_budget": 13})
    assert "needs 14 registers > budget 13" in cost.group_violation(g, nodes, tight)
