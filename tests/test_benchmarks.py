"""Smoke test of the benchmark harness (the benchmark itself is not part of the suite)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from solverfuse import cost, zoo
from solverfuse.hardware import load_hardware

from .emit_helpers import host_flags

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


def test_plan_all_scores_every_strategy_with_the_cost_model():
    run = _load("run")
    g = zoo.elementwise_chain(8, 32)
    row = run.plan_all(g, load_hardware("nvidia-h100"), time_limit=30, workers=1)
    assert row["unfused"] == cost.unfused_traffic(g) and row["q_min"] == cost.q_min(g)
    assert row["optimal"]["status"] == "optimal"
    # a single elementwise chain fuses into one kernel: optimal traffic is exactly Q_min
    assert row["optimal"]["traffic"] == cost.q_min(g)
    assert all(s["traffic"] >= row["optimal"]["traffic"] for s in row["strategies"].values())


def test_side_by_side_timing_interleaves_and_report_renders(tmp_path):
    run, report = _load("run"), _load("report")
    calls = []
    times = run.time_side_by_side({"a": lambda: calls.append("a") or 1.0,
                                   "b": lambda: calls.append("b") or 2.0}, rounds=2)
    assert calls == ["a", "b", "b", "a"] and times == {"a": [1.0, 1.0], "b": [2.0, 2.0]}
    results = {"machine": _load("machine").describe(), "quick": True, "wall_seconds": 1.0,
               "settings": {"hardware": "nvidia-h100", "time_limit": 5, "workers": 1, "threads": 1, "factor": 0.1},
               "planning": [{"graph": "chain", "error": "ValueError: boom"}]}
    report.write(results, tmp_path)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## Machine" in text and "error: ValueError: boom" in text


def test_cachegrind_parser_sums_only_the_kernel_file():
    cg = _load("cachegrind_llc")
    text = "events: Ir DLmr DLmw\nfl=/t/model.c\nfn=k0\n1 5 1 2\nfi=/t/main.c\n2 7 7 7\nfe=/t/model.c\n3 1 1 1\n"
    assert cg.parse(text, "model.c") == {"Ir": 6, "DLmr": 2, "DLmw": 3}


def test_read_stream_sums_what_it_reads_and_the_ceiling_bounds_memory_kernels():
    machine, scaling = _load("machine"), _load("scaling_bound")
    from solverfuse.emit.build import BASE_FLAGS
    lib = machine.TriadLib(1000 * 32 + 7, 1, BASE_FLAGS)
    lib.b[:] = 0.5
    lib.b[-1] = 3.0  # past the 32-float blocks: the remainder loop
    assert lib.read() == 0.5 * (1000 * 32 + 6) + 3.0 and lib.read_bytes == 4 * (1000 * 32 + 7)
    # a compute kernel halves; one streaming at the profile's read rate only gains R2 / R1
    rows = [{"secs": 4.0, "bytes": 0, "ops": "Conv", "shape": [1]},
            {"secs": 2.0, "bytes": 2e9 * 2.0, "ops": "Gemm", "shape": [1]}]
    assert scaling.ceiling(rows, 2.0, 1 / 1.5) == 6.0 / (2.0 + 2.0 / 1.5)
    assert scaling.ceiling(rows, 2.0, 0.25) == 6.0 / (2.0 + 1.0)  # never more than 2x per kernel
    assert scaling.memory_kernels(rows, 2.0, 1 / 1.5).startswith("Gemm [1]: 2000.00 ms, 2 GB/s")


def test_mm_tile_probe_builds_the_emitted_tiles_and_they_sum_right(tmp_path):
    """The probe's harness compiles the emitter's two matmul tiles and checks their sums against a
    plain dot product in C: K = 300 (past one 256-row block of the transposing tile), N = 96."""
    probe = _load("mm_tile_probe")
    exe = probe.build_probe("cc", str(tmp_path))
    r = probe.run_probe(exe, 300, 96, 1)
    assert r["err"] < 1e-5 and r["tile"] > 0 and r["ptile"] > 0
    if "avx512f" in host_flags():  # the 12-row candidate and the peak loop are AVX-512 code
        assert r["tile12"] > 0 and r["peak"] > 0


def test_thread_trace_splits_each_team_kernel_inside_the_run(tmp_path):
    """At 2 threads every thread records its start and return of each team kernel: the spans lie
    inside the run's wall time (timed outside the library), every start skew within its span."""
    trace = _load("thread_trace")
    res = trace.trace("conv:32x28x28x32x3x1x1", 2, 3, str(tmp_path))
    rows = res["rows"]
    assert rows and all(r["team"] for r in rows)
    assert 0 < sum(r["span"] for r in rows) <= res["run"]
    for r in rows:
        assert r["t1"] > 0 and 0 <= r["late"] <= r["span"]
        assert r["span"] - r["skew"] > 0  # the threads' mean time in the kernel
    allowed = os.sched_getaffinity(0)
    assert res["moves"] >= 0 and set(res["cpus"]) <= allowed  # the CPUs the threads returned on
    assert res["per_cpu"] and set(res["per_cpu"]) <= allowed and all(t > 0 for t in res["per_cpu"].values())
    row, detail = trace.report("conv", 2, res, 3)
    assert row.startswith("| conv | 1 (1) |") and len(row.split("|")) == len(trace.SUMMARY[0].split("|"))
    assert len(detail) == 4 + 1 + 1  # title, blank, header, rule, one kernel, blank


def test_line_share_times_every_access_and_compares_it_with_its_own_line_baseline(tmp_path):
    """The C harness runs each access on 2 threads over a buffer split between them: every
    scenario reports the bytes one thread touched (the whole buffer for all-read) and one time per
    round; the table compares each with the access to the thread's own lines."""
    ls = _load("line_share")
    exe = ls.build("cc", tmp_path / "line_share")
    res = ls.measure(exe, 64, 2, 3, 1 << 20)
    assert list(res) == ["own-write", "shared-write", "cold-write", "own-read", "other-read", "all-read"]
    for name, (nbytes, secs) in res.items():
        assert nbytes == (64 * 1024 if name == "all-read" else 32 * 1024)
        assert len(secs) == 3 and all(s > 0 for s in secs)
    rows = ls.rows(res, 64, 2)
    assert len(rows) == 6 and all(len(r.split("|")) == len(ls.HEADER[0].split("|")) for r in rows)
    assert rows[0].endswith("| 1.00 |") and rows[3].endswith("| 1.00 |")  # own-write, own-read


def test_kernel_passes_times_each_pass_of_a_fused_kernel(tmp_path):
    """A conv fused with the Concat after it and a ReLU (DenseNet's growth layer) runs as passes
    (the Concat's other input; the conv input's copy and the conv tiles): each is timed on every
    thread of the team."""
    kp = _load("kernel_passes")
    from solverfuse.graph import Graph
    g = Graph.model_validate({
        "name": "cat", "inputs": ["x", "y"], "outputs": ["z"],
        "tensors": {"x": {"shape": [1, 64, 28, 28]}, "y": {"shape": [1, 32, 28, 28]},
                    "w": {"shape": [32, 64, 3, 3], "constant": True}, "c": {"shape": [1, 32, 28, 28]},
                    "k": {"shape": [1, 64, 28, 28]}, "z": {"shape": [1, 64, 28, 28]}},
        "nodes": [{"name": "conv", "op": "Conv", "inputs": ["x", "w"], "outputs": ["c"],
                   "attributes": {"pads": [1, 1, 1, 1]}},
                  {"name": "cat", "op": "Concat", "inputs": ["y", "c"], "outputs": ["k"], "attributes": {"axis": 1}},
                  {"name": "relu", "op": "Relu", "inputs": ["k"], "outputs": ["z"]}]})
    kp.graph_for = lambda spec: g
    res = kp.passes("cat", [0], 2, 3, str(tmp_path))[0]
    assert res["ops"] and len(res["labels"]) >= 2 and res["labels"][0].startswith("pass:")
    assert len(res[1]) == 1 and len(res[2]) == 2
    assert all(len(th) == len(res["labels"]) and all(s > 0 for s in th) for th in res[1] + res[2])
    table = kp.report("cat", 0, 2, res)
    assert table[2].startswith("| pass | 1 thread ms | thread 0 ms | thread 1 ms |") and table[-2].startswith("| kernel |")


def test_zoo_profile_sums_both_runtimes_by_kind_of_kernel(tmp_path):
    """Our kernels and ONNX Runtime's profiled nodes of one graph are summed by kind: ORT's fused
    Conv+Relu node counts as a Conv, its LRN as an LRN, and the table has a row per kind."""
    pytest.importorskip("onnxruntime")
    zp = _load("zoo_profile")
    from solverfuse.graph import Graph
    g = Graph.model_validate({
        "name": "k", "inputs": ["x"], "outputs": ["z"],
        "tensors": {"x": {"shape": [1, 8, 16, 16]}, "w": {"shape": [8, 8, 3, 3], "constant": True},
                    "c": {"shape": [1, 8, 16, 16]}, "r": {"shape": [1, 8, 16, 16]}, "z": {"shape": [1, 8, 16, 16]}},
        "nodes": [{"name": "conv", "op": "Conv", "inputs": ["x", "w"], "outputs": ["c"],
                   "attributes": {"pads": [1, 1, 1, 1]}},
                  {"name": "relu", "op": "Relu", "inputs": ["c"], "outputs": ["r"]},
                  {"name": "lrn", "op": "LRN", "inputs": ["r"], "outputs": ["z"], "attributes": {"size": 3}}]})
    zp.graph_for = lambda spec: g
    ours = zp.by_class(zp.profile("k", 1, 2, "optimal", str(tmp_path)))
    ort = zp.by_class(zp.ort_profile("k", 1, 2))
    assert "Conv" in ours and set(ours) <= {"Conv", "LRN"} and all(s > 0 for s in ours.values())
    assert {"Conv", "LRN"} <= set(ort), ort
    table = zp.class_table({1: ours, 2: ours}, {1: ort, 2: ort}, 2)
    assert len(table) == 2 + len(set(ours) | set(ort)) + 1
    assert table[-1].startswith("| total |") and table[-1].endswith("| 1.00 |")
