"""The ``inductor`` baseline with its lowering's recomputation (greedy/inductor_inline.py):
Inductor computes an unstored pointwise value inside the loop of every kernel that reads it.
References: hand-counted bytes, the covering brute-force oracle (no plan may beat it), the
validator, and ONNX's reference evaluator for the emitted C."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from solverfuse import cost, greedy
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.hardware import load_hardware
from solverfuse.oracle import brute_force_covering
from solverfuse.plans import FORMAT_COVERING, validate
from solverfuse.sources import load_graph
from tests.test_covering import fork_case
from tests.test_oracle import small_case

H100 = load_hardware("nvidia-h100")
TIGHT = H100.model_copy(update={"name": "tight", "register_budget": H100.kernel_base_registers + 2})
N = 64  # a [64, 64] float tensor is 16,384 B
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KB16 = N * N * 4


def fork(op: str = "Relu"):
    # h = op(x) read by a row reduction and by a pointwise consumer
    return load_graph({"name": "fork", "tensors": {"x": {"shape": [N, N]}}, "inputs": ["x"], "outputs": ["y", "s"],
                       "nodes": [{"name": "a", "op": op, "inputs": ["x"], "outputs": ["h"]},
                                 {"name": "r", "op": "ReduceSum", "inputs": ["h"], "outputs": ["s"],
                                  "attributes": {"axes": [1], "keepdims": 1}},
                                 {"name": "b", "op": "Neg", "inputs": ["h"], "outputs": ["y"]}]})


def test_inlined_producer_is_recomputed_in_each_consumer_kernel(tmp_path):
    # TIGHT holds two of these ops per kernel: the partition stores h (x read, h written and
    # read again); Inductor's lowering never stores relu(x) and computes it in both loops
    g = fork()
    part = greedy.greedy_plan(g, TIGHT, "inductor")
    plan = greedy.recomputing_plan(g, TIGHT, "inductor")
    assert plan.format == FORMAT_COVERING and plan.strategy == "inductor-recompute"
    assert sorted((tuple(k.nodes), tuple(k.writes)) for k in plan.groups) == [(("a", "b"), ("y",)), (("a", "r"), ("s",))]
    s_bytes = N * 4
    assert plan.traffic_bytes == 2 * KB16 + KB16 + s_bytes  # x twice, y, s
    assert part.traffic_bytes == KB16 + KB16 + KB16 + KB16 + s_bytes  # x, h written, h read, y, s
    validate(plan, g, TIGHT)
    # the recomputed relu's flops count in each kernel's time
    flops = {k.nodes[-1]: sum(g.flops(v) for v in k.nodes) for k in plan.groups}
    assert flops["b"] == g.flops("a") + g.flops("b")
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path, counters=True)
    ins = random_inputs(g, seed=3)
    out, ref = prog.run(ins, {}), reference_outputs(g, ins, {}, engine="reference")
    for t in ("y", "s"):
        np.testing.assert_allclose(out[t], ref[t], rtol=1e-5, atol=1e-6)
    assert sorted(c["read_bytes"] + c["written_bytes"] for c in prog.counters) == \
        sorted(grp.traffic_bytes for grp in plan.groups)


def test_heavy_reused_value_is_stored_on_cpu():
    # should_realize_on_reuse (CPU): a value read twice whose expression uses exp is stored
    g = fork("Exp")
    plan = greedy.recomputing_plan(g, TIGHT, "inductor")
    assert plan.format != FORMAT_COVERING  # nothing recomputed: a partition
    assert sorted((k.nodes, k.writes) for k in plan.groups) == [(["a"], ["h"]), (["r", "b"], ["s", "y"])]
    assert plan.traffic_bytes == KB16 + KB16 + KB16 + KB16 + N * 4  # x, h written, h read once, y, s


def test_fused_kernels_hold_the_recomputed_op_once():
    # With room for all three ops the two loops (same 64 x 64 iteration) fuse: one kernel
    plan = greedy.recomputing_plan(fork(), H100, "inductor")
    assert [grp.nodes for grp in plan.groups] == [["a", "r", "b"]]
    assert plan.traffic_bytes == KB16 + KB16 + N * 4


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_examples_give_valid_plans_no_worse_than_unfused(path):
    g = load_graph(path)
    plan = greedy.recomputing_plan(g, H100, "inductor")
    validate(plan, g, H100)
    assert cost.q_min(g) <= plan.traffic_bytes <= cost.unfused_traffic(g)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fork_case())
def test_random_forks_valid_and_never_better_than_the_covering_oracle(case):
    # forks are where Inductor recomputes (about one case in eight here)
    g, hw = case
    plan = greedy.recomputing_plan(g, hw, "inductor")
    validate(plan, g, hw)
    assert plan.traffic_bytes >= brute_force_covering(g, hw)[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_case(max_ops=6))
def test_random_dags_valid_and_never_better_than_the_covering_oracle(case):
    g, hw = case
    plan = greedy.recomputing_plan(g, hw, "inductor")
    validate(plan, g, hw)
    assert plan.traffic_bytes >= brute_force_covering(g, hw)[0]


SOFTMAX = {"name": "softmax", "tensors": {"x": {"shape": [2, 16777216]}}, "inputs": ["x"], "outputs": ["y"],
           "nodes": [{"name": "max", "op": "ReduceMax", "inputs": ["x"], "outputs": ["m"], "attributes": {"axes": [1], "keepdims": 1}},
                     {"name": "sub", "op": "Sub", "inputs": ["x", "m"], "outputs": ["d"]},
                     {"name": "exp", "op": "Exp", "inputs": ["d"], "outputs": ["e"]},
                     {"name": "sum", "op": "ReduceSum", "inputs": ["e"], "outputs": ["s"], "attributes": {"axes": [1], "keepdims": 1}},
                     {"name": "div", "op": "Div", "inputs": ["e", "s"], "outputs": ["y"]}]}


def test_long_softmax_rows_run_as_one_looped_kernel():
    # issue 12: torch.compile runs a softmax over 16M-float rows as one kernel of three loops,
    # the exponent recomputed in the last: three reads of X and one write of Y
    g = load_graph(SOFTMAX)
    plan = greedy.recomputing_plan(g, H100, "inductor")
    x = 2 * 16777216 * 4
    assert [(k.nodes, k.passes) for k in plan.groups] == [(["max", "sub", "exp", "sum", "div"], 3)]
    part = greedy.greedy_plan(g, H100, "inductor").traffic_bytes  # three kernels: x read twice, e written and read
    assert plan.traffic_bytes == 4 * x and part == 5 * x + 4 * 8  # (+ the row maxima and sums, written and read)


def test_looped_kernel_runs_and_counts_what_it_plans(tmp_path):
    # the same softmax on rows a 64-byte L1 cannot hold (16 floats): emitted, vs the reference
    micro = H100.model_copy(update={"name": "micro-l1", "l1_bytes": 64})
    spec = {**SOFTMAX, "tensors": {"x": {"shape": [4, 16]}}}
    g = load_graph(spec)
    plan = greedy.recomputing_plan(g, micro, "inductor")
    assert [k.passes for k in plan.groups] == [3]
    validate(plan, g, micro)
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path, counters=True)
    ins = random_inputs(g, seed=5)
    out, ref = prog.run(ins, {}), reference_outputs(g, ins, {}, engine="reference")
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-5, atol=1e-7)
    assert [c["read_bytes"] + c["written_bytes"] for c in prog.counters] == [plan.traffic_bytes] == [4 * 4 * 16 * 4]
