"""Inside one kernel: each pass's time per thread at 1 and at N threads, to see which pass of a
kernel that gains little from a second thread loses it.

``thread_trace.py`` says which kernels lose; a fused kernel runs several passes (a Concat's copy
with the next BatchNorm, a conv input's padded copy, the conv's tiles), each a work-shared loop
ending at a barrier. The rendered C of the plan is edited here (benchmark only): every thread
reads the clock at the kernel's entry, at each pass's opening comment, and at its return; a pass's
time therefore includes the wait at the barrier that ends it (a thread with less work waits
there). Medians over ``--rounds`` runs of the whole model.

    PYTHONPATH=. python benchmarks/kernel_passes.py light:densenet121 31 [--threads 2] [--rounds 21]
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import re
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
from zoo_profile import HW  # noqa: E402

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import build  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.emit.program import buffer_table, render  # noqa: E402

#: The clock every thread reads at the marks (thread-local last mark; at most 8 threads).
PROBE = """
double sf_pass_secs[8][{n}];
static __thread double sf_pass_last;
static inline void sf_pass_mark(int i)
{{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (i >= 0) sf_pass_secs[SF_TID() & 7][i] += t - sf_pass_last;
    sf_pass_last = t;
}}
"""


def mark_passes(model_c: str, groups: list[int]) -> tuple[str, dict[int, list[str]]]:
    """``model_c`` with kernels ``k<group>`` timed per pass (pass i of all the groups' passes adds
    to ``sf_pass_secs[thread][i]``), and each group's pass labels (their opening comments). A pass
    opens at a comment at the body's outer level that follows code (or opens the body).

    >>> c = ("SF_NOINLINE static int k3(void *const *B)\\n{\\n    /* pass: a */\\n    x();\\n"
    ...      "    /* pass: b */\\n    /* more on b */\\n    y();\\n    return 0;\\n}\\n")
    >>> text, labels = mark_passes(c, [3])
    >>> labels, text.count("sf_pass_mark(-1);"), text.count("sf_pass_mark(0);"), text.count("sf_pass_mark(1);")
    ({3: ['pass: a', 'pass: b']}, 1, 1, 1)
    """
    labels: dict[int, list[str]] = {}
    n = 0
    for group in groups:
        head = f"SF_NOINLINE static int k{group}(void *const *B)\n{{\n"
        start = model_c.find(head)
        if start < 0:
            raise SystemExit(f"kernel k{group} not found (a kernel the same as an earlier one is emitted once)")
        end = model_c.index("\n}\n", start)
        out, own, code_seen = [], [], False
        for ln in model_c[start + len(head):end].split("\n"):
            if ln.startswith("    /* ") and (code_seen or not own):
                if own:
                    out.append(f"    sf_pass_mark({n + len(own) - 1});")
                own.append(re.sub(r"\s*\*/$", "", ln.strip()[3:])[:90])
                code_seen = False
            elif ln.strip() and not ln.startswith("    /* ") and own:
                code_seen = True
            if ln == "    return 0;":
                out.append(f"    sf_pass_mark({n + len(own) - 1});")
            out.append(ln)
        model_c = model_c[:start] + head + "    sf_pass_mark(-1);\n" + "\n".join(out) + model_c[end:]
        labels[group] = own
        n += len(own)
    first = model_c.index("SF_NOINLINE static int k")
    return model_c[:first] + PROBE.format(n=max(1, n)) + model_c[first:], labels


def passes(spec: str, groups: list[int], threads: int, rounds: int, cache: str) -> dict:
    """Per group: its ops, its pass labels, and per thread count (1 and ``threads``) per thread
    per pass the median seconds."""
    g = graph_for(spec)
    plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
    res = {gi: {"ops": "+".join(dict.fromkeys(g.index.node[v].op for v in plan.groups[gi].nodes))} for gi in groups}
    for t in (1, threads):
        files = render(plan, g, threads=t)
        files.pop("buffers.json")
        files["model.c"], labels = mark_passes(files["model.c"], groups)
        n = sum(len(v) for v in labels.values())
        lib = ctypes.CDLL(str(build(files, threads=t, cache_dir=cache)))
        arrays, ptrs = bind_buffers([dataclasses.asdict(b) for b in buffer_table(plan, g)],
                                    random_inputs(g, seed=0), constants(g, seed=0))
        lib.sf_init()
        secs = ((ctypes.c_double * max(1, n)) * 8).in_dll(lib, "sf_pass_secs")
        per = [[[] for _ in range(n)] for _ in range(t)]
        for r in range(rounds + 1):
            ctypes.memset(secs, 0, ctypes.sizeof(secs))
            if lib.sf_run(ptrs):
                raise RuntimeError("run failed")
            if r:  # the first run packs the weights
                for th in range(t):
                    for i in range(n):
                        per[th][i].append(secs[th][i])
        i = 0
        for gi in groups:
            res[gi]["labels"] = labels[gi]
            res[gi][t] = [[statistics.median(p) for p in per[th][i:i + len(labels[gi])]] for th in range(t)]
            i += len(labels[gi])
    return res


def report(spec: str, group: int, threads: int, res: dict) -> list[str]:
    """A table: each pass's 1-thread time, each thread's time at ``threads``, the speed-up (1-thread
    time over the slowest thread's)."""
    cols = " | ".join(f"thread {i} ms" for i in range(threads))
    lines = [f"{spec}, group {group} ({res['ops']}):", "",
             f"| pass | 1 thread ms | {cols} | speed-up |", "|---|---|" + "---|" * threads + "---|"]
    one, many = res[1][0], res[threads]
    for i, label in enumerate(res["labels"]):
        worst = max(th[i] for th in many)
        lines.append(f"| {label} | {1e3 * one[i]:.3f} | " + " | ".join(f"{1e3 * th[i]:.3f}" for th in many)
                     + f" | {one[i] / worst if worst else float('nan'):.2f} |")
    total1, totaln = sum(one), max(sum(th) for th in many)
    lines.append(f"| kernel | {1e3 * total1:.3f} | " + " | ".join(f"{1e3 * sum(th):.3f}" for th in many)
                 + f" | {total1 / totaln:.2f} |")
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("groups", help="comma-separated group indices (thread_trace.py's group column)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--title", default="")
    ap.add_argument("--out", help="markdown file to write")
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-gemm-speed"))
    args = ap.parse_args(argv)
    started, load0 = time.time(), os.getloadavg()[0]
    groups = [int(x) for x in args.groups.split(",")]
    res = passes(args.spec, groups, args.threads, args.rounds, args.cache)
    body = sum((report(args.spec, gi, args.threads, res[gi]) for gi in groups), [])
    lines = machine.section(f"Passes inside a kernel at 1 and {args.threads} threads{': ' + args.title if args.title else ''}",
                        f"Written by `benchmarks/kernel_passes.py`: medians of {args.rounds} runs of the whole model; a "
                        "pass's time includes the wait at the barrier that ends it.", started, load0,
                        machine.describe()["cpu"], body)
    if args.out:
        write_results(args.out, lines, append=args.append)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
