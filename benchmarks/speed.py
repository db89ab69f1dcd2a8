"""Speed of the graph side on a 10,000-op synthetic graph: loading it, the graph index, and every
greedy baseline (the speed-sensitive users of the shared DAG utilities).

    python benchmarks/speed.py [--ops 10000] [--repeat 1] [--out benchmarks/results/struct.md]

Prints one line per measurement and writes them as a Markdown table. Wall-clock numbers: on a
shared machine they carry the noise of whatever else runs; compare runs made back to back.
(The unit tests assert no timing; this script is where speed is watched.)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from solverfuse import greedy, zoo  # noqa: E402
from solverfuse.graph import Graph  # noqa: E402
from solverfuse.hardware import load_hardware  # noqa: E402


def _reach(graph: Graph):
    """The descendant/ancestor bitsets: the graph index's when it has them, else built the way
    the greedy bookkeeping used to build them (so the script also runs on older trees)."""
    index = graph.index
    if hasattr(index, "desc"):
        return index.desc, index.anc
    from solverfuse.greedy import Partition
    p = Partition(graph, load_hardware("nvidia-h100"))
    return p._descendants()


def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


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
            out, wall, cpu = timed(fn)
            best = (wall, cpu) if best is None else (min(best[0], wall), min(best[1], cpu))
        rows.append((label, *best))
        print(f"{label:<44} {best[0]:8.3f} s wall {best[1]:8.3f} s CPU", flush=True)
        return out

    g = measure(f"synthetic_graph({args.ops})", lambda: zoo.synthetic_graph(args.ops))
    fresh = lambda: Graph(name=g.name, tensors=g.tensors, inputs=g.inputs, outputs=g.outputs, nodes=g.nodes)
    measure("graph.index (order, producers, consumers)", lambda: fresh().index)
    measure("graph.index reach bitsets (desc + anc)", lambda: _reach(fresh()))
    for name in greedy.STRATEGIES:
        if name != "unfused":
            groups = measure(f"greedy {name}", lambda name=name: greedy.STRATEGIES[name](g, hw))
            digest = hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:12]
            print(f"{'':<44} {len(groups)} groups, partition sha256 {digest}", flush=True)
            rows[-1] = (f"{rows[-1][0]} ({len(groups)} groups, sha256 {digest})", *rows[-1][1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# Graph-side speed ({args.ops}-op synthetic graph)", "",
             f"Machine: {platform.machine()}, Python {platform.python_version()}; best of {args.repeat}; "
             "seconds on a shared machine (wall is noisy under load; CPU time of this process less so).",
             "", "| measurement | wall s | CPU s |", "|---|---|---|"]
    lines += [f"| {label} | {wall:.3f} | {cpu:.3f} |" for label, wall, cpu in rows]
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
