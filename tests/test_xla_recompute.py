"""The ``xla`` baseline with producer duplication (greedy/xla_recompute.py): XLA's priority fusion
clones a producer into each consumer fusion. References: hand-counted bytes, the covering
brute-force oracle (no plan may beat it), the validator, and ONNX's reference evaluator for the
emitted C."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from solverfuse import cost, greedy
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.errors import PlanError
from solverfuse.hardware import load_hardware
from solverfuse.oracle import brute_force_covering
from solverfuse.plans import FORMAT_COVERING, validate
from solverfuse.sources import load_graph
from tests.test_oracle import small_case

H100 = load_hardware("nvidia-h100")
TIGHT = H100.model_copy(update={"name": "tight", "register_budget": H100.kernel_base_registers + 3})
N = 256  # floats: every tensor is 1,024 B
FORK = load_graph({"name": "fork", "tensors": {"x": {"shape": [N]}}, "inputs": ["x"], "outputs": ["y", "z"],
                   "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
                             {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
                             {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_fork_producer_is_cloned_into_both_consumers(tmp_path):
    # TIGHT holds two of these ops per kernel: the partition xla cannot fuse a into both b and c
    # (one kernel of three); XLA clones a into each: x read twice, h never written
    part = greedy.greedy_plan(FORK, TIGHT, "xla")
    plan = greedy.recomputing_plan(FORK, TIGHT, "xla")
    assert plan.format == FORMAT_COVERING and plan.strategy == "xla-recompute"
    assert sorted((tuple(g.nodes), tuple(g.writes)) for g in plan.groups) == [(("a", "b"), ("y",)), (("a", "c"), ("z",))]
    assert plan.traffic_bytes == 4 * 1024 < part.traffic_bytes == 5 * 1024
    validate(plan, FORK, TIGHT)
    prog = compile_plan(plan, FORK, strict=True, cache_dir=tmp_path, counters=True)
    ins = random_inputs(FORK, seed=4)
    out, ref = prog.run(ins, {}), reference_outputs(FORK, ins, {}, engine="reference")
    for t in ("y", "z"):
        np.testing.assert_allclose(out[t], ref[t], rtol=1e-6, atol=1e-7)
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == [(1024, 1024), (1024, 1024)]


def test_reduce_into_reduce_is_never_cloned():
    # XLA fuses no producer that reduces into a consumer that reduces
    g = load_graph({"name": "rr", "tensors": {"x": {"shape": [4, N]}}, "inputs": ["x"], "outputs": ["s"],
                    "nodes": [{"name": "r1", "op": "ReduceSum", "inputs": ["x"], "outputs": ["m"],
                               "attributes": {"axes": [1], "keepdims": 1}},
                              {"name": "r2", "op": "ReduceMax", "inputs": ["m"], "outputs": ["s"],
                               "attributes": {"axes": [0], "keepdims": 1}}]})
    plan = greedy.recomputing_plan(g, H100, "xla")
    assert sorted(g.nodes for g in plan.groups) == [["r1"], ["r2"]]


def test_unknown_recomputing_strategy_is_one_line():
    with pytest.raises(PlanError, match="unknown recomputing strategy 'tvm'"):
        greedy.recomputing_plan(FORK, H100, "tvm")


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_examples_give_valid_plans_no_worse_than_unfused(path):
    g = load_graph(path)
    plan = greedy.recomputing_plan(g, H100, "xla")
    validate(plan, g, H100)
    assert cost.q_min(g) <= plan.traffic_bytes <= cost.unfused_traffic(g)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_case(max_ops=6))
def test_random_dags_valid_and_never_better_than_the_covering_oracle(case):
    g, hw = case
    plan = greedy.recomputing_plan(g, hw, "xla")
    validate(plan, g, hw)
    assert plan.traffic_bytes >= brute_force_covering(g, hw)[0]
