"""ONNX import: the 9 light models, constant folding, elision, hostile names, bad files."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from .conftest import LIGHT_MODELS, light_model_path
import solverfuse
from solverfuse.cli import app
from solverfuse.errors import GraphError
from solverfuse.graph import load_graph, parse_graph
from solverfuse.onnx_import import VALUE_MAX_ELEMENTS, import_onnx

runner = CliRunner()
F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=18, name="t"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _export(graph) -> onnx.ModelProto:
    """Our Graph back as an opset-18 ONNX model (constants with a value/fill as initializers):
    an independent way to check that import preserved the model's meaning."""
    inits = []
    for name, t in graph.tensors.items():
        if t.constant:
            arr = graph.constant_value(name)
            assert arr is not None, f"constant {name!r} has no data"
            inits.append(numpy_helper.from_array(arr, name))
    to_code = {"float32": F, "int64": TensorProto.INT64, "bool": TensorProto.BOOL}
    ins = [_vi(t, graph.tensors[t].shape, to_code[graph.tensors[t].dtype]) for t in graph.inputs]
    outs = [_vi(t, graph.tensors[t].shape, to_code[graph.tensors[t].dtype]) for t in graph.outputs]
    nodes = [helper.make_node(n.op, n.inputs, n.outputs, name=n.name, **n.attributes) for n in graph.nodes]
    return _model(nodes, ins, outs, inits)


# ---- the 9 light models ------------------------------------------------------------------

def _expected_ops(model: onnx.ModelProto) -> Counter:
    """Ops that must survive import, computed from the ONNX file alone: nodes that depend
    (transitively) on the runtime input, except the elided Dropout/Identity. Everything else
    only depends on initializers/constants and is folded."""
    inits = {i.name for i in model.graph.initializer}
    live = {i.name for i in model.graph.input if i.name not in inits}
    ops = Counter()
    for n in model.graph.node:
        if any(t in live for t in n.input):
            live.update(n.output)
            if n.op_type not in ("Dropout", "Identity"):
                ops[n.op_type] += 1
    return ops


@pytest.fixture(scope="module")
def imported():
    """Each light model imported once (import speed is measured in benchmarks/, not here)."""
    return {name: import_onnx(light_model_path(name)) for name in LIGHT_MODELS}


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_imports_fully_shaped(name, imported):
    g = imported[name]
    model = onnx.load(str(light_model_path(name)))
    # node count and op mix after folding, against the independent count from the ONNX file
    assert Counter(n.op for n in g.nodes) == _expected_ops(model)
    assert len(g.nodes) == sum(_expected_ops(model).values())
    # every tensor shaped, every constant marked, the data input kept
    assert all(t.shape is not None for t in g.tensors.values())
    assert len(g.inputs) == 1 and g.tensors[g.inputs[0]].shape == [1, 3, 224, 224]
    # the classifier output: [1, 1000] (DenseNet/SqueezeNet declare [1, 1000, 1, 1] in the file)
    (out,) = g.outputs
    declared = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert out == model.graph.output[0].name and g.tensors[out].shape == declared
    assert declared[:2] == [1, 1000] and np.prod(declared) == 1000


def test_light_model_names_and_folded_values(imported):
    g = imported["densenet121"]
    model = onnx.load(str(light_model_path("densenet121")))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    # n2 = Unsqueeze(conv1/bn_w_0, axes=[1, 2]) on an initializer: folded into a [64, 1, 1] value
    assert g.tensors["r2"].constant and g.tensors["r2"].shape == [64, 1, 1]
    np.testing.assert_array_equal(g.constant_value("r2"), inits["conv1/bn_w_0"][:, None, None])
    # ConstantOfShape weights: uniform, shape from the __SHAPE initializer, no value materialised
    w = g.tensors["conv1_w_0"]
    assert w.constant and w.shape == inits["conv1_w_0__SHAPE"].tolist() and w.fill == pytest.approx(0.02)
    assert "conv1_w_0__SHAPE" not in g.tensors  # consumed only by the folded ConstantOfShape
    # Inception v1 reshapes a ConstantOfShape weight: folded without building 1000x1024 values
    g1 = imported["inception_v1"]
    (gemm,) = [n for n in g1.nodes if n.op == "Gemm"]
    wt = g1.tensors[gemm.inputs[1]]
    assert wt.constant and wt.shape == [1000, 1024] and wt.value is None and wt.fill == pytest.approx(0.02)
    # Dropout elided: the Reshape after it reads the pooled tensor directly
    (reshape,) = [n for n in g1.nodes if n.op == "Reshape"]
    assert reshape.inputs[0] == "r138"
    # names kept exactly, slashes included
    gr = imported["resnet50"]
    assert gr.inputs == ["gpu_0/data_0"] and gr.outputs == ["gpu_0/softmax_1"]
    assert "gpu_0/res_conv1_bn_s_0" in gr.tensors


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_cli_inspect_onnx(name, imported):
    g = imported[name]
    r = runner.invoke(app, ["inspect", str(light_model_path(name)), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["nodes"] == len(g.nodes) and s["tensors"] == len(g.tensors)
    assert s["output_bytes"] == 4000 and s["input_bytes"] == 3 * 224 * 224 * 4
    assert s["ops_by_category"]["compute"]["Conv"] == sum(n.op == "Conv" for n in g.nodes)


def test_cli_import_writes_graph_json(tmp_path):
    out = tmp_path / "resnet50.json"
    r = runner.invoke(app, ["import", str(light_model_path("resnet50")), "-o", str(out)])
    assert r.exit_code == 0, r.output
    g = load_graph(out)
    assert g.digest() == import_onnx(light_model_path("resnet50")).digest()
    assert solverfuse.load_graph(light_model_path("resnet50")).digest() == g.digest()  # .onnx accepted directly
    with pytest.raises(GraphError, match="not a graph JSON file; load models with solverfuse.load_graph"):
        load_graph(light_model_path("resnet50"))  # the graph-format reader does not dispatch


# ---- folding and elision on hand-built models --------------------------------------------

def test_shape_gather_unsqueeze_concat_reshape_folds():
    """x[2,3,4] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) -> Relu: the shape
    subgraph folds to the constant [2, -1]; ONNX Runtime agrees on the result."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["d0"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["u"], name="unsq"),
             helper.make_node("Concat", ["u", "minus1"], ["target"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", None)], inits)
    g = import_onnx(model)
    assert [(n.name, n.op) for n in g.nodes] == [("reshape", "Reshape"), ("relu", "Relu")]
    assert g.nodes[0].inputs == ["x", "target"]
    assert g.tensors["target"].constant and g.tensors["target"].value == [2, -1]
    assert g.tensors["target"].dtype == "int64"
    assert not {"s", "d0", "u", "zero", "ax0", "minus1"} & set(g.tensors)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    (want,) = _ort(model, {"x": x})
    assert g.tensors["y"].shape == list(want.shape) == [2, 12]
    (got,) = _ort(_export(g), {"x": x})
    np.testing.assert_array_equal(got, want)


def test_shape_arithmetic_folds_like_onnxruntime():
    """Slice/Gather(-1)/Mul/Div/Cast/Concat/Range/Expand on shapes and Constant nodes all fold;
    the shapes they produce are the ones ONNX Runtime computes."""
    i64 = TensorProto.INT64
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Constant", [], ["c1"], name="k1", value_ints=[1]),
             helper.make_node("Constant", [], ["c3"], name="k3",
                              value=numpy_helper.from_array(np.array([3], np.int64))),
             helper.make_node("Slice", ["s", "c1", "c3"], ["mid"], name="slice"),  # [3, 4]
             helper.make_node("ReduceProd", ["mid"], ["prod"], name="prod", keepdims=1),  # [12]
             helper.make_node("Div", ["prod", "c3"], ["q"], name="div"),  # [4]
             helper.make_node("Cast", ["q"], ["q32"], name="cast", to=TensorProto.INT32),
             helper.make_node("Cast", ["q32"], ["q64"], name="cast_back", to=i64),
             helper.make_node("Gather", ["s", "neg1"], ["last"], name="gather", axis=0),  # [5]
             helper.make_node("Mul", ["last", "c3"], ["last3"], name="mul"),  # [15]
             helper.make_node("Concat", ["c1", "q64", "last3", "minus1"], ["target"], name="cat", axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),  # [1, 4, 15, 2]
             helper.make_node("Range", ["r0", "r5", "r1"], ["rng"], name="range"),
             helper.make_node("Cast", ["rng"], ["rngf"], name="castf", to=F),
             helper.make_node("Expand", ["rngf", "eshape"], ["ex"], name="expand"),
             helper.make_node("Add", ["ex", "z"], ["w"], name="add")]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "neg1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array(0, np.int64), "r0"),
             numpy_helper.from_array(np.array(5, np.int64), "r5"),
             numpy_helper.from_array(np.array(1, np.int64), "r1"),
             numpy_helper.from_array(np.array([3, 1, 5], np.int64), "eshape")]
    model = _model(nodes, [_vi("x", [2, 3, 4, 5]), _vi("z", [3, 2, 5])], [_vi("y", None), _vi("w", None)], inits)
    g = import_onnx(model)
    assert [n.op for n in g.nodes] == ["Reshape", "Add"]
    assert g.tensors["target"].value == [1, 4, 15, -1]
    assert g.tensors["ex"].constant and np.array_equal(
        g.constant_value("ex"), np.broadcast_to(np.arange(5, dtype=np.float32), (3, 1, 5)))
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
             "z": rng.standard_normal((3, 2, 5)).astype(np.float32)}
    want = _ort(model, feeds)
    assert [g.tensors[t].shape for t in g.outputs] == [list(w.shape) for w in want]
    for a, b in zip(_ort(_export(g), feeds), want):
        np.testing.assert_array_equal(a, b)


def test_opset9_attribute_forms():
    """Opset-9 Slice/Unsqueeze/Squeeze carry axes and starts as attributes."""
    nodes = [helper.make_node("Slice", ["x"], ["s"], name="slice", starts=[1, 0], ends=[3, 100], axes=[1, 2]),
             helper.make_node("Unsqueeze", ["s"], ["u"], name="unsq", axes=[0]),
             helper.make_node("Squeeze", ["u"], ["q"], name="sq", axes=[0]),
             helper.make_node("Relu", ["q"], ["y"], name="relu")]
    model = _model(nodes, [_vi("x", [2, 5, 4])], [_vi("y", None)], opset=9)
    g = import_onnx(model)
    x = np.arange(40, dtype=np.float32).reshape(2, 5, 4) - 20
    (want,) = _ort(model, {"x": x})
    assert g.tensors["s"].shape == [2, 2, 4] and g.tensors["u"].shape == [1, 2, 2, 4]
    assert g.tensors["y"].shape == list(want.shape)
    assert g.nodes[0].attributes == {"starts": [1, 0], "ends": [3, 100], "axes": [1, 2]}


def test_old_softmax_keeps_its_semantics():
    """Below opset 13 Softmax normalises the input coerced to 2-D at `axis`: the import makes
    that explicit, and the re-exported opset-18 graph computes what ONNX Runtime computes."""
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1),
             helper.make_node("Softmax", ["x"], ["z"], name="sm_last", axis=2)]
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", None), _vi("z", None)], opset=11)
    g = import_onnx(model)
    assert [n.op for n in g.nodes] == ["Flatten", "Softmax", "Reshape", "Softmax"]
    assert g.tensors["y"].shape == [2, 3, 4]
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    want = _ort(model, {"x": x})
    got = _ort(_export(g), {"x": x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.allclose(want[0], want[1])  # the two axes really differ


def test_constants_value_fill_or_neither():
    rng = np.random.default_rng(2)
    big = rng.standard_normal((64, 128)).astype(np.float32)        # 8192 > VALUE_MAX_ELEMENTS
    small = rng.standard_normal((16,)).astype(np.float32)
    nodes = [helper.make_node("ConstantOfShape", ["big_shape"], ["ones"], name="cos",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["x", "ones"], ["a"], name="add"),
             helper.make_node("Add", ["a", "big"], ["b"], name="add2"),
             helper.make_node("Mul", ["b", "small"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.array([64, 128], np.int64), "big_shape"),
             numpy_helper.from_array(big, "big"), numpy_helper.from_array(small.repeat(8), "small")]
    model = _model(nodes, [_vi("x", [64, 128])], [_vi("y", None)], inits)
    g = import_onnx(model)
    assert 64 * 128 > VALUE_MAX_ELEMENTS
    assert g.tensors["ones"].fill == 0.5 and g.tensors["ones"].value is None and g.tensors["ones"].shape == [64, 128]
    assert g.tensors["big"].value is None and g.tensors["big"].fill is None  # seeded random when run
    assert np.array_equal(np.asarray(g.tensors["small"].value, np.float32), small.repeat(8))
    assert [n.name for n in g.nodes] == ["add", "add2", "mul"]


def test_dropout_and_identity_elided_output_names_kept():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Dropout", ["r"], ["d", "mask"], name="drop"),
             helper.make_node("Identity", ["d"], ["y"], name="id"),
             helper.make_node("Identity", ["x"], ["x_copy"], name="passthrough"),
             helper.make_node("Exp", ["d"], ["e"], name="exp")]
    model = _model(nodes, [_vi("x", [4, 4])], [_vi("y", None), _vi("x_copy", None), _vi("e", None)], opset=13)
    g = import_onnx(model)
    assert g.outputs == ["y", "x_copy", "e"]
    by_name = {n.name: n for n in g.nodes}
    assert set(by_name) == {"relu", "exp", "passthrough"}
    assert by_name["relu"].outputs == ["y"] and by_name["exp"].inputs == ["y"]
    assert by_name["passthrough"].op == "Identity"  # input -> output cannot be renamed away
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    for a, b in zip(_ort(_export(g), {"x": x}), _ort(model, {"x": x})):
        np.testing.assert_array_equal(a, b)


HOSTILE = ['gpu_0/conv "1"', "naïve tensor ü/'x'", "名前 テンソル", "a\\b c", "semi;colon*/"]


def test_hostile_names_survive_import_and_round_trip():
    t = HOSTILE
    nodes = [helper.make_node("Relu", [t[0]], [t[1]], name=t[2]),
             helper.make_node("Add", [t[1], t[4]], [t[3]], name=t[3]),
             helper.make_node("Exp", [t[3]], ["out"], name=""),
             helper.make_node("Neg", ["out"], ["out2"], name=""),
             helper.make_node("Abs", ["out2"], ["out3"], name=t[2])]  # duplicate node name
    inits = [numpy_helper.from_array(np.ones((3,), np.float32), t[4])]
    model = _model(nodes, [_vi(t[0], [2, 3])], [_vi("out3", None)], inits, name="hostile ✓")
    g = import_onnx(model)
    assert g.name == "hostile ✓" and g.inputs == [t[0]]
    assert {t[0], t[1], t[3], t[4]} <= set(g.tensors)
    names = [n.name for n in g.nodes]
    assert names[:2] == [t[2], t[3]] and len(set(names)) == 5 and all(names)
    back = parse_graph(g.to_json())
    assert back.digest() == g.digest() and [n.name for n in back.nodes] == names


# ---- errors --------------------------------------------------------------------------------

def _one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_corrupt_onnx_file(tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(light_model_path("squeezenet").read_bytes()[:777] + b"\xff\x00garbage")
    out = tmp_path / "graph.json"
    _one_line_error(runner.invoke(app, ["import", str(bad), "-o", str(out)]), "corrupt.onnx")
    assert not out.exists()
    _one_line_error(runner.invoke(app, ["inspect", str(bad)]), "corrupt.onnx")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    _one_line_error(runner.invoke(app, ["inspect", str(empty)]), "empty.onnx")
    _one_line_error(runner.invoke(app, ["import", str(tmp_path / "absent.onnx")]), "absent.onnx")


def test_op_outside_the_table_imports_opaque_with_onnx_shapes(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="ok"),
             helper.make_node("Hardmax", ["r"], ["y"], name="weird/op")]
    path = tmp_path / "m.onnx"
    onnx.save(_model(nodes, [_vi("x", [2, 3])], [_vi("y", None)]), str(path))
    stats = {}
    g = import_onnx(path, stats=stats)
    node = g.index.node["weird/op"]
    assert (node.op, node.category, g.tensors["y"].shape, stats["opaque_nodes"]) == ("Hardmax", "memory", [2, 3], 1)
    # an op whose output shape ONNX cannot infer either (data-dependent) is refused by name
    nz = _model([helper.make_node("NonZero", ["x"], ["y"], name="nz/op")], [_vi("x", [2, 3])], [_vi("y", None)])
    with pytest.raises(GraphError, match="nz/op.*NonZero"):
        import_onnx(nz)
    custom = _model([helper.make_node("Foo", ["x"], ["y"], name="c", domain="my.ops")],
                    [_vi("x", [2])], [_vi("y", None)])
    custom.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.raises(GraphError, match="'c'.*my.ops.Foo"):
        import_onnx(custom)


def test_symbolic_and_missing_shapes():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", ["batch", 8])], [_vi("y", None)])
    with pytest.raises(GraphError, match="graph input 'x'.*batch"):
        import_onnx(model)
    g = import_onnx(model, dims={"batch": 3})
    assert g.tensors["y"].shape == [3, 8]
    # a Reshape whose target depends on runtime data cannot be shaped: the node is named
    nodes = [helper.make_node("Reshape", ["x", "t"], ["y"], name="dyn reshape")]
    model = _model(nodes, [_vi("x", [2, 4]), _vi("t", [2], TensorProto.INT64)], [_vi("y", None)])
    with pytest.raises(GraphError, match="dyn reshape"):
        import_onnx(model)


def test_unsupported_dtype_names_the_tensor():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                   [_vi("x", [2], TensorProto.COMPLEX64)], [_vi("y", None, TensorProto.COMPLEX64)])
    with pytest.raises(GraphError, match="'x'.*COMPLEX64"):
        import_onnx(model)


def test_cli_import_symbolic_dims(tmp_path):
    path = tmp_path / "sym.onnx"
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", ["batch", 8])],
                     [_vi("y", None)]), str(path))
    _one_line_error(runner.invoke(app, ["import", str(path)]), "'x'", "batch")
    r = runner.invoke(app, ["import", str(path), "--dim", "batch=3"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tensors"]["y"]["shape"] == [3, 8]
    _one_line_error(runner.invoke(app, ["import", str(path), "--dim", "batch"]), "NAME=VALUE")


@pytest.mark.parametrize("make", ["dropout_true", "dropout_runtime", "bn_training"])
def test_training_mode_is_refused(make):
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 4])
    inits = [helper.make_tensor("r", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("t", TensorProto.BOOL, [], [True])]
    inputs = [x]
    if make == "dropout_true":
        nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")]
    elif make == "dropout_runtime":
        inputs.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
        nodes = [helper.make_node("Dropout", ["x", "r", "flag"], ["y"], name="drop")]
    else:
        inits += [helper.make_tensor(n, TensorProto.FLOAT, [3], [1.0, 1.0, 1.0]) for n in ("s", "b", "m", "v")]
        nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn",
                                  training_mode=1)]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, [y], inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(GraphError, match=r"node '(drop|bn)': .* training mode"):
        import_onnx(model)


def test_training_dropout_with_zero_ratio_is_identity():
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    inits = [helper.make_tensor("r", TensorProto.FLOAT, [], [0.0]),
             helper.make_tensor("t", TensorProto.BOOL, [], [True])]
    model = helper.make_model(helper.make_graph([helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")],
                                                "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 18)])
    assert [n.op for n in import_onnx(model).nodes] == ["Identity"]
