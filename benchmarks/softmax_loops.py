"""The softmax over rows of 16M floats of issue 12, run as the covering-optimal looped kernel.

``X: [2, 16777216]`` (64 MiB per row, far beyond any L1), softmax decomposed as exporters write it
(``ReduceMax, Sub, Exp, ReduceSum, Div``). The covering optimum (``solve_report(covering=True)``,
nvidia-h100 profile) is one kernel of three passes moving 4 x |X|; the partition optimum is
torch.compile's three kernels (5 x |X| + 32 B). This script

1. plans both, runs the covering plan's *instrumented* C and reports bytes counted vs predicted;
2. checks the looped C against ONNX Runtime (the decomposed graph, and ``Softmax`` opset 13);
3. times, interleaved over ``--rounds`` rounds (medians): the looped C, the partition C and ONNX
   Runtime on the decomposed graph and on the single Softmax op, all at ``--threads`` threads.

Writes ``benchmarks/results/loops.md`` (machine and load average beside the table).

    PYTHONPATH=. python benchmarks/softmax_loops.py [--rounds 5] [--threads 1] [--cols 16777216]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
import run as bench  # noqa: E402  (benchmarks/run.py: ORT session/runner, interleaving)
from solverfuse.emit.build import compile_plan  # noqa: E402
from solverfuse.files import write_atomic  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.solve import solve_report  # noqa: E402
from solverfuse.sources import load_graph  # noqa: E402


def softmax_graph(rows: int, cols: int, decomposed: bool):
    """The row softmax as five ops (as exporters write it) or as one opset-13 ``Softmax``."""
    if not decomposed:
        return load_graph({"name": f"softmax-op-{rows}x{cols}", "tensors": {"x": {"shape": [rows, cols]}},
                           "inputs": ["x"], "outputs": ["y"],
                           "nodes": [{"name": "sm", "op": "Softmax", "inputs": ["x"], "outputs": ["y"],
                                      "attributes": {"axis": 1}}]})
    red = {"axes": [1], "keepdims": 1}
    return load_graph({
        "name": f"softmax-{rows}x{cols}", "tensors": {"x": {"shape": [rows, cols]}}, "inputs": ["x"], "outputs": ["y"],
        "nodes": [{"name": "max", "op": "ReduceMax", "inputs": ["x"], "outputs": ["m"], "attributes": red},
                  {"name": "sub", "op": "Sub", "inputs": ["x", "m"], "outputs": ["d"]},
                  {"name": "exp", "op": "Exp", "inputs": ["d"], "outputs": ["e"]},
                  {"name": "sum", "op": "ReduceSum", "inputs": ["e"], "outputs": ["s"], "attributes": red},
                  {"name": "div", "op": "Div", "inputs": ["e", "s"], "outputs": ["y"]}]})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--cols", type=int, default=16777216)
    ap.add_argument("--out", default=str(HERE / "results" / "loops.md"))
    a = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    hw = load_hardware("nvidia-h100")
    g = softmax_graph(a.rows, a.cols, True)
    op = softmax_graph(a.rows, a.cols, False)
    nx = a.rows * a.cols * 4
    cache = tempfile.mkdtemp(prefix="sf_loops_")
    t = time.monotonic()
    cover = solve_report(g, hw, workers=1, covering=True).plan
    part = solve_report(g, hw, workers=1).plan
    solve_s = time.monotonic() - t
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.rows, a.cols), dtype=np.float32)
    feeds = {"x": x}
    # 1. counted bytes of the looped kernel's instrumented build vs the cost model
    counted = compile_plan(cover, g, counters=True, cache_dir=cache)
    y_counted = counted.run(feeds, {})["y"]
    counts = counted.counters
    del counted
    # 2. numerics vs ONNX Runtime (decomposed graph and the Softmax op)
    fast = compile_plan(cover, g, threads=a.threads, cache_dir=cache)
    partition = compile_plan(part, g, threads=a.threads, cache_dir=cache)
    y = fast.run(feeds, {})["y"]
    sess_dec, sess_op = bench.ort_session(g, {}, a.threads), bench.ort_session(op, {}, a.threads)
    ref_dec = sess_dec.run(None, feeds)[0]
    ref_op = sess_op.run(None, feeds)[0]
    err = {"ORT (5 ops)": float(np.max(np.abs(y - ref_dec))), "ORT (Softmax op)": float(np.max(np.abs(y - ref_op))),
           "instrumented build": float(np.max(np.abs(y_counted - ref_op)))}
    scale = float(np.max(np.abs(ref_op)))
    # 3. interleaved timing
    runners = {"C looped (covering plan, 1 kernel, 3 passes)": bench.c_runner(fast, feeds, {}),
               f"C partition plan ({len(part.groups)} kernels)": bench.c_runner(partition, feeds, {}),
               "ONNX Runtime, 5 ops": bench.ort_runner(sess_dec, feeds),
               "ONNX Runtime, Softmax op": bench.ort_runner(sess_op, feeds)}
    times = bench.time_side_by_side(runners, a.rounds)
    med = {k: statistics.median(v) for k, v in times.items()}
    m = machine.describe()
    read = sum(c["read_bytes"] for c in counts)
    written = sum(c["written_bytes"] for c in counts)
    lines = [
        "# Looped kernels: the softmax over rows of 16M floats (issue 12)", "",
        f"`PYTHONPATH=. python benchmarks/softmax_loops.py --rounds {a.rounds} --threads {a.threads}` -- "
        f"X: [{a.rows}, {a.cols}] float32 (|X| = {nx:,} B), nvidia-h100 profile for planning.",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['compiler']}; {m['date_utc']}; load average "
        f"{load0:.2f} before, {os.getloadavg()[0]:.2f} after (a shared machine: times are noisy).", "",
        "## Plans and bytes", "",
        "| plan | kernels | passes | predicted B | x |X| | counted B (instrumented C) |",
        "|---|---:|---|---:|---:|---:|",
        f"| covering optimum ({cover.status}) | {len(cover.groups)} | {[grp.passes for grp in cover.groups]} | "
        f"{cover.traffic_bytes:,} | {cover.traffic_bytes / nx:.3f} | {read + written:,} "
        f"(read {read:,}, written {written:,}) |",
        f"| partition optimum ({part.status}) | {len(part.groups)} | {[grp.passes for grp in part.groups]} | "
        f"{part.traffic_bytes:,} | {part.traffic_bytes / nx:.3f} | |", "",
        f"Both solves: {solve_s:.1f} s. Per kernel, counted == predicted: "
        f"{all(c['read_bytes'] + c['written_bytes'] == grp.traffic_bytes for c, grp in zip(counts, cover.groups))}.", "",
        "## Numerics (max |difference| of the looped C's y)", "",
        "| against | max abs diff |", "|---|---:|"]
    lines += [f"| {k} | {v:.3g} |" for k, v in err.items()]
    lines += ["", f"(largest |y| = {scale:.3g})", "",
              f"## Time ({a.threads} thread(s), median of {a.rounds} interleaved rounds, warm buffers)", "",
              "| runner | median ms | all rounds ms | GB/s at the plan's bytes |", "|---|---:|---|---:|"]
    moved = {0: cover.traffic_bytes, 1: part.traffic_bytes, 2: part.traffic_bytes, 3: 2 * nx}
    for i, (k, v) in enumerate(med.items()):
        lines.append(f"| {k} | {v * 1e3:.1f} | {', '.join(f'{s * 1e3:.0f}' for s in times[k])} | "
                     f"{moved[i] / v / 1e9:.2f} |")
    lines += ["", "GB/s uses each runner's bytes as planned (ORT's 5 ops: the partition's bytes is a lower "
              "bound on what it moves; the Softmax op: 2 |X|, one read and one write)."]
    write_atomic(Path(a.out), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
