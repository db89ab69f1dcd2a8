"""Thread scaling of the emitted C with one parallel region per run (``render(team=True)``, the
default: :mod:`solverfuse.emit.team`) against one region per parallel loop (``team=False``, the
code before), side by side with ONNX Runtime at the same thread count and, with ``--before DIR``
(a checkout of the base commit), the C that tree's emitter writes for the same plan -- all in one
interleaved run.

Every case is the optimal plan of one ONNX light model; at 1 thread both variants are the same
C (no region), so it is timed once. Reports the fastest round of each (other jobs of a shared
machine only add time) and the 1-thread / 2-thread time ratio of each runtime. At 1 thread the
time is the calling thread's CPU time (both runtimes compute on it; a loaded machine's other jobs
do not count), at 2 threads wall time. Workers sleep
between runs (``OMP_WAIT_POLICY=passive``, ORT not spinning): see emit_speed.py.

    PYTHONPATH=. python benchmarks/omp_speed.py [--cases light:squeezenet,...] [--rounds 9]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))

import run as bench  # noqa: E402  (benchmarks/run.py: ORT runner, interleaving)
from emit_speed import BEFORE, HW, OldProgram  # noqa: E402
from run import ort_session  # noqa: E402
from gemm_speed import cpu_warm  # noqa: E402
from emit_speed_cases import make_graph  # noqa: E402

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import Program, build  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.emit.program import buffer_table, render  # noqa: E402
from solverfuse.plans import save_plan  # noqa: E402

CASES = ["light:squeezenet", "light:shufflenet", "light:densenet121", "light:inception_v1", "light:resnet50"]


MICRO = r"""
#include <stdio.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static float sink[64];
int main(void)
{
    const int n = 2000;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now();
        for (int i = 0; i < n; i++) {
            #pragma omp parallel for schedule(static) num_threads(2)
            for (int j = 0; j < 2; j++) sink[j * 16] += 1;
        }
        double t1 = now();
        #pragma omp parallel num_threads(2)
        for (int i = 0; i < n; i++) {
            #pragma omp for schedule(static) nowait
            for (int j = 0; j < 2; j++) sink[j * 16] += 1;
            (void)sf_sync(0);
        }
        printf("%.3f %.3f\n", 1e6 * (t1 - t0) / n, 1e6 * (now() - t1) / n);
    }
    return 0;
}
"""


def sync_cost(workdir: str) -> str:
    """Microseconds per 2-thread loop of 2 iterations: a ``#pragma omp parallel for`` region of
    its own (the code before) vs an ``omp for`` + ``sf_sync`` in one region (emit.team); the
    median of 7 repeats of 2000."""
    from solverfuse.emit.ctext import PRELUDE
    from solverfuse.emit.team import SYNC
    Path(workdir, "micro.c").write_text(PRELUDE.replace('#include "model.h"', "") + SYNC + MICRO)
    subprocess.run(["cc", "-O2", "-std=c11", "-fopenmp", "micro.c", "-o", "micro"], cwd=workdir, check=True)
    out = subprocess.run([str(Path(workdir, "micro"))], capture_output=True, text=True, check=True).stdout
    pairs = sorted(tuple(map(float, ln.split())) for ln in out.split("\n") if ln.strip())
    region = sorted(p[0] for p in pairs)[len(pairs) // 2]
    team = sorted(p[1] for p in pairs)[len(pairs) // 2]
    return (f"Per parallel loop (2 threads, 2 iterations, median of 7 x 2000): a region of its own "
            f"{region:.1f} us, an `omp for` + team barrier in one region {team:.1f} us.")


def regions(files: dict) -> int:
    """``#pragma omp parallel`` lines in the rendered C (regions written, not opened per run)."""
    return sum(t.count("#pragma omp parallel") for n, t in files.items() if n.endswith(".c"))


def before_program(spec: str, plan, threads: int, before: str, cache: str, x, cs) -> OldProgram:
    """The library the ``before`` tree's emitter builds for ``plan`` (emit_speed.BEFORE)."""
    with tempfile.TemporaryDirectory() as d:
        save_plan(plan, Path(d) / "plan.json")
        r = subprocess.run([sys.executable, "-c", BEFORE, spec, str(Path(d) / "plan.json"), str(threads), cache,
                            str(HERE)], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=before),
                           timeout=900, cwd=before)
        if r.returncode:
            raise RuntimeError(r.stderr.strip().splitlines()[-1])
        info = json.loads(r.stdout.strip().splitlines()[-1])
    return OldProgram(info["lib"], info["buffers"], x, cs)


def old_cpu_time(old: OldProgram) -> float:
    """CPU seconds of the calling thread in the second of two runs of a 'before' library."""
    secs = (ctypes.c_double * 2)()
    if old.lib.sf_time_cpu(old.ptrs, 2, secs):
        raise RuntimeError("before-program failed")
    return secs[1]


def time_case(spec: str, rounds: int, cache: str, before: str | None = None) -> list[dict]:
    """Rows (one per thread count) of fastest ms: ORT, team, regions, before."""
    g = make_graph(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
    table = buffer_table(plan, g)
    rows = []
    for threads in (1, 2):
        runners, row = {}, {"case": spec, "threads": threads, "groups": len(plan.groups)}
        cpu = threads == 1  # the calling thread's CPU time: what the run took, not the time other jobs held the core
        if before:
            old = before_program(spec, plan, threads, before, cache, x, cs)
            runners["before"] = old.time if not cpu else (lambda old=old: old_cpu_time(old))
        for name, team in (("team", True), ("regions", False)) if threads > 1 else (("team", True),):
            files = render(plan, g, threads=threads, team=team)
            row[name + "_regions"] = regions(files)
            prog = Program(plan, g, table, build(files, threads=threads, cache_dir=cache),
                           sanitize=False, counters=False, threads=threads)
            runners[name] = (lambda prog=prog: prog.time(x, cs, repeats=2, cpu=cpu)[1])
        sess = ort_session(g, cs, threads)
        runners["ort"] = cpu_warm(bench.ort_call(sess, x)) if cpu else bench.ort_runner(sess, x)
        for k, v in bench.time_side_by_side(runners, rounds).items():
            row[k + "_ms"] = 1e3 * min(v)
        if threads == 1:
            row["regions_ms"] = row["team_ms"]
        rows.append(row)
    return rows


def tables(rows: list[dict]) -> str:
    def ms(r, k):
        return f"{r[k]:.2f}" if k in r else "-"

    def ratio(r, k):
        return f"{r['team_ms'] / r[k]:.2f}" if k in r else "-"
    out = ["| case | threads | groups | regions in the C (team / per loop) | ORT ms | before ms | team ms | per-loop regions ms "
           "| team/ORT | team/before | team/per-loop |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reg = f"{r.get('team_regions', 0)} / {r.get('regions_regions', 0)}" if r["threads"] > 1 else "0 / 0"
        out.append(f"| {r['case']} | {r['threads']} | {r['groups']} | {reg} | {ms(r, 'ort_ms')} | {ms(r, 'before_ms')} "
                   f"| {ms(r, 'team_ms')} | {ms(r, 'regions_ms')} | {ratio(r, 'ort_ms')} | {ratio(r, 'before_ms')} "
                   f"| {ratio(r, 'regions_ms')} |")
    by = {(r["case"], r["threads"]): r for r in rows}
    out += ["", "Thread scaling (time at 1 thread / time at 2 threads):", "",
            "| case | ORT | ours before | ours, team | ours, per-loop regions |", "|---|---|---|---|---|"]
    for (case, th), r in by.items():
        r2 = by.get((case, 2))
        if th == 1 and r2:
            b = f"{r['before_ms'] / r2['before_ms']:.2f}" if "before_ms" in r and "before_ms" in r2 else "-"
            out.append(f"| {case} | {r['ort_ms'] / r2['ort_ms']:.2f} | {b} | {r['team_ms'] / r2['team_ms']:.2f} "
                       f"| {r['regions_ms'] / r2['regions_ms']:.2f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-omp-speed"))
    ap.add_argument("--out", default=str(HERE / "results" / "omp.md"))
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--before", help="a checkout of the base commit: also time its emitter's C")
    ap.add_argument("--title", default="One parallel region per run vs one per loop, with ONNX Runtime")
    args = ap.parse_args(argv)
    load0, t0 = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory() as d:
        micro = sync_cost(d)
    print(micro, flush=True)
    rows = []
    for spec in args.cases.split(","):
        rows += time_case(spec, args.rounds, args.cache, args.before)
        print(tables(rows).splitlines()[-1], flush=True)
    load1 = os.getloadavg()
    text = (f"## {args.title}\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}, {args.rounds} interleaved "
            f"rounds, fastest of each (1 thread: CPU time of the calling thread; 2 threads: wall time); OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, ORT allow_spinning=0; "
            f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end ({os.cpu_count()} CPUs).\n\n"
            + micro + "\n\n" + tables(rows) + "\n")
    print(text)
    path = Path(args.out)
    prev = path.read_text() if args.append and path.exists() else ""
    path.write_text(prev + ("\n" if prev else "") + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
