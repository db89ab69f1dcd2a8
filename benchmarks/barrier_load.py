"""The team's barrier (``solverfuse.emit.team.SYNC``) of earlier trees against this one, at 2
threads, on an idle machine and with busy processes beside the run.

A barrier that spins while it waits wins on an idle machine (no futex wake-up per kernel) and can
lose badly on a loaded one (the spinning thread holds a core the thread it waits for needs). For
every model and every count of busy processes (``--hogs``: Python ``while True`` loops started
before the model's rounds and killed after them), the same plan is built twice -- once with the
earlier tree's barrier text (``git show REV:solverfuse/emit/team.py``), once with this tree's --
and the two are timed interleaved over ``--rounds`` rounds (each the median of 5 back-to-back
runs, timed inside C). Appended to ``benchmarks/results/omp.md``.

    PYTHONPATH=. python benchmarks/barrier_load.py --before 19d320f,50bc368 --hogs 0,1,2
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from emit_speed import HW  # noqa: E402
from emit_speed_cases import make_graph  # noqa: E402
from report import write_results  # noqa: E402  (benchmarks/report.py)

from solverfuse import api  # noqa: E402
from solverfuse.emit import program, team  # noqa: E402
from solverfuse.emit.build import compile_plan  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402


def sync_text(rev: str) -> str:
    """``SYNC`` of ``solverfuse/emit/team.py`` at git revision ``rev`` of this repository."""
    src = subprocess.run(["git", "show", f"{rev}:solverfuse/emit/team.py"], capture_output=True, text=True,
                         check=True, cwd=HERE.parent).stdout
    ns: dict = {}
    exec(compile(src, f"{rev}:solverfuse/emit/team.py", "exec"), ns)
    return ns["SYNC"]


def measure(spec: str, syncs: dict, hogs: int, rounds: int) -> dict:
    """Median ms per barrier text of ``spec``'s optimal plan at 2 threads, with ``hogs`` busy
    processes running throughout."""
    g = make_graph(spec)
    plan = api.plan(g, HW)
    x, c = random_inputs(g, seed=0), constants(g, seed=0)
    progs = {}
    try:
        for name, text in syncs.items():
            program.SYNC = text  # render() reads the barrier text from program's namespace
            progs[name] = compile_plan(plan, g, threads=2)
    finally:
        program.SYNC = team.SYNC
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        time.sleep(0.2)
        for p in progs.values():
            p.time(x, c, repeats=3)
        times = {name: [] for name in progs}
        for _ in range(rounds):
            for name, p in progs.items():
                times[name].append(1e3 * statistics.median(p.time(x, c, repeats=5)))
    finally:
        for b in busy:
            b.kill()
    return {name: statistics.median(v) for name, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="19d320f,50bc368",
                    help="comma-separated git revisions whose barriers are compared (19d320f: the adaptive spin "
                         "bound; 50bc368: a fixed ~120 us spin)")
    ap.add_argument("--cases", default="light:squeezenet,light:inception_v1,light:inception_v2,light:resnet50")
    ap.add_argument("--hogs", default="0,1,2", help="comma-separated counts of busy processes")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default=str(HERE / "results" / "omp.md"))
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args(argv)
    revs = args.before.split(",")
    syncs = {**{rev: sync_text(rev) for rev in revs}, "this tree": team.SYNC}
    load0 = os.getloadavg()[0]
    out = ["## The team's barrier, idle and loaded: earlier trees' barriers and this one's", "",
           f"Written by `benchmarks/barrier_load.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
           f"{load0:.1f} at the start): the barriers of {', '.join(f'`{r}`' for r in revs)} and this tree's; the same plan "
           f"built with each, 2 threads, {args.rounds} interleaved rounds (each the median of 5 back-to-back runs, timed "
           "inside C), median ms; `hogs` busy processes beside the run throughout.", "",
           f"Machine: {machine.describe()}", "",
           "| case | hogs | " + " | ".join(f"{n} ms" for n in syncs) + " | " + " | ".join(f"{n} / {revs[0]}" for n in list(syncs)[1:]) + " |",
           "|---|---|" + "---|" * (2 * len(syncs) - 1)]
    for spec in args.cases.split(","):
        for hogs in (int(h) for h in args.hogs.split(",")):
            r = measure(spec, syncs, hogs, args.rounds)
            base = r[revs[0]]
            out.append(f"| {spec} | {hogs} | " + " | ".join(f"{r[n]:.2f}" for n in syncs) + " | "
                       + " | ".join(f"{r[n] / base:.2f}" for n in list(syncs)[1:]) + " |")
            print(out[-1], flush=True)
    write_results(args.out, out, append=args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
