"""Where the second thread's time goes: one model's kernels at 1 and at N threads, each team
kernel's time split into the even share of its 1-thread time, the threads' extra work, and their
skew (a thread that left the barrier late, or finished early and waited).

The plan's C is instrumented as :func:`zoo_profile.instrument` does (a benchmark-only edit of the
rendered text). At 1 thread each kernel's wall time is kept; at N threads each thread records the
clock when it left the barrier before a kernel and when it returned from it. Per kernel, medians
over ``--rounds`` runs of:

- ``span``: the last return minus the first start (what the kernel cost the run);
- ``share``: its 1-thread time / N (a perfect split);
- ``extra work``: the threads' mean time in the kernel minus ``share`` (the threads ran slower than
  one thread did: shared caches and bandwidth, lines moving between cores, a thread migrated to a
  core with a cold cache);
- ``skew``: ``span`` minus the mean time in the kernel (a thread that left the barrier late:
  woken from sleep, descheduled; or an uneven split: one thread finished early and waited);
- ``late``: the latest thread's start after the first one's.

The run's time beyond the sum of spans is the barriers' own crossing. Each thread also records the
CPU it returned from each team kernel on: the changes between consecutive kernels are migrations
(a thread moved away from its L1 and L2). And the 1-thread library is timed on each of the first
CPUs the process may use in turn: a core slower than the others caps what a second thread on it
adds. Per model one summary row and the kernels that lost most.

For a host where the second thread pays less than it should (results/scaling.md: a 16-core Xeon,
ResNet-50 1.18x from 1 to 2 threads against ONNX Runtime's 1.61x): run it once as is and once
with the OpenMP threads pinned (``OMP_PROC_BIND=close OMP_PLACES=cores``, printed in the title)
to see whether migrations are the loss.

    PYTHONPATH=. python benchmarks/thread_trace.py light:resnet50 [--threads 2] [--rounds 21]
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from bound import bind_buffers  # noqa: E402
from gemm_speed import graph_for  # noqa: E402
from report import write_results  # noqa: E402
from zoo_profile import HW, instrument  # noqa: E402

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import build  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.emit.program import buffer_table, render  # noqa: E402


def _library(plan, g, threads: int, cache: str):
    """The instrumented library of ``plan`` at ``threads`` threads, loaded with seeded data, and
    the arrays that must outlive it."""
    files = render(plan, g, threads=threads)
    files.pop("buffers.json")
    files["model.c"] = instrument(files["model.c"], "CLOCK_MONOTONIC")
    lib = ctypes.CDLL(str(build(files, threads=threads, cache_dir=cache)))
    arrays, ptrs = bind_buffers([dataclasses.asdict(b) for b in buffer_table(plan, g)],
                                random_inputs(g, seed=0), constants(g, seed=0))
    lib.sf_init()
    if lib.sf_run(ptrs):  # packs the weights
        raise RuntimeError("run failed")
    return lib, (arrays, ptrs)


def trace(spec: str, threads: int, rounds: int, cache: str) -> dict:
    """Per group of ``spec``'s optimal plan: 1-thread median seconds and, at ``threads``, the
    per-round spans, mean work and starts of its team kernels; the run's median time."""
    g = graph_for(spec)
    plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
    n = len(plan.groups)
    one, keep1 = _library(plan, g, 1, cache)
    many, keepn = _library(plan, g, threads, cache)
    secs1 = (ctypes.c_double * (n + 1)).in_dll(one, "sf_group_secs")
    secsn = (ctypes.c_double * (n + 1)).in_dll(many, "sf_group_secs")
    at = (((ctypes.c_double * 2) * 8) * (n + 1)).in_dll(many, "sf_at")
    cpu_at = ((ctypes.c_int * 8) * (n + 1)).in_dll(many, "sf_cpu_at")
    t1 = []
    span, work, late, team = ([[] for _ in range(n)] for _ in range(4))
    runs, moves, cpus = [], [], set()
    for _ in range(rounds):
        for i in range(n):
            secs1[i] = 0.0
        if one.sf_run(keep1[1]):
            raise RuntimeError("run failed")
        t1.append(list(secs1[:n]))
    per_cpu = _per_cpu(one, keep1[1], rounds)
    for _ in range(rounds):
        for i in range(n):
            secsn[i] = 0.0
            for j in range(threads):
                at[i][j][0] = at[i][j][1] = 0.0
        t0 = time.perf_counter()
        if many.sf_run(keepn[1]):
            raise RuntimeError("run failed")
        runs.append(time.perf_counter() - t0)
        # per thread, the CPUs it returned from its team kernels on, in run order: a change, a
        # migration (its L1 and L2 left behind)
        seq = [[cpu_at[i][j] for i in range(n) if all(at[i][k][1] for k in range(threads))] for j in range(threads)]
        moves.append(sum(sum(a != b for a, b in zip(c, c[1:])) for c in seq))
        cpus.update(c for c in sum(seq, []) if c >= 0)
        for i in range(n):
            starts = [at[i][j][0] for j in range(threads)]
            ends = [at[i][j][1] for j in range(threads)]
            if all(ends):  # a kernel of the team (one every thread ran)
                team[i].append(1)
                span[i].append(max(ends) - min(starts))
                work[i].append(statistics.fmean(e - s for s, e in zip(starts, ends)))
                late[i].append(max(starts) - min(starts))
            else:  # a serial kernel before or after the team's region
                span[i].append(secsn[i])
                work[i].append(secsn[i])
                late[i].append(0.0)
    med = statistics.median
    rows = []
    for i, grp in enumerate(plan.groups):
        ops = "+".join(dict.fromkeys(g.index.node[v].op for v in grp.nodes))
        shape = list(g.tensors[grp.writes[0]].shape) if grp.writes else []
        s, w, one_t = med(span[i]), med(work[i]), med(r[i] for r in t1)
        rows.append({"group": i, "ops": ops, "shape": shape, "t1": one_t, "span": s, "share": one_t / threads,
                     "extra": w - one_t / threads, "skew": s - w, "late": med(late[i]), "team": bool(team[i])})
    return {"rows": rows, "run": med(runs), "moves": med(moves), "cpus": sorted(cpus), "per_cpu": per_cpu}


def _per_cpu(lib, ptrs, rounds: int, most: int = 4) -> dict:
    """The 1-thread library's median run time on each of the first ``most`` CPUs the calling
    thread may use (pinned to each in turn, then let go): a core slower than the others (a busy
    neighbour, a lower clock) caps what a second thread on it can add. Under ``OMP_PROC_BIND``
    libgomp has already bound the calling thread to one CPU: one entry."""
    allowed = sorted(os.sched_getaffinity(0))
    out = {}
    try:
        for cpu in allowed[:most]:
            os.sched_setaffinity(0, {cpu})
            secs = []
            for _ in range(max(3, rounds // 2)):
                t0 = time.perf_counter()
                if lib.sf_run(ptrs):
                    raise RuntimeError("run failed")
                secs.append(time.perf_counter() - t0)
            out[cpu] = statistics.median(secs)
    finally:
        os.sched_setaffinity(0, allowed)
    return out


SUMMARY = ["| model | kernels (team) | 1-thread kernels ms | run ms | sum of spans | sum of shares | extra work "
           "| skew | of it, late starts | barriers (run - spans) | CPU changes a run | CPUs used "
           "| 1-thread run ms per CPU |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def report(spec: str, threads: int, res: dict, top: int) -> tuple[str, list[str]]:
    """The model's summary row (columns of :data:`SUMMARY`) and a table of the ``top`` kernels
    whose span exceeds their even share the most."""
    rows = res["rows"]
    tot = {k: sum(r[k] for r in rows) for k in ("t1", "span", "share", "extra", "skew", "late")}
    ms = lambda x: f"{1e3 * x:.3f}"  # noqa: E731
    summary = (f"| {spec} | {len(rows)} ({sum(r['team'] for r in rows)}) | {ms(tot['t1'])} | {ms(res['run'])} "
               f"| {ms(tot['span'])} | {ms(tot['share'])} | {ms(tot['extra'])} | {ms(tot['skew'])} "
               f"| {ms(tot['late'])} | {ms(res['run'] - tot['span'])} | {res['moves']:g} "
               f"| {', '.join(map(str, res['cpus'])) or '-'} "
               f"| {', '.join(f'{c}: {1e3 * t:.2f}' for c, t in res['per_cpu'].items())} |")
    out = [f"{spec}: the {min(top, len(rows))} kernel(s) whose span exceeds 1/{threads} of their 1-thread time the most", "",
           "| group | ops | out shape | 1 thread ms | span ms | speed-up | extra work ms | skew ms | late ms |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["share"] - r["span"])[:top]:
        up = f"{r['t1'] / r['span']:.2f}" if r["span"] > 0 else "-"
        out.append(f"| {r['group']} | {r['ops']} | {r['shape']} | {ms(r['t1'])} | {ms(r['span'])} | {up} "
                   f"| {ms(r['extra'])} | {ms(r['skew'])} | {ms(r['late'])} |")
    return summary, out + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--title", default="")
    ap.add_argument("--out", help="markdown file to write")
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-gemm-speed"))
    args = ap.parse_args(argv)
    if args.threads < 2:
        ap.error("--threads must be at least 2")
    started, load0 = time.time(), os.getloadavg()[0]
    binding = ", ".join(f"{k}={os.environ[k]}" for k in ("OMP_PROC_BIND", "OMP_PLACES") if k in os.environ) or "unpinned"
    summary, body = list(SUMMARY), []
    for i, spec in enumerate(args.specs):
        row, detail = report(spec, args.threads, trace(spec, args.threads, args.rounds, args.cache), args.top)
        summary.append(row)
        body += detail
        lines = machine.section(
            f"Where the second thread's time goes{': ' + args.title if args.title else ''}",
            f"Written by `benchmarks/thread_trace.py`: {args.threads} threads ({binding}), {args.rounds} rounds, "
            f"the 1-thread runs, then the {args.threads}-thread runs; medians.", started, load0,
            machine.describe()["cpu"], summary + [""] + body)
        if args.out:  # after each model: a time limit that stops the script keeps what finished
            if i == 0:
                write_results(args.out, lines, append=args.append)
                before = Path(args.out).read_text()[:-len("\n".join(lines))]
            else:
                Path(args.out).write_text(before + "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
