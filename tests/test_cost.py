"""The cost model on tiny graphs whose traffic is computed by hand (float32: 4 bytes/element)."""
from __future__ import annotations

import pytest

from solverfuse import cost, rules
from solverfuse.graph import parse_graph
from solverfuse.hardware import load_hardware
from solverfuse.mapping import group_footprint, op_footprint

N = 100  # elements per tensor -> 400 bytes
B = 4 * N


def graph(nodes, inputs=("x",), outputs=("y",), extra=None):
    tensors = {i: {"shape": [N]} for i in inputs}
    tensors.update(extra or {})
    return parse_graph({"format": "solverfuse-graph/1", "tensors": tensors, "inputs": list(inputs),
                        "outputs": list(outputs), "nodes": nodes})


def op(name, kind, ins, outs):
    return {"name": name, "op": kind, "inputs": ins, "outputs": outs}


@pytest.fixture
def chain():  # x -a-> h1 -b-> h2 -c-> y
    return graph([op("a", "Relu", ["x"], ["h1"]), op("b", "Exp", ["h1"], ["h2"]), op("c", "Neg", ["h2"], ["y"])])


def test_chain(chain):
    assert cost.unfused_traffic(chain) == 6 * B          # each op reads 1, writes 1
    assert cost.plan_traffic(chain, [["a", "b", "c"]]) == 2 * B
    assert cost.plan_traffic(chain, [["a", "b"], ["c"]]) == 4 * B
    assert cost.q_min(chain) == 2 * B


def test_diamond():  # x -> a -> (b, c) -> d -> y
    g = graph([op("a", "Relu", ["x"], ["h"]), op("b", "Exp", ["h"], ["p"]), op("c", "Neg", ["h"], ["q"]),
               op("d", "Add", ["p", "q"], ["y"])])
    assert cost.unfused_traffic(g) == 2 * B + 2 * B + 2 * B + 3 * B
    assert cost.plan_traffic(g, [["a", "b", "c", "d"]]) == 2 * B
    # a alone writes h once; b+c+d read h once (de-duplicated) and write y
    assert cost.plan_traffic(g, [["a"], ["b", "c", "d"]]) == 2 * B + 2 * B
    assert cost.group_writes(g, ["a", "b"]) == ["h", "p"]  # h still needed by c outside


def test_residual():  # x -> a -> b -> add(b, x) -> y : x read by two groups when split
    g = graph([op("a", "Relu", ["x"], ["h1"]), op("b", "Exp", ["h1"], ["h2"]), op("add", "Add", ["h2", "x"], ["y"])])
    assert cost.plan_traffic(g, [["a", "b", "add"]]) == 2 * B
    assert cost.plan_traffic(g, [["a", "b"], ["add"]]) == (B + B) + (B + B + B)
    assert cost.group_reads(g, ["a", "b", "add"]) == ["x"]


def test_siblings_share_input_horizontal_dedup():
    g = graph([op("a", "Relu", ["x"], ["y"]), op("b", "Exp", ["x"], ["z"])], outputs=("y", "z"))
    assert cost.plan_traffic(g, [["a"], ["b"]]) == 4 * B
    assert cost.plan_traffic(g, [["a", "b"]]) == 3 * B    # x read once for both
    assert cost.q_min(g) == 3 * B


def test_multi_output_group():
    g = graph([op("a", "Relu", ["x"], ["h"]), op("b", "Exp", ["h"], ["y"]), op("c", "Neg", ["h"], ["z"])],
              outputs=("y", "z", "h"))
    # h is a graph output: written once even though every consumer is in the group
    assert cost.group_writes(g, ["a", "b", "c"]) == ["h", "y", "z"]
    assert cost.plan_traffic(g, [["a", "b", "c"]]) == 4 * B
    g2 = graph([op("s", "Split", ["x"], ["p", "q"]), op("e", "Exp", ["p"], ["y"])],
               outputs=("y", "q"))
    assert g2.tensors["p"].shape == [50]
    assert cost.plan_traffic(g2, [["s", "e"]]) == B + B // 2 + B // 2


def test_constants_and_bytes_by_dtype():
    g = parse_graph({"format": "solverfuse-graph/1",
                     "tensors": {"x": {"shape": [8], "dtype": "float16"},
                                 "w": {"shape": [8], "dtype": "float16", "constant": True, "fill": 2.0}},
                     "inputs": ["x"], "outputs": ["y"],
                     "nodes": [op("m", "Mul", ["x", "w"], ["h"]), op("c", "Cast", ["h"], ["y"])]})
    assert g.nbytes("x") == 16 and g.nbytes("w") == 16
    assert cost.q_min(g) == 16 + 16 + g.nbytes("y")


def test_legality_rules():
    hw = load_hardware("nvidia-h100")
    g = graph([op("a", "Relu", ["x"], ["h"]), op("mm", "MatMul", ["h", "w"], ["m"]),
               op("mm2", "MatMul", ["m", "w2"], ["y"])],
              extra={"w": {"shape": [N, N], "constant": True}, "w2": {"shape": [N, N], "constant": True}})
    assert not rules.edge_fusable(g, "a", "mm")            # anchor reads its operands from memory
    assert "must read 'h' from global memory" in cost.group_violation(g, ["a", "mm"], hw)
    assert cost.group_violation(g, ["mm", "mm2"], hw).startswith("node 'mm2' (anchor) must read")
    g2 = graph([op("mm", "MatMul", ["x2", "w"], ["m"]), op("r", "Relu", ["m"], ["y"])], inputs=("x2",),
               extra={"x2": {"shape": [4, N]}, "w": {"shape": [N, N], "constant": True}})
    assert cost.group_violation(g2, ["mm", "r"], hw) is None   # epilogue fusion is fine


def test_capacity_is_additive():
    hw = load_hardware("nvidia-h100")
    g = graph([op("a", "Relu", ["x"], ["h"]), op("s", "Softmax", ["h"], ["y"])])
    assert op_footprint(g, "s", hw).l1_bytes == B   # one row of 100 floats
    fp = group_footprint(g, ["a", "s"], hw)
    assert fp.registers == hw.kernel_base_registers + 1 + 2
    small = hw.model_copy(update={"l1_bytes": B - 1})
    assert "L1" in cost.group_violation(g, ["a", "s"], small)
    assert cost.group_violation(g, ["s"], small) is None   # a single op always fits


def test_roofline_time():
    hw = load_hardware("nvidia-h100")
    g = graph([op("a", "Relu", ["x"], ["y"])])
    assert cost.group_time(g, ["a"], hw) == pytest.approx(2 * B / hw.dram_bandwidth + hw.launch_overhead_s)
