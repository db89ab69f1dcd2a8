"""Two emitters' C for the memory-bound motifs, side by side in one process (issue 15's motif goal):
the motifs of ``motifbw.py`` rendered by another source tree (``--old``, in a subprocess with that
tree first on ``sys.path``) and by this one, built with the same flags and timed interleaved round by
round -- old, new and the STREAM triad back to back at tensors ``--factor`` x the last-level cache
(wall time), then the in-cache copies (~256 KiB tensors, the thread's CPU time). Each column is the
median over rounds of a per-round ratio, so a loaded machine moves both sides alike (motifbw.py's
sections of two trees run minutes apart do not pair up under load). Appends to ``--out``.

    PYTHONPATH=. python benchmarks/motif_ab.py --old /path/to/old/tree --out benchmarks/results/motifs.md
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

from report import write_results  # noqa: E402  (benchmarks/report.py)
import run as bench  # noqa: E402  (benchmarks/run.py: motifs, interleaving)

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import Program, buffer_table, build  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.emit.program import render  # noqa: E402

from motifbw import HOT_BYTES, PLAN_HW, motif_pairs, out_elems  # noqa: E402

_RENDER = """
import json, sys
sys.path.insert(0, {bench!r})
import run as bench
from solverfuse import api
from solverfuse.emit.program import render
from solverfuse.hardware import detect
hw = detect(); llc = hw.l3_bytes or hw.l2_bytes
out = {{}}
for size, factor in (("big", {factor!r}), ("hot", {hot!r} / llc)):
    for name, g in bench.motif_graphs(llc, factor, hw):
        if name == "matmul_bias_relu":
            continue
        files = render(api.plan(g, {hw!r}, strategy="optimal", time_limit=20, workers=1), g, threads=1, units=1)
        out[size + ":" + name] = files["model.c"]
json.dump(out, sys.stdout)
"""
_WHERE = """
import solverfuse, pathlib
print()
print(pathlib.Path(solverfuse.__file__).parent.parent)
"""


def old_sources(tree: Path, factor: float) -> dict:
    """model.c of every motif (big and in-cache sizes) as the tree at ``tree`` renders it."""
    # that tree's own benchmarks/run.py: it puts the tree it sits in first on sys.path
    code = _RENDER.format(bench=str(tree / "benchmarks"), factor=factor, hot=HOT_BYTES, hw=PLAN_HW)
    env = dict(os.environ, PYTHONPATH=str(tree))
    r = subprocess.run([sys.executable, "-c", code + _WHERE], cwd=tree, env=env, capture_output=True, text=True,
                       check=True)
    out = json.loads(r.stdout.splitlines()[0])
    if Path(r.stdout.splitlines()[1]).resolve() != tree.resolve():
        raise SystemExit(f"the old C came from {r.stdout.splitlines()[1]}, not {tree}")
    return out


def programs(g, old_c: str, cache: str):
    """(old, new) Programs of the motif ``g``: the same plan, the two trees' model.c."""
    plan = api.plan(g, PLAN_HW, strategy="optimal", time_limit=20, workers=1)
    files = render(plan, g, threads=1, units=1)
    files.pop("buffers.json")
    out = []
    for src in (old_c, files["model.c"]):
        path = build(dict(files, **{"model.c": src}), threads=1, cache_dir=cache)
        out.append(Program(plan, g, buffer_table(plan, g), path, sanitize=False, counters=False, threads=1))
    return plan, out


def measure(old: dict, rounds: int, factor: float, cache: str) -> list[str]:
    pairs, triad = motif_pairs(factor)
    tw = bench.warm(triad)
    rows = ["| motif | old of triad | new of triad | new/old time (2x LLC) | old in-cache ns/element | "
            "new in-cache ns/element | new/old in-cache |", "|---|---|---|---|---|---|---|"]
    for name, g, gh in pairs:
        plan, (po, pn) = programs(g, old["big:" + name], cache)
        x, cs = random_inputs(g, 0), constants(g, 0)
        t = {"old": [], "new": [], "triad": []}
        for _ in range(rounds):
            t["triad"].append(tw())
            t["old"].append(po.time(x, cs, repeats=2)[1])
            t["new"].append(pn.time(x, cs, repeats=2)[1])
        frac = {k: statistics.median((plan.traffic_bytes / a) / (triad.nbytes / b) for a, b in zip(t[k], t["triad"]))
                for k in ("old", "new")}
        big = statistics.median(b / a for a, b in zip(t["old"], t["new"]))
        _, (ho, hn) = programs(gh, old["hot:" + name], cache)
        xh, csh = random_inputs(gh, 0), constants(gh, 0)
        c = {"old": [], "new": []}
        for _ in range(rounds):
            c["old"].append(min(ho.time(xh, csh, repeats=10, cpu=True)))
            c["new"].append(min(hn.time(xh, csh, repeats=10, cpu=True)))
        elems = out_elems(gh)
        rows.append(f"| {name} | {100 * frac['old']:.0f}% | {100 * frac['new']:.0f}% | {big:.2f} | "
                    f"{1e9 * min(c['old']) / elems:.3f} | {1e9 * min(c['new']) / elems:.3f} | "
                    f"{statistics.median(b / a for a, b in zip(c['old'], c['new'])):.2f} |")
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the other source tree (its solverfuse renders the old C)")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--factor", type=float, default=2.0, help="motif tensor size / LLC")
    ap.add_argument("--title", default="old vs new emitter, interleaved")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-motif-ab"))
    ap.add_argument("--out", default=str(HERE / "results" / "motifs.md"))
    args = ap.parse_args(argv)
    started, load0 = time.time(), os.getloadavg()
    rows = measure(old_sources(Path(args.old).resolve(), args.factor), args.rounds, args.factor, args.cache)
    load1 = os.getloadavg()
    import solverfuse
    text = [f"## {args.title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            f"Written by `benchmarks/motif_ab.py`: old C rendered by `{Path(args.old).resolve()}`, new by "
            f"`{Path(solverfuse.__file__).parent.parent}`; 1 thread, {args.rounds} rounds, each old, new and the "
            f"triad back to back at tensors {args.factor:g}x the LLC (\"of triad\": median of per-round ratios), "
            f"then the in-cache copies (CPU time, best per side; new/old: median of per-round ratios). "
            f"**Load:** {load0[0]:.1f} at the start, {load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at the end; "
            f"run time {time.time() - started:.0f} s.", "", *rows]
    print(write_results(args.out, text, True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
