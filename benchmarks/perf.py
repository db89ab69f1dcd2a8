"""Time to prove the optimum of every light model (tests/data/models), 2 workers: writes
benchmarks/results/perf.md. ``--batch 0`` measures CP-SAT's default interleave batch (the tree
before the fix), the default one task per worker.

    PYTHONPATH=$PWD python benchmarks/perf.py [--batch N] [--limit S] [--only a,b] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from solverfuse import solve
from solverfuse.onnx_import import import_onnx

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "data" / "models"


def measure(name: str, limit: float, workers: int) -> dict:
    """Import one model and solve it; seconds, status and the solver's shape."""
    graph = import_onnx(str(MODELS / f"{name}.onnx"))
    start = time.monotonic()
    report = solve.solve_report(graph, "nvidia-h100", time_limit=limit, workers=workers)
    seconds = time.monotonic() - start
    plan = report.plan
    return {"model": name, "ops": len(graph.nodes), "seconds": round(seconds, 2), "status": plan.status,
            "traffic": plan.traffic_bytes, "bound": plan.bound_bytes, "parts": report.parts,
            "largest": report.largest_part, "formulations": report.formulations}


def render(paths: list[str], out: Path) -> None:
    """benchmarks/results/perf.md from JSON-lines files of :func:`measure` rows (one column set per
    batch setting; a model missing from a file shows ``-``)."""
    runs: dict[str, dict[str, dict]] = {}
    for path in paths:
        for line in open(path):
            row = json.loads(line)
            runs.setdefault(str(row["batch"]), {})[row["model"]] = row
    keys = sorted(runs, key=lambda k: (k != "default", k))
    models = sorted({m for r in runs.values() for m in r})
    head = "| model | ops | largest part | formulations | " + " | ".join(
        f"s (batch {k}) | status (batch {k})" for k in keys) + " | traffic B |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for m in models:
        any_row = next(r[m] for r in runs.values() if m in r)
        forms = ", ".join(f"{k} {v}" for k, v in sorted(any_row["formulations"].items()))
        cells = []
        for k in keys:
            row = runs[k].get(m)
            cells += [f"{row['seconds']:.2f} (load {row['load']})", row["status"]] if row else ["-", "-"]
        lines.append(f"| {m} | {any_row['ops']} | {any_row['largest']} | {forms} | " + " | ".join(cells)
                     + f" | {any_row['traffic']:,} |")
    out.write_text(HEADER + "\n".join(lines) + "\n")


HEADER = """# Proving the optimum of the light models (benchmarks/perf.py)

`solve_report(graph, "nvidia-h100", workers=2)` on every model of `tests/data/models`; seconds are
wall time of planning (import excluded) on the shared 2-core machine, with its 1-minute load average
when the row finished (7 helpers share it: times are inflated and noisy). *batch default* = CP-SAT's
own `interleave_batch_size` (the tree before this change), *batch 2* = one task per worker.

"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=None, help="interleave batch size (0 = CP-SAT default)")
    ap.add_argument("--limit", type=float, default=120.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--render", nargs="*", help="only write results/perf.md from these JSON-lines files")
    args = ap.parse_args()
    if args.render:
        render(args.render, ROOT / "benchmarks" / "results" / "perf.md")
        return
    solve.INTERLEAVE_BATCH = args.batch
    names = args.only.split(",") if args.only else sorted(p.stem for p in MODELS.glob("*.onnx"))
    rows = []
    for name in names:
        row = measure(name, args.limit, args.workers)
        row["batch"] = "default" if args.batch == 0 else (args.batch or args.workers)
        row["load"] = round(os.getloadavg()[0], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
