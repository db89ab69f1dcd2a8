"""Before/after of the emitter changes, side by side with ONNX Runtime in one run.

For each case (memory-bound motifs of :mod:`solverfuse.zoo`, a few ONNX light models) one plan
is made (the greedy "fuse where legal" baseline of the package: deterministic, no solver time)
and rendered twice: by this tree's emitter ("after") and by another tree's emitter ("before",
``--before DIR``: a checkout of the base commit, e.g. ``git archive main | tar -x -C DIR``), which
runs in a subprocess that renders and compiles the same plan and prints the library path. Both
libraries are loaded here and timed inside C (``sf_time``), interleaved with ONNX Runtime 1.x
(every graph optimisation, IO binding, the same thread count) in rotated order, ``--rounds``
rounds; the table reports medians and ratios. Results go to ``benchmarks/results/emit.md``.

    PYTHONPATH=. python benchmarks/emit_speed.py --before /tmp/sf_before
"""
from __future__ import annotations

import argparse
import ctypes
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
# Worker threads that sleep between parallel regions, in both runtimes: on a machine shared with
# other jobs, spinning OpenMP workers of one runtime take the cores from the other timed next in
# this process (measured: every 2-thread C run ~25 ms slower, ORT ~10x slower on small motifs).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402

import machine  # noqa: E402  (benchmarks/machine.py)
from report import write_results  # noqa: E402  (benchmarks/report.py)
import run as bench  # noqa: E402  (benchmarks/run.py: ORT session/runner, interleaving)
from solverfuse.emit.build import compile_plan  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402
from solverfuse.plans import save_plan  # noqa: E402
# every node joins the latest group it can legally join: the emitter tests' independent rule
from tests.emit_helpers import fuse_greedily as fuse_where_legal  # noqa: E402

HW = load_hardware("nvidia-h100")

#: Run in the "before" tree: render + compile a saved plan, print the library and buffer table.
BEFORE = r"""
import json, sys
spec, plan_path, threads, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, sys.argv[5])
from emit_speed_cases import make_graph
from solverfuse.plans import load_plan
from solverfuse.emit.build import build
try:
    from solverfuse.emit.program import render
except ImportError:
    from solverfuse.emit.c import render
g = make_graph(spec)
plan = load_plan(plan_path, g)
files = render(plan, g, threads=threads)
table = json.loads(files.pop("buffers.json"))
print(json.dumps({"lib": str(build(files, threads=threads, cache_dir=cache)), "buffers": table["buffers"]}))
"""


class OldProgram:
    """A library built by the 'before' emitter: every buffer is the caller's (numpy arrays)."""

    def __init__(self, lib: str, buffers: list[dict], inputs: dict, consts: dict):
        self.lib = ctypes.CDLL(lib)
        self.lib.sf_time.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        arrays = []
        for b in buffers:
            dt = np.dtype(np.bool_) if b["dtype"] == "bool" else np.dtype(b["dtype"])
            src = inputs if b["role"] == "input" else consts if b["role"] == "constant" else None
            arrays.append(np.ascontiguousarray(np.asarray(src[b["tensor"]], dtype=dt).reshape(b["shape"]))
                          if src is not None else np.empty(b["shape"], dtype=dt))
        self.arrays = arrays
        self.ptrs = (ctypes.c_void_p * (len(arrays) + 1))(*[a.ctypes.data for a in arrays])

    def time(self) -> float:
        secs = (ctypes.c_double * 2)()
        rc = self.lib.sf_time(self.ptrs, 2, secs)
        if rc:
            raise RuntimeError(f"before-program failed ({rc})")
        return secs[1]


def measure(spec: str, threads: int, rounds: int, before: str | None, cache: str) -> dict:
    from emit_speed_cases import make_graph
    g = make_graph(spec)
    groups = fuse_where_legal(g)
    from solverfuse.plans import build_plan
    plan = build_plan(g, HW, groups, strategy="fuse-where-legal")
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    row = {"case": spec, "threads": threads, "nodes": len(g.nodes), "groups": len(plan.groups)}
    t0 = time.perf_counter()
    prog = compile_plan(plan, g, threads=threads, cache_dir=cache)
    row["build_s"] = time.perf_counter() - t0
    runners = {"after": lambda: prog.time(x, cs, repeats=2)[1]}
    if before:
        with tempfile.TemporaryDirectory() as d:
            save_plan(plan, Path(d) / "plan.json")
            env = dict(os.environ, PYTHONPATH=before)
            # cwd = the before tree: with ``-c`` the working directory comes first on sys.path, so
            # run from this tree the subprocess imported this tree's emitter (before == after)
            r = subprocess.run([sys.executable, "-c", BEFORE, spec, str(Path(d) / "plan.json"), str(threads),
                                cache, str(HERE)], capture_output=True, text=True, env=env, timeout=900, cwd=before)
            if r.returncode:
                raise RuntimeError(r.stderr.strip().splitlines()[-1])
            info = json.loads(r.stdout.strip().splitlines()[-1])
        old = OldProgram(info["lib"], info["buffers"], x, cs)
        runners["before"] = old.time
    sess = bench.ort_session(g, cs, threads)
    runners["ort"] = bench.ort_runner(sess, x)
    times = bench.time_side_by_side(runners, rounds)
    for k, v in times.items():
        row[k + "_ms"] = 1e3 * statistics.median(v)
    return row


def table(rows: list[dict]) -> str:
    from emit_speed_cases import kernel_flops
    gf = any(kernel_flops(r["case"]) for r in rows)
    out = ["| case | threads | groups | ORT ms | before ms | after ms | before/ORT | after/ORT | after/before |"
           + (" ORT GFLOP/s | before GFLOP/s | after GFLOP/s |" if gf else ""),
           "|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if gf else "")]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | {r['threads']} | | | | | error: {r['error']} | | |")
            continue
        b, a, o = r.get("before_ms"), r["after_ms"], r["ort_ms"]
        cells = [r["case"], r["threads"], r["groups"], f"{o:.2f}", "" if b is None else f"{b:.2f}", f"{a:.2f}",
                 "" if b is None else f"{b / o:.2f}", f"{a / o:.2f}", "" if b is None else f"{a / b:.2f}"]
        if gf:
            fl = kernel_flops(r["case"]) / 1e6  # GFLOP/s = flops / 1e9 / (ms / 1e3)
            cells += [f"{fl / o:.1f}", "" if b is None else f"{fl / b:.1f}", f"{fl / a:.1f}"]
        out.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    lines = []
    for kind, pred in (("kernels", lambda r: r["case"].split(":")[0] in ("gemm", "mm", "conv")),
                       ("motifs", lambda r: r["case"].startswith("zoo:")),
                       ("light models", lambda r: r["case"].startswith("light:"))):
        for th in (1, 2):
            sel = [r for r in rows if pred(r) and r["threads"] == th and "error" not in r]
            if not sel:
                continue
            med = lambda k: statistics.median(r[k] / r["ort_ms"] for r in sel)
            b = f"{med('before_ms'):.2f}" if all("before_ms" in r for r in sel) else "n/a"
            lines.append(f"| {kind} | {th} | {len(sel)} | {b} | {med('after_ms'):.2f} |")
    return "| set | threads | cases | median before/ORT | median after/ORT |\n|---|---|---|---|---|\n" + "\n".join(lines)


def cold_builds(spec: str) -> str:
    """Cold build of one case (empty cache) as one translation unit and as the units compile_plan
    picks: wall time and the compilers' CPU time (children of this process)."""
    from emit_speed_cases import make_graph

    from solverfuse.emit.build import build, translation_units
    from solverfuse.emit.program import render
    g = make_graph(spec)
    from solverfuse.plans import build_plan
    plan = build_plan(g, HW, fuse_where_legal(g), strategy="fuse-where-legal")
    out = ["| case | groups | translation units | wall s | compiler CPU s |", "|---|---|---|---|---|"]
    for units in (1, translation_units(len(plan.groups))):
        files = render(plan, g, units=units)
        files.pop("buffers.json")
        with tempfile.TemporaryDirectory() as d:
            c0, t0 = os.times(), time.perf_counter()
            build(files, cache_dir=d)
            wall, c1 = time.perf_counter() - t0, os.times()
        cpu = c1.children_user - c0.children_user + c1.children_system - c0.children_system
        out.append(f"| {spec} | {len(plan.groups)} | {sum(n.endswith('.c') for n in files)} | {wall:.1f} | {cpu:.1f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    from emit_speed_cases import CASES, kernel_flops
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="root of a tree with the emitter to compare against")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--cases", default="all",
                    help="comma-separated case specs, or 'motifs', 'light', 'kernels', 'all'")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-emit-speed"))
    ap.add_argument("--out", default=str(HERE / "results" / "emit.md"))
    ap.add_argument("--append", action="store_true", help="add this run's tables to --out")
    ap.add_argument("--title", default="Emitter speed: before/after of the emit changes, vs ONNX Runtime",
                    help="heading of this run's section")
    ap.add_argument("--cold-build", help="only measure the cold build of this case (e.g. light:densenet121); "
                    "its table is always added to --out (alone it would replace the file's other runs)")
    args = ap.parse_args(argv)
    if args.cold_build:
        load0 = os.getloadavg()[0]
        rows = cold_builds(args.cold_build)
        text = [f"## Cold build ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
                f"{load0:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores shared with other "
                "jobs: wall times are the machine's, compiler CPU time is the build's)", "", rows, ""]
        print(write_results(args.out, text, append=True))
        return 0
    from emit_speed_cases import KERNELS
    specs = KERNELS if args.cases == "kernels" else CASES if args.cases == "all" else [c for c in CASES if c.startswith("zoo:")] if args.cases == "motifs" \
        else [c for c in CASES if c.startswith("light:")] if args.cases == "light" else args.cases.split(",")
    rows = []
    started = time.time()
    for spec in specs:
        for th in [int(t) for t in args.threads.split(",")]:
            try:
                rows.append(measure(spec, th, args.rounds, args.before, args.cache))
            except Exception as e:  # report the case, keep measuring the others
                rows.append({"case": spec, "threads": th, "error": str(e)[:120]})
            print(rows[-1], flush=True)
    desc = machine.describe()
    load = os.getloadavg()
    text = [f"# {args.title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
            "", "Written by `benchmarks/emit_speed.py`. Times are medians of "
            f"{args.rounds} interleaved rounds (rotated order), each the second of two back-to-back runs "
            "timed inside C (ORT: IO binding, all graph optimisations, the same intra-op thread count). "
            "Plans: every node joins the latest group it may legally join (the same plan for before and after). "
            f"Worker threads do not spin between runs in either runtime (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
            "ORT session.intra_op.allow_spinning=0): on this shared machine spinning workers of one runtime slow the other.",
            "", f"Machine: {json.dumps(desc)}", "",
            f"**Noise:** a shared machine: load average at the end of the run {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
            f"on {os.cpu_count()} cores (other jobs ran throughout); single numbers can be off by 2x, ratios of "
            "interleaved runs less so. Run time of this measurement: " f"{time.time() - started:.0f} s.",
            "", "## Summary", "", summary(rows), "", "## Cases", "", table(rows), "",
            *([] if not any(kernel_flops(r["case"]) for r in rows) else [
                "GFLOP/s = 2 x multiply-adds of the kernel / median time (the ReLU epilogue and, for C, "
                "the per-run packing of a computed B and the padded input copy of a conv included).", ""])]
    print(write_results(args.out, text, args.append))
    return 0


if __name__ == "__main__":
    sys.exit(main())
