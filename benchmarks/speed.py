"""Speed of the graph side on a 10,000-op synthetic graph: loading it, the graph index, and every
greedy baseline (the speed-sensitive users of the shared DAG utilities).

    python benchmarks/speed.py [--ops 10000] [--repeat 1] [--baseline OLD_SOURCE_TREE]
                               [--instructions OPS] [--out benchmarks/results/struct.md]

e.g. ``git archive c8183db | tar -x -C /tmp/base && python benchmarks/speed.py --baseline /tmp/base
--instructions 2000`` (about 15 minutes on 2 busy cores).

Prints one line per measurement and writes them as a Markdown table. With ``--baseline`` the same
measurements are made on another source tree (e.g. ``git archive`` of an older commit) at the same
time, in a second process, and shown beside; the partitions' sha256 tell
whether both trees produce the same plans. Wall-clock seconds carry the noise of whatever else
runs on the machine; the process's CPU seconds much less. (The unit tests assert no timing; this
script is where speed is watched.)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def measure_tree(ops: int, repeat: int) -> list[tuple[str, float, float]]:
    """(label, wall s, CPU s) per measurement, for the ``solverfuse`` first on ``sys.path``."""
    import solverfuse
    from solverfuse import greedy, zoo
    from solverfuse.graph import Graph
    from solverfuse.hardware import load_hardware
    hw = load_hardware("nvidia-h100")
    rows = []
    print(f"solverfuse from {Path(solverfuse.__file__).parent}", flush=True)

    def measure(label, fn):
        best, out = None, None
        for _ in range(repeat):
            out, wall, cpu = timed(fn)
            best = (wall, cpu) if best is None else (min(best[0], wall), min(best[1], cpu))
        rows.append((label, *best))
        print(f"{label:<44} {best[0]:8.3f} s wall {best[1]:8.3f} s CPU", flush=True)
        return out

    def reach(graph):
        index = graph.index
        if hasattr(index, "desc"):
            return index.desc, index.anc
        return greedy.Partition(graph, hw)._descendants()  # trees before the shared index

    g = measure(f"synthetic_graph({ops})", lambda: zoo.synthetic_graph(ops))
    fresh = lambda: Graph(name=g.name, tensors=g.tensors, inputs=g.inputs, outputs=g.outputs, nodes=g.nodes)
    measure("graph.index (order, producers, consumers)", lambda: fresh().index)
    measure("graph.index reach bitsets (desc + anc)", lambda: reach(fresh()))
    for name in greedy.STRATEGIES:
        if name != "unfused":
            groups = measure(f"greedy {name}", lambda name=name: greedy.STRATEGIES[name](g, hw))
            digest = hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:12]
            print(f"{'':<44} {len(groups)} groups, partition sha256 {digest}", flush=True)
            rows[-1] = (f"{rows[-1][0]} ({len(groups)} groups, sha256 {digest})", *rows[-1][1:])
    return rows


_RUN = """
import sys
sys.path.insert(0, sys.argv[1])
from solverfuse import greedy, zoo
from solverfuse.hardware import load_hardware
g = zoo.synthetic_graph(int(sys.argv[2]))
for name in sys.argv[3].split(",") if sys.argv[3] else []:
    greedy.STRATEGIES[name](g, load_hardware("nvidia-h100"))
"""


def instructions(tree: Path, ops: int, strategies: str) -> subprocess.Popen:
    """Start counting the instructions of building the graph and running ``strategies`` (comma
    separated; empty: none) under valgrind's cachegrind, with a fixed hash seed: deterministic
    counts, unlike seconds on a shared machine. Read the result with :func:`refs`."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, "-c", _RUN, str(tree), str(ops), strategies]
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def refs(proc: subprocess.Popen) -> int:
    """The instruction count (``I refs``) a finished :func:`instructions` run reported."""
    _, err = proc.communicate()
    line = next(x for x in err.splitlines() if "I   refs:" in x or "I refs:" in x)
    return int(line.rsplit(":", 1)[1].replace(",", ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1, help="best of this many runs per measurement")
    ap.add_argument("--baseline", type=Path, help="source tree of an older version, measured at the same time")
    ap.add_argument("--tree", type=Path, default=HERE.parent, help="source tree to measure")
    ap.add_argument("--json", type=Path, help="write the rows as JSON here instead of Markdown")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "struct.md")
    ap.add_argument("--instructions", type=int, metavar="OPS", default=0,
                    help="with --baseline: also count instructions (valgrind) of the greedy baselines "
                         "on an OPS-op graph in both trees")
    args = ap.parse_args(argv)
    before = None
    if args.baseline:
        # both trees at once, each in its own process: they share whatever load the machine has
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for tree, name in ((args.baseline, "before"), (args.tree, "after")):
                dump = Path(tmp) / f"{name}.json"
                cmd = [sys.executable, __file__, "--ops", str(args.ops), "--repeat", str(args.repeat),
                       "--tree", str(tree), "--json", str(dump)]
                procs.append((subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(tree)}), dump))
            if any(proc.wait() for proc, _ in procs):
                raise SystemExit("a measurement failed")
            before, rows = (json.loads(dump.read_text()) for _, dump in procs)
    else:
        sys.path.insert(0, str(args.tree))
        rows = measure_tree(args.ops, args.repeat)
    if args.json:
        args.json.write_text(json.dumps(rows))
        return 0
    counts = {}
    if args.baseline and args.instructions:
        names = ",".join(n for n in ("tvm", "xla", "inductor", "guide"))
        runs = {(tree, s): instructions(tree, args.instructions, s)
                for tree in (args.baseline, args.tree) for s in ("", names)}
        counts = {key: refs(proc) for key, proc in runs.items()}
    head = f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs " \
           f"(shared; load average {os.getloadavg()[0]:.1f} at the end); best of {args.repeat}."
    lines = [f"# Graph-side speed ({args.ops}-op synthetic graph)", "", head, ""]
    if before is None:
        lines += ["| measurement | wall s | CPU s |", "|---|---|---|"]
        lines += [f"| {label} | {wall:.3f} | {cpu:.3f} |" for label, wall, cpu in rows]
    else:
        lines += [f"Baseline: `{args.baseline}` and this tree measured at the same time, in two processes.", "",
                  "| measurement | before wall s | before CPU s | after wall s | after CPU s |",
                  "|---|---|---|---|---|"]
        for (label, wall, cpu), (label0, wall0, cpu0) in zip(rows, before):
            same = "" if label == label0 else f" (before: {label0})"
            lines.append(f"| {label}{same} | {wall0:.3f} | {cpu0:.3f} | {wall:.3f} | {cpu:.3f} |")
    if counts:
        names = next(s for _, s in counts if s)
        work = {tree: counts[tree, names] - counts[tree, ""] for tree in (args.baseline, args.tree)}
        lines += ["", f"Instructions of the greedy baselines ({names}) on a {args.instructions}-op synthetic "
                  "graph, counted by valgrind (cachegrind, PYTHONHASHSEED=0; the run minus a run that only "
                  "builds the graph): deterministic, unlike the seconds above.", "",
                  "| tree | instructions | ratio |", "|---|---|---|",
                  f"| before | {work[args.baseline]:,} | 1.000 |",
                  f"| after | {work[args.tree]:,} | {work[args.tree] / work[args.baseline]:.3f} |"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
