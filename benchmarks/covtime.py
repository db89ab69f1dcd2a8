"""Covering plans under both objectives: the traffic covering (``solve_report(covering=True)``)
against the time covering (``time_objective.solve_covering_time_report``: ``--recompute
--objective time``) on the runtime motifs (``solverfuse.zoo.MOTIFS``, default sizes) and the
exported model set (``tests/data/models/*.onnx``).

The time covering is given the traffic covering (``traffic_plan``: its kernels hint the time
model and its proven traffic bound feeds the time floor) and its own ``--time-limit`` for the
remaining stages (time partition, time covering). Per graph: each plan's predicted time (``cost.covering_time_ps``), traffic, status and solve wall
time, and the time plan's proven bound and gap. Predictions only (nothing is compiled or run), on
one profile (default ``nvidia-h100``: a 3 us launch makes kernel count matter). One CP-SAT worker,
``--time-limit`` seconds per solve; the machine is shared, its load average is written beside the
table.

    PYTHONPATH=. python benchmarks/covtime.py [--time-limit 1.5] [--hardware nvidia-h100] [OUT.md]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from solverfuse import cost, zoo  # noqa: E402
from solverfuse.files import write_atomic  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.plans import plan_kernels  # noqa: E402
from solverfuse.solve import solve_report  # noqa: E402
from solverfuse.sources import load_graph  # noqa: E402
from solverfuse.time_objective import solve_covering_time_report  # noqa: E402

MODELS = HERE.parent / "tests" / "data" / "models"


def graphs(hw):
    for name, make in zoo.MOTIFS.items():
        yield "motif", name, (make(4096, hardware=hw) if name == "l1_overflow" else make())
    for path in sorted(MODELS.glob("*.onnx")):
        yield "model", path.stem, load_graph(path)


def row(kind: str, name: str, g, hw, limit: float) -> tuple[str, float, str]:
    start = time.monotonic()
    tp = solve_report(g, hw, time_limit=limit, workers=1, covering=True).plan
    t_secs = time.monotonic() - start
    start = time.monotonic()
    rep = solve_covering_time_report(g, hw, time_limit=limit, workers=1, traffic_plan=tp)
    c_secs = time.monotonic() - start
    tp_ps = cost.covering_time_ps(g, plan_kernels(tp), hw)
    cp = rep.plan
    return (f"| {kind} | {name} | {len(g.nodes)} | {tp_ps / 1e6:,.2f} | {rep.time_ps / 1e6:,.2f} | "
            f"{rep.time_ps / tp_ps:.3f} | {100 * rep.gap:.1f} | {tp.traffic_bytes:,} | {cp.traffic_bytes:,} | "
            f"{len(tp.groups)} / {len(cp.groups)} | {tp.status} / {cp.status} | {t_secs:.1f} / {c_secs:.1f} |",
            rep.time_ps / tp_ps, cp.status)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=str(HERE / "results" / "covtime.md"))
    ap.add_argument("--time-limit", type=float, default=1.5)
    ap.add_argument("--hardware", default="nvidia-h100")
    args = ap.parse_args(argv)
    hw = load_hardware(args.hardware)
    lines = ["# Covering plans: traffic objective vs time objective (`benchmarks/covtime.py`)", "",
             f"Profile `{hw.name}`; {args.time_limit:g} s per solve, 1 CP-SAT worker; load average "
             f"{os.getloadavg()[0]:.1f} at start (2 shared cores). Times are predictions "
             "(`cost.covering_time_ps`, us), not measurements. `ratio` = time plan / traffic plan "
             "(never above 1: the time covering is hinted with the traffic covering); `gap` = the time "
             "plan's (time - proven bound) / time. Pairs are traffic / time.", "",
             "| kind | graph | ops | traffic plan us | time plan us | ratio | gap % | traffic plan B | "
             "time plan B | kernels | status | solve s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    began = time.monotonic()
    ratios, proven = [], 0
    for kind, name, g in graphs(hw):
        text, ratio, status = row(kind, name, g, hw, args.time_limit)
        lines.append(text)
        ratios.append(ratio)
        proven += status == "optimal"
        print(text, flush=True)
    ratios.sort()
    lines += ["", f"The time covering is faster than the traffic covering on {sum(r < 1 for r in ratios)} of "
              f"{len(ratios)} graphs (least ratio {ratios[0]:.3f}, median {ratios[len(ratios) // 2]:.3f}), slower "
              f"on {sum(r > 1 for r in ratios)}; proven time-optimal on {proven}.",
              "", f"Total wall time {time.monotonic() - began:.0f} s; load average {os.getloadavg()[0]:.1f} at the end."]
    write_atomic(Path(args.out), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
