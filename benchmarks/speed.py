"""Speed of the graph side on a 10,000-op synthetic graph: loading it, the graph index, and every
greedy baseline (the speed-sensitive users of the shared DAG utilities).

    python benchmarks/speed.py [--ops 10000] [--repeat 1] [--out benchmarks/results/struct.md]

Prints one line per measurement and writes them as a Markdown table. Wall-clock numbers: on a
shared machine they carry the noise of whatever else runs; compare runs made back to back.
(The unit tests assert no timing; this script is where speed is watched.)
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from solverfuse import greedy, zoo  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1, help="best of this many runs per measurement")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "struct.md")
    args = ap.parse_args(argv)
    hw = load_hardware("nvidia-h100")
    rows = []

    def measure(label, fn):
        best, out = None, None
        for _ in range(args.repeat):
            out, s = timed(fn)
            best = s if best is None else min(best, s)
        rows.append((label, best))
        print(f"{label:<40} {best:8.3f} s", flush=True)
        return out

    g = measure(f"synthetic_graph({args.ops})", lambda: zoo.synthetic_graph(args.ops))
    measure("graph.index (fresh copy)", lambda: g.model_copy().index)
    for name in greedy.STRATEGIES:
        if name != "unfused":
            groups = measure(f"greedy {name}", lambda name=name: greedy.STRATEGIES[name](g, hw))
            print(f"{'':<40} {len(groups)} groups", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# Graph-side speed ({args.ops}-op synthetic graph)", "",
             f"Machine: {platform.machine()}, Python {platform.python_version()}; best of {args.repeat}; "
             "wall-clock seconds on a shared machine (noisy).", "",
             "| measurement | seconds |", "|---|---|"]
    lines += [f"| {label} | {s:.3f} |" for label, s in rows]
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
