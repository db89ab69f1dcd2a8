"""Two emitters' C for the exported transformer models, side by side in one process (issue 15):
each model's optimal plan rendered by another source tree (``--old``, in a subprocess with that
tree's ``transformers_speed.py``, which puts its own tree first on ``sys.path``) and by this one,
built with the same flags and timed interleaved round by round (each side's fastest of ``--batch``
back-to-back runs per round) at 1 and 2 threads. The column new/old is the median of the per-round
ratios, so a loaded machine moves both sides alike. A model whose two trees plan differently (the
cost model changed) is reported and skipped: the old C needs its own plan's buffers. Appends to
``--out``. The motifs have their own script, ``motif_ab.py``.

    PYTHONPATH=. python benchmarks/export_ab.py --old /path/to/old/tree --models llama_ts,t5_ts
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

import machine  # noqa: E402  (benchmarks/machine.py)
import transformers_speed as ts  # noqa: E402  (benchmarks/transformers_speed.py: models, plans)
from report import write_results  # noqa: E402  (benchmarks/report.py)
import run as bench  # noqa: E402  (benchmarks/run.py: interleaving)
from tests.model_set import model_names  # noqa: E402

from solverfuse.emit.build import Program, buffer_table, build  # noqa: E402
from solverfuse.emit.program import render  # noqa: E402

_RENDER = """
import json, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
import transformers_speed as ts
import solverfuse
from solverfuse.emit.program import render
out = {{"root": str(Path(solverfuse.__file__).parent.parent)}}
for name in {names!r}:
    with ts.loaded(name, Path({cache!r})) as (path, g, feeds, consts, plans):
        plan = plans["optimal"]
        out[name] = {{"groups": [list(grp.nodes) for grp in plan.groups],
                      "c": {{str(t): render(plan, g, threads=t, units=1)["model.c"] for t in {threads!r}}}}}
json.dump(out, sys.stdout)
"""


def old_sources(tree: Path, names: list[str], threads: list[int], cache: Path) -> dict:
    """name -> {"groups": the old plan's groups, "c": {threads: model.c}} as the tree at ``tree``
    renders them."""
    code = _RENDER.format(bench=str(tree / "benchmarks"), names=names, cache=str(cache), threads=threads)
    r = subprocess.run([sys.executable, "-c", code], cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree)),
                       capture_output=True, text=True, check=True)
    out = json.loads(r.stdout)
    if Path(out.pop("root")).resolve() != tree.resolve():
        raise SystemExit(f"the old C did not come from {tree}")
    return out


def measure(old: dict, names: list[str], threads: list[int], rounds: int, batch: int, cache: Path) -> list[str]:
    rows = ["| model | threads | old ms | new ms | new/old | C changed |", "|---|---|---|---|---|---|"]
    for name in names:
        with ts.loaded(name, cache) as (path, g, feeds, consts, plans):
            plan = plans["optimal"]
            if [list(grp.nodes) for grp in plan.groups] != old[name]["groups"]:
                rows.append(f"| {name} | - | - | - | plans differ: skipped | - |")
                print(rows[-1], flush=True)
                continue
            for t in threads:
                files = render(plan, g, threads=t, units=1)
                files.pop("buffers.json")
                srcs = {"old": old[name]["c"][str(t)], "new": files["model.c"]}
                progs = {k: Program(plan, g, buffer_table(plan, g),
                                    build(dict(files, **{"model.c": src}), threads=t, cache_dir=str(cache / "c")),
                                    sanitize=False, counters=False, threads=t) for k, src in srcs.items()}
                runners = {k: (lambda p=p: min(p.time(feeds, consts, repeats=batch))) for k, p in progs.items()}
                tm = bench.time_side_by_side(runners, rounds)
                ratio = statistics.median(b / a for a, b in zip(tm["old"], tm["new"]))
                rows.append(f"| {name} | {t} | {1e3 * statistics.median(tm['old']):.4f} | "
                            f"{1e3 * statistics.median(tm['new']):.4f} | {ratio:.3f} | "
                            f"{'yes' if srcs['old'] != srcs['new'] else 'no'} |")
                print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the other source tree (its solverfuse renders the old C)")
    ap.add_argument("--models", help="comma-separated stems (default: every exported model)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--batch", type=int, default=10, help="back-to-back runs per side and round (the fastest counts)")
    ap.add_argument("--title", default="old vs new emitter on the exported models, interleaved")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-export-ab"))
    ap.add_argument("--out", default=str(HERE / "results" / "export_ab.md"))
    args = ap.parse_args(argv)
    names = args.models.split(",") if args.models else model_names()
    threads = [int(t) for t in args.threads.split(",")]
    cache = Path(args.cache)
    started, load0 = time.time(), os.getloadavg()
    old = old_sources(Path(args.old).resolve(), names, threads, cache)
    rows = measure(old, names, threads, args.rounds, args.batch, cache)
    load1 = os.getloadavg()
    import solverfuse
    text = [f"## {args.title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            f"Written by `benchmarks/export_ab.py`: old C rendered by `{Path(args.old).resolve()}`, new by "
            f"`{Path(solverfuse.__file__).parent.parent}`; the optimal plan of each exported model (seeded "
            f"weights, the test inputs), {args.rounds} rounds, each the fastest of {args.batch} runs per side, "
            f"old and new back to back (new/old: median of per-round ratios). **Load:** {load0[0]:.1f} at the "
            f"start, {load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at the end; run time "
            f"{time.time() - started:.0f} s.", "", f"Machine: {json.dumps(machine.describe())}", "", *rows]
    print(write_results(args.out, text, True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
