"""emit/reference: our graph back to ONNX (opset 18) and run; checked against NumPy by hand."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.reference import check_inputs, reference_outputs, to_onnx
from solverfuse.errors import EmitError
from solverfuse.sources import load_graph

from .conftest import EXAMPLES

ENGINES = ["reference", "onnxruntime"]


def one_node(op, x_shape, attributes=None, extra_inputs=(), tensors=None, n_out=1, dtype="float32"):
    tensors = dict(tensors or {})
    tensors["x"] = {"shape": x_shape, "dtype": dtype}
    outs = [f"y{i}" for i in range(n_out)]
    return load_graph({"tensors": tensors, "inputs": ["x"], "outputs": outs,
                       "nodes": [{"name": "n", "op": op, "inputs": ["x", *extra_inputs], "outputs": outs,
                                  "attributes": attributes or {}}]})


def run(g, x, engine, consts=None):
    return reference_outputs(g, {"x": x}, constants(g) if consts is None else consts, engine)


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7 - 1


@pytest.mark.parametrize("engine", ENGINES)
def test_opset9_attribute_forms_are_converted(engine):
    """Imported old models keep attribute forms opset 18 moved to inputs; results match NumPy."""
    cases = [
        (one_node("Unsqueeze", [2, 3, 4], {"axes": [0, 3]}), X[None, :, :, None]),
        (one_node("Squeeze", [2, 1, 4], {"axes": [1]}), None),
        (one_node("ReduceMean", [2, 3, 4], {"axes": [1], "keepdims": 1}), X.mean(axis=1, keepdims=True)),
        (one_node("ReduceMax", [2, 3, 4], {"axes": [-1], "keepdims": 0}), X.max(axis=-1)),
        (one_node("Clip", [2, 3, 4], {"min": -0.5, "max": 0.5}), np.clip(X, -0.5, 0.5)),
        (one_node("Dropout", [2, 3, 4], {"ratio": 0.3}), X),
    ]
    for g, want in cases:
        x = X if want is not None else X[:, :1, :]
        want = X[:, 0, :] if want is None else want
        got = run(g, x, engine)["y0"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=g.nodes[0].op)


@pytest.mark.parametrize("engine", ENGINES)
def test_split_attribute_and_num_outputs(engine):
    g = one_node("Split", [2, 3, 4], {"axis": 2, "split": [1, 3]}, n_out=2)
    out = run(g, X, engine)
    np.testing.assert_array_equal(out["y0"], X[:, :, :1])
    np.testing.assert_array_equal(out["y1"], X[:, :, 1:])
    g = one_node("Split", [2, 3, 4], {"axis": 2}, n_out=2)  # opset-18 needs num_outputs
    out = run(g, X, engine)
    np.testing.assert_array_equal(out["y1"], X[:, :, 2:])


def test_batchnorm_with_old_attributes_matches_formula():
    c = {"s": np.array([1.0, 2.0, 0.5], np.float32), "b": np.array([0.0, 1.0, -1.0], np.float32),
         "m": np.array([0.5, 0.0, 1.0], np.float32), "v": np.array([1.0, 4.0, 0.25], np.float32)}
    tensors = {k: {"shape": [3], "constant": True} for k in c}
    g = one_node("BatchNormalization", [2, 3, 4], {"epsilon": 1e-5, "spatial": 1, "is_test": 1},
                 ["s", "b", "m", "v"], tensors)
    r = lambda a: a.reshape(1, 3, 1)
    want = r(c["s"]) * (X - r(c["m"])) / np.sqrt(r(c["v"]) + 1e-5) + r(c["b"])
    for engine in ENGINES:
        np.testing.assert_allclose(run(g, X, engine, c)["y0"], want, rtol=1e-5, atol=1e-6)


def test_gelu_gets_opset_20_and_matches_erf_formula():
    g = one_node("Gelu", [2, 3, 4])
    assert to_onnx(g, {}).opset_import[0].version == 20
    want = 0.5 * X * (1 + np.vectorize(math.erf)(X / math.sqrt(2)))
    np.testing.assert_allclose(run(g, X, "reference")["y0"], want, rtol=1e-5, atol=1e-6)


def test_cast_by_name_and_constant_of_shape():
    g = one_node("Cast", [2, 3, 4], {"to": "int32"})
    assert run(g, X * 3, "onnxruntime")["y0"].dtype == np.int32
    g = load_graph({"tensors": {"x": {"shape": [3]}, "s": {"shape": [2], "dtype": "int64", "constant": True,
                                                           "value": [2, 3]}, "z": {"shape": [2, 3]}},
                    "inputs": ["x"], "outputs": ["y"],
                    "nodes": [{"name": "k", "op": "ConstantOfShape", "inputs": ["s"], "outputs": ["z"],
                               "attributes": {"value": 1.5}},
                              {"name": "a", "op": "Add", "inputs": ["z", "x"], "outputs": ["y"]}]})
    x = np.array([1, 2, 3], np.float32)
    for engine in ENGINES:
        np.testing.assert_array_equal(run(g, x, engine)["y"], np.broadcast_to(x + 1.5, (2, 3)))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.stem)
def test_examples_valid_onnx_and_engines_agree(path):
    g = load_graph(path)
    c, x = constants(g), random_inputs(g)
    model = to_onnx(g, c)
    onnx.checker.check_model(model, full_check=True)
    a = reference_outputs(g, x, c, "reference")
    b = reference_outputs(g, x, c, "onnxruntime")
    for k in g.outputs:
        assert a[k].shape == tuple(g.tensors[k].shape)
        np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-4)


def test_intermediate_outputs_can_be_requested():
    g = load_graph(EXAMPLES / "mlp.json")
    c, x = constants(g), random_inputs(g)
    first = g.nodes[0]
    out = reference_outputs(g, x, c, "onnxruntime", outputs=[first.outputs[0]])
    assert first.op == "MatMul"
    a, b = (x | c)[first.inputs[0]], (x | c)[first.inputs[1]]
    np.testing.assert_allclose(out[first.outputs[0]], a @ b, rtol=1e-4, atol=1e-4)


def test_errors_name_the_place():
    g = load_graph({"tensors": {"x": {"shape": [2]}, "y": {"shape": [2]}}, "inputs": ["x"], "outputs": ["y"],
                    "nodes": [{"name": "odd node", "op": "MyOp", "category": "memory",
                               "inputs": ["x"], "outputs": ["y"]}]})
    with pytest.raises(EmitError, match="odd node"):
        to_onnx(g, {})
    g = one_node("Relu", [2, 3])
    with pytest.raises(EmitError, match="'x' is missing"):
        check_inputs(g, {})
    with pytest.raises(EmitError, match=r"'x' has shape \[3, 2\]"):
        check_inputs(g, {"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(EmitError, match="'x' has dtype"):
        check_inputs(g, {"x": np.array([["a", "b", "c"]] * 2)})
    with pytest.raises(EmitError, match="engine"):
        reference_outputs(g, {"x": np.zeros((2, 3), np.float32)}, {}, engine="tvm")
    g = one_node("Add", [2], extra_inputs=["k"], tensors={"k": {"shape": [2], "constant": True}})
    with pytest.raises(EmitError, match="constant 'k'"):
        to_onnx(g, {})


@pytest.mark.parametrize("engine", ENGINES)
def test_large_constants_are_fed_not_serialised(engine):
    """A >1 MB weight goes in as a fed input; results are unchanged (NumPy oracle)."""
    g = one_node("MatMul", [2, 600], extra_inputs=["w"], tensors={"w": {"shape": [600, 600], "constant": True}})
    c = constants(g)
    assert c["w"].nbytes > (1 << 20)
    model = to_onnx(g, c, fed=["w"])
    assert not model.graph.initializer and [i.name for i in model.graph.input] == ["x", "w"]
    x = np.linspace(-1, 1, 1200, dtype=np.float32).reshape(2, 600)
    np.testing.assert_allclose(run(g, x, engine, c)["y0"], x @ c["w"], rtol=1e-4, atol=1e-5)


def test_scalar_inputs_stay_scalars():
    """0-d inputs keep shape [] (np.ascontiguousarray would silently make them [1])."""
    g = load_graph({"tensors": {"x": {"shape": [3]}, "s": {"shape": []}}, "inputs": ["x", "s"],
                    "outputs": ["y"], "nodes": [{"name": "m", "op": "Mul", "inputs": ["x", "s"], "outputs": ["y"]}]})
    feeds = check_inputs(g, {"x": np.ones(3, np.float32), "s": np.float32(2.5)})
    assert feeds["s"].shape == ()
    assert reference_outputs(g, feeds, {}, "onnxruntime")["y"].tolist() == [2.5, 2.5, 2.5]
