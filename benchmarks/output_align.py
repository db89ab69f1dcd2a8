"""What the output buffer's alignment costs the memory-bound motifs: the same compiled program timed
with its outputs at a 64-byte boundary (what ``Program`` allocates, ``build.aligned_empty``) and
16 bytes past one (where NumPy puts a large array: glibc's mmap'd chunks), interleaved round by
round, CPU time of the calling thread (load-robust), tensors ``--factor`` x the last-level cache.
A row whose 16-float blocks are whole cache lines is written with non-temporal stores from the
first element (sf_stream, sf_drain and the GELU block peel or skip a misaligned start). Appends to
``--out``.

    PYTHONPATH=. python benchmarks/output_align.py --out benchmarks/results/gelu.md --append
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import machine  # noqa: E402  (benchmarks/machine.py)
from report import write_results  # noqa: E402  (benchmarks/report.py)
import run as bench  # noqa: E402  (benchmarks/run.py: motifs)

from solverfuse import api  # noqa: E402
from solverfuse.emit import build  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.hardware import detect  # noqa: E402

from motifbw import PLAN_HW  # noqa: E402


def offset_outputs(offset_bytes: dict):
    """Make ``build.aligned_empty`` return arrays ``offset_bytes["now"]`` bytes past a 64-byte
    boundary (0: aligned); returns the original to restore."""
    orig = build.aligned_empty

    def shifted(shape, dtype):
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        extra = 64 // dt.itemsize
        o = offset_bytes["now"] // dt.itemsize
        return orig((n + extra,), dt)[o:o + n].reshape(shape)
    build.aligned_empty = shifted
    return orig


def measure(rounds: int, factor: float, cache: str) -> list[str]:
    hw = detect()
    llc = hw.l3_bytes or hw.l2_bytes
    state = {"now": 0}
    orig = offset_outputs(state)
    rows = ["| motif | aligned / 16 B past (CPU time, median of per-round ratios) | aligned ms | 16 B past ms |",
            "|---|---|---|---|"]
    try:
        for name, g in bench.motif_graphs(llc, factor, hw):
            if name == "matmul_bias_relu":
                continue
            plan = api.plan(g, PLAN_HW, strategy="optimal", time_limit=20, workers=1)
            prog = build.compile_plan(plan, g, threads=1, cache_dir=cache)
            x, cs = random_inputs(g, 0), constants(g, 0)
            t = {0: [], 16: []}
            for _ in range(rounds):
                for off in (16, 0):
                    state["now"] = off
                    t[off].append(min(prog.time(x, cs, repeats=3, cpu=True)))
            ratio = statistics.median(a / b for a, b in zip(t[0], t[16]))
            rows.append(f"| {name} | {ratio:.2f} | {1e3 * min(t[0]):.1f} | {1e3 * min(t[16]):.1f} |")
            print(rows[-1], flush=True)
    finally:
        build.aligned_empty = orig
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--factor", type=float, default=2.0, help="motif tensor size / LLC")
    ap.add_argument("--title", default="output alignment")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-output-align"))
    ap.add_argument("--out", default=str(HERE / "results" / "gelu.md"))
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args(argv)
    started, load0 = time.time(), os.getloadavg()
    rows = measure(args.rounds, args.factor, args.cache)
    load1 = os.getloadavg()
    text = [f"## {args.title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            f"Written by `benchmarks/output_align.py`: one program per motif, its outputs 64-byte aligned or "
            f"16 bytes past, {args.rounds} interleaved rounds, 1 thread, tensors {args.factor:g}x the LLC, CPU "
            f"time. **Load:** {load0[0]:.1f} at the start, {load1[0]:.1f} at the end (a shared 2-core machine); "
            f"run time {time.time() - started:.0f} s.", "", f"Machine: {machine.describe()['cpu']}", "", *rows]
    write_results(args.out, text, append=args.append)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
