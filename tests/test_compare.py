"""`compare`: one row per strategy, scored by the cost model; optimal never worse than a partition,
the covering optimum never worse than anything; table/JSON/Markdown."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from solverfuse import cost, greedy
from solverfuse.cli import app
from solverfuse.compare import Row, compare, format_markdown, format_table, rows_for
from solverfuse.errors import InternalError
from solverfuse.oracle import brute_force_covering
from solverfuse.plans import FORMAT_COVERING, validate
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware

from .conftest import EXAMPLES, light_model_path

H100 = load_hardware("nvidia-h100")
# every strategy in table order: a recomputing baseline right after the partition baseline it refines
NAMES = ["optimal", *[n for b in greedy.STRATEGIES for n in (b, *([f"{b}-recompute"] if b in greedy.RECOMPUTING else []))]]
# two ops per kernel (as in tests/test_xla_recompute.py): on FORK, cloning a into b's and c's
# kernels beats every partition
TIGHT = H100.model_copy(update={"name": "tight", "register_budget": H100.kernel_base_registers + 3})
FORK = load_graph({"name": "fork", "tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y", "z"],
                   "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
                             {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y"]},
                             {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["z"]}]})


@pytest.fixture(scope="module")
def residual_rows():
    g = load_graph(EXAMPLES / "residual.json")
    return g, compare(g, H100, time_limit=5, workers=1)


def test_rows_cover_every_strategy_and_use_the_cost_model(residual_rows):
    g, rows = residual_rows
    assert [r.strategy for r in rows] == NAMES
    by = {r.strategy: r for r in rows}
    unfused = cost.unfused_traffic(g)
    assert by["unfused"].traffic_bytes == unfused and by["unfused"].x_unfused == 1.0
    assert by["unfused"].groups == len(g.nodes)
    assert by["optimal"].gap_to_optimal_pct == 0.0 and by["optimal"].status == "optimal"
    best = by["optimal"].traffic_bytes
    for r in rows:
        assert r.traffic_bytes >= best >= cost.q_min(g)
        assert (r.gap_to_optimal_pct > 0) == (r.traffic_bytes > best) and r.x_qmin >= 1.0


def test_ratios_and_times_match_hand_computed_values():
    """x -> a -> h, h -> b -> y1, h -> c -> y2 on 256 float32 (1 KiB per tensor), counted by hand:
    unfused moves x, h (write), h, y1, h, y2 = 6 KiB; fused whole it reads x and writes y1, y2 =
    3 KiB, which is also Q_min. Every op is memory-bound, so each kernel's time is its bytes over
    the bandwidth plus one launch."""
    g = load_graph({"tensors": {"x": {"shape": [256]}}, "inputs": ["x"], "outputs": ["y1", "y2"],
                    "nodes": [{"name": "a", "op": "Relu", "inputs": ["x"], "outputs": ["h"]},
                              {"name": "b", "op": "Exp", "inputs": ["h"], "outputs": ["y1"]},
                              {"name": "c", "op": "Neg", "inputs": ["h"], "outputs": ["y2"]}]})
    by = {r.strategy: r for r in compare(g, H100, time_limit=5, workers=1)}
    opt, unf = by["optimal"], by["unfused"]
    assert (opt.traffic_bytes, opt.groups, opt.x_unfused, opt.gap_to_optimal_pct, opt.x_qmin) == \
        (3072, 1, 2.0, 0.0, 1.0)
    assert (unf.traffic_bytes, unf.groups, unf.x_unfused, unf.gap_to_optimal_pct, unf.x_qmin) == \
        (6144, 3, 1.0, 100.0, 2.0)
    assert unf.predicted_seconds == pytest.approx(3 * (2048 / 3.35e12 + H100.launch_overhead_s), rel=1e-6)
    assert opt.predicted_seconds == pytest.approx(3072 / 3.35e12 + H100.launch_overhead_s, rel=1e-6)


def test_optimal_worse_than_a_greedy_plan_is_a_loud_error():
    g = load_graph(EXAMPLES / "residual.json")
    worse = greedy.greedy_plan(g, H100, "unfused")
    better = greedy.greedy_plan(g, H100, "tvm")
    assert better.traffic_bytes < worse.traffic_bytes
    with pytest.raises(InternalError, match="bug: the optimal plan moves"):
        rows_for(g, H100, {"optimal": (worse, 0.0), "tvm": (better, 0.0)})


def test_xla_recompute_row_beats_the_partition_optimum_unchecked():
    """Hand count on FORK (1 KiB per tensor, two ops per kernel): the best partition is {a, b}, {c}
    (x, h, y, then h, z: 5 KiB); XLA clones a into both consumers: {a, b} and {a, c} each read x
    and write one output (4 KiB), 1 KiB less than the partition optimum. Each kernel is
    memory-bound: 2 KiB over the bandwidth plus one launch."""
    rows = compare(FORK, TIGHT, time_limit=5, workers=1)
    assert [r.strategy for r in rows] == NAMES
    by = {r.strategy: r for r in rows}
    opt, rec = by["optimal"], by["xla-recompute"]
    assert (opt.traffic_bytes, opt.recomputes, opt.checked_against) == (5 * 1024, False, "optimal")
    assert (rec.traffic_bytes, rec.groups, rec.recomputes, rec.checked_against) == (4 * 1024, 2, True, None)
    assert rec.gap_to_optimal_pct == -20.0 and rec.x_unfused == 1.5
    assert rec.predicted_seconds == pytest.approx(2 * (2048 / TIGHT.dram_bandwidth + TIGHT.launch_overhead_s), rel=1e-6)
    # Inductor's lowering computes the unstored relu in both consumers' loops too
    ind = by["inductor-recompute"]
    assert (ind.traffic_bytes, ind.groups, ind.recomputes, ind.checked_against) == (4 * 1024, 2, True, None)
    assert all(r.checked_against == "optimal" for r in rows if not r.recomputes)
    plan = greedy.recomputing_plan(FORK, TIGHT, "xla")
    validate(plan, FORK, TIGHT)
    assert sorted((tuple(g.nodes), tuple(g.reads), tuple(g.writes)) for g in plan.groups) == \
        [(("a", "b"), ("x",), ("y",)), (("a", "c"), ("x",), ("z",))]
    table = format_table(rows)
    assert table.splitlines()[-1].startswith("not checked against an optimum: xla-recompute")
    assert format_markdown(rows).splitlines()[-1] == table.splitlines()[-1]


def test_covering_row_checks_the_recomputing_row():
    rows = compare(FORK, TIGHT, time_limit=5, workers=1, covering=True)
    assert [r.strategy for r in rows] == ["optimal", "covering", *NAMES[1:]]
    by = {r.strategy: r for r in rows}
    assert by["covering"].traffic_bytes == brute_force_covering(FORK, TIGHT)[0] == 4 * 1024
    assert by["covering"].status == "optimal" and by["covering"].recomputes
    assert by["xla-recompute"].checked_against == "covering" and by["unfused"].checked_against == "optimal"
    assert by["inductor-recompute"].checked_against == "covering"
    assert "not checked" not in format_table(rows)


def test_a_plan_beating_the_covering_bound_is_a_loud_error():
    part = greedy.greedy_plan(FORK, TIGHT, "xla")
    rec = greedy.recomputing_plan(FORK, TIGHT, "xla")
    assert rec.format == FORMAT_COVERING and rec.traffic_bytes < part.traffic_bytes
    # a recomputing row may beat the partition optimum ...
    rows = rows_for(FORK, TIGHT, {"optimal": (part, 0.0), "xla-recompute": (rec, 0.0)})
    assert [r.checked_against for r in rows] == ["optimal", None]
    # ... but never a covering optimum's proven bound
    fake = part.model_copy(update={"strategy": "covering", "status": "optimal", "bound_bytes": part.traffic_bytes})
    with pytest.raises(InternalError, match="bug: the covering optimum is proven to move at least 5120"):
        rows_for(FORK, TIGHT, {"optimal": (part, 0.0), "covering": (fake, 0.0), "xla-recompute": (rec, 0.0)})
    # and a partition beating the partition optimum is still a bug, with a covering row or without
    worse = greedy.greedy_plan(FORK, TIGHT, "unfused")
    with pytest.raises(InternalError, match="bug: the optimal plan moves 6144"):
        rows_for(FORK, TIGHT, {"optimal": (worse, 0.0), "covering": (rec, 0.0), "xla": (part, 0.0)})


def test_table_and_markdown_render_every_row(residual_rows):
    _, rows = residual_rows
    table = format_table(rows, "residual")
    md = format_markdown(rows)
    assert table.splitlines()[0] == "residual" and len(table.splitlines()) == 3 + len(rows)  # no footnote: all checked
    assert md.splitlines()[0].startswith("| strategy | status | kernels | traffic")
    assert all(f"| {r.strategy} |" in md for r in rows)


def test_cli_json_markdown_and_plans(tmp_path):
    r = CliRunner().invoke(app, ["compare", str(EXAMPLES / "mlp.json"), "--time-limit", "5", "--workers", "1",
                                 "--json", "--plans", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [row["strategy"] for row in doc["rows"]] == NAMES
    assert all(isinstance(row["traffic_bytes"], int) for row in doc["rows"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"mlp.{s}.plan.json" for s in NAMES)
    r = CliRunner().invoke(app, ["compare", str(EXAMPLES / "mlp.json"), "--workers", "1", "--markdown"])
    assert r.exit_code == 0 and "|---|---|" in r.stdout


def test_cli_recompute_adds_the_checked_covering_row():
    r = CliRunner().invoke(app, ["compare", str(EXAMPLES / "residual.json"), "--time-limit", "5", "--workers", "1",
                                 "--json", "--recompute"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [row["strategy"] for row in rows] == ["optimal", "covering", *NAMES[1:]]
    assert all(row["checked_against"] in ("optimal", "covering") for row in rows)
    assert rows[1]["traffic_bytes"] <= rows[0]["traffic_bytes"]


def test_cli_on_an_onnx_model():
    r = CliRunner().invoke(app, ["compare", str(light_model_path("squeezenet")), "--hardware", "nvidia-a100",
                                 "--time-limit", "5", "--workers", "1", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert min(row["traffic_bytes"] for row in rows if not row["recomputes"]) == rows[0]["traffic_bytes"]


@pytest.mark.parametrize("args, message", [
    (["compare", "missing.json"], "no such file"),
    (["compare", str(EXAMPLES / "mlp.json"), "--hardware", "nope"], "unknown hardware 'nope'"),
    (["compare", str(EXAMPLES / "mlp.json"), "--json", "--markdown"], "not both"),
])
def test_cli_errors_are_one_line(args, message):
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2
    assert message in r.output and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_row_model_round_trips():
    r = Row(strategy="x", status="heuristic", groups=1, traffic_bytes=8, x_unfused=1.0,
            gap_to_optimal_pct=0.0, x_qmin=1.0, predicted_seconds=1e-6, planning_seconds=0.0)
    assert Row.model_validate(r.model_dump()) == r
