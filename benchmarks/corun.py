"""What a second core can add on this machine: the thread-scaling ceiling of each ONNX light model.

Issue 15 asks for a 1 -> 2 thread speed-up at least ONNX Runtime's. A second core can only give
what the shared parts of the machine (last-level cache, memory bandwidth, the host under a virtual
machine) leave it. For each model and each runtime (our optimal plan's C, ONNX Runtime), this
script times:

* **alone**: the model at 1 thread and at 2 threads, interleaved (wall time, median of rounds);
* **co-run**: the model at 1 thread on core 0 while a second process runs the same runtime on the
  same model at 1 thread on core 1, without pause. Two copies that share no work are the best a
  split of the model between two cores can do, so ``2 x alone / co-run`` is the ceiling of that
  runtime's 2-thread speed-up here.

A runtime whose 1-thread code is fast moves more bytes per second and meets the shared limits
sooner: its ceiling is lower. Results go to ``benchmarks/results/corun.md`` (``--append`` adds a
section).

    PYTHONPATH=. python benchmarks/corun.py [--rounds 7] [--models light:resnet50,...] [--append]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from emit_speed import HW  # noqa: E402
from emit_speed_cases import make_graph  # noqa: E402
from gemm_speed import ZOO_LIGHT  # noqa: E402
from report import write_results  # noqa: E402
from run import ort_session  # noqa: E402

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import compile_plan  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402


def runner(spec: str, runtime: str, threads: int, cache: str):
    """A function that runs ``spec`` once with ``runtime`` ("ours": the optimal plan's C; "ort")."""
    g = make_graph(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    if runtime == "ort":
        sess = ort_session(g, cs, threads)
        feeds = {i.name: x[i.name] for i in sess.get_inputs()}
        return lambda: sess.run(None, feeds)
    plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
    prog = compile_plan(plan, g, threads=threads, cache_dir=cache)
    return lambda: prog.time(x, cs, repeats=1)


def spin(spec: str, runtime: str, cache: str) -> None:
    """The co-running copy: pinned to core 1, runs the model at 1 thread until it is killed."""
    os.sched_setaffinity(0, {1})
    f = runner(spec, runtime, 1, cache)
    f()
    print("ready", flush=True)
    while True:
        f()


def timed(f, rounds: int) -> list[float]:
    f()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def measure(spec: str, rounds: int, cache: str) -> dict:
    """Median seconds: each runtime alone at 1 and 2 threads (interleaved), then at 1 thread beside
    a copy of itself on the other core."""
    fs = {(rt, th): runner(spec, rt, th, cache) for rt in ("ours", "ort") for th in (1, 2)}
    alone = {k: [] for k in fs}
    for f in fs.values():
        f()
    for _ in range(rounds):
        for k, f in fs.items():
            t0 = time.perf_counter()
            f()
            alone[k].append(time.perf_counter() - t0)
    row = {"spec": spec, "load": os.getloadavg()[0], **{f"{rt}_{th}": statistics.median(v) for (rt, th), v in alone.items()}}
    keep = os.sched_getaffinity(0)
    for rt in ("ours", "ort"):
        other = subprocess.Popen([sys.executable, __file__, "--spin", spec, rt, cache], stdout=subprocess.PIPE, text=True)
        try:
            if other.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the co-running copy of {spec} ({rt}) did not start")
            os.sched_setaffinity(0, {0})
            row[f"{rt}_corun"] = statistics.median(timed(fs[(rt, 1)], rounds))
        finally:
            os.sched_setaffinity(0, keep)
            other.kill()
            other.wait()
    return row


def table(rows: list[dict]) -> list[str]:
    out = ["| model | load | ours 1t ms | ours co-run ms | ours ceiling | ours 1t/2t | ORT 1t ms | ORT co-run ms | "
           "ORT ceiling | ORT 1t/2t |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["spec"].split(":")[-1], f"{r['load']:.1f}"]
        for rt in ("ours", "ort"):
            cells += [f"{1e3 * r[f'{rt}_1']:.2f}", f"{1e3 * r[f'{rt}_corun']:.2f}",
                      f"{2 * r[f'{rt}_1'] / r[f'{rt}_corun']:.2f}", f"{r[f'{rt}_1'] / r[f'{rt}_2']:.2f}"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ZOO_LIGHT))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-gemm-speed"))
    ap.add_argument("--spin", nargs=3, metavar=("SPEC", "RUNTIME", "CACHE"), help=argparse.SUPPRESS)
    ap.add_argument("--title", default="thread-scaling ceiling")
    ap.add_argument("--out", default=str(HERE / "results" / "corun.md"))
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args(argv)
    if args.spin:
        spin(*args.spin)
        return 0
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("corun.py needs two cores")
    rows = []
    for spec in args.models.split(","):
        rows.append(measure(spec, args.rounds, args.cache))
        print(table(rows)[-1], flush=True)
    text = [f"## {args.title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            f"Machine: {json.dumps(machine.describe())}", "",
            "Written by `benchmarks/corun.py`: per model, each runtime at 1 thread alone, at 1 thread while a "
            "copy of itself runs the same model on the other core (co-run), and at 2 threads; median wall "
            f"time of {args.rounds} rounds. Ceiling = 2 x alone / co-run: the 2-thread speed-up of two copies "
            "that share no work, the most a split of the model between the two cores can give here. "
            "1t/2t = the runtime's own speed-up.", "", *table(rows), ""]
    print(write_results(args.out, text, append=args.append))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
