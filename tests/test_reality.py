"""Costs as compilers execute (``formulations/reality.md``): partitions real compilers generate are
legal and costed as they run, and the optimum is never worse. Expected numbers are computed by hand
(float32: 4 bytes/element, int64: 8)."""
from __future__ import annotations

import pytest

from solverfuse import cost
from solverfuse.sources import load_graph
from solverfuse.hardware import list_hardware, load_hardware
from solverfuse.mapping import group_footprint
from solverfuse.oracle import brute_force
from solverfuse.plans import build_plan, validate
from solverfuse.solve import solve, solve_report

ROWS, COLS = 2, 16777216
X = ROWS * COLS * 4                    # 134,217,728 B
RED = ROWS * 4                         # a reduced [2, 1] tensor: 8 B

SOFTMAX = load_graph({
    "name": "softmax-decomposed", "tensors": {"x": {"shape": [ROWS, COLS]}}, "inputs": ["x"], "outputs": ["y"],
    "nodes": [{"name": "max", "op": "ReduceMax", "inputs": ["x"], "outputs": ["m"],
               "attributes": {"axes": [1], "keepdims": 1}},
              {"name": "sub", "op": "Sub", "inputs": ["x", "m"], "outputs": ["d"]},
              {"name": "exp", "op": "Exp", "inputs": ["d"], "outputs": ["e"]},
              {"name": "sum", "op": "ReduceSum", "inputs": ["e"], "outputs": ["s"],
               "attributes": {"axes": [1], "keepdims": 1}},
              {"name": "div", "op": "Div", "inputs": ["e", "s"], "outputs": ["y"]}]})
#: torch.compile's (Inductor's) kernels for this softmax: the sum streams while exp's result is written
INDUCTOR = [["max"], ["sub", "exp", "sum"], ["div"]]
#: read x, write m | read x and m, write e and s | read e and s, write y
INDUCTOR_BYTES = (X + RED) + (X + RED + X + RED) + (X + RED + X)


def test_inductor_softmax_bytes_by_hand():
    assert INDUCTOR_BYTES == 5 * X + 4 * RED == 671_088_672


@pytest.mark.parametrize("profile", list_hardware())
def test_inductor_softmax_partition_is_legal_and_costed_as_it_runs(profile):
    hw = load_hardware(profile)
    for grp in INDUCTOR:
        assert cost.group_violation(SOFTMAX, grp, hw) is None, (profile, grp)
    assert group_footprint(SOFTMAX, ["sub", "exp", "sum"], hw).l1_bytes == 0   # the row streams
    plan = build_plan(SOFTMAX, hw, INDUCTOR, strategy="inductor-softmax")
    validate(plan, SOFTMAX, hw)
    assert plan.traffic_bytes == INDUCTOR_BYTES
    # a reduction with a later op of its group downstream keeps its 64 MiB row: over every L1
    assert "L1" in cost.group_violation(SOFTMAX, ["max", "sub"], hw)
    assert "L1" in cost.group_violation(SOFTMAX, ["sub", "exp", "sum", "div"], hw)
    best = solve(SOFTMAX, hw, workers=1)
    assert best.status == "optimal" and best.traffic_bytes <= INDUCTOR_BYTES


def test_softmax_optimum_matches_the_oracle_in_both_formulations():
    hw = load_hardware("nvidia-h100")
    assert brute_force(SOFTMAX, hw)[0] == INDUCTOR_BYTES
    for max_groups in (20000, 0):       # set partitioning; representative assignment
        plan = solve_report(SOFTMAX, hw, workers=1, max_groups=max_groups).plan
        assert plan.status == "optimal" and plan.traffic_bytes == INDUCTOR_BYTES


# ---- views: metadata, no kernel, unless they write a graph output ---------------------------------

def _views(outputs):
    return load_graph({
        "tensors": {"x": {"shape": [4, 8]}, "shp": {"shape": [2], "dtype": "int64", "constant": True,
                                                   "value": [8, 4]}},
        "inputs": ["x"], "outputs": outputs,
        "nodes": [{"name": "r", "op": "Reshape", "inputs": ["x", "shp"], "outputs": ["h"]},
                  {"name": "u", "op": "Unsqueeze", "inputs": ["h"], "outputs": ["h3"], "attributes": {"axes": [0]}},
                  {"name": "e", "op": "Exp", "inputs": ["h3"], "outputs": ["y"]}]})


def test_view_group_moves_nothing_and_launches_nothing():
    g = _views(["y"])
    hw = load_hardware("nvidia-h100")
    assert cost.group_traffic(g, ["r", "u"]) == 0 and cost.group_time(g, ["r", "u"], hw) == 0.0
    assert cost.group_traffic(g, ["e"]) == 128 + 128
    assert cost.unfused_traffic(g) == 256                     # r and u alone are free too
    # fused with Exp the views are index maps: read x (128) and the shape (16), write y (128)
    assert cost.group_traffic(g, ["r", "u", "e"]) == 272
    assert cost.q_min(g) == 256                              # the shape operand need not be read
    assert solve(g, hw, workers=1).traffic_bytes == 256


def test_view_writing_a_graph_output_is_a_copy():
    g = _views(["y", "h"])
    assert cost.group_traffic(g, ["r"]) == 128 + 16 + 128     # read x and shp, write h
    assert cost.group_traffic(g, ["u"]) == 0                 # h3 is no output: still free
    assert cost.group_time(g, ["r"], load_hardware("nvidia-h100")) > 0


# ---- gathers: the data operand costs the gathered bytes ---------------------------------------------

def _embedding(n_idx, extra_reader=False):
    nodes = [{"name": "g", "op": "Gather", "inputs": ["table", "ids"], "outputs": ["emb"]},
             {"name": "a", "op": "Relu", "inputs": ["emb"], "outputs": ["y"]}]
    outputs = ["y"]
    if extra_reader:
        nodes.append({"name": "n", "op": "Neg", "inputs": ["table"], "outputs": ["z"]})
        outputs.append("z")
    return load_graph({"tensors": {"table": {"shape": [1000, 64], "constant": True},
                                   "ids": {"shape": [n_idx], "dtype": "int64", "constant": True, "fill": 3}},
                       "inputs": [], "outputs": outputs, "nodes": nodes})


TABLE = 1000 * 64 * 4                                        # 256,000 B


def test_gather_reads_the_rows_it_gathers():
    g = _embedding(8)
    rows = 8 * 64 * 4                                        # 2,048 B gathered
    assert cost.group_traffic(g, ["g"]) == rows + 8 * 8 + rows
    assert cost.group_traffic(g, ["g", "a"]) == rows + 64 + rows
    assert cost.q_min(g) == rows + 64 + rows


def test_gathered_bytes_are_capped_at_the_table():
    g = _embedding(2000)                                     # 512,000 B of repeated rows
    assert cost.group_traffic(g, ["g"]) == TABLE + 2000 * 8 + 2000 * 64 * 4
    assert cost.q_min(g) == TABLE + 2000 * 8 + 2000 * 64 * 4


def test_a_table_read_whole_elsewhere_costs_its_size_there():
    g = _embedding(8, extra_reader=True)
    assert cost.group_traffic(g, ["n"]) == 2 * TABLE
    assert cost.group_traffic(g, ["g"]) == 2048 + 64 + 2048
    assert cost.q_min(g) == TABLE + 64 + 2048 + TABLE        # table once, ids, y, z


def test_q_min_follows_views_into_gathers():
    g = load_graph({"tensors": {"table": {"shape": [1000, 64], "constant": True},
                                "ids": {"shape": [8], "dtype": "int64", "constant": True, "fill": 3}},
                    "inputs": [], "outputs": ["y"],
                    "nodes": [{"name": "i", "op": "Identity", "inputs": ["table"], "outputs": ["t2"]},
                              {"name": "g", "op": "Gather", "inputs": ["t2", "ids"], "outputs": ["y"]}]})
    # Identity alone is free and the gather reads 8 rows of its (aliased) output
    assert cost.unfused_traffic(g) == 2048 + 64 + 2048
    assert cost.q_min(g) <= cost.unfused_traffic(g)
    assert cost.q_min(g) == 2048 + 64 + 2048


# ---- streaming reductions: a row only when the group reads the reduction's result ------------------

def test_streaming_reduction_needs_a_row_only_with_a_later_op_in_its_group():
    hw = load_hardware("nvidia-h100")
    assert group_footprint(SOFTMAX, ["exp", "sum"], hw).l1_bytes == 0
    assert group_footprint(SOFTMAX, ["sum", "div"], hw).l1_bytes == COLS * 4
    g = load_graph({"tensors": {"x": {"shape": [8, 1024]}}, "inputs": ["x"], "outputs": ["y"],
                    "nodes": [{"name": "e", "op": "Exp", "inputs": ["x"], "outputs": ["h"]},
                              {"name": "s", "op": "Softmax", "inputs": ["h"], "outputs": ["y"]}]})
    assert group_footprint(g, ["e", "s"], hw).l1_bytes == 4096   # softmax reads its row 3 times


def test_q_min_sums_every_gather_of_a_table():
    g = load_graph({"tensors": {"table": {"shape": [1000, 64], "constant": True},
                                "ids": {"shape": [8], "dtype": "int64", "constant": True, "fill": 3}},
                    "inputs": [], "outputs": ["y", "z"],
                    "nodes": [{"name": "g1", "op": "Gather", "inputs": ["table", "ids"], "outputs": ["y"]},
                              {"name": "g2", "op": "Gather", "inputs": ["table", "ids"], "outputs": ["z"]}]})
    # the table's floor is both gathers' rows; ids read once; y and z written
    assert cost.q_min(g) == 2 * 2048 + 64 + 2 * 2048
    hw = load_hardware("nvidia-h100")
    # gathers share a kernel (Inductor's embedding kernels): both lookups in one group reach the floor
    assert cost.group_violation(g, ["g1", "g2"], hw) is None
    assert cost.group_traffic(g, ["g1", "g2"]) == 2 * 2048 + 64 + 2 * 2048
    assert solve(g, hw, workers=1).traffic_bytes == 2 * 2048 + 64 + 2 * 2048
