"""The time objective against a brute-force oracle over every partition, disconnected groups included.

The oracle (:func:`solverfuse.oracle.brute_force_time`) enumerates every set partition and prices
each group by the time objective's definition written out in the oracle (not ``cost.kernel_time_ps``);
the solver searches connected groups only. On random small DAGs and random time profiles (caches
small enough that groups cross them, launch overheads from 0 to dominant, compute-bound matmuls):
the solver's plan is the connected optimum, its bound is at most the optimum over *all*
partitions, ``optimal`` is claimed only when the time is that optimum, and when no two ops
without a tensor between them may share a kernel the connected optimum is the global one.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solverfuse import cost, time_bound, zoo
from solverfuse.hardware import load_hardware
from solverfuse.oracle import brute_force_time, kernel_time
from solverfuse.plans import validate
from solverfuse.time_objective import solve_time_report
from tests.test_oracle import small_case


@st.composite
def timed_case(draw):
    g, hw = draw(small_case(max_ops=7))
    l2 = draw(st.integers(16, 512))
    dram = draw(st.sampled_from([1e9, 4e9]))
    l3_bw = dram * draw(st.sampled_from([1, 2, 5]))
    hw = hw.model_copy(update={
        "dram_bandwidth": dram, "l3_bandwidth": draw(st.sampled_from([None, l3_bw])),
        "l2_bandwidth": draw(st.sampled_from([None, l3_bw * draw(st.sampled_from([1, 3]))])),
        "l2_bytes": l2, "l3_bytes": l2 * draw(st.sampled_from([2, 8])),
        "peak_flops": {"float32": draw(st.sampled_from([2e8, 1e9, 1e12]))},
        "launch_overhead_s": draw(st.sampled_from([0.0, 5e-9, 1e-7, 2e-6]))})
    return g, hw


@settings(max_examples=200, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(timed_case())
def test_time_objective_matches_brute_force(case):
    g, hw = case
    best, groups, _ = brute_force_time(g, hw)
    conn, conn_groups, _ = brute_force_time(g, hw, connected=True)
    # the oracle's definition and the cost model agree on the plans it found
    assert cost.plan_time_ps(g, groups, hw) == best and cost.plan_time_ps(g, conn_groups, hw) == conn
    assert best <= conn
    r = solve_time_report(g, hw, workers=1, time_limit=20, seed=0)
    validate(r.plan, g, hw)
    assert r.time_ps == cost.plan_time_ps(g, r.plan.group_nodes(), hw)
    assert r.connected_time_ps == conn, (conn_groups, r.plan.group_nodes())   # the connected optimum
    assert r.time_ps <= conn                                        # merging pieces only helps
    assert r.bound_ps <= best <= r.time_ps                          # a bound on every partition
    assert r.floor_ps <= best
    if r.plan.status == "optimal":
        assert r.time_ps == best
    if r.merge_pair is None:        # the theorem: no two pieces may share a kernel
        assert conn == best
    elif r.merge_pair:              # the pair found may share a kernel and shares no tensor
        a, b = r.merge_pair
        assert cost.group_violation(g, [a, b], hw) is None


def test_oracle_kernel_time_is_the_cost_model():
    g = zoo.softmax_rows(64, 64)
    hw = load_hardware("detect")
    for grp in ([list(g.index.order)], [[v] for v in g.index.order]):
        assert sum(kernel_time(g, hw, x) for x in grp) == cost.plan_time_ps(g, grp, hw)


def test_softmax_at_dram_size_is_proven_optimal_and_bound_is_exact():
    # one kernel reads X once and writes Y once, both beyond L3: the floor is that kernel's time
    hw = load_hardware("detect")
    g = zoo.softmax_rows(4096, 4096)
    r = solve_time_report(g, hw, workers=1, time_limit=10)
    assert len(r.plan.groups) == 1 and r.plan.status == "optimal"
    assert r.bound_ps == r.time_ps == cost.plan_time_ps(g, r.plan.group_nodes(), hw)


def test_cache_resident_kernel_runs_at_cache_bandwidth():
    hw = load_hardware("detect")
    small, big = zoo.elementwise_chain(8, 8), zoo.elementwise_chain(4096, 4096)
    for g, level in ((small, hw.l2_bandwidth), (big, hw.dram_bandwidth)):
        nodes = list(g.index.order)
        b = cost.group_traffic(g, nodes)
        want = max(-(-b * cost.PS // int(level)), -(-sum(g.flops(v) for v in nodes) * cost.PS // int(hw.peak("float32"))))
        assert cost.group_time_ps(g, nodes, hw) == want + round(hw.launch_overhead_s * cost.PS)


def test_min_kernels_and_merge_pair():
    hw = load_hardware("nvidia-h100")
    chain = zoo.elementwise_chain(64, 64)
    assert time_bound.min_kernels(chain, hw) == 1 and time_bound.merge_pair(chain, hw) is None


def test_worked_example_two_pieces_merge_and_the_floor_proves_it():
    # formulations/time.md: the connected optimum (2 kernels) is not a bound; the merged kernel is
    from solverfuse.graph import load_graph
    g = load_graph({"tensors": {"x": {"shape": [1 << 20]}, "y": {"shape": [1 << 20]}}, "inputs": ["x", "y"],
                    "outputs": ["a", "c"],
                    "nodes": [{"name": "p", "op": "Relu", "inputs": ["x"], "outputs": ["a"]},
                              {"name": "q", "op": "Exp", "inputs": ["y"], "outputs": ["b"]},
                              {"name": "r", "op": "Neg", "inputs": ["b"], "outputs": ["c"]}]})
    r = solve_time_report(g, "nvidia-h100", workers=1)
    assert r.connected_time_ps == 11_008_126 and r.merge_pair == ("p", "q")
    assert r.plan.group_nodes() == [["p", "q", "r"]] and r.time_ps == r.bound_ps == 8_008_125
    assert r.plan.status == "optimal" and brute_force_time(g, load_hardware("nvidia-h100"))[0] == 8_008_125


def test_objectives_benchmark_says_slower_only_beyond_noise():
    from tests.test_benchmarks import _load
    obj = _load("objectives")
    hw = load_hardware("detect")
    base = {"same": False, "pred_traffic": 100, "pred_time": 90, "k_traffic": 5, "k_time": 4,
            "part": 1000, "time_traffic_bytes": 1000, "part_status": "optimal"}
    slower = obj.verdict({**base, "rounds_traffic": [1.0, 1.01, 0.99], "rounds_time": [1.2, 1.21, 1.19]}, hw)
    assert slower[0].startswith("x1.200") and slower[1].startswith("**slower beyond noise**")
    # one round faster: not beyond noise, whatever the medians say
    noisy = obj.verdict({**base, "rounds_traffic": [1.0, 1.0, 1.3], "rounds_time": [1.2, 1.2, 1.1]}, hw)
    assert noisy[1].startswith("within noise")
    faster = obj.verdict({**base, "rounds_traffic": [1.2, 1.21, 1.19], "rounds_time": [1.0, 1.01, 0.99]}, hw)
    assert faster[1].startswith("faster beyond noise")
    assert obj.verdict({**base, "same": True, "rounds_traffic": [1.0], "rounds_time": [1.0]}, hw)[1] == "same plan"
