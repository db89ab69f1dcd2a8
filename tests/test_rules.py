"""The fusion rules are stated once (op table rows, :mod:`solverfuse.rules`); the forms derived from
them -- presolve's bit masks and the assignment formulation's constraint data -- must agree with the
predicate on random small graphs and random groups."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solverfuse import cost, rules
from solverfuse.ops import OPS, ROLE_RULES

from .test_oracle import small_case


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_case(), st.data())
def test_masks_and_assign_data_agree_with_the_predicate(case, data):
    g, _ = case
    order = list(g.index.order)
    pos = {v: i for i, v in enumerate(order)}
    m = rules.masks(g, order)
    # descendants by brute force (not presolve's bitsets): hulls of every pair
    desc = {v: set() for v in order}
    for v in reversed(order):
        for w in g.index.succs[v]:
            desc[v] |= {w} | desc[w]
    for i, u in enumerate(order):
        for v in order[i + 1:]:
            hull = [w for w in order if w in (u, v) or (w in desc[u] and v in desc[w])]
            bits = sum(1 << pos[w] for w in hull)
            assert rules.hull_violation(m, bits, pos[u], v in desc[u]) == \
                (rules.rule_violation(g, hull) is not None), (u, v, hull)
    ad = rules.assign_data(g, order)
    for _ in range(10):
        group = data.draw(st.lists(st.sampled_from(order), min_size=1, unique=True))
        group.sort(key=pos.__getitem__)
        assert rules.assign_violation(g, ad, group) == (rules.rule_violation(g, group) is not None), group


def test_rule_data_defaults_from_the_role_and_rows_override_it():
    rule = {n: (OPS[n].materialised_inputs, OPS[n].exclusive, OPS[n].opaque)
            for n in ("Relu", "ReduceSum", "MatMul", "Gather", "MaxPool")}
    assert rule == {"Relu": (False, False, False), "ReduceSum": (False, False, False),
                    "MatMul": (True, True, False), "Gather": (False, False, False), "MaxPool": (True, False, False)}
    assert ROLE_RULES["opaque"] == (True, False, True)
    assert {n for n, i in OPS.items() if i.view} == {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"}
    assert {n for n, i in OPS.items() if i.streaming} >= {"ReduceSum", "ReduceMax", "GlobalAveragePool"}
    assert not any(OPS[n].streaming for n in ("Softmax", "LogSoftmax", "LayerNormalization"))
    assert OPS["Gather"].gather_data_input and rules.facts  # gathers: data from memory, see below


def _embeddings():
    """BERT's embeddings as Inductor runs them in one kernel: position ids computed in the kernel
    (expand of a range), word + position lookups, add, LayerNorm; a MatMul reading the result."""
    from solverfuse.graph import load_graph
    t = {"ids": {"shape": [2, 8], "dtype": "int64"}, "wte": {"shape": [64, 16], "constant": True},
         "wpe": {"shape": [8, 16], "constant": True}, "ar": {"shape": [1, 8], "dtype": "int64", "constant": True},
         "shp": {"shape": [2], "dtype": "int64", "constant": True, "value": [2, 8]},
         "w": {"shape": [16, 16], "constant": True}, "s": {"shape": [16], "constant": True}}
    return load_graph({"tensors": t, "inputs": ["ids"], "outputs": ["y"], "nodes": [
        {"name": "pos", "op": "Expand", "inputs": ["ar", "shp"], "outputs": ["pid"]},
        {"name": "word", "op": "Gather", "inputs": ["wte", "ids"], "outputs": ["we"]},
        {"name": "posemb", "op": "Gather", "inputs": ["wpe", "pid"], "outputs": ["pe"]},
        {"name": "add", "op": "Add", "inputs": ["we", "pe"], "outputs": ["e"]},
        {"name": "ln", "op": "LayerNormalization", "inputs": ["e", "s", "s"], "outputs": ["h"]},
        {"name": "neg", "op": "Neg", "inputs": ["wte"], "outputs": ["nw"]},
        {"name": "again", "op": "Gather", "inputs": ["nw", "ids"], "outputs": ["g2"]},
        {"name": "mm", "op": "MatMul", "inputs": ["h", "w"], "outputs": ["y"]},
        # bert's token-type lookup: aten.gather's data is an expand of a buffer (read through it)
        {"name": "view", "op": "Transpose", "inputs": ["wte"], "outputs": ["wt"], "attributes": {"perm": [1, 0]}},
        {"name": "viaview", "op": "Gather", "inputs": ["wt", "ids"], "outputs": ["g3"]},
        {"name": "view2", "op": "Transpose", "inputs": ["nw"], "outputs": ["nwt"], "attributes": {"perm": [1, 0]}},
        {"name": "computed", "op": "Gather", "inputs": ["nwt", "ids"], "outputs": ["g4"]}]})


def test_gathers_compute_indices_in_kernel_and_share_groups_but_not_with_anchors():
    """Inductor's embedding kernel (bert, distilbert, gpt2): the indices come from an in-kernel
    expand, two lookups and the add + LayerNorm share one kernel. The gathered data still comes
    from memory, and no gather joins a GEMM's kernel."""
    g = _embeddings()
    assert rules.rule_violation(g, ["pos", "word", "posemb", "add", "ln"]) is None
    assert rules.edge_fusable(g, "pos", "posemb") and not rules.edge_fusable(g, "neg", "again")
    assert "must read its data 'nw'" in rules.rule_violation(g, ["neg", "again"])
    assert "cannot share a kernel with anchor 'mm'" in rules.rule_violation(g, ["word", "mm"])
    assert rules.rule_violation(g, ["view", "viaview"]) is None  # data read through a view
    assert "'neg' computes it" in rules.rule_violation(g, ["neg", "view2", "computed"])
    assert rules.edge_fusable(g, "view2", "computed") and not rules.edge_fusable(g, "neg", "again")
    order = list(g.index.order)
    m, ad = rules.masks(g, order), rules.assign_data(g, order)
    for grp, bad in [(["pos", "word", "posemb", "add", "ln"], False), (["neg", "again"], True),
                     (["word", "mm"], True), (["word", "posemb"], False), (["view", "viaview"], False),
                     (["neg", "view2", "computed"], True)]:
        assert rules.assign_violation(g, ad, grp) == bad, grp
        bits = sum(1 << order.index(v) for v in grp)
        assert rules.hull_violation(m, bits, order.index(grp[0]), bad and grp[0] == "neg") == bad, grp


@settings(max_examples=150, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_case(), st.data())
def test_legality_is_monotone_under_subsets(case, data):
    """Presolve and the enumerations prune on it (formulations/reality.md): a legal group's subsets
    are legal -- including the one non-additive rule, a streaming reduction's row."""
    g, hw = case
    order = list(g.index.order)
    for _ in range(10 if len(order) > 1 else 0):
        group = data.draw(st.lists(st.sampled_from(order), min_size=2, unique=True))
        if cost.group_violation(g, group, hw) is None:
            for v in group:
                assert cost.group_violation(g, [w for w in group if w != v], hw) is None, (group, v)
