"""Partition-optimal vs covering-optimal (recomputation + looped reductions) traffic and solve time
on the ONNX "light" models, the example graphs and the softmax of issue 12.

Usage: ``python benchmarks/recompute.py [OUT.md] [--time-limit S]`` (default
``benchmarks/results/recomp.md``, 10 s per solve). Both plans come from ``solve.solve_report`` in
this process with 2 CP-SAT workers; wall seconds include presolve and model building. The machine
is shared: its load average is written beside the table.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import onnx

from solverfuse.files import write_atomic
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse.solve import solve_report

ROOT = Path(__file__).resolve().parent.parent
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SOFTMAX = {
    "name": "softmax-2x16M", "tensors": {"x": {"shape": [2, 16777216]}}, "inputs": ["x"], "outputs": ["y"],
    "nodes": [{"name": "max", "op": "ReduceMax", "inputs": ["x"], "outputs": ["m"], "attributes": {"axes": [1], "keepdims": 1}},
              {"name": "sub", "op": "Sub", "inputs": ["x", "m"], "outputs": ["d"]},
              {"name": "exp", "op": "Exp", "inputs": ["d"], "outputs": ["e"]},
              {"name": "sum", "op": "ReduceSum", "inputs": ["e"], "outputs": ["s"], "attributes": {"axes": [1], "keepdims": 1}},
              {"name": "div", "op": "Div", "inputs": ["e", "s"], "outputs": ["y"]}]}


def graphs():
    yield "softmax [2, 16M] (issue 12)", load_graph(SOFTMAX)
    for path in sorted((ROOT / "examples").glob("*.json")):
        yield f"examples/{path.name}", load_graph(path)
    for path in sorted(LIGHT.glob("light_*.onnx")):
        yield path.stem[len("light_"):], load_graph(path)


def main(argv: list[str]) -> None:
    limit = 10.0
    if "--time-limit" in argv:
        i = argv.index("--time-limit")
        limit = float(argv[i + 1])
        del argv[i:i + 2]
    out = Path(argv[0]) if argv else ROOT / "benchmarks" / "results" / "recomp.md"
    hw = load_hardware("nvidia-h100")
    rows = ["| graph | ops | partition B | status | s | covering B | status | bound B | s | kernels (recomputed ops, looped) |",
            "|---|---:|---:|---|---:|---:|---|---:|---:|---|"]
    for name, g in graphs():
        t = time.monotonic()
        p = solve_report(g, hw, time_limit=limit, workers=2).plan
        tp = time.monotonic() - t
        t = time.monotonic()
        c = solve_report(g, hw, time_limit=limit, workers=2, covering=True).plan
        tc = time.monotonic() - t
        seen: dict[str, int] = {}
        for grp in c.groups:
            for v in grp.nodes:
                seen[v] = seen.get(v, 0) + 1
        dup = sum(1 for n in seen.values() if n > 1)
        loops = sum(1 for grp in c.groups if grp.passes > 1)
        rows.append(f"| {name} | {len(g.nodes)} | {p.traffic_bytes:,} | {p.status} | {tp:.2f} | "
                    f"{c.traffic_bytes:,} | {c.status} | {c.bound_bytes:,} | {tc:.2f} | "
                    f"{len(c.groups)} ({dup}, {loops}) |")
        print(rows[-1], flush=True)
    text = ["# Recomputation and looped reductions: partition vs covering optimum", "",
            f"`python benchmarks/recompute.py` -- nvidia-h100 profile, time limit {limit:g} s per solve, "
            "2 CP-SAT workers; the covering solve includes its partition stage (half the limit).",
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average before/after "
            f"{LOAD[0]} / {os.getloadavg()[0]:.2f} (a shared machine: solve times are noisy).", ""] + rows
    write_atomic(out, "\n".join(text) + "\n")


LOAD = [f"{os.getloadavg()[0]:.2f}"]

if __name__ == "__main__":
    main(sys.argv[1:])
