"""Time limits at scale: writes ``benchmarks/results/scale.md``.

    python benchmarks/scale.py                 # 3 runs per graph, --time-limit 10 (about 3 minutes)
    python benchmarks/scale.py --runs 5
    python benchmarks/scale.py --stages        # also time each hint baseline and the presolve alone
    python benchmarks/scale.py --phases --before /tmp/old   # CPU of the way to the first hint, vs older code

Overshoot: ``solverfuse plan --json --time-limit T`` as a subprocess on random DAGs of 1,000 /
5,000 / 20,000 ops (``zoo.synthetic_graph(n, seed=1)``) and a 20,000-op chain
(``zoo.elementwise_chain(64, 64, 20000)``): wall time from process start to exit minus T, the
status, the gap to the reported bound and the plan's reason (which hint it is, what was cut).
The load average is recorded before every run: on a shared machine the wall times say as much
about the neighbours as about solverfuse.

Stages (``--stages``): each greedy baseline and the presolve, in a subprocess of its own with a
time cap, on the 5,000- and 20,000-op random DAGs and the chain.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "benchmarks" / "results" / "scale.md"
GRAPHS = [("random DAG, 1,000 ops", "synthetic_graph(1000, seed=1)"),
          ("random DAG, 5,000 ops", "synthetic_graph(5000, seed=1)"),
          ("random DAG, 20,000 ops", "synthetic_graph(20000, seed=1)"),
          ("chain, 20,000 ops", "elementwise_chain(64, 64, 20000)")]
STAGES = ["unfused", "tvm", "xla", "guide", "inductor", "presolve"]
STAGE_SCRIPT = """
import sys, time
from solverfuse.sources import load_graph
from solverfuse.hardware import load_hardware
from solverfuse import greedy
from solverfuse.formulations.presolve import presolve
from solverfuse.solve import MAX_PART_OPS
g = load_graph(sys.argv[1]); hw = load_hardware("nvidia-h100"); g.index.desc
t = time.monotonic()
if sys.argv[2] == "presolve":
    presolve(g, hw, max_part=MAX_PART_OPS)
else:
    greedy.STRATEGIES[sys.argv[2]](g, hw)
print(time.monotonic() - t)
"""

#: The CPU seconds of what stands between the start and the first real hint at the parent, each
#: step after the one before in one process (as the worker child and the parent do them): the
#: child loads the graph, checks the every-op-alone plan, runs and checks the unfused and TVM
#: hints; the parent builds (validates) the hint's plan and writes its JSON.
PHASES = ["imports", "load", "check alone", "unfused + check", "tvm", "check tvm", "build plan", "plan JSON"]
PHASE_SCRIPT = """
import json, sys, time
c = time.process_time()
out = {}
def mark(name):
    global c
    out[name] = round(time.process_time() - c, 3)
    c = time.process_time()
import ortools.sat.python.cp_model
from solverfuse import cost, greedy
from solverfuse.hardware import load_hardware
from solverfuse.plans import build_plan, plan_to_json
from solverfuse.solve import best_hint
from solverfuse.sources import load_graph
mark("imports")
hw = load_hardware("nvidia-h100")
g = load_graph(sys.argv[1]); mark("load")
best = best_hint(g, hw, [[[v] for v in g.index.order]]); cost.plan_traffic(g, best); mark("check alone")
h = greedy.STRATEGIES["unfused"](g, hw); cost.plan_traffic(g, best_hint(g, hw, [best, h])); mark("unfused + check")
h = greedy.STRATEGIES["tvm"](g, hw); mark("tvm")
best = best_hint(g, hw, [best, h]); cost.plan_traffic(g, best); mark("check tvm")
p = build_plan(g, hw, best, strategy="optimal", status="feasible"); mark("build plan")
plan_to_json(p); mark("plan JSON")
print(json.dumps(out))
"""


def load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def env(root: Path = ROOT) -> dict:
    return dict(os.environ, PYTHONPATH=str(root))


def write_graphs(d: Path) -> list[tuple[str, Path]]:
    from solverfuse import zoo
    out = []
    for k, (name, expr) in enumerate(GRAPHS):
        path = d / f"g{k}.json"
        path.write_text(eval(f"zoo.{expr}").to_json())  # noqa: S307 -- our own table above
        out.append((name, path))
    return out


def overshoot(graphs, runs: int, time_limit: float) -> list[dict]:
    rows = []
    for name, path in graphs:
        for run in range(runs):
            before = load()
            start = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "solverfuse.cli", "plan", str(path), "--json",
                                "--time-limit", str(time_limit)], env=env(), capture_output=True, text=True)
            wall = time.monotonic() - start
            row = {"graph": name, "run": run + 1, "limit": time_limit, "wall": wall, "rc": r.returncode, "load": before}
            try:
                plan = json.loads(r.stdout)
                row.update(status=plan["status"], solve_seconds=plan["solve_seconds"], reason=plan.get("reason") or "",
                           traffic=plan["traffic_bytes"], groups=len(plan["groups"]),
                           ops=sum(len(g["nodes"]) for g in plan["groups"]), returned=returned(plan),
                           gap=(plan["traffic_bytes"] - plan["bound_bytes"]) / plan["traffic_bytes"]
                           if plan["traffic_bytes"] else 0.0)
            except (ValueError, KeyError):
                row.update(status="?", solve_seconds=float("nan"), traffic=0, gap=float("nan"), groups=0, ops=0,
                           returned="nothing (the command failed)",
                           reason=(r.stderr.strip().splitlines() or [""])[-1])
            rows.append(row)
            print(row, flush=True)
    return rows


def returned(plan: dict) -> str:
    """What the plan is, from its reason: the solver's (seeded with the best hint), the best
    greedy hint the parent held (named), or every op alone."""
    reason = plan.get("reason") or ""
    if "returned every op alone" in reason or all(len(g["nodes"]) == 1 for g in plan["groups"]):
        return "every op alone"
    if "returned the best greedy plan (" in reason:
        return "hint " + reason.split("returned the best greedy plan (", 1)[1].split(")", 1)[0]
    if "returned the best greedy plan" in reason:
        return "a greedy hint"
    return "the solver's plan"


def stages(graphs, cap: float, root: Path = ROOT, label: str = "this tree") -> list[dict]:
    rows = []
    for name, path in graphs:
        if name.startswith("random DAG, 1,000"):
            continue
        row = {"graph": name, "code": label, "load": load()}
        for stage in STAGES:
            try:
                r = subprocess.run([sys.executable, "-c", STAGE_SCRIPT, str(path), stage], env=env(root),
                                   capture_output=True, text=True, timeout=cap, cwd=root)
                row[stage] = f"{float(r.stdout.strip().splitlines()[-1]):.2f}" if r.returncode == 0 else "error"
            except subprocess.TimeoutExpired:
                row[stage] = f"> {cap:g} (incl. load)"
            print(name, stage, row[stage], flush=True)
        rows.append(row)
    return rows


def phases(graphs, root: Path = ROOT, label: str = "this tree") -> list[dict]:
    rows = []
    for name, path in graphs:
        if not name.endswith("20,000 ops"):
            continue
        r = subprocess.run([sys.executable, "-c", PHASE_SCRIPT, str(path)], env=env(root), capture_output=True,
                           text=True, cwd=root)
        try:
            row = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            row = {}
        row.update(graph=name, code=label, loadavg=load())
        print(row, flush=True)
        rows.append(row)
    return rows


def markdown(rows: list[dict], stage_rows: list[dict], runs: int, seconds: float,
             phase_rows: Optional[list[dict]] = None) -> str:
    lines = ["# Time limits at scale", "",
             f"Written by `benchmarks/scale.py --runs {runs}` in {seconds:.0f} s on {os.cpu_count()} cores "
             f"({platform.processor() or platform.machine()}, Python {platform.python_version()}). The machine "
             "is shared with other sessions (the load average before each run is in the table): wall times "
             "include their noise.", "",
             "## `solverfuse plan --time-limit 10` (whole process: start, imports, load, hints, solve, validation, exit)", "",
             "| graph | run | load avg | wall s | overshoot s | solve_seconds | status | returned | groups | traffic B | gap | reason |",
             "|---|---:|---|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['run']} | {r['load']} | {r['wall']:.1f} | {r['wall'] - r['limit']:+.1f} | "
                     f"{r['solve_seconds']:.1f} | {r['status']} | {r['returned']} | {r['groups']:,} | {r['traffic']:,} | "
                     f"{100 * r['gap']:.1f}% | {r['reason']} |")
    lines += ["", "Worst overshoot per graph (and the load average before that run):", ""]
    for name in dict.fromkeys(r["graph"] for r in rows):
        mine = [r for r in rows if r["graph"] == name]
        worst = max(mine, key=lambda r: r["wall"] - r["limit"])
        alone = sum(r["returned"] == "every op alone" for r in mine)
        lines.append(f"* {name}: {worst['wall'] - worst['limit']:+.1f} s (load {worst['load'].split()[0]}); "
                     f"every op alone in {alone} of {len(mine)} runs")
    lines += ["", "Overshoot = wall time of the whole process minus the limit. The stated bound: the limit "
              "counts from the process's entry; the parent stops the solver worker at the limit + "
              "`worker.GRACE` (1 s) and returns the best validated plan it holds, waiting at most "
              "`worker.FALLBACK_WAIT` (1 s) more for the validation of a newer hint; then the plan is "
              "printed and the process exits. What is outside the bound: interpreter start-up before "
              "`main()` runs, and, on a loaded machine, the validation of the first fallback (every "
              "op alone) when no hint was ready.", ""]
    if phase_rows:
        lines += ["## The way to the first real hint at 20,000 ops (CPU seconds, one process)", "",
                  "Each step after the one before, as the worker child (load, check the every-op-alone "
                  "plan, the unfused and TVM hints and their checks) and the parent (build and validate "
                  "the hint's plan, write its JSON) do them; CPU seconds, so the load matters less than "
                  "in the wall times above (it still slows a shared core's caches).", "",
                  "| graph | code | load avg | " + " | ".join(PHASES) + " | total |",
                  "|---|---|---|" + "---:|" * (len(PHASES) + 1)]
        for r in phase_rows:
            cells = [f"{r[p]:.2f}" if p in r else "?" for p in PHASES]
            total = sum(r.get(p, 0.0) for p in PHASES)
            lines.append(f"| {r['graph']} | {r['code']} | {r['loadavg']} | " + " | ".join(cells) + f" | {total:.2f} |")
        lines.append("")
    if stage_rows:
        lines += ["## Stages alone (seconds; each in a fresh process, graph load excluded)", "",
                  "| graph | code | load avg | " + " | ".join(STAGES) + " |", "|---|---|---|" + "---:|" * len(STAGES)]
        for r in stage_rows:
            lines.append(f"| {r['graph']} | {r['code']} | {r['load']} | " + " | ".join(r[s] for s in STAGES) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--stages", action="store_true", help="also time the baselines and the presolve alone")
    ap.add_argument("--stage-cap", type=float, default=60.0, help="seconds per stage before it is cut")
    ap.add_argument("--before", type=Path, help="a checkout of older code whose stages (and phases) are timed too")
    ap.add_argument("--phases", action="store_true", help="also time the way to the first real hint at 20k ops")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        graphs = write_graphs(Path(d))
        rows = overshoot(graphs, args.runs, args.time_limit)
        stage_rows = stages(graphs, args.stage_cap) if args.stages else []
        if args.stages and args.before:
            stage_rows += stages(graphs, args.stage_cap, args.before, f"before ({args.before.name})")
        phase_rows = []
        if args.phases:
            for i in range(2):  # this tree and the older one alternately: both see the same load
                phase_rows += phases(graphs[2 + i:3 + i])
                if args.before:
                    phase_rows += phases(graphs[2 + i:3 + i], args.before, f"before ({args.before.name})")
    text = markdown(rows, stage_rows, args.runs, time.monotonic() - start, phase_rows)
    from solverfuse.files import write_atomic
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
