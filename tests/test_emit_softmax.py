"""The row loop's softmax helpers (emit/row_helpers.py ``sf_expsum``: the AVX-512 vector exp
``sf_exp16``, the AVX2 ``sf_exp8``, else the prelude's ``sf_expf``; ``sf_divq``; ``sf_stream`` and
``sf_drain``: non-temporal stores of large outputs) against references that share no code with
them: the exponentials against NumPy's float64 exp, softmax rows against ONNX Runtime and NumPy
float64, the division against NumPy's. Each is built for this host (-march=native), without
AVX-512 (a cc wrapper adding -mno-avx512f: sf_exp8), without AVX-512 and AVX2 (the portable
sf_expf loop), with the streaming stores forced on small tensors, and with the softmax output
also deferred to the next row (row_stream: drained during a LayerNorm's statistics where the row has
them); and under the sanitizers."""
from __future__ import annotations

import re

import numpy as np
import pytest

from solverfuse.emit import norm_stats, row_loop, row_stream
from solverfuse.emit.build import compile_plan
from solverfuse.emit.program import render
from solverfuse.emit.reference import reference_outputs
from solverfuse.plans import build_plan

from .emit_helpers import HW, exp_errors, graph

#: Stated in emit/row_helpers.py: sf_exp16's and sf_exp8's max error in float32 ulps of the true
#: value (measured 1.06 and 1.18 over every 211th float32 in [-110, 110]); sf_expf's (the portable
#: build) is 1.25.
EXP16_ULP = 1.5


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emit-softmax-cache")


BUILDS = ["native", "no-avx512", "portable", "streamed", "deferred"]


def _compile(g, groups, build, cache, cc, monkeypatch, **kw):
    if build in ("streamed", "deferred"):
        monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)
    if build == "deferred":
        monkeypatch.setattr(row_stream, "DEFER_MIN_ROW_BYTES", 0)
    plan = build_plan(g, HW, groups, strategy="test")
    return plan, compile_plan(plan, g, cache_dir=cache, strict=True, cc=cc.get(build), **kw)


def _exp_graph(rows_, cols):
    """e = Exp(x), y = e / ReduceSum(e) over rows, one row-loop group writing e: the
    exponentials of x come out of sf_expsum unchanged."""
    return graph({"x": [rows_, cols]}, ["x"], ["e", "y"],
                 [("exp", "Exp", ["x"], ["e"]), ("sum", "ReduceSum", ["e"], ["s"], {"axes": [1], "keepdims": 1}),
                  ("div", "Div", ["e", "s"], ["y"])])


@pytest.mark.parametrize("build", BUILDS)
def test_row_exponentials_within_the_stated_bound(build, cache, no_avx512_cc, monkeypatch):
    """Every 211th float32 in [-110, 110] (overflow above 88.72, subnormal results below -87.34, zero
    below -103.97) and the special values through a row loop's exponentials, against float64 exp:
    error in ulps of the float32 result, and exactly the same overflow to inf, underflow to 0 and NaN."""
    bits = np.arange(0, 2 ** 32, 211, dtype=np.uint64).astype(np.uint32).view(np.float32)
    grid = bits[np.isfinite(bits) & (np.abs(bits) <= 110)]
    special = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-30, -1e-30, 88.72283, 88.72284,
                        89.0, 1e30, 3e38, -87.33, -103.97, -103.98, -104.0, -1e30, -3e38], np.float32)
    cols = 256
    x = np.concatenate([grid, special])
    x = np.concatenate([x, np.zeros(-x.size % cols, np.float32)]).reshape(-1, cols)
    g = _exp_graph(*x.shape)
    plan, prog = _compile(g, [["exp", "sum", "div"]], build, cache, no_avx512_cc, monkeypatch)
    src = render(plan, g)["model.c"]
    assert "sf_expsum(" in src[src.index("static int k0("):]
    got = prog.run({"x": x}, {})["e"].ravel()
    x = x.ravel()
    _, fin, ulp = exp_errors(x, got)
    assert ulp.max() <= EXP16_ULP, f"max error {ulp.max():.3g} ulp at x = {x[fin][ulp.argmax()]}"


@pytest.mark.parametrize("build", BUILDS)
def test_row_exponentials_less_the_row_max_within_the_stated_bound(build, cache, no_avx512_cc, monkeypatch):
    """e = Exp(x - ReduceMax(x)) written out (sf_expsum_from_max: no upper clamp, as every
    argument is <= 0): every 211th float32 in [-110, 0] and -inf, NaN, -0, with a 0 in each row
    so that the row max is 0 and e = exp(x), against float64 exp with sf_exp16's bound."""
    bits = np.arange(0, 2 ** 32, 211, dtype=np.uint64).astype(np.uint32).view(np.float32)
    grid = bits[np.isfinite(bits) & (bits <= 0) & (bits >= -110)]
    special = np.array([-np.inf, np.nan, -0.0, -1e-30, -87.33, -103.97, -103.98, -104.0, -1e30, -3e38], np.float32)
    cols = 256
    x = np.concatenate([grid, special])
    x = np.concatenate([x, np.full(-x.size % (cols - 1), -1.0, np.float32)]).reshape(-1, cols - 1)
    x = np.concatenate([np.zeros((x.shape[0], 1), np.float32), x], axis=1)
    g = graph({"x": list(x.shape)}, ["x"], ["e", "y"],
              [("m", "ReduceMax", ["x"], ["m"], {"axes": [1], "keepdims": 1}), ("d", "Sub", ["x", "m"], ["d"]),
               ("exp", "Exp", ["d"], ["e"]), ("sum", "ReduceSum", ["e"], ["s"], {"axes": [1], "keepdims": 1}),
               ("div", "Div", ["e", "s"], ["y"])])
    plan, prog = _compile(g, [["m", "d", "exp", "sum", "div"]], build, cache, no_avx512_cc, monkeypatch)
    src = render(plan, g)["model.c"]
    assert "sf_expsum_from_max(" in src[src.index("static int k0("):]
    got = prog.run({"x": x}, {})["e"].ravel()
    x = x.ravel()
    _, fin, ulp = exp_errors(x, got)
    assert ulp.max() <= EXP16_ULP, f"max error {ulp.max():.3g} ulp at x = {x[fin][ulp.argmax()]}"


def _softmax_graph(lengths, dtype="float"):
    """For each row length n: a Softmax op on x{n} and the exporters' decomposition of it on
    z{n} (ReduceMax, Sub, Exp, ReduceSum, Div); one group each."""
    tensors, nodes, groups, outs = {}, [], [], []
    for n in lengths:
        for t in (f"x{n}", f"z{n}", f"y{n}", f"w{n}"):
            tensors[t] = {"shape": [5, n], "dtype": dtype}
        for t in (f"m{n}", f"s{n}"):
            tensors[t] = {"shape": [5, 1], "dtype": dtype}
        for t in (f"d{n}", f"e{n}"):
            tensors[t] = {"shape": [5, n], "dtype": dtype}
        nodes += [(f"sm{n}", "Softmax", [f"x{n}"], [f"y{n}"], {"axis": -1}),
                  (f"max{n}", "ReduceMax", [f"z{n}"], [f"m{n}"], {"axes": [1], "keepdims": 1}),
                  (f"sub{n}", "Sub", [f"z{n}", f"m{n}"], [f"d{n}"]),
                  (f"exp{n}", "Exp", [f"d{n}"], [f"e{n}"]),
                  (f"sum{n}", "ReduceSum", [f"e{n}"], [f"s{n}"], {"axes": [1], "keepdims": 1}),
                  (f"div{n}", "Div", [f"e{n}", f"s{n}"], [f"w{n}"])]
        groups += [[f"sm{n}"], [f"max{n}", f"sub{n}", f"exp{n}", f"sum{n}", f"div{n}"]]
        outs += [f"y{n}", f"w{n}"]
    return graph(tensors, [t for n in lengths for t in (f"x{n}", f"z{n}")], outs, nodes), groups


def _rows(n, seed, dtype=np.float32):
    """5 rows of length n: normal(0, 3); huge positive and negative values; a -inf mask over all but
    the first element; values that overflow exp unshifted; all -inf (NaN in every engine)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3, size=(5, n)).astype(dtype)
    x[1, ::2] = -1e30
    x[1, 1::3] = 1e30 if n > 1 else x[1, 1::3]
    x[2, 1:] = -np.inf
    x[3] = rng.uniform(80, 120, size=n).astype(dtype)
    x[4] = -np.inf
    return x


LENGTHS = (1, 3, 17, 1000)


@pytest.mark.parametrize("build", BUILDS)
def test_softmax_rows_match_onnxruntime(build, cache, no_avx512_cc, monkeypatch):
    """Softmax op and its exporters' decomposition on rows of 1, 3, 17 and 1000 floats, with
    overflowing, underflowing, -inf-masked and all -inf rows: equal to ONNX Runtime's within
    1e-6 relative (NaN where it gives NaN)."""
    g, groups = _softmax_graph(LENGTHS)
    _, prog = _compile(g, groups, build, cache, no_avx512_cc, monkeypatch)
    ins = {f"{p}{n}": _rows(n, n + (p == "z")) for n in LENGTHS for p in "xz"}
    got = prog.run(ins, {})
    ref = reference_outputs(g, ins, {}, engine="onnxruntime")
    for t in g.outputs:
        np.testing.assert_allclose(got[t], ref[t], rtol=1e-6, atol=1e-7, err_msg=t)
        assert not np.isnan(got[t][:4]).any(), t


@pytest.mark.parametrize("build", ["native", "deferred"])
def test_double_softmax_rows_match_numpy_float64(build, cache, no_avx512_cc, monkeypatch):
    """The same graphs in float64 (row statistics and exponentials in double): NumPy float64 to 1e-13."""
    g, groups = _softmax_graph(LENGTHS, "float64")
    _, prog = _compile(g, groups, build, cache, no_avx512_cc, monkeypatch)
    ins = {f"{p}{n}": _rows(n, n + (p == "z"), np.float64)[:4] for n in LENGTHS for p in "xz"}
    ins = {k: np.concatenate([v, v[:1]]) for k, v in ins.items()}   # no all -inf row here
    got = prog.run(ins, {})
    for n in LENGTHS:
        for x, y in ((f"x{n}", f"y{n}"), (f"z{n}", f"w{n}")):
            v = ins[x]
            e = np.exp(v - v.max(axis=-1, keepdims=True))
            np.testing.assert_allclose(got[y], e / e.sum(axis=-1, keepdims=True), rtol=1e-13, atol=0, err_msg=y)


def test_streamed_softmax_is_clean_under_the_sanitizers(cache, monkeypatch):
    """The streamed row loop (forced on small rows of odd length) in the ASan/UBSan build: no
    report, and the values of the plain build (to rounding: -O1 sums in another order)."""
    monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(row_stream, "DEFER_MIN_ROW_BYTES", 4000)   # rows of 1000 floats deferred, of 17 not
    g, groups = _softmax_graph((17, 1000))
    # and a softmax squared: its output is not the kept exponentials, so it is streamed in place
    g = graph({**{t: {"shape": list(v.shape), "dtype": v.dtype} for t, v in g.tensors.items()},
               "q": [5, 1000], "y2": [5, 1000]}, [*g.inputs], [*g.outputs, "y2"],
              [(n.name, n.op, list(n.inputs), list(n.outputs), dict(n.attributes)) for n in g.nodes]
              + [("sm2", "Softmax", ["x1000"], ["q"], {"axis": -1}), ("sq", "Mul", ["q", "q"], ["y2"])])
    groups = groups + [["sm2", "sq"]]
    plan = build_plan(g, HW, groups, strategy="test")
    ins = {f"{p}{n}": _rows(n, n + (p == "z")) for n in (17, 1000) for p in "xz"}
    src = render(plan, g)["model.c"]
    assert "sf_drain(" in src and "sf_stream(" in src and "sf_stream_fence();" in src
    # the softmaxes of rows of 17 written straight from their exponentials (no stack block between),
    # the squared one through a block
    body = src[src.index("static int k0("):]
    assert len(re.findall(r"sf_drain\(&\(sf_pend\)\{.*\}, 0, 17\);", body)) == 2
    assert len(re.findall(r"sf_stream\(&", body)) == 1
    got = compile_plan(plan, g, cache_dir=cache, sanitize=True).run(ins, {})
    plain = compile_plan(plan, g, cache_dir=cache).run(ins, {})
    for t in g.outputs:
        np.testing.assert_allclose(got[t], plain[t], rtol=1e-6, atol=1e-7, err_msg=t)


@pytest.mark.parametrize("build", ["native", "streamed", "deferred"])
def test_division_by_the_normaliser_is_the_division(build, cache, no_avx512_cc, monkeypatch):
    """The exporters' softmax writing its exponentials e, normaliser s (broadcast) and w = e / s: w is computed
    by sf_divq (reciprocal and one FMA remainder step), and equals NumPy's float32 division e / s
    wherever the quotient is >= 1e-30, within 1 ulp of it below (subnormal remainders)."""
    n = 1000
    g = graph({"z": [64, n], "m": [64, 1], "d": [64, n], "e": [64, n], "s": [64, 1], "w": [64, n],
               "zero": {"shape": [n], "constant": True}, "sb": [64, n]}, ["z"], ["e", "sb", "w"],
              [("max", "ReduceMax", ["z"], ["m"], {"axes": [1], "keepdims": 1}), ("sub", "Sub", ["z", "m"], ["d"]),
               ("exp", "Exp", ["d"], ["e"]), ("sum", "ReduceSum", ["e"], ["s"], {"axes": [1], "keepdims": 1}),
               ("div", "Div", ["e", "s"], ["w"]), ("bcast", "Add", ["s", "zero"], ["sb"])])
    groups = [["max", "sub", "exp", "sum", "div", "bcast"]]
    plan, prog = _compile(g, groups, build, cache, no_avx512_cc, monkeypatch)
    src = render(plan, g)["model.c"]
    if build in ("streamed", "deferred"):   # w streamed straight from the kept exponentials, as a division
        assert "sf_divq(" not in src[src.index("static int k0("):]
        assert re.search(r"sf_drain\(&\(sf_pend\)\{&\w+\[\w+\*1000\], \w+, \w+, 1\.0f / \w+, 1, 0\}, 0, 1000\);", src)
    else:
        assert "sf_divq(" in src
    z = np.random.default_rng(3).normal(0, 1, size=(64, n)).astype(np.float32) * np.geomspace(0.1, 40, 64,
                                                                                           dtype=np.float32)[:, None]
    out = prog.run({"z": z}, {"zero": np.zeros(n, np.float32)})
    want = out["e"] / out["sb"]   # sb: the kernel's normaliser s of each row (s + 0, broadcast)
    big = want >= 1e-30
    assert big.mean() > 0.5
    np.testing.assert_array_equal(out["w"][big], want[big])
    assert (np.abs(out["w"][~big] - want[~big]) <= np.spacing(want[~big])).all()


def test_a_row_minimum_is_no_softmax_normaliser(cache):
    """exp(z - min(z)) over rows: the terms exceed 1 and overflow, so ReduceSum of them is no softmax
    normaliser: the division stays a division (no sf_divq) and the values match ONNX Runtime,
    inf / inf = NaN included."""
    g = graph({"z": [64, 300], "m": [64, 1], "d": [64, 300], "e": [64, 300], "s": [64, 1], "w": [64, 300]},
              ["z"], ["w"],
              [("min", "ReduceMin", ["z"], ["m"], {"axes": [1], "keepdims": 1}), ("sub", "Sub", ["z", "m"], ["d"]),
               ("exp", "Exp", ["d"], ["e"]), ("sum", "ReduceSum", ["e"], ["s"], {"axes": [1], "keepdims": 1}),
               ("div", "Div", ["e", "s"], ["w"])])
    plan = build_plan(g, HW, [["min", "sub", "exp", "sum", "div"]], strategy="test")
    src = render(plan, g)["model.c"]
    assert "sf_divq(" not in src and "sf_expsum" in src
    z = np.random.default_rng(4).normal(0, 1, size=(64, 300)).astype(np.float32) * np.geomspace(1, 60, 64)[:, None]
    z = z.astype(np.float32)
    got = compile_plan(plan, g, cache_dir=cache, strict=True).run({"z": z}, {})["w"]
    want = reference_outputs(g, {"z": z}, {}, engine="onnxruntime")["w"]
    assert np.isnan(want).any() and not np.isnan(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cols", [600, 2100])
@pytest.mark.parametrize("memory", [False, True])
def test_a_rows_exponentials_are_one_call_that_prefetches_the_next_row(cols, memory, cache, monkeypatch):
    """A Softmax row's exponentials are one sf_expsum call per row (not a call per 256-value block),
    passed a pointer to the next row of the input, null at the last row, which the helper prefetches
    as it computes -- into the L1 for a row of 2,400 bytes, into the L2 only (far = 1) and the row
    after next for one of 8,400 (FAR_PREFETCH_ROW_BYTES = 8,192); the instrumented build passes
    none. An input from memory (row_loop.STREAM_MIN_BYTES, forced) read into the L1 one row ahead
    also passes the row OUTPUT_FAR_ROWS_AHEAD on (pf2), into the L2. The outputs match ONNX Runtime."""
    if memory:
        monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)
    g = graph({"x": [6, cols]}, ["x"], ["y"], [("sm", "Softmax", ["x"], ["y"], {"axis": -1})])
    plan = build_plan(g, HW, [["sm"]], strategy="test")
    for counters in (False, True):
        body = render(plan, g, counters=counters)["model.c"]
        lines = [ln.strip() for ln in body[body.index("static int k0("):].split("\n")]
        calls = [ln for ln in lines if "sf_expsum" in ln and "sf_drain" not in ln]
        loops = [ln for ln in lines if "sf_expsum" in ln and ln.startswith("for (")]
        assert len(calls) == 1 and not loops and re.search(rf"sf_expsum\w*\(\w+, \w+, {cols}, ", calls[0]), calls
        pf, far, pf2 = calls[0].rstrip(");").rsplit(", ", 3)[1:]
        if counters:
            assert (pf, far, pf2) == ("0", "0", "0"), calls
            continue
        d = 2 if cols == 2100 else 1
        assert f"const float *{pf} = i1 + {d} < 6 ? &b0[((i1 + {d}))*{cols}] : 0;" in lines, (pf, lines)
        assert far == ("1" if cols == 2100 else "0"), calls
        if memory and cols == 600:
            d = row_loop.OUTPUT_FAR_ROWS_AHEAD
            assert f"const float *{pf2} = i1 + {d} < 6 ? &b0[((i1 + {d}))*{cols}] : 0;" in lines, (pf2, lines)
        else:
            assert pf2 == "0", calls
    x = np.random.default_rng(2).normal(0, 3, (6, cols)).astype(np.float32)
    got = compile_plan(plan, g, cache_dir=cache, strict=True).run({"x": x}, {})["y"]
    np.testing.assert_allclose(got, reference_outputs(g, {"x": x}, {}, engine="onnxruntime")["y"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("cols", [2048, 2113])
def test_layernorm_softmax_rows_drain_during_the_statistics(cols, cache, monkeypatch):
    """softmax(layernorm(x) * 2) over rows (the l1_overflow motif) streamed and deferred: the
    previous row's output is drained block by block inside the LayerNorm statistics' pass (rows of
    2,048: whole blocks of 1,024; of 2,113: a last block of 65), not with the exponentials, where
    each row computes its own statistics (norm_stats: not carried from the previous row, as rows
    of CARRY_MIN_ROW_BYTES are; tests/test_emit_carried_stats.py). The outputs match ONNX Runtime;
    the sanitizer build reports nothing and gives the plain build's."""
    monkeypatch.setattr(norm_stats, "CARRY_MIN_ROW_BYTES", 1 << 30)
    monkeypatch.setattr(row_loop, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(row_stream, "DEFER_MIN_ROW_BYTES", 0)
    g = graph({"x": [5, cols], "s": {"shape": [cols], "constant": True}, "b": {"shape": [cols], "constant": True},
               "two": {"shape": [], "constant": True, "value": [2.0]}}, ["x"], ["y"],
              [("ln", "LayerNormalization", ["x", "s", "b"], ["n"], {"axis": -1, "epsilon": 1e-5}),
               ("scale", "Mul", ["n", "two"], ["h"]), ("sm", "Softmax", ["h"], ["y"], {"axis": -1})])
    plan = build_plan(g, HW, [["ln", "scale", "sm"]], strategy="test")
    src = render(plan, g)["model.c"]
    lines = [ln.strip() for ln in src[src.index("static int k0("):].split("\n")]
    drains = [i for i, ln in enumerate(lines) if ln.startswith("sf_drain(&")]
    first_exp = min(i for i, ln in enumerate(lines) if "sf_expsum" in ln)
    assert len(drains) == 2 and drains[0] < first_exp < drains[1], drains   # in the row, after the loop
    assert re.fullmatch(rf"for \(long (\w+) = 0; \1 < {cols}; \1 \+= 1024\) \{{", lines[drains[0] - 1])
    ins = {"x": np.random.default_rng(4).normal(0, 2, (5, cols)).astype(np.float32)}
    cs = {"s": np.random.default_rng(5).normal(1, 0.3, cols).astype(np.float32),
          "b": np.random.default_rng(6).normal(0, 0.3, cols).astype(np.float32), "two": np.float32(2.0)}
    plain = compile_plan(plan, g, cache_dir=cache, strict=True).run(ins, cs)["y"]
    np.testing.assert_allclose(plain, reference_outputs(g, ins, cs, engine="onnxruntime")["y"], rtol=2e-5, atol=1e-7)
    got = compile_plan(plan, g, cache_dir=cache, sanitize=True).run(ins, cs)["y"]
    np.testing.assert_allclose(got, plain, rtol=1e-6, atol=1e-9)
