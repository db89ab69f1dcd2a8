"""The time objective with recomputation (``--recompute --objective time``): a covering of least
predicted time, checked against the covering-time brute force (``oracle.brute_force_covering_time``:
a shortest path over kernels timed by its own written-out roofline), and the covering stage's
hints from the recomputing baselines (never worse than ``xla-recompute``/``inductor-recompute``).
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solverfuse import cost
from solverfuse.cost import Kernel
from solverfuse.greedy import RECOMPUTING, recomputing_plan
from solverfuse.hardware import load_hardware
from solverfuse.oracle import brute_force_covering_time, covering_kernel_time
from solverfuse.plans import plan_kernels, validate
from solverfuse.solve import solve_report
from solverfuse.time_objective import solve_covering_time_report
from solverfuse.sources import load_graph
from tests.model_set import MODELS_DIR, model_names
from tests.test_covering import FORK, SOFTMAX, SOFTMAX_OPS, TIGHT, X, fork_case
from tests.test_oracle import small_case

H100 = load_hardware("nvidia-h100")


@st.composite
def timing(draw, hw):
    """``hw`` with a launch overhead, peak and cache tier of the same order as the small cases'
    memory times (tens of picoseconds), so launches, compute and bandwidth all trade off."""
    peak = draw(st.sampled_from([1e10, 1e11, 1e12, 1e14]))
    update = {"launch_overhead_s": draw(st.sampled_from([0.0, 0.0, 2e-11, 1e-10, 1e-9])),
              "peak_flops": {k: peak for k in hw.peak_flops}}
    if draw(st.booleans()):
        update.update(l2_bytes=draw(st.sampled_from([256, 1024, 4096])), l2_bandwidth=2 * hw.dram_bandwidth)
    return hw.model_copy(update=update)


def _check(g, hw):
    best_all, fastest = brute_force_covering_time(g, hw)
    best_conn, _ = brute_force_covering_time(g, hw, connected=True)
    rep = solve_covering_time_report(g, hw, workers=1, time_limit=30, seed=0)
    plan = rep.plan
    validate(plan, g, hw)
    kernels = plan_kernels(plan)
    # the plan's time by the oracle's own formula equals the cost model's and the solver's
    assert sum(covering_kernel_time(g, hw, k.nodes, k.writes, k.passes) for k in kernels) == rep.time_ps
    assert cost.covering_time_ps(g, kernels, hw) == rep.time_ps
    # the covering model is exact over connected kernels: it reaches that oracle's optimum (or a
    # whole hint beats it), and nothing beats the optimum over every covering
    assert best_all <= rep.time_ps <= best_conn, (fastest, kernels)
    assert rep.time_ps == best_conn or "whole was fastest" in plan.reason, (best_conn, kernels)
    assert rep.bound_ps <= best_all
    if plan.status == "optimal":
        assert rep.time_ps == best_all, (fastest, kernels)
    if rep.merge_pair is None:  # every legal kernel is connected: the optimum is proven
        assert best_all == best_conn and plan.status == "optimal", plan.reason
    # never slower than the recomputing baselines (it is hinted with them)
    for name in RECOMPUTING:
        assert rep.time_ps <= cost.covering_time_ps(g, plan_kernels(recomputing_plan(g, hw, name)), hw)
    return plan


@settings(max_examples=100, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fork_case(max_ops=6).flatmap(lambda c: st.tuples(st.just(c[0]), timing(c[1]))))
def test_covering_time_matches_the_covering_time_oracle_on_forks(case):
    _check(*case)


@settings(max_examples=40, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_case(max_ops=5).flatmap(lambda c: st.tuples(st.just(c[0]), timing(c[1]))))
def test_covering_time_matches_the_covering_time_oracle_with_views_gathers_anchors(case):
    _check(*case)


def test_covering_time_recomputes_the_fork_when_launches_are_free():
    # launches free: two kernels that each recompute a beat writing and re-reading h
    hw = TIGHT.model_copy(update={"launch_overhead_s": 0.0})
    plan = _check(FORK, hw)
    assert sorted(g.nodes for g in plan.groups) == [["a", "b"], ["a", "c"]]


def test_covering_time_softmax_is_the_looped_kernel():
    rep = solve_covering_time_report(SOFTMAX, H100, workers=1, time_limit=20)
    assert rep.plan.status == "optimal", rep.plan.reason
    assert [(g.nodes, g.passes) for g in rep.plan.groups] == [(list(SOFTMAX_OPS), 3)]
    assert rep.plan.traffic_bytes == 4 * X
    assert rep.time_ps == cost.covering_time_ps(SOFTMAX, [Kernel(SOFTMAX_OPS, ("y",), 3)], H100)


def test_library_and_cli_plumb_covering_time(tmp_path):
    import solverfuse
    from typer.testing import CliRunner

    from solverfuse.cli import app
    from solverfuse.plans import load_plan
    p = solverfuse.plan(FORK, TIGHT, strategy="covering", objective="time", workers=1, time_limit=20)
    assert p.strategy == "covering-time"
    path = tmp_path / "fork.json"
    path.write_text(FORK.to_json())
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["plan", str(path), "--recompute", "--objective", "time", "--workers", "1",
                                 "--time-limit", "20", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert load_plan(out).strategy == "covering-time"


@pytest.mark.parametrize("name", ["fork", "softmax"])
def test_traffic_covering_never_worse_than_the_recomputing_baselines(name):
    g, hw = (FORK, TIGHT) if name == "fork" else (SOFTMAX, H100)
    plan = solve_report(g, hw, workers=1, time_limit=0.5, covering=True).plan
    for base in RECOMPUTING:
        assert plan.traffic_bytes <= recomputing_plan(g, hw, base).traffic_bytes


def _never_worse(g, hw, limit):
    plan = solve_report(g, hw, workers=1, time_limit=limit, covering=True).plan
    validate(plan, g, hw)
    for base in RECOMPUTING:
        # the baseline's own traffic, by the cost model on its own validated plan
        ref = cost.covering_traffic(g, plan_kernels(recomputing_plan(g, hw, base)))
        assert plan.traffic_bytes <= ref, (base, plan.traffic_bytes, ref)


@pytest.mark.parametrize("name", model_names())
def test_traffic_covering_never_worse_than_the_recomputing_baselines_on_the_exported_models(name):
    _never_worse(load_graph(MODELS_DIR / f"{name}.onnx"), H100, 0.3)


@pytest.mark.parametrize("seed", range(4))
def test_traffic_covering_never_worse_than_the_recomputing_baselines_on_random_dags(seed):
    from solverfuse.zoo import synthetic_graph
    _never_worse(synthetic_graph(60, seed=seed), H100, 0.2)


def test_compare_shows_the_time_rows_and_the_proven_covering_time_is_the_fastest_row():
    from solverfuse.compare import compare
    rows = {r.strategy: r for r in compare(FORK, TIGHT, time_limit=5, workers=1, covering=True, objective="time")}
    assert list(rows)[:4] == ["optimal", "covering", "optimal-time", "covering-time"]
    ct = rows["covering-time"]
    assert ct.status == "optimal"
    # every row's plan is a covering: none may be predicted faster than the proven time optimum
    assert all(ct.predicted_ps <= r.predicted_ps for r in rows.values())
    assert ct.predicted_ps == brute_force_covering_time(FORK, TIGHT)[0]
