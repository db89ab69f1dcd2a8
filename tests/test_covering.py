"""Plans with recomputation and looped reductions (``solverfuse-plan/2``, formulations/covering.md).

References are hand-counted bytes and hand-built plans; the validator must accept the legal ones
and name the broken rule of each illegal one.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solverfuse import cost
from solverfuse.cost import Kernel
from solverfuse.errors import PlanError
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.oracle import brute_force, brute_force_covering
from solverfuse.plans import (FORMAT_COVERING, build_covering_plan, build_plan, load_plan, save_plan,
                              validate)
from solverfuse.formulations.presolve import presolve, traffic_floor
from solverfuse.solve import solve_report
from tests.test_oracle import small_case

H100 = load_hardware("nvidia-h100")
N = 256  # floats: every tensor below is 1,024 B
#: a -> (b, c): h is read by two consumers; on TIGHT no kernel holds all three (4 registers of ops),
#: so recomputing a in both kernels saves writing and re-reading h
FORK = load_graph({"name": "fork", "tensors": {"x": {"shape": [N]}}, "inputs": ["x"], "outputs": ["y", "z"],
                   "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
                             {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
                             {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})

ROWS, COLS = 2, 16777216
X = ROWS * COLS * 4
SOFTMAX = load_graph({
    "name": "softmax-decomposed", "tensors": {"x": {"shape": [ROWS, COLS]}}, "inputs": ["x"], "outputs": ["y"],
    "nodes": [{"name": "max", "op": "ReduceMax", "inputs": ["x"], "outputs": ["m"],
               "attributes": {"axes": [1], "keepdims": 1}},
              {"name": "sub", "op": "Sub", "inputs": ["x", "m"], "outputs": ["d"]},
              {"name": "exp", "op": "Exp", "inputs": ["d"], "outputs": ["e"]},
              {"name": "sum", "op": "ReduceSum", "inputs": ["e"], "outputs": ["s"],
               "attributes": {"axes": [1], "keepdims": 1}},
              {"name": "div", "op": "Div", "inputs": ["e", "s"], "outputs": ["y"]}]})
SOFTMAX_OPS = ("max", "sub", "exp", "sum", "div")
TIGHT = H100.model_copy(update={"name": "tight", "register_budget": H100.kernel_base_registers + 3})


def test_partition_kernels_cost_what_groups_cost():
    for grp in (["a"], ["a", "b"], ["a", "b", "c"], ["b"]):
        assert cost.kernel_traffic(FORK, grp, cost.group_writes(FORK, grp)) == cost.group_traffic(FORK, grp)


def test_recomputed_fork_is_legal_and_cheaper_than_every_partition():
    assert cost.group_violation(FORK, ["a", "b", "c"], TIGHT) is not None
    # both kernels read x and write one output: 2 * (1024 + 1024); the best partition
    # {a, b}, {c} writes h and reads it again: 2048 + 1024 + 2048
    p = build_covering_plan(FORK, TIGHT, [Kernel(("a", "b"), ("y",)), Kernel(("a", "c"), ("z",))],
                            strategy="manual")
    assert p.format == FORMAT_COVERING and p.traffic_bytes == 4096
    assert [g.reads for g in p.groups] == [["x"], ["x"]]
    # a partition is still written as /1
    q = build_covering_plan(FORK, TIGHT, [Kernel(("a", "b"), ("h", "y")), Kernel(("c",), ("z",))],
                            strategy="manual")
    assert q.format == "solverfuse-plan/1" and q.traffic_bytes == 5 * 1024


def test_covering_plan_round_trips_and_v1_plans_still_load(tmp_path):
    p = build_covering_plan(FORK, H100, [Kernel(("a", "b"), ("y",)), Kernel(("a", "c"), ("z",))],
                            strategy="manual")
    save_plan(p, tmp_path / "p2.json")
    back = load_plan(tmp_path / "p2.json")
    assert back.format == FORMAT_COVERING and back.traffic_bytes == 4096
    v1 = build_plan(FORK, H100, [["a", "b", "c"]], strategy="manual")
    save_plan(v1, tmp_path / "p1.json")
    assert load_plan(tmp_path / "p1.json").format == "solverfuse-plan/1"


def _broken(edit, recount=True):
    """The recomputed fork plan with one rule broken by ``edit`` -- and, unless ``recount`` is
    False, its byte counts made consistent again, so that only the rule is wrong."""
    p = build_covering_plan(FORK, H100, [Kernel(("a", "b"), ("y",)), Kernel(("a", "c"), ("z",))],
                            strategy="manual")
    edit(p)
    if recount:
        for g in p.groups:
            g.traffic_bytes = cost.kernel_traffic(FORK, g.nodes, g.writes, g.passes)
        p.traffic_bytes = sum(g.traffic_bytes for g in p.groups)
    return p


@pytest.mark.parametrize("edit, message", [
    (lambda p: p.groups.pop(), "node 'c' is in no group"),
    (lambda p: p.groups[1].writes.clear(), "graph output 'z' is written by no group"),
    (lambda p: p.groups[1].reads.append("h"), "reads is"),
    (lambda p: (p.groups[0].writes.append("h"), p.groups[1].writes.append("h")), "written by groups"),
    (lambda p: p.groups[0].writes.append("h"), "no later group reads"),
    (lambda p: p.groups[0].writes.append("z"), "none of its ops produces"),
    (lambda p: setattr(p.groups[0], "passes", 2), "makes 1 passes, not 2"),
])
def test_validator_names_the_broken_rule(edit, message):
    with pytest.raises(PlanError, match=message):
        validate(_broken(edit), FORK, H100)


def test_validator_checks_the_recorded_bytes():
    with pytest.raises(PlanError, match="traffic_bytes is 1"):
        validate(_broken(lambda p: setattr(p.groups[0], "traffic_bytes", 1), recount=False), FORK, H100)


def test_read_before_its_write_is_rejected():
    # c reads h from memory; the group writing h comes after it
    p = build_covering_plan(FORK, H100, [Kernel(("a", "b"), ("h", "y")), Kernel(("c",), ("z",))],
                            strategy="manual")
    p.format = FORMAT_COVERING
    validate(p, FORK, H100)   # a partition written as /2 is a legal /2 plan
    p.groups.reverse()
    with pytest.raises(PlanError, match="no earlier group writes it"):
        validate(p, FORK, H100)


def test_a_v1_plan_may_not_duplicate_an_op():
    p = build_covering_plan(FORK, H100, [Kernel(("a", "b"), ("y",)), Kernel(("a", "c"), ("z",))],
                            strategy="manual")
    p.format = "solverfuse-plan/1"
    with pytest.raises(PlanError, match="is in groups"):
        validate(p, FORK, H100)


def test_softmax_as_one_looped_kernel_moves_four_x():
    # three passes over x: max | sub, exp, sum | sub, exp, div; one write of y
    assert cost.kernel_violation(SOFTMAX, SOFTMAX_OPS, H100) is not None   # one pass: 64 MiB rows
    assert cost.kernel_violation(SOFTMAX, SOFTMAX_OPS, H100, passes=3) is None
    p = build_covering_plan(SOFTMAX, H100, [Kernel(SOFTMAX_OPS, ("y",), 3)], strategy="manual")
    assert p.format == FORMAT_COVERING and p.groups[0].passes == 3
    assert p.traffic_bytes == 4 * X == 536_870_912
    assert p.groups[0].l1_bytes == 0


def test_covering_oracle_finds_the_fork_recomputation_and_the_looped_softmax():
    best, kernels = brute_force_covering(FORK, TIGHT)
    assert best == 4096 and sorted(k.nodes for k in kernels) == [("a", "b"), ("a", "c")]
    assert brute_force_covering(FORK, H100)[0] == 3072   # all three fit: one kernel
    assert brute_force_covering(SOFTMAX, H100)[0] == 4 * X


# ---- the covering formulation against the covering oracle -----------------------------------------

@st.composite
def fork_case(draw, max_ops=6):
    """A random DAG of 2..6 memory-bound ops that favours forks (each op reads one of the three
    latest tensors) and reductions feeding broadcasts, on a hardware with few registers and an L1
    that often holds no row: where recomputation and looped kernels pay."""
    s = draw(st.sampled_from([4, 8]))
    n = draw(st.integers(2, max_ops))
    tensors = {"x": {"shape": [s, s]}, "r": {"shape": [s, 1]}}
    sq, row = ["x"], ["r"]
    nodes, read = [], set()
    for i in range(n):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduce", "reduce", "softmax"]))
        out = f"t{i}"
        # favour the latest tensors: forks and chains
        a = draw(st.sampled_from(sq[-3:]))
        if kind == "unary":
            node = {"op": draw(st.sampled_from(["Relu", "Exp", "Neg", "Sigmoid"])), "inputs": [a]}
            sq.append(out)
        elif kind == "binary":
            b = draw(st.sampled_from(sq[-3:] + row[-2:]))
            node = {"op": draw(st.sampled_from(["Add", "Mul", "Sub"])), "inputs": [a, b]}
            sq.append(out)
            read.add(b)
        elif kind == "reduce":
            node = {"op": draw(st.sampled_from(["ReduceSum", "ReduceMax"])), "inputs": [a],
                    "attributes": {"axes": [1], "keepdims": 1}}
            row.append(out)
        else:
            node = {"op": "Softmax", "inputs": [a], "attributes": {"axis": -1}}
            sq.append(out)
        read.add(a)
        nodes.append({"name": f"n{i}", "outputs": [out], **node})
    produced = [nd["outputs"][0] for nd in nodes]
    outputs = [t for t in produced if t not in read] or [produced[-1]]
    g = load_graph({"name": "fork", "tensors": tensors, "inputs": ["x", "r"], "outputs": outputs, "nodes": nodes})
    base = H100.kernel_base_registers
    hw = H100.model_copy(update={"name": "tight", "register_budget": base + draw(st.integers(2, 8)),
                                 "l1_bytes": draw(st.sampled_from([8, 8, 4 * s, 4096]))})
    return g, hw


def _check_against_oracle(g, hw):
    best, kernels = brute_force_covering(g, hw)
    plan = solve_report(g, hw, workers=1, time_limit=30, seed=0, covering=True).plan
    validate(plan, g, hw)
    assert plan.status == "optimal", plan.reason
    assert plan.traffic_bytes == best, (kernels, [(k.nodes, k.writes, k.passes) for k in plan.groups])
    assert plan.bound_bytes == best
    # never worse than the partition optimum (the partition oracle's)
    assert best <= brute_force(g, hw)[0]
    # the covering floors are valid for every covering
    pre = presolve(g, hw, violation=cost.looped_violation, convex=False)
    assert sum(traffic_floor(g, pre, part, recompute=True) for part in pre.parts) <= best
    assert cost.plan_floor(g, list(g.index.order)) <= best


@settings(max_examples=200, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fork_case())
def test_covering_solver_matches_the_covering_oracle_on_forks(case):
    _check_against_oracle(*case)


@settings(max_examples=100, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_case(max_ops=6))
def test_covering_solver_matches_the_covering_oracle_with_views_gathers_anchors(case):
    _check_against_oracle(*case)


# ---- end to end: the solver, the library and the command line ------------------------------------

def test_softmax_covering_optimum_is_one_looped_kernel_of_four_x():
    plan = solve_report(SOFTMAX, H100, workers=1, covering=True).plan
    assert plan.status == "optimal" and plan.traffic_bytes == plan.bound_bytes == 4 * X
    assert [(g.nodes, g.passes) for g in plan.groups] == [(list(SOFTMAX_OPS), 3)]
    partition = solve_report(SOFTMAX, H100, workers=1).plan
    assert partition.traffic_bytes == 5 * X + 32   # torch.compile's three kernels


def test_library_strategy_covering_returns_a_v2_plan():
    import solverfuse
    p = solverfuse.plan(FORK, TIGHT, strategy="covering", workers=1, time_limit=20)
    assert p.format == FORMAT_COVERING and p.status == "optimal" and p.traffic_bytes == 4096
    assert solverfuse.plan(FORK, TIGHT, workers=1, time_limit=20).traffic_bytes == 5120


def test_cli_plan_recompute_writes_a_loadable_v2_plan(tmp_path):
    from typer.testing import CliRunner
    from solverfuse.cli import app
    src = tmp_path / "softmax.json"
    src.write_text(SOFTMAX.model_dump_json(exclude_none=True))
    out = tmp_path / "plan.json"
    res = CliRunner().invoke(app, ["plan", str(src), "--recompute", "--workers", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "3 passes" in res.output
    plan = load_plan(out)
    assert plan.format == FORMAT_COVERING and plan.traffic_bytes == 4 * X


# ---- run time in exact integer picoseconds ---------------------------------------------------------

def test_kernel_time_counts_every_pass_and_its_recomputed_flops():
    hw = H100
    bw, launch = int(hw.dram_bandwidth), round(hw.launch_overhead_s * 10 ** 12)
    peak = int(hw.peak("float32"))
    # by hand: the looped softmax computes max | sub, exp, sum | sub, exp, div
    f = {v: SOFTMAX.flops(v) for v in SOFTMAX_OPS}
    flops = f["max"] + (f["sub"] + f["exp"] + f["sum"]) + (f["sub"] + f["exp"] + f["div"])
    mem = -(-4 * X * 10 ** 12 // bw)
    want = max(mem, -(-flops * 10 ** 12 // peak)) + launch
    assert cost.kernel_time_ps(SOFTMAX, SOFTMAX_OPS, ("y",), hw, passes=3) == want
    # one pass of the same ops (were it legal) moves 2|X| and computes each op once
    one = sum(f.values())
    assert cost.kernel_time_ps(SOFTMAX, SOFTMAX_OPS, ("y",), hw) == \
        max(-(-2 * X * 10 ** 12 // bw), -(-one * 10 ** 12 // peak)) + launch
    # the covering plan's time is the sum over its kernels; a partition's equals plan_time_ps
    assert cost.covering_time_ps(FORK, [Kernel(("a", "b"), ("h", "y")), Kernel(("c",), ("z",))], hw) == \
        cost.plan_time_ps(FORK, [["a", "b"], ["c"]], hw)
    assert abs(cost.plan_time_ps(FORK, [["a", "b"], ["c"]], hw) / 1e12 -
               cost.plan_time(FORK, [["a", "b"], ["c"]], hw)) < 1e-11


# ---- the C emitter runs a plan with recomputation ---------------------------------------------------

def test_emitted_recomputed_fork_matches_the_reference_and_counts_the_stated_bytes(tmp_path):
    import numpy as np
    from solverfuse.emit.build import compile_plan
    from solverfuse.emit.data import constants, random_inputs
    from solverfuse.emit.reference import reference_outputs
    plan = build_covering_plan(FORK, TIGHT, [Kernel(("a", "b"), ("y",)), Kernel(("a", "c"), ("z",))],
                               strategy="manual")
    prog = compile_plan(plan, FORK, strict=True, cache_dir=tmp_path, counters=True)
    ins, cs = random_inputs(FORK, seed=3), constants(FORK, seed=3)
    out = prog.run(ins, cs)
    ref = reference_outputs(FORK, ins, cs, engine="reference")
    for t in ("y", "z"):
        np.testing.assert_allclose(out[t], ref[t], rtol=1e-5, atol=1e-6)
    # each kernel reads x and writes its own output; h never reaches memory
    assert [(c["read_bytes"], c["written_bytes"]) for c in prog.counters] == [(1024, 1024), (1024, 1024)]
    assert sum(c["read_bytes"] + c["written_bytes"] for c in prog.counters) == plan.traffic_bytes


# ---- the time objective ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["attention", "inception", "layernorm_gelu", "mlp", "residual"])
def test_time_objective_is_never_predicted_slower_than_the_traffic_plan(name, examples_dir):
    from solverfuse.solve import solve
    from solverfuse.time_objective import solve_time
    g = load_graph(examples_dir / f"{name}.json")
    fast = solve_time(g, H100, workers=1, time_limit=10)
    lean = solve(g, H100, workers=1, time_limit=10)
    validate(fast, g, H100)
    # optimal only with a proven time bound (tests/test_time_bound.py); then bound_bytes is its traffic
    assert fast.status in ("optimal", "feasible") and fast.bound_bytes in (None, fast.traffic_bytes)
    assert "lower bound" in fast.reason
    assert cost.plan_time_ps(g, fast.group_nodes(), H100) <= cost.plan_time_ps(g, lean.group_nodes(), H100)
    assert fast.traffic_bytes >= lean.traffic_bytes


def test_library_objective_time_and_bad_objective():
    import solverfuse
    p = solverfuse.plan(FORK, H100, objective="time", workers=1, time_limit=10)
    assert p.strategy == "optimal-time" and "predicted" in p.reason
    with pytest.raises(solverfuse.errors.SolverfuseError, match="unknown objective"):
        solverfuse.plan(FORK, H100, objective="speed")


def test_explain_refuses_a_recomputing_plan_in_one_line():
    from solverfuse.explain import explain
    plan = build_covering_plan(FORK, TIGHT, [Kernel(("a", "b"), ("y",)), Kernel(("a", "c"), ("z",))],
                               strategy="manual")
    with pytest.raises(PlanError, match="node 'a' is recomputed"):
        explain(plan, FORK, TIGHT)


def test_a_covering_model_past_its_deadline_is_not_built():
    """``covering.build(deadline=)`` gives up (None: the covering stage keeps the part's hint)
    once building passes the deadline, so a large part cannot overrun the time limit; with time
    left the same part builds, and its optimum is the oracle's."""
    import time

    from ortools.sat.python import cp_model

    from solverfuse.formulations import covering
    g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
                    "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
                              {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
                              {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})
    hw = load_hardware("nvidia-h100")
    pre = presolve(g, hw, violation=cost.looped_violation, convex=False)
    assert covering.build(g, hw, pre, pre.parts[0], deadline=time.monotonic() - 1) is None
    f = covering.build(g, hw, pre, pre.parts[0], deadline=time.monotonic() + 60)
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    assert s.Solve(f.model) == cp_model.OPTIMAL
    assert f.objective_value(s.Value) == brute_force_covering(g, hw)[0]
