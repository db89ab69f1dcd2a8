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
                    "MatMul": (True, True, False), "Gather": (True, True, False), "MaxPool": (True, False, False)}
    assert ROLE_RULES["opaque"] == (True, False, True)
    assert {n for n, i in OPS.items() if i.view} == {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"}
    assert {n for n, i in OPS.items() if i.streaming} >= {"ReduceSum", "ReduceMax", "GlobalAveragePool"}
    assert not any(OPS[n].streaming for n in ("Softmax", "LogSoftmax", "LayerNormalization"))
    assert OPS["Gather"].gather_data_input


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
