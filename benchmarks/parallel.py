"""Parts in parallel: writes ``benchmarks/results/parallel.md``.

    python benchmarks/parallel.py                    # DenseNet-121, Inception-v2 (light), random DAGs of 1k / 5k ops
    python benchmarks/parallel.py --time-limit 60 --jobs 4

For each graph, :func:`solverfuse.solve.solve_report` runs three times, each in a process of its
own (the greedy hints computed first, not timed): sequentially with one CP-SAT worker, sequentially with
``--jobs`` CP-SAT workers (the same threads as the parallel run), and with the parts and windows
in ``--jobs`` worker processes of one CP-SAT worker each (:mod:`solverfuse.distribute`). Wall
time of the solve (the hints excluded), status, traffic and bound; "same plan" compares the
parallel plan's groups with the one-worker sequential plan's (same seed, same worker count per
model). The load average is recorded before every run: on a shared machine the wall times say as
much about the neighbours as about solverfuse.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "benchmarks" / "results" / "parallel.md"


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def graphs(names: list[str]):
    import onnx

    from solverfuse import zoo
    from solverfuse.sources import load_graph
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    for name in names:
        if name.isdigit():
            yield f"random DAG, {int(name):,} ops", zoo.synthetic_graph(int(name), seed=1)
        elif (light / f"light_{name}.onnx").exists():
            yield f"{name} (light ONNX)", load_graph(light / f"light_{name}.onnx")


RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from solverfuse import distribute, greedy
from solverfuse.hardware import load_hardware
from solverfuse.solve import solve_report
from benchmarks.parallel import graphs
jobs, workers, limit = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
if jobs > 1:
    distribute.prestart()  # the workers' interpreter starts while the hints run, as in `plan`
hw = load_hardware("nvidia-h100")
(_, g), = graphs([sys.argv[2]])
hints = [make(g, hw) for make in greedy.STRATEGIES.values()]
t = time.monotonic()
r = solve_report(g, hw, time_limit=limit, workers=workers, seed=0, hints=hints, jobs=jobs)
print(json.dumps({"seconds": time.monotonic() - t, "parts": r.parts, "status": r.plan.status, "ops": len(g.nodes),
                  "traffic": r.plan.traffic_bytes, "bound": r.plan.bound_bytes, "reason": r.plan.reason,
                  "groups": [grp.nodes for grp in r.plan.groups]}))
"""


def run_one(name: str, jobs: int, workers: int, limit: float) -> dict:
    """One solve in a subprocess of its own (a CP-SAT abort costs only its row)."""
    p = subprocess.run([sys.executable, "-c", RUN, str(ROOT), name, str(jobs), str(workers), str(limit)],
                       capture_output=True, text=True, timeout=limit + 300)
    if p.returncode != 0:
        native = next((ln for ln in p.stderr.splitlines() if "Check failed" in ln), p.stderr.strip()[-200:])
        return {"error": f"died (exit {p.returncode}): {native.strip()}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--graphs", nargs="*", default=["densenet121", "inception_v2", "1000", "5000"])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    from benchmarks.report import write_results
    runs = [("sequential, 1 worker", 1, 1), (f"sequential, {args.jobs} workers", 1, args.jobs),
            (f"{args.jobs} processes x 1 worker", args.jobs, args.jobs)]
    lines = ["# Parts in parallel (`benchmarks/parallel.py`)", "",
             f"`solve_report(time_limit={args.time_limit:g}, seed=0)` with every greedy baseline as hint, each run "
             f"in a process of its own, on {platform.machine()} with {os.cpu_count()} cores (shared: load average "
             "before each run in the last column). Seconds of the solve only (the hints are computed first; the "
             "parallel run's worker interpreter starts meanwhile, as in `plan`). *Same plan*: the groups equal "
             "the one-worker sequential plan's.", "",
             "| graph | ops | parts | run | seconds | status | traffic (B) | bound (B) | same plan | load |",
             "|---|---:|---:|---|---:|---|---:|---:|---|---|"]
    titles = {name: title for name in args.graphs for title, _ in graphs([name])}
    for name in args.graphs:
        base = None
        for label, jobs, workers in runs:
            before = load()
            r = run_one(name, jobs, workers, args.time_limit)
            if "error" in r:
                row = f"| {titles[name]} | | | {label} | | {r['error']} | | | | {before} |"
            else:
                if base is None:
                    base, same = r, "-"
                else:
                    same = ("yes" if r["groups"] == base["groups"] else
                            "traffic equal" if r["traffic"] == base["traffic"] else "no")
                row = (f"| {titles[name]} | {r['ops']:,} | {r['parts']} | {label} | {r['seconds']:.1f} | "
                       f"{r['status']} | {r['traffic']:,} | {r['bound']:,} | {same} | {before} |")
            print(row, flush=True)
            lines.append(row)
    loads = [float(x) for x in load().split()[:1] if x != "?"]
    if loads and loads[0] > (os.cpu_count() or 1):
        lines += ["", f"The machine was oversubscribed (load {loads[0]:.1f} on {os.cpu_count()} cores at the end): "
                  "parallel processes then compete with the neighbours for the same cores, and their start-up "
                  "(a worker interpreter, the graph sent to each worker) is not repaid; the rows say what the "
                  "parallel path costs here and that its plans are the same, not what it gains on idle cores."]
    lines += ["", "Parts and windows are independent, so the parallel plan is the sequential one wherever "
              "every part is proven optimal within its share; where a window or part runs out of time the "
              "plans may differ (each is still legal, and never worse than the best hint)."]
    write_results(args.out, lines)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
