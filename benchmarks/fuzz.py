"""Long fuzz runs and the time-limit overshoot: writes ``benchmarks/results/fuzz.md``.

    python benchmarks/fuzz.py                 # 200 cases per class, overshoot on 1k/5k/20k ops
    python benchmarks/fuzz.py --cases 2000    # longer
    python benchmarks/fuzz.py --no-overshoot  # fuzz only

Fuzz: the malformed-input cases of ``tests/fuzzing.py`` (one mutation of a valid graph, plan or
hardware profile), drawn with a seeded ``random.Random``, through the library and the CLI
commands (in-process, Typer's CliRunner). Every case must end in success or exit 2 with one
``error:`` line, no traceback, no file left behind; anything else is counted as a failure and its
first line recorded. Counts per class (document x mutation) and outcome.

Overshoot: ``solverfuse plan --time-limit T`` as a subprocess on random DAGs of 1,000 / 5,000 /
20,000 ops and a 20,000-op chain, wall time from process start to exit minus T, with the status
and the reason the plan reports.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from typer.testing import CliRunner  # noqa: E402

from tests.fuzzing import (GRAPH, MUTATIONS, SPECIAL, check_cli, check_library, files_in,  # noqa: E402
                           mutate, valid_hardware, valid_plan)

OUT = ROOT / "benchmarks" / "results" / "fuzz.md"


def _value(rng: random.Random):
    if rng.random() < 0.6:
        return rng.choice(SPECIAL)
    return rng.choice([rng.randint(-10**6, 10**6), rng.random() * 1e6 - 5e5, "".join(
        rng.choice("ab\u00e9\u4e2d\\\"'{}[]/*#") for _ in range(rng.randint(0, 12))),
        [rng.randint(-3, 3) for _ in range(rng.randint(0, 4))]])


def fuzz(cases: int, seed: int) -> tuple[dict, list[str]]:
    """Run ``cases`` cases per document class; (counts[(doc, mutation, target)][outcome], failures)."""
    import solverfuse
    from solverfuse.cli import app
    from solverfuse.hardware import load_hardware
    from solverfuse.plans import load_plan
    runner = CliRunner()
    rng = random.Random(seed)
    counts: dict = collections.defaultdict(collections.Counter)
    failures: list[str] = []
    docs = {"graph": GRAPH, "plan": valid_plan(), "hardware": valid_hardware()}
    graph_text = json.dumps(GRAPH).encode()

    def record(key, fn):
        try:
            counts[key][fn()] += 1
        except AssertionError as e:
            counts[key]["FAIL"] += 1
            failures.append(f"{key}: {str(e).splitlines()[0][:200] if str(e) else 'assertion'}")
        except Exception as e:  # noqa: BLE001 -- an escaped exception is a finding, not a crash
            counts[key]["FAIL"] += 1
            failures.append(f"{key}: escaped {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")

    for kind in docs:
        for i in range(cases):
            mutation = rng.choice(MUTATIONS)
            data = mutate(docs[kind], mutation, rng.randrange(10_000), _value(rng))
            with tempfile.TemporaryDirectory() as d:
                d = Path(d)
                path = d / f"{kind}.json"
                path.write_bytes(data)
                out = d / "out"
                out.mkdir()

                def cli(args):
                    before = files_in(out)
                    return lambda: check_cli(runner.invoke(app, [a.replace("@OUT", str(out)) for a in args]), out, before)

                if kind == "graph":
                    record((kind, mutation, "library plan"), lambda: check_library(
                        solverfuse.plan, str(path), "nvidia-h100", strategy="tvm"))
                    record((kind, mutation, "inspect"), cli(["inspect", str(path)]))
                    if i % 5 == 0:
                        record((kind, mutation, "plan"), cli(["plan", str(path), "--time-limit", "1",
                                                             "--workers", "1", "-o", "@OUT/p.json"]))
                    if i % 25 == 0:
                        record((kind, mutation, "run"), cli(["run", str(path), "--strategy", "tvm",
                                                            "-o", "@OUT/o.npz"]))
                        record((kind, mutation, "compare"), cli(["compare", str(path), "--time-limit", "1",
                                                                "--workers", "1", "--plans", "@OUT"]))
                elif kind == "plan":
                    record((kind, mutation, "library load_plan"), lambda: check_library(load_plan, path))
                    record((kind, mutation, "explain"), cli(["explain", str(path)]))
                    if i % 4 == 0:
                        record((kind, mutation, "emit"), cli(["emit", str(path), "-o", "@OUT/c"]))
                    if i % 10 == 0:
                        record((kind, mutation, "show"), cli(["show", str(path), "-o", "@OUT/p.svg"]))
                else:
                    record((kind, mutation, "library load_hardware"), lambda: check_library(load_hardware, str(path)))
                    record((kind, mutation, "hardware show"), cli(["hardware", "show", str(path)]))
                    if i % 5 == 0:
                        g = d / "g.json"
                        g.write_bytes(graph_text)
                        record((kind, mutation, "plan"), cli(["plan", str(g), "--hardware", str(path),
                                                             "--time-limit", "1", "--workers", "1"]))
    return counts, failures


def overshoot(time_limit: float) -> list[dict]:
    """Wall time of ``solverfuse plan`` subprocesses against the time limit."""
    from solverfuse import zoo
    rows = []
    graphs = [("random DAG, 1,000 ops", lambda: zoo.synthetic_graph(1000, seed=1)),
              ("random DAG, 5,000 ops", lambda: zoo.synthetic_graph(5000, seed=1)),
              ("random DAG, 20,000 ops", lambda: zoo.synthetic_graph(20000, seed=1)),
              ("chain, 20,000 ops", lambda: zoo.elementwise_chain(64, 64, 20000))]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        for name, make in graphs:
            path = Path(d) / "g.json"
            path.write_text(make().to_json())
            start = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "solverfuse.cli", "plan", str(path), "--json",
                                "--time-limit", str(time_limit)], env=env, capture_output=True, text=True)
            wall = time.monotonic() - start
            row = {"graph": name, "limit": time_limit, "wall": wall, "rc": r.returncode}
            try:
                plan = json.loads(r.stdout)
                row.update(status=plan["status"], solve_seconds=plan["solve_seconds"],
                           reason=plan.get("reason") or "", gap=(plan["traffic_bytes"] - plan["bound_bytes"])
                           / plan["traffic_bytes"] if plan["traffic_bytes"] else 0.0)
            except (ValueError, KeyError):
                row.update(status="?", solve_seconds=float("nan"), reason=(r.stderr.strip().splitlines() or [""])[-1],
                           gap=float("nan"))
            rows.append(row)
            print(row, flush=True)
    return rows


def markdown(counts: dict, failures: list[str], rows: list[dict], cases: int, seed: int, seconds: float) -> str:
    lines = ["# Fuzz counts and time-limit overshoot", "",
             f"Written by `benchmarks/fuzz.py --cases {cases} --seed {seed}` in {seconds:.0f} s on "
             f"{os.cpu_count()} cores (a shared machine: wall times are noisy).", "",
             "## Fuzz: one mutation of a valid document, through the library and every command", "",
             "`ok` = success (the input was still valid, or became a valid variant), `error` = exit 2 "
             "with one `error:` line / one-line SolverfuseError and no file left behind, `FAIL` = "
             "anything else (traceback, escaped exception, several lines, file left, internal error).", "",
             "| document | target | mutation | cases | ok | error | FAIL |", "|---|---|---|---:|---:|---:|---:|"]
    total = collections.Counter()
    for (doc, mutation, target), c in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        n = sum(c.values())
        total.update(c)
        lines.append(f"| {doc} | {target} | {mutation} | {n} | {c['ok']} | {c['error']} | {c['FAIL']} |")
    lines += ["", f"Total: {sum(total.values())} runs, {total['ok']} ok, {total['error']} one-line errors, "
              f"{total['FAIL']} failures.", ""]
    if failures:
        lines += ["Failures (first 30):", ""] + [f"- {f}" for f in failures[:30]] + [""]
    if rows:
        lines += ["## Time-limit overshoot of `solverfuse plan` (whole process, load included)", "",
                  "| graph | --time-limit | wall s | overshoot s | solve_seconds | status | gap | reason |",
                  "|---|---:|---:|---:|---:|---|---:|---|"]
        for r in rows:
            lines.append(f"| {r['graph']} | {r['limit']:g} | {r['wall']:.1f} | {r['wall'] - r['limit']:+.1f} | "
                         f"{r['solve_seconds']:.1f} | {r['status']} | {100 * r['gap']:.1f}% | {r['reason']} |")
        lines += ["", "Overshoot = wall time of the whole process (Python start, imports, JSON load, "
                  "hints, solve, validation, exit) minus the limit. The stated bound: "
                  "`--time-limit` + `worker.GRACE` (1 s) + validating the fallback plan when the worker "
                  "had to be stopped (done in the background while waiting) + interpreter start-up.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200, help="cases per document class")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--no-overshoot", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    start = time.monotonic()
    counts, failures = fuzz(args.cases, args.seed)
    rows = [] if args.no_overshoot else overshoot(args.time_limit)
    text = markdown(counts, failures, rows, args.cases, args.seed, time.monotonic() - start)
    from solverfuse.files import write_atomic
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
