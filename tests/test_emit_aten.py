"""The C emitter's lowerings of the ATen-only op rows (ops of torch.export graphs with no ONNX
operator) against references written here: numpy formulas, and torch eager where torch is
installed. One kernel per op (the unfused plan) and one fused plan."""
from __future__ import annotations

import numpy as np
import pytest

from solverfuse.emit.build import compile_plan
from solverfuse.plans import build_plan

from .emit_helpers import HW, fuse_greedily, graph, unfused

RNG = np.random.default_rng(20261201)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-aten-cache")


def run_c(g, groups, cache_dir, ins):
    plan = build_plan(g, HW, groups, strategy="test")
    prog = compile_plan(plan, g, strict=True, cache_dir=cache_dir, counters=False, threads=1)
    return prog.run(ins, None)  # constants: their values in the graph


def close(got, want, rtol=1e-5, atol=1e-6):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _elementwise_graph():
    t = {"x": [3, 5, 4], "p": [3, 5, 4], "i1": {"shape": [3, 1, 4], "dtype": "int64"},
         "i2": {"shape": [5, 4], "dtype": "int64"}, "f1": [5, 1]}
    nodes = [("rs", "Rsqrt", ["p"], ["o_rs"]), ("si", "Silu", ["x"], ["o_si"]),
             ("ne_i", "NotEqual", ["i1", "i2"], ["o_ne_i"]), ("ne_f", "NotEqual", ["x", "f1"], ["o_ne_f"])]
    g = graph(t, ["x", "p", "i1", "i2", "f1"], [o for n in nodes for o in n[3]], nodes)
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    f1 = x[0, :, :1].copy()  # some equal, some not
    f1[::2] += 1.0
    ins = {"x": x, "p": RNG.uniform(0.1, 4.0, (3, 5, 4)).astype(np.float32),
           "i1": RNG.integers(0, 3, (3, 1, 4)), "i2": RNG.integers(0, 3, (5, 4)), "f1": f1}
    return g, ins


@pytest.mark.parametrize("fused", [False, True])
def test_rsqrt_silu_not_equal(cache, fused):
    g, ins = _elementwise_graph()
    out = run_c(g, fuse_greedily(g) if fused else unfused(g), cache, ins)
    x, p = ins["x"].astype(np.float64), ins["p"].astype(np.float64)
    close(out["o_rs"], (1.0 / np.sqrt(p)).astype(np.float32))
    close(out["o_si"], (x / (1.0 + np.exp(-x))).astype(np.float32))
    assert out["o_ne_i"].dtype == np.bool_
    np.testing.assert_array_equal(out["o_ne_i"], ins["i1"] != ins["i2"])
    np.testing.assert_array_equal(out["o_ne_f"], ins["x"] != ins["f1"])
    assert out["o_ne_f"].any() and not out["o_ne_f"].all()


def test_var_mean_axes_keepdims_correction(cache):
    t = {"x": [4, 3, 6]}
    cases = [("vm_last", {"axes": [-1], "keepdims": 1, "correction": 1.0}),
             ("vm_outer", {"axes": [0, 2], "keepdims": 0, "correction": 0.0}),
             ("vm_mid", {"axes": [1], "keepdims": 1, "correction": 2.0}),
             ("vm_all", {"axes": [0, 1, 2], "keepdims": 0, "correction": 1.0})]
    nodes = [(n, "VarMean", ["x"], [f"{n}_var", f"{n}_mean"], a) for n, a in cases]
    g = graph(t, ["x"], [o for n in nodes for o in n[3]], nodes)
    x = (3.0 + RNG.standard_normal((4, 3, 6))).astype(np.float32)
    for groups in (unfused(g), fuse_greedily(g)):
        out = run_c(g, groups, cache, {"x": x})
        for n, a in cases:
            axes, keep = tuple(a["axes"]), bool(a["keepdims"])
            close(out[f"{n}_var"], np.var(x.astype(np.float64), axis=axes, ddof=a["correction"],
                                          keepdims=keep).astype(np.float32), rtol=1e-4)
            close(out[f"{n}_mean"], np.mean(x.astype(np.float64), axis=axes, keepdims=keep).astype(np.float32))


def _layer_norm_graph(write_stats):
    """aten's decomposition of layer_norm: var_mean, add eps, rsqrt, (x - mean) * rstd * w + b."""
    t = {"x": [2, 5, 16], "eps": {"shape": [], "constant": True, "value": 1e-5},
         "w": {"shape": [16], "constant": True, "value": list(np.linspace(0.5, 1.5, 16))},
         "b": {"shape": [16], "constant": True, "value": list(np.linspace(-1, 1, 16))}}
    nodes = [("vm", "VarMean", ["x"], ["var", "mean"], {"axes": [2], "keepdims": 1, "correction": 0.0}),
             ("ae", "Add", ["var", "eps"], ["ve"]), ("rs", "Rsqrt", ["ve"], ["rstd"]),
             ("sub", "Sub", ["x", "mean"], ["xc"]), ("mul", "Mul", ["xc", "rstd"], ["xn"]),
             ("mw", "Mul", ["xn", "w"], ["xw"]), ("ab", "Add", ["xw", "b"], ["y"]),
             ("si", "Silu", ["y"], ["z"])]
    return graph(t, ["x"], ["z"] + (["var", "mean"] if write_stats else []), nodes)


@pytest.mark.parametrize("write_stats", [False, True])
def test_layer_norm_decomposition_fused(cache, write_stats):
    g = _layer_norm_graph(write_stats)
    groups = fuse_greedily(g)
    assert len(groups) == 1  # one kernel: row statistics then the row's outputs
    x = (2.0 + 3.0 * RNG.standard_normal((2, 5, 16))).astype(np.float32)
    out = run_c(g, groups, cache, {"x": x})
    xd = x.astype(np.float64)
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    y = (xd - mu) / np.sqrt(var + 1e-5) * np.linspace(0.5, 1.5, 16) + np.linspace(-1, 1, 16)
    close(out["z"], (y / (1 + np.exp(-y))).astype(np.float32), rtol=1e-4, atol=1e-5)
    if write_stats:
        close(out["var"], var.astype(np.float32), rtol=1e-4)
        close(out["mean"], mu.astype(np.float32), atol=1e-5)


def test_select_and_constant_pad(cache):
    t = {"x": [3, 4, 5]}
    nodes = [("s0", "Select", ["x"], ["o_s0"], {"axis": 0, "index": 2}),
             ("s1", "Select", ["x"], ["o_s1"], {"axis": -1, "index": -2}),
             ("p1", "ConstantPad", ["x"], ["o_p1"], {"pad": [1, 2], "value": -7.0}),
             ("p2", "ConstantPad", ["x"], ["o_p2"], {"pad": [0, 1, 2, 0, 1, 1], "value": 0.5}),
             ("p3", "ConstantPad", ["x"], ["o_p3"], {"pad": [-1, 2, 1, -2]}),
             ("e", "Exp", ["o_p2"], ["o_e"])]  # a consumer of the padded tensor (fused in one plan)
    g = graph(t, ["x"], [o for n in nodes for o in n[3]], nodes)
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    p2 = np.pad(x, [(1, 1), (2, 0), (0, 1)], constant_values=0.5)
    for groups in (unfused(g), fuse_greedily(g)):
        out = run_c(g, groups, cache, {"x": x})
        np.testing.assert_array_equal(out["o_s0"], x[2])
        np.testing.assert_array_equal(out["o_s1"], x[:, :, -2])
        np.testing.assert_array_equal(out["o_p1"], np.pad(x, [(0, 0), (0, 0), (1, 2)], constant_values=-7.0))
        np.testing.assert_array_equal(out["o_p2"], p2)
        np.testing.assert_array_equal(out["o_p3"], np.pad(x, [(0, 0), (1, 0), (0, 2)])[:, :-2, 1:])
        close(out["o_e"], np.exp(p2))


def test_torch_imported_module_runs_in_c(cache):
    """A torch module imported through torch.export (core ATen: var_mean, rsqrt, constant_pad_nd,
    select, ne) planned unfused and fused, run in our C, against torch eager."""
    torch = pytest.importorskip("torch", reason="torch (the solverfuse[torch] extra) is not installed")
    from solverfuse.torch import from_module

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.ln = torch.nn.Linear(8, 16), torch.nn.LayerNorm(16)

        def forward(self, x):
            h = torch.nn.functional.silu(self.ln(self.lin(x)))
            r = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)  # RMSNorm
            var, mean = torch.var_mean(x, dim=1, correction=1)
            return torch.nn.functional.pad(r, (1, 2))[:, 0], x != 0.5, var, mean

    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(3, 4, 8)
    x[0, 0, :3] = 0.5
    g = from_module(model, (x,))
    ops = {n.op for n in g.nodes}
    assert {"VarMean", "Rsqrt", "ConstantPad", "Select", "NotEqual"} <= ops, ops
    with torch.no_grad():
        ref = [t.numpy() for t in model(x)]
    for groups in (unfused(g), fuse_greedily(g)):
        out = run_c(g, groups, cache, {g.inputs[0]: x.numpy()})
        for t, want in zip(g.outputs, ref):
            assert out[t].dtype == want.dtype, t
            if want.dtype == np.bool_:
                np.testing.assert_array_equal(out[t], want)
            else:
                close(out[t], want, rtol=1e-4, atol=1e-5)


def _np_attention(q, k, v, mask=None, causal=False, scale=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    return np.matmul(e / e.sum(-1, keepdims=True), v), lse


def test_scaled_dot_product_attention(cache):
    b, h, lq, lk, dq, dv = 2, 3, 5, 7, 4, 6
    t = {"q": [b, h, lq, dq], "k": [b, 1, lk, dq], "v": [b, h, lk, dv], "kc": [b, h, lq, dq],
         "bm": {"shape": [lq, lk], "dtype": "bool"}, "fm": [b, 1, lq, lk]}
    nodes = [("plain", "ScaledDotProductAttention", ["q", "k", "v"], ["o_plain", "l_plain"]),
             ("bool", "ScaledDotProductAttention", ["q", "k", "v", "bm"], ["o_bool", "l_bool"], {"scale": 0.3}),
             ("float", "ScaledDotProductAttention", ["q", "k", "v", "fm"], ["o_float", "l_float"]),
             ("causal", "ScaledDotProductAttention", ["q", "kc", "q"], ["o_causal", "l_causal"], {"causal": 1})]
    g = graph(t, ["q", "k", "v", "kc", "bm", "fm"], [o for n in nodes for o in n[3]], nodes)
    bm = RNG.random((lq, lk)) < 0.6
    bm[:, 0] = True  # no fully masked row
    ins = {"q": RNG.standard_normal((b, h, lq, dq)), "k": RNG.standard_normal((b, 1, lk, dq)),
           "v": RNG.standard_normal((b, h, lk, dv)), "kc": RNG.standard_normal((b, h, lq, dq)),
           "bm": bm, "fm": RNG.standard_normal((b, 1, lq, lk))}
    ins = {n: (a.astype(np.float32) if a.dtype != np.bool_ else a) for n, a in ins.items()}
    refs = {"plain": _np_attention(ins["q"], ins["k"], ins["v"]),
            "bool": _np_attention(ins["q"], ins["k"], ins["v"], bm, scale=0.3),
            "float": _np_attention(ins["q"], ins["k"], ins["v"], ins["fm"]),
            "causal": _np_attention(ins["q"], ins["kc"], ins["q"], causal=True)}
    out = run_c(g, unfused(g), cache, ins)
    for n, (o, lse) in refs.items():
        close(out[f"o_{n}"], o.astype(np.float32), rtol=1e-4, atol=1e-5)
        close(out[f"l_{n}"], lse.astype(np.float32), rtol=1e-4, atol=1e-5)
    torch = pytest.importorskip("torch", reason="torch is not installed: numpy reference only")
    tt = {n: torch.from_numpy(a) for n, a in ins.items()}
    F = torch.nn.functional
    want = F.scaled_dot_product_attention(tt["q"], tt["k"].expand(b, h, lk, dq), tt["v"], attn_mask=tt["bm"],
                                          scale=0.3)
    close(out["o_bool"], want.numpy(), rtol=1e-4, atol=1e-5)
    want = F.scaled_dot_product_attention(tt["q"], tt["kc"], tt["q"], is_causal=True)
    close(out["o_causal"], want.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_transformers_model_runs_in_c(cache, name):
    """A torch-imported transformers model (var_mean / rsqrt / attention rows) runs in our C,
    unfused and fused, matching torch eager."""
    torch = pytest.importorskip("torch", reason="torch (the solverfuse[torch] extra) is not installed")
    pytest.importorskip("transformers", reason="transformers is not installed")
    from solverfuse.torch import from_module
    from solverfuse.torch.models import MODELS

    model, inputs = MODELS[name]()
    g = from_module(model, inputs)
    assert "ScaledDotProductAttention" in {n.op for n in g.nodes}
    with torch.no_grad():
        want = model(*inputs).numpy()
    feed = dict(zip([t for t in g.inputs if not g.tensors[t].constant], (a.numpy() for a in inputs)))
    for groups in (unfused(g), fuse_greedily(g)):
        (t,) = g.outputs
        close(run_c(g, groups, cache, feed)[t], want, rtol=1e-4, atol=1e-5)


def test_scaled_dot_product_attention_float64(cache):
    """A float64 attention keeps float64 accuracy: its scores, probabilities and logsumexp are
    double (they were float scratch for every dtype, ~1e-7 off)."""
    b, h, lq, lk, dq, dv = 1, 2, 4, 9, 5, 3
    f64 = {n: {"shape": s, "dtype": "float64"}
           for n, s in {"q": [b, h, lq, dq], "k": [b, h, lk, dq], "v": [b, h, lk, dv], "fm": [lq, lk],
                                    "o": [b, h, lq, dv], "l": [b, h, lq]}.items()}
    nodes = [("a", "ScaledDotProductAttention", ["q", "k", "v", "fm"], ["o", "l"])]
    g = graph(f64, ["q", "k", "v", "fm"], ["o", "l"], nodes)
    ins = {n: RNG.standard_normal(f64[n]["shape"]) for n in ("q", "k", "v", "fm")}
    o, lse = _np_attention(ins["q"], ins["k"], ins["v"], ins["fm"])
    out = run_c(g, unfused(g), cache, ins)
    assert out["o"].dtype == np.float64 and out["l"].dtype == np.float64
    close(out["o"], o, rtol=1e-12, atol=1e-13)
    close(out["l"], lse, rtol=1e-12, atol=1e-13)
