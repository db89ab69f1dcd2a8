"""Graph loading: every class of bad input gets one line naming the place; shapes are inferred."""
from __future__ import annotations

import json
import subprocess
import sys

import networkx as nx
import pytest

from solverfuse.errors import GraphError
from solverfuse.graph import graph_schema, load_graph, parse_graph

from .conftest import EXAMPLES


def g(nodes, tensors=None, inputs=("x",), outputs=("y",)):
    t = {"x": {"shape": [4, 8]}}
    t.update(tensors or {})
    return {"format": "solverfuse-graph/1", "tensors": t, "inputs": list(inputs),
            "outputs": list(outputs), "nodes": nodes}


def relu(name, i, o):
    return {"name": name, "op": "Relu", "inputs": [i], "outputs": [o]}


BAD = {
    "malformed JSON": ('{"nodes": [', "malformed JSON at line 1"),
    "unknown tensor": (g([relu("r", "nope", "y")]), "node 'r' reads unknown tensor 'nope'"),
    "duplicate node": (g([relu("r", "x", "h"), relu("r", "h", "y")]), "duplicate node name 'r'"),
    "duplicate producer": (g([relu("a", "x", "y"), relu("b", "x", "y")]), "tensor 'y' is produced by both 'a' and 'b'"),
    "cycle": (g([{"name": "a", "op": "Add", "inputs": ["x", "z"], "outputs": ["h"]},
                 relu("b", "h", "z"), relu("c", "h", "y")]), "cycle: node 'a'"),
    "shape mismatch": (g([{"name": "add", "op": "Add", "inputs": ["x", "w"], "outputs": ["y"]}],
                         {"w": {"shape": [3], "constant": True}}), "node 'add' (Add): shapes [4, 8] and [3] do not broadcast"),
    "declared shape disagrees": (g([relu("r", "x", "y")], {"y": {"shape": [4, 9]}}),
                                 "output 'y' declared shape [4, 9] but inputs give [4, 8]"),
    "shape not inferable": (g([{"name": "rs", "op": "Reshape", "inputs": ["x", "s"], "outputs": ["y"]}],
                              {"s": {"shape": [2], "dtype": "int64"}}, inputs=("x", "s")),
                            "node 'rs' (Reshape): Reshape's shape must be a constant"),
    "unknown dtype": (g([relu("r", "x", "y")], {"x": {"shape": [4], "dtype": "float13"}}), "tensor 'x': unknown dtype 'float13'"),
    "unknown op": (g([{"name": "m", "op": "FancyOp", "inputs": ["x"], "outputs": ["y"]}]), "node 'm': unknown op 'FancyOp'"),
    "absurd size": (g([relu("r", "x", "y")], {"x": {"shape": [1 << 30, 1 << 30, 1 << 30]}}), "tensor 'x': shape"),
    "negative dim": (g([relu("r", "x", "y")], {"x": {"shape": [4, -1]}}), "bad shape [4, -1]"),
    "wrong field type": (g([{"name": "r", "op": "Relu", "inputs": "x", "outputs": ["y"]}]), "nodes.0.inputs"),
    "unknown field": (dict(g([relu("r", "x", "y")]), extra=1), "extra: Extra inputs are not permitted"),
    "output not produced": (g([relu("r", "x", "h")], outputs=("zz",)), "graph output 'zz' is not produced"),
    "input undeclared": (g([relu("r", "x", "y")], inputs=("x", "q")), "graph input 'q' is not declared"),
    "wrong format": (dict(g([relu("r", "x", "y")]), format="other/2"), "format must be"),
    "matmul mismatch": (g([{"name": "mm", "op": "MatMul", "inputs": ["x", "w"], "outputs": ["y"]}],
                          {"w": {"shape": [7, 3], "constant": True}}), "node 'mm' (MatMul): MatMul inner dimensions differ"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_the_place(case):
    data, needle = BAD[case]
    with pytest.raises(GraphError) as e:
        parse_graph(json.dumps(data) if isinstance(data, dict) else data)
    msg = str(e.value)
    assert needle in msg
    assert "\n" not in msg


@pytest.mark.parametrize("case", ["malformed JSON", "cycle", "unknown tensor", "shape mismatch"])
def test_cli_bad_graph_exit_2_one_line(tmp_path, case):
    data, needle = BAD[case]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data) if isinstance(data, dict) else data)
    r = subprocess.run([sys.executable, "-m", "solverfuse.cli", "inspect", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_unknown_op_with_category_is_planned_opaquely():
    data = g([{"name": "m", "op": "FancyOp", "category": "memory", "inputs": ["x"], "outputs": ["y"]}],
             {"y": {"shape": [4, 8]}})
    graph = parse_graph(data)
    assert graph.index.node["m"].category == "memory"
    with pytest.raises(GraphError, match="output 'y' needs a declared shape"):
        parse_graph(g([{"name": "m", "op": "FancyOp", "category": "memory", "inputs": ["x"], "outputs": ["y"]}]))


def test_shape_inference_through_layout_ops():
    data = g([{"name": "t", "op": "Transpose", "inputs": ["x"], "outputs": ["xt"], "attributes": {"perm": [1, 0]}},
              {"name": "r", "op": "Reshape", "inputs": ["xt", "s"], "outputs": ["xr"]},
              {"name": "sm", "op": "Softmax", "inputs": ["xr"], "outputs": ["p"], "attributes": {"axis": -1}},
              {"name": "rm", "op": "ReduceMean", "inputs": ["p"], "outputs": ["m"], "attributes": {"axes": [1], "keepdims": 1}},
              {"name": "sub", "op": "Sub", "inputs": ["p", "m"], "outputs": ["y"]}],
             {"s": {"shape": [2], "dtype": "int64", "constant": True, "value": [2, -1]}})
    graph = parse_graph(data)
    assert graph.tensors["xt"].shape == [8, 4]
    assert graph.tensors["xr"].shape == [2, 16]
    assert graph.tensors["m"].shape == [2, 1]
    assert graph.tensors["y"].shape == [2, 16]


def test_constant_node_becomes_constant_tensor():
    data = g([{"name": "c", "op": "Constant", "inputs": [], "outputs": ["k"], "attributes": {"value": [[2.0] * 8] * 4}},
              {"name": "m", "op": "Mul", "inputs": ["x", "k"], "outputs": ["y"]}])
    graph = parse_graph(data)
    assert [n.name for n in graph.nodes] == ["m"]
    assert graph.tensors["k"].constant and graph.tensors["k"].shape == [4, 8]


def test_topological_order_and_index():
    data = g([relu("b", "h", "y"), relu("a", "x", "h")])
    graph = parse_graph(data)
    assert graph.index.order == ["a", "b"]
    assert graph.index.producer["h"] == "a" and graph.index.consumers["h"] == ["b"]
    assert graph.index.preds["b"] == ["a"] and graph.index.succs["a"] == ["b"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_index_reachability_and_sizes_match_networkx(path):
    """The index's bitsets and byte sizes against networkx and the shapes, built from the JSON."""
    import math
    import numpy as np
    graph = load_graph(path)
    made_by = {t: n.name for n in graph.nodes for t in n.outputs}
    d = nx.DiGraph()
    d.add_nodes_from(n.name for n in graph.nodes)
    d.add_edges_from((made_by[t], n.name) for n in graph.nodes for t in n.inputs if t in made_by)
    index = graph.index
    assert sorted(index.order) == sorted(d.nodes) and all(
        index.position[u] < index.position[v] for u, v in d.edges)
    at = lambda mask: {index.order[k] for k in range(len(index.order)) if mask >> k & 1}
    for i, v in enumerate(index.order):
        assert at(index.desc[i]) == nx.descendants(d, v) and at(index.anc[i]) == nx.ancestors(d, v)
    for t, spec in graph.tensors.items():
        size = 2 if spec.dtype == "bfloat16" else np.dtype(spec.dtype).itemsize
        assert graph.nbytes(t) == math.prod(spec.shape) * size


def test_a_copy_with_new_tensors_derives_its_own_index():
    graph = parse_graph(g([relu("a", "x", "y")]))
    assert graph.nbytes("y") == 128
    wider = graph.model_copy(update={"tensors": {**graph.tensors, "y": graph.tensors["y"].model_copy(
        update={"shape": [4, 16]})}})
    assert wider.nbytes("y") == 256 and graph.nbytes("y") == 128


HOSTILE = ['gpu_0/conv1_w_0', 'a "quoted" name', "it's", "sp ace", "ünï©ødé→名字", "*/ #include <x>", "back\\slash", "new\nline"]


def test_hostile_names_round_trip():
    tensors = {HOSTILE[0]: {"shape": [3]}}
    nodes, prev = [], HOSTILE[0]
    for i, name in enumerate(HOSTILE[1:]):
        out = f"t{i}:{name}"
        nodes.append({"name": name, "op": "Exp" if i % 2 else "Neg", "inputs": [prev], "outputs": [out]})
        prev = out
    data = {"format": "solverfuse-graph/1", "name": "höstile/\"graph\"", "tensors": tensors,
            "inputs": [HOSTILE[0]], "outputs": [prev], "nodes": nodes}
    graph = parse_graph(data)
    again = parse_graph(graph.to_json())
    assert [n.name for n in again.nodes] == HOSTILE[1:]
    assert again.digest() == graph.digest()
    assert again.name == 'höstile/"graph"'


def test_examples_load(examples_dir):
    names = sorted(p.stem for p in examples_dir.glob("*.json"))
    assert names == ["attention", "inception", "layernorm_gelu", "mlp", "residual"]
    for p in examples_dir.glob("*.json"):
        graph = load_graph(p)
        assert all(t.shape is not None for t in graph.tensors.values())


def test_networkx_round_trip():
    graph = load_graph(EXAMPLES / "residual.json")
    view = graph.to_networkx()
    assert nx.is_directed_acyclic_graph(view)
    assert view.number_of_nodes() == len(graph.nodes)
    assert view.edges["conv1", "bn1"]["bytes"] == graph.nbytes("c1")
    d = nx.DiGraph()
    d.add_node("x", op="Input", shape=[2, 3])
    d.add_node("w", op="Constant", shape=[3], fill=1.0)
    d.add_node("add", op="Add")
    d.add_edge("x", "add", index=0)
    d.add_edge("w", "add", index=1)
    d.add_node("act", op="Sigmoid")
    d.add_edge("add", "act")
    built = load_graph(d)
    assert built.outputs == ["act"] and built.tensors["act"].shape == [2, 3]
    assert built.index.node["add"].inputs == ["x", "w"]


def test_schema_is_json_schema():
    s = graph_schema()
    assert s["title"] == "solverfuse-graph/1"
    assert {"tensors", "nodes", "inputs", "outputs"} <= set(s["properties"])
