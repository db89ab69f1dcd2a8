"""The optimal planner against a brute-force oracle on random small DAGs with random capacities.

The oracle (:mod:`solverfuse.oracle`) enumerates every set partition and knows nothing of the
CP-SAT formulations or their presolve; the solver must reach the same optimum every time, prove
it, and return a plan the validator accepts.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solverfuse import cost
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.formulations.presolve import presolve, traffic_floor
from solverfuse.oracle import brute_force
from solverfuse.plans import validate
from solverfuse.solve import solve_report

H100 = load_hardware("nvidia-h100")
UNARY = ["Relu", "Exp", "Neg", "Sigmoid"]
BINARY = ["Add", "Mul"]
KINDS = ["unary", "unary", "binary", "binary", "reduce", "softmax", "matmul", "gather", "transpose",
         "opaque", "split", "view", "view", "gather_rows"]
VIEWS = ["Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"]


@st.composite
def small_case(draw, max_ops=9):
    """A random DAG of 1..9 ops on [s, s] / [s, 1] / [s] / [s, s/2] tensors + a hardware with random
    small register and L1 limits. Views (Identity, Reshape with a constant shape, Flatten,
    Squeeze/Unsqueeze between [s, 1] and [s]), gathers that pick all rows or one column, and
    streaming (ReduceSum/ReduceMax) and non-streaming (Softmax) reductions are all drawn."""
    s = draw(st.sampled_from([2, 4, 8]))
    n = max_ops - draw(st.integers(0, max_ops - 1))  # hypothesis favours small draws: favour big graphs
    tensors = {"x": {"shape": [s, s]}, "z": {"shape": [s, s]}, "r": {"shape": [s, 1]},
               "w": {"shape": [s, s], "constant": True},
               "idx": {"shape": [s], "dtype": "int64", "constant": True, "value": list(range(s))[::-1]},
               "col": {"shape": [1], "dtype": "int64", "constant": True, "value": [s - 1]},
               "shp": {"shape": [2], "dtype": "int64", "constant": True, "value": [s, s]}}
    pool = {"sq": ["x", "z"], "row": ["r"], "half": [], "vec": []}
    nodes, read = [], set()

    def take(kind):
        t = draw(st.sampled_from(pool[kind]))
        read.add(t)
        return t

    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        out = f"t{i}"
        shape = "sq"
        if kind == "unary":
            shape = draw(st.sampled_from([k for k in pool if pool[k]]))
            node = {"op": draw(st.sampled_from(UNARY)), "inputs": [take(shape)]}
        elif kind == "binary":
            a = draw(st.sampled_from([k for k in pool if pool[k]]))
            b = "row" if a == "sq" and draw(st.booleans()) else a
            shape = a
            node = {"op": draw(st.sampled_from(BINARY)), "inputs": [take(a), take(b)]}
        elif kind == "reduce":
            node = {"op": draw(st.sampled_from(["ReduceSum", "ReduceMax"])), "inputs": [take("sq")],
                    "attributes": {"axes": [1], "keepdims": 1}}
            shape = "row"
        elif kind == "view":
            op = draw(st.sampled_from(VIEWS))
            if op == "Identity":
                shape = draw(st.sampled_from([k for k in pool if pool[k] and k != "half"]))
                node = {"op": op, "inputs": [take(shape)]}
            elif op == "Reshape":
                node = {"op": op, "inputs": [take("sq"), "shp"]}
            elif op == "Flatten":
                node = {"op": op, "inputs": [take("sq")], "attributes": {"axis": 1}}
            elif op == "Squeeze":
                node = {"op": op, "inputs": [take("row")], "attributes": {"axes": [1]}}
                shape = "vec"
            else:
                src = "vec" if pool["vec"] and draw(st.booleans()) else None
                if src is None:
                    node = {"op": "Identity", "inputs": [take("row")]}
                    shape = "row"
                else:
                    node = {"op": op, "inputs": [take("vec")], "attributes": {"axes": [1]}}
                    shape = "row"
        elif kind == "gather_rows":
            node = {"op": "Gather", "inputs": [take("sq"), "col"], "attributes": {"axis": 1}}
            shape = "row"
        elif kind == "softmax":
            node = {"op": "Softmax", "inputs": [take("sq")], "attributes": {"axis": -1}}
        elif kind == "matmul":
            node = {"op": "MatMul", "inputs": [take("sq"), "w" if draw(st.booleans()) else take("sq")]}
        elif kind == "gather":
            node = {"op": "Gather", "inputs": [take("sq"), "idx"], "attributes": {"axis": 0}}
        elif kind == "transpose":
            node = {"op": "Transpose", "inputs": [take("sq")], "attributes": {"perm": [1, 0]}}
        elif kind == "opaque":
            node = {"op": "MyCustomOp", "category": "memory", "inputs": [take("sq")]}
            tensors[out] = {"shape": [s, s]}
        else:
            node = {"op": "Split", "inputs": [take("sq")], "attributes": {"axis": 1},
                    "outputs": [out + "a", out + "b"]}
            pool["half"] += [out + "a", out + "b"]
        node.setdefault("outputs", [out])
        if kind != "split":
            pool[shape].append(out)
        nodes.append({"name": f"n{i}", **node})
    produced = [t for nd in nodes for t in nd["outputs"]]
    extra = draw(st.lists(st.sampled_from(produced), max_size=2))
    outputs = list(dict.fromkeys([t for t in produced if t not in read] + extra))
    g = load_graph({"name": "random", "tensors": tensors, "inputs": ["x", "z", "r"],
                    "outputs": outputs, "nodes": nodes})
    base = draw(st.integers(0, 8))
    hw = H100.model_copy(update={
        "name": "random-hw", "kernel_base_registers": base,
        "register_budget": base + draw(st.integers(1, 12)),
        "l1_bytes": draw(st.integers(8, 4096)),
        "gemm_tile": H100.gemm_tile.model_copy(update={"accumulator_registers": draw(st.integers(1, 6))})})
    return g, hw


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(small_case())
def test_solver_matches_brute_force(case):
    g, hw = case
    best, groups, legal = brute_force(g, hw)
    # both formulations: set partitioning (the default) and representative assignment (forced by
    # allowing no enumerated groups), each must prove the oracle's optimum
    for max_groups in (20000, 0):
        plan = solve_report(g, hw, workers=1, time_limit=30, seed=0, max_groups=max_groups).plan
        assert plan.status == "optimal"
        assert plan.traffic_bytes == best, (max_groups, groups, plan.group_nodes())
        assert plan.bound_bytes == best
        validate(plan, g, hw)
    # the oracle's optimum as a hint must be expressible in the presolved model (presolve removed
    # nothing an optimal plan needs) and must come back as an optimum
    plan = solve_report(g, hw, workers=1, time_limit=30, hints=[groups]).plan
    assert plan.status == "optimal" and plan.traffic_bytes == best
    # planning in windows of 3 ops is legal and never worse than its hint, but claims no optimum
    for mode in ({"exact_ops": 0}, {"max_pairs": 0}):
        plan = solve_report(g, hw, workers=1, time_limit=30, hints=[groups], window=3, **mode).plan
        validate(plan, g, hw)
        assert plan.traffic_bytes == best and plan.bound_bytes <= best
    # the presolve's traffic floor, the whole-graph floor and Q_min are valid bounds
    pre = presolve(g, hw)
    assert sum(traffic_floor(g, pre, part) for part in pre.parts) <= best
    assert cost.plan_floor(g, list(g.index.order)) <= best and cost.q_min(g) <= best
