"""The C emitter runs looped kernels (a group whose rows exceed L1, run as several passes) and
plans with recomputation (an op in several groups) -- issue 12.

References: ONNX Runtime / ONNX's reference evaluator for the numbers; bytes counted by hand for
the instrumented counters (each pass reads its inputs again; a kept reduction result is not
re-read). A profile with a 1 KiB L1 forces looped kernels on rows of 1,000 floats, so the C stays
small and quick.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solverfuse import cost, zoo
from solverfuse.cost import Kernel
from solverfuse.emit.build import compile_plan
from solverfuse.emit.data import constants, random_inputs
from solverfuse.emit.reference import reference_outputs
from solverfuse.errors import EmitError
from solverfuse.hardware import load_hardware
from solverfuse.mapping import loop_passes
from solverfuse.plans import FORMAT_COVERING, build_covering_plan, build_plan
from solverfuse.solve import solve_report
from tests.emit_helpers import graph

H100 = load_hardware("nvidia-h100")
TINY = H100.model_copy(update={"name": "tiny-l1", "l1_bytes": 1024})
ROWS, COLS = 3, 1000
X = ROWS * COLS * 4  # bytes of one [3, 1000] float tensor


def _run(g, plan, tmp_path, engine="onnxruntime", seed=1):
    """Run the plan's instrumented C; every output must match the reference engine."""
    prog = compile_plan(plan, g, strict=True, cache_dir=tmp_path, counters=True)
    ins, cs = random_inputs(g, seed=seed), constants(g, seed=seed)
    out = prog.run(ins, cs)
    ref = reference_outputs(g, ins, cs, engine=engine)
    for t in g.outputs:
        np.testing.assert_allclose(out[t], ref[t], rtol=1e-5, atol=1e-6, err_msg=f"tensor {t!r}")
    return [(c["read_bytes"], c["written_bytes"]) for c in prog.counters]


def test_covering_optimal_softmax_is_a_three_pass_kernel_that_runs_and_counts_four_x(tmp_path):
    g = zoo.softmax_rows(ROWS, COLS)
    ops = tuple(g.index.order)
    assert cost.kernel_violation(g, ops, TINY) is not None  # one pass would keep a 4 KB row
    plan = solve_report(g, TINY, workers=1, covering=True).plan
    assert plan.format == FORMAT_COVERING and [(grp.nodes, grp.passes) for grp in plan.groups] == [(list(ops), 3)]
    # by hand: pass 1 reads x (max), pass 2 reads x (x - max, exp, sum), pass 3 reads x (recomputes
    # x - max and exp, divides); y written once; the row max and sum stay in the kernel
    assert _run(g, plan, tmp_path) == [(3 * X, X)]
    assert plan.traffic_bytes == 4 * X == cost.kernel_traffic(g, ops, ("y",), 3)


def _layernorm(outputs):
    """LayerNorm without scale, decomposed as exporters write it; ``d`` (x - mean) may be an output."""
    return graph({"x": [ROWS, COLS], "eps": {"shape": [], "constant": True, "value": 1e-5}},
                 ["x"], outputs,
                 [("mean", "ReduceMean", ["x"], ["mu"], {"axes": [1], "keepdims": 1}),
                  ("sub", "Sub", ["x", "mu"], ["d"]),
                  ("sq", "Mul", ["d", "d"], ["d2"]),
                  ("var", "ReduceMean", ["d2"], ["v"], {"axes": [1], "keepdims": 1}),
                  ("add", "Add", ["v", "eps"], ["ve"]),
                  ("sqrt", "Sqrt", ["ve"], ["sd"]),
                  ("div", "Div", ["d", "sd"], ["y"])])


def test_looped_layernorm_writing_an_earlier_pass_tensor_matches_and_counts_every_pass(tmp_path):
    g = _layernorm(["y", "d"])
    ops = tuple(g.index.order)
    plan = build_covering_plan(g, TINY, [Kernel(ops, ("d", "y"), 3)], strategy="manual")
    # pass 1: x; pass 2: x (d, d*d, var) and writes d; pass 3: x (d again), eps; writes y
    assert _run(g, plan, tmp_path, engine="reference") == [(3 * X + 4, 2 * X)]
    assert plan.traffic_bytes == 5 * X + 4


def test_reductions_of_one_pass_share_its_loop(tmp_path):
    g = graph({"x": [ROWS, COLS]}, ["x"], ["y"],
              [("max", "ReduceMax", ["x"], ["m"], {"axes": [1], "keepdims": 1}),
               ("sum", "ReduceSum", ["x"], ["s"], {"axes": [1], "keepdims": 1}),
               ("sub", "Sub", ["x", "m"], ["d"]),
               ("div", "Div", ["d", "s"], ["y"])])
    ops = tuple(g.index.order)
    plan = build_covering_plan(g, TINY, [Kernel(ops, ("y",), 2)], strategy="manual")
    assert _run(g, plan, tmp_path) == [(2 * X, X)]
    from solverfuse.emit.program import render
    src = render(plan, g)["model.c"]
    assert src.count("one loop over the reduced axes") == 1  # max and sum: one loop over x


def test_recomputed_op_in_a_looped_kernel_and_in_another_kernel(tmp_path):
    # h = relu(x) feeds a row softmax (looped) and z = -h; h is never written: both kernels
    # recompute it, the looped one in each of its three passes
    g = graph({"x": [ROWS, COLS]}, ["x"], ["y", "z"],
              [("relu", "Relu", ["x"], ["h"]),
               ("neg", "Neg", ["h"], ["z"]),
               ("max", "ReduceMax", ["h"], ["m"], {"axes": [1], "keepdims": 1}),
               ("sub", "Sub", ["h", "m"], ["d"]),
               ("exp", "Exp", ["d"], ["e"]),
               ("sum", "ReduceSum", ["e"], ["s"], {"axes": [1], "keepdims": 1}),
               ("div", "Div", ["e", "s"], ["y"])])
    soft = ("relu", "max", "sub", "exp", "sum", "div")
    plan = build_covering_plan(g, TINY, [Kernel(("relu", "neg"), ("z",)), Kernel(soft, ("y",), 3)],
                               strategy="manual")
    assert sorted((tuple(grp.nodes), grp.passes) for grp in plan.groups) == [(("relu", "max", "sub", "exp", "sum", "div"), 3), (("relu", "neg"), 1)]
    counts = _run(g, plan, tmp_path)
    assert sorted(counts) == [(X, X), (3 * X, X)]
    assert sum(r + w for r, w in counts) == plan.traffic_bytes == 6 * X


def test_cli_plans_recomputes_and_runs_the_looped_softmax(tmp_path):
    from typer.testing import CliRunner
    from solverfuse.cli import app
    src, prof, out = tmp_path / "softmax.json", tmp_path / "tiny.json", tmp_path / "plan.json"
    src.write_text(zoo.softmax_rows(ROWS, COLS).model_dump_json(exclude_none=True))
    prof.write_text(TINY.model_dump_json())
    res = CliRunner().invoke(app, ["plan", str(src), "--recompute", "--workers", "1", "--hardware", str(prof),
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["run", str(src), "--plan", str(out), "--check", "--engine", "onnxruntime"])
    assert res.exit_code == 0, res.output


def test_looped_kernel_with_an_anchor_is_refused_in_one_line():
    from solverfuse.emit.kernel import Kernel as CKernel
    from solverfuse.emit.looped import render_looped
    from solverfuse.emit.lowering import code_for_op
    g = graph({"a": [2, 8], "b": [8, 16]}, ["a", "b"], ["y"],
              [("mm", "MatMul", ["a", "b"], ["c"]),
               ("max", "ReduceMax", ["c"], ["m"], {"axes": [1], "keepdims": 1}),
               ("sub", "Sub", ["c", "m"], ["y"])])
    k = CKernel(g, ["mm", "max", "sub"], 0, {"a": 0, "b": 1, "y": 2}, counters=False, threads=1, lower=code_for_op)
    with pytest.raises(EmitError, match="node 'mm': a looped kernel recomputes .* a MatMul"):
        render_looped(k, 2)


# ---- random row graphs: every looped kernel the covering solver picks runs and counts its bytes ----

R, C = 3, 40  # 160 B rows; MICRO's 64 B L1 holds none, so a row reduction fused with its readers loops
MICRO = H100.model_copy(update={"name": "micro-l1", "l1_bytes": 64})


@st.composite
def row_graph(draw):
    """A random DAG over x: [R, C] of row reductions (to [R, 1]), unary ops and broadcasting
    binary ops; every tensor nobody reads is an output."""
    shapes = {"x": (R, C)}
    nodes = []
    for i in range(draw(st.integers(3, 7))):
        wide = [t for t, s in shapes.items() if s == (R, C)]
        kind = draw(st.sampled_from(["reduce", "unary", "binary", "binary"]))
        out = f"t{i}"
        if kind == "reduce":
            a = draw(st.sampled_from(wide))
            op = draw(st.sampled_from(["ReduceSum", "ReduceMax", "ReduceMean"]))
            nodes.append((f"n{i}", op, [a], [out], {"axes": [1], "keepdims": 1}))
            shapes[out] = (R, 1)
        elif kind == "unary":
            a = draw(st.sampled_from(sorted(shapes)))
            nodes.append((f"n{i}", draw(st.sampled_from(["Neg", "Abs", "Tanh", "Sigmoid"])), [a], [out]))
            shapes[out] = shapes[a]
        else:
            a = draw(st.sampled_from(wide))
            b = draw(st.sampled_from(sorted(shapes)))
            nodes.append((f"n{i}", draw(st.sampled_from(["Add", "Sub", "Mul"])), [a, b], [out]))
            shapes[out] = (R, C)
    read = {t for n in nodes for t in n[2]}
    outs = [n[3][0] for n in nodes if n[3][0] not in read]
    return graph({"x": [R, C]}, ["x"], outs, nodes, name="rows")


def _check_plan(g, plan, tmp_path):
    counts = _run(g, plan, tmp_path, engine="reference", seed=5)
    for (r, w), grp in zip(counts, plan.groups):
        assert r + w == cost.kernel_traffic(g, grp.nodes, grp.writes, grp.passes), grp.name


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row_graph())
def test_random_row_graphs_run_as_one_looped_kernel_and_as_the_covering_optimum(tmp_path, g):
    ops = tuple(g.index.order)
    passes = loop_passes(g, ops)
    if passes > 1 and cost.kernel_violation(g, ops, MICRO, passes) is None:
        _check_plan(g, build_covering_plan(g, MICRO, [Kernel(ops, tuple(dict.fromkeys(g.outputs)), passes)],
                                           strategy="manual"), tmp_path)
    _check_plan(g, solve_report(g, MICRO, workers=1, covering=True).plan, tmp_path)


def test_a_stream_ending_in_a_reduction_reads_its_input_once(tmp_path):
    # torch.compile's middle softmax kernel: e = exp(x - max) is written AND summed; one loop over
    # x does both (the general schedule gave the sum a loop of its own: x read twice from DRAM)
    from solverfuse.emit.program import render
    g = zoo.softmax_rows(ROWS, COLS)
    plan = build_plan(g, TINY, [["row_max"], ["shift", "exp", "row_sum"], ["y"]], strategy="manual")
    src = render(plan, g)["model.c"]
    k1 = src[src.index("static int k1("):src.index("static int k2(")]
    assert k1.count("for (long") == 2 and k1.count("sf_expf(") == 1  # rows, then one loop over the row
    # by hand: [max] reads x, writes m; [shift, exp, sum] reads x and m, writes e and s; [y] reads e, s
    r = ROWS * 4
    assert _run(g, plan, tmp_path) == [(X, r), (X + r, X + r), (X + r, X)]


def test_a_view_recomputed_in_every_pass_checks_its_shape_in_every_pass(tmp_path):
    # x is reshaped before its row softmax: each of the three passes recomputes the Reshape,
    # so each reads (checks) its 16-byte shape tensor, as the cost model charges
    g = graph({"x": [ROWS * COLS], "shp": {"shape": [2], "dtype": "int64", "constant": True,
                                            "value": [ROWS, COLS]}},
              ["x"], ["y"],
              [("rs", "Reshape", ["x", "shp"], ["x2"]),
               ("max", "ReduceMax", ["x2"], ["m"], {"axes": [1], "keepdims": 1}),
               ("sub", "Sub", ["x2", "m"], ["d"]),
               ("exp", "Exp", ["d"], ["e"]),
               ("sum", "ReduceSum", ["e"], ["s"], {"axes": [1], "keepdims": 1}),
               ("div", "Div", ["e", "s"], ["y"])])
    ops = tuple(g.index.order)
    plan = build_covering_plan(g, TINY, [Kernel(ops, ("y",), 3)], strategy="manual")
    assert _run(g, plan, tmp_path) == [(3 * X + 3 * 16, X)]
    assert plan.traffic_bytes == 4 * X + 3 * 16


def test_a_gather_recomputed_in_each_pass_is_charged_its_gathered_bytes_per_pass(tmp_path):
    # rows picked by a Gather (twice row 2, never row 1), then x - rowmax: both passes gather
    g = graph({"x": [ROWS, COLS], "idx": {"shape": [ROWS], "dtype": "int64", "constant": True, "value": [2, 0, 2]}},
              ["x"], ["y"],
              [("g", "Gather", ["x", "idx"], ["r"], {"axis": 0}),
               ("max", "ReduceMax", ["r"], ["m"], {"axes": [1], "keepdims": 1}),
               ("sub", "Sub", ["r", "m"], ["y"])])
    ops = tuple(g.index.order)
    plan = build_covering_plan(g, TINY, [Kernel(ops, ("y",), 2)], strategy="manual")
    # per pass: the gathered rows (3 x 1,000 floats, repeats counted again, capped at |x|) + idx
    assert _run(g, plan, tmp_path) == [(2 * (X + 24), X)]
    assert plan.traffic_bytes == 3 * X + 48
