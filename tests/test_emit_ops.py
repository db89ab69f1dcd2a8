"""Each op of the C emitter against ONNX's reference evaluator, on seeded random shapes with
broadcasting. Ops are batched into a few graphs (one kernel per op: the unfused plan) so that the
suite compiles little."""
from __future__ import annotations

import re

import numpy as np
import pytest

from .emit_helpers import check, graph, run_plan, unfused

RNG = np.random.default_rng(20240607)


def dims(n, lo=2, hi=5):
    return [int(d) for d in RNG.integers(lo, hi + 1, size=n)]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-cache")


def test_elementwise_and_broadcast_ops(cache):
    a, b, c = dims(3)
    t = {"x": [a, b, c], "yb": [b, 1], "z": [c], "p": [a, b, c], "q": [1, c], "s": {"shape": [], "constant": True, "fill": -0.25},
         "cond": {"shape": [b, c], "dtype": "bool"}, "i1": {"shape": [a, 1, c], "dtype": "int64"},
         "i2": {"shape": [b, c], "dtype": "int64"}}
    un = ["Relu", "Neg", "Exp", "Tanh", "Erf", "Sigmoid", "Identity", "Abs", "Floor", "Sin"]
    nodes = [(f"n_{op}", op, ["x"], [f"o_{op}"]) for op in un]
    nodes += [(f"n_{op}", op, ["p"], [f"o_{op}"]) for op in ("Sqrt", "Log", "Reciprocal")]
    nodes += [
        ("add", "Add", ["x", "yb"], ["o_add"]), ("sub", "Sub", ["yb", "x"], ["o_sub"]),
        ("mul", "Mul", ["x", "z"], ["o_mul"]), ("div", "Div", ["x", "p"], ["o_div"]),
        ("pow", "Pow", ["p", "q"], ["o_pow"]), ("sum", "Sum", ["x", "yb", "z"], ["o_sum"]),
        ("max", "Max", ["x", "yb", "q"], ["o_max"]), ("mean", "Mean", ["x", "z"], ["o_mean"]),
        ("where", "Where", ["cond", "x", "yb"], ["o_where"]), ("eq", "Equal", ["i1", "i2"], ["o_eq"]),
        ("less", "Less", ["x", "q"], ["o_less"]),
        ("cast_i", "Cast", ["x"], ["o_cast_i"], {"to": 7}), ("cast_b", "Cast", ["cond"], ["o_cast_b"], {"to": 1}),
        ("cast_tb", "Cast", ["x"], ["o_cast_tb"], {"to": 9}),
        ("drop", "Dropout", ["x"], ["o_drop", "o_mask"]), ("lrelu", "LeakyRelu", ["x"], ["o_lrelu"], {"alpha": 0.3}),
        ("clip", "Clip", ["x", "s", ""], ["o_clip"]), ("prelu", "PRelu", ["x", "z"], ["o_prelu"]),
        ("gelu", "Gelu", ["x"], ["o_gelu"]),
    ]
    outs = [o for n in nodes for o in n[3]]
    g = graph(t, ["x", "yb", "z", "p", "q", "cond", "i1", "i2"], outs, nodes)
    check(g, unfused(g), cache)


def test_integer_arithmetic_and_int_where(cache):
    a, b = dims(2)
    t = {"i": {"shape": [a, b], "dtype": "int64"}, "j": {"shape": [b], "dtype": "int64"},
         "m": {"shape": [a, b], "dtype": "bool"}}
    nodes = [("add", "Add", ["i", "j"], ["o_add"]), ("mul", "Mul", ["i", "j"], ["o_mul"]),
             ("w", "Where", ["m", "i", "j"], ["o_w"]), ("mx", "ReduceMax", ["i"], ["o_mx"], {"axes": [1], "keepdims": 0}),
             ("neg", "Neg", ["i"], ["o_neg"]), ("c", "Cast", ["i"], ["o_c"], {"to": 1})]
    g = graph(t, ["i", "j", "m"], [o for n in nodes for o in n[3]], nodes)
    check(g, unfused(g), cache)


def test_reductions_and_normalisations(cache):
    a, b, c = dims(3, 2, 6)
    n, ch, h, w = dims(4, 2, 5)
    t = {"x": [a, b, c], "sc": [c], "bi": [c], "sc2": [b, c], "img": [n, ch, h, w]}
    nodes = [("sm1", "Softmax", ["x"], ["o_sm1"], {"axis": 1}), ("sm2", "Softmax", ["x"], ["o_sm2"]),
             ("lsm", "LogSoftmax", ["x"], ["o_lsm"], {"axis": 0}),
             ("rm", "ReduceMean", ["x"], ["o_rm"], {"axes": [1], "keepdims": 1}),
             ("rs", "ReduceSum", ["x"], ["o_rs"], {"axes": [0, 2], "keepdims": 0}),
             ("rx", "ReduceMax", ["x"], ["o_rx"], {"axes": [-1], "keepdims": 0}),
             ("rn", "ReduceMin", ["x"], ["o_rn"]),
             ("rl2", "ReduceL2", ["x"], ["o_rl2"], {"axes": [2]}),
             ("ln1", "LayerNormalization", ["x", "sc", "bi"], ["o_ln1"], {"epsilon": 1e-5}),
             ("ln2", "LayerNormalization", ["x", "sc2"], ["o_ln2", "o_mean", "o_istd"], {"axis": 1}),
             ("gap", "GlobalAveragePool", ["img"], ["o_gap"]), ("gmp", "GlobalMaxPool", ["img"], ["o_gmp"])]
    t.update({k: {"shape": t[k], "constant": True} for k in ("sc", "bi", "sc2")})
    g = graph(t, ["x", "img"], [o for nd in nodes for o in nd[3]], nodes)
    check(g, unfused(g), cache)


def _const(shape, value, dtype="int64"):
    return {"shape": shape, "dtype": dtype, "constant": True, "value": value}


def test_layout_ops(cache):
    a, b, c = dims(3, 3, 6)
    t = {"x": [a, b, c], "u": [a, 2, c], "v": [a, 1, c], "e": [b, 1],
         "starts": _const([2], [1, -1]), "ends": _const([2], [a, -c - 1]), "axes": _const([2], [0, 2]),
         "steps": _const([2], [1, -2]), "shape": _const([3], [0, -1, 2 * c]) if b % 2 == 0 else _const([2], [-1, c]),
         "split": _const([2], [1, b - 1]), "eshape": _const([3], [a, b, 3]), "sq": _const([1], [1]),
         "usq": _const([2], [0, 3]), "idx": {"shape": [2, 3], "dtype": "int64"}}
    nodes = [("cat", "Concat", ["x", "u", "v"], ["o_cat"], {"axis": 1}),
             ("sl", "Slice", ["x", "starts", "ends", "axes", "steps"], ["o_sl"]),
             ("sp", "Split", ["x", "split"], ["o_sp0", "o_sp1"], {"axis": 1}),
             ("tr", "Transpose", ["x"], ["o_tr"], {"perm": [2, 0, 1]}),
             ("rs", "Reshape", ["x", "shape"], ["o_rs"]), ("fl", "Flatten", ["x"], ["o_fl"], {"axis": 2}),
             ("sq", "Squeeze", ["v", "sq"], ["o_sq"]), ("us", "Unsqueeze", ["x", "usq"], ["o_us"]),
             ("ex", "Expand", ["e", "eshape"], ["o_ex"]), ("ga", "Gather", ["x", "idx"], ["o_ga"], {"axis": 1}),
             ("ga0", "Gather", ["x", "idx"], ["o_ga0"], {"axis": 0})]
    g = graph(t, ["x", "u", "v", "e", "idx"], [o for nd in nodes for o in nd[3]], nodes)
    check(g, unfused(g), cache)


def test_anchors_and_windows(cache):
    n, cin, h, w = 2, 4, *dims(2, 7, 10)
    m, k, p = dims(3, 3, 9)
    t = {"img": [n, cin, h, w], "w1": {"shape": [6, 2, 3, 3], "constant": True}, "b1": {"shape": [6], "constant": True},
         "w2": {"shape": [5, cin, 1, 1], "constant": True}, "w3": {"shape": [3, cin, 2, 3], "constant": True},
         "a": [k, m], "bt": [p, k], "cb": {"shape": [p], "constant": True}, "cm": {"shape": [m, 1], "constant": True},
         "ba": [2, 1, m, k], "bb": [3, k, p], "vec": [k], "mk": [m, k], "kp": [k, p],
         "bn_s": {"shape": [cin], "constant": True}, "bn_b": {"shape": [cin], "constant": True},
         "bn_m": {"shape": [cin], "constant": True}, "bn_v": {"shape": [cin], "constant": True}}
    nodes = [
        ("conv1", "Conv", ["img", "w1", "b1"], ["o_conv1"], {"pads": [1, 2, 0, 1], "strides": [2, 1],
                                                            "dilations": [1, 2], "group": 2}),
        ("conv2", "Conv", ["img", "w2"], ["o_conv2"]),
        ("conv3", "Conv", ["img", "w3"], ["o_conv3"], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ("gemm1", "Gemm", ["a", "bt", "cb"], ["o_gemm1"], {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
        ("gemm2", "Gemm", ["mk", "kp", "cm"], ["o_gemm2"]),
        ("mm1", "MatMul", ["ba", "bb"], ["o_mm1"]), ("mm2", "MatMul", ["vec", "kp"], ["o_mm2"]),
        ("mm3", "MatMul", ["mk", "vec"], ["o_mm3"]),
        ("bn", "BatchNormalization", ["img", "bn_s", "bn_b", "bn_m", "bn_v"], ["o_bn"], {"epsilon": 1e-3}),
        ("mp", "MaxPool", ["img"], ["o_mp"], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                             "ceil_mode": 1}),
        ("ap1", "AveragePool", ["img"], ["o_ap1"], {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1],
                                                   "count_include_pad": 1}),
        ("ap2", "AveragePool", ["img"], ["o_ap2"], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ]
    g = graph(t, ["img", "a", "bt", "ba", "bb", "vec", "mk", "kp"], [o for nd in nodes for o in nd[3]], nodes)
    check(g, unfused(g), cache, rtol=1e-4, atol=1e-4)


def test_lrn_against_onnxruntime(cache):
    # onnx.reference's LRN loops over the batch axis instead of the channels (onnx 1.16-1.17),
    # so LRN is checked against ONNX Runtime.
    t = {"img": [2, 6, 3, 4]}
    nodes = [("lrn", "LRN", ["img"], ["o_lrn"], {"size": 3, "alpha": 1e-3, "beta": 0.75, "bias": 2.0}),
             ("lrn5", "LRN", ["img"], ["o_lrn5"], {"size": 5})]
    g = graph(t, ["img"], ["o_lrn", "o_lrn5"], nodes)
    check(g, unfused(g), cache, engine="onnxruntime")


def _lrn_spec(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN as the ONNX operator spec words it, in float64 (ONNX Runtime has no even window or
    double LRN; onnx.reference's loops over the batch axis, see above)."""
    c = x.shape[1]
    sq = np.zeros(x.shape, dtype=np.float64)
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + -(-(size - 1) // 2))
        sq[:, ch] = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
    return x / (bias + alpha / size * sq) ** beta


@pytest.mark.parametrize("shape,attrs,dtype,threads", [
    ((1, 7, 9, 33), {"size": 5, "beta": 0.75, "alpha": 0.02}, "float32", 1),   # square roots; rows of 33
    ((2, 5, 4, 6), {"size": 4, "beta": 0.5, "bias": 1.5, "alpha": 0.1}, "float32", 1),  # even window
    ((1, 6, 3, 17), {"size": 3, "beta": 1.0, "alpha": 0.3}, "float64", 1),     # a division, double
    ((1, 9, 5, 8), {"size": 3, "beta": 0.6, "alpha": 0.05}, "float32", 2),     # powf, 2 threads
    ((1, 6, 5, 1), {"size": 3, "beta": 0.75, "alpha": 0.05}, "float32", 1),    # rows of 1: per element
])
def test_lrn_rows_with_an_epilogue_match_the_spec(shape, attrs, dtype, threads, cache):
    """LRN computed a row at a time (the squares of the window's channels summed into the row,
    then scaled) with a fused Relu after it; the betas that take square roots or a division and
    one that takes powf; inputs large enough that the window sum matters. Against the spec's
    formula in float64, and ONNX Runtime where it has the case (odd window, float32)."""
    from solverfuse.emit.program import render
    t = {"x": {"shape": list(shape), "dtype": dtype}}
    g = graph(t, ["x"], ["y"], [("n", "LRN", ["x"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, prog, _, ins, _ = run_plan(g, [["n", "r"]], cache, threads=threads)
    x = ins["x"] * 4
    out = prog.run({"x": x}, {})
    want = np.maximum(_lrn_spec(x, **attrs), 0)
    np.testing.assert_allclose(out["y"], want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=1e-6)
    if attrs["size"] % 2 and dtype == "float32":
        check(g, [["n", "r"]], cache, rtol=1e-5, atol=1e-6, engine="onnxruntime", threads=threads)
    src = render(plan, g)["model.c"].split("static int k0")[1]
    assert ("pow" not in src) == (attrs["beta"] != 0.6)
    ct = "float" if dtype == "float32" else "double"
    assert bool(re.search(rf"{ct} T\d+\[{shape[-1]}\]( SF_ALIGN64)?;", src)) == (shape[-1] > 1)  # the row form ran


@pytest.mark.parametrize("shape,kernel,attrs", [
    ((1, 16, 12, 12), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),                      # stride 1, padded
    ((2, 8, 9, 14), (8, 8, 1, 1), {}),                                             # 1x1, batch 2
    ((1, 4, 13, 15), (8, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),      # stride 2, odd sizes
    ((1, 3, 40, 44), (16, 3, 5, 5), {"strides": [2, 1], "pads": [2, 2, 2, 2], "dilations": [1, 2]}),
    ((1, 6, 70, 64), (4, 6, 3, 3), {"pads": [1, 1, 1, 1]}),                         # several bands of rows
    ((2, 6, 10, 10), (12, 2, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),             # grouped: 4 out/group
])
def test_register_blocked_conv_with_epilogue(shape, kernel, attrs, cache):
    """Convs that take the register-blocked tile (output channels divisible by 2): bias, a fused
    ReLU epilogue, strides, dilations, asymmetric pads, planes split into bands, vs reference."""
    t = {"x": shape, "w": {"shape": list(kernel), "constant": True}, "bb": {"shape": [kernel[0]], "constant": True}}
    g = graph(t, ["x"], ["y"], [("c", "Conv", ["x", "w", "bb"], ["h"], attrs), ("r", "Relu", ["h"], ["y"])])
    plan, _, _ = check(g, [["c", "r"]], cache, rtol=1e-4, atol=1e-5)
    from solverfuse.emit.program import render
    src = render(plan, g)["model.c"]
    assert "sf_conv_tile" in src and ("copy of a Conv input" in src or "reads its input in place" in src)  # the blocked tile ran
