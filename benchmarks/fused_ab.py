"""Before/after of the optimal plan's C against the unfused plan's C (issue 15: fusion never
slower than no fusion): ``transformers_speed.py`` run alternately from two source trees -- a
``--base`` tree (e.g. ``git archive <commit> | tar -x -C DIR``) and this one -- on the same models
and thread counts. Each run times the optimal plan, the unfused plan and ONNX Runtime interleaved
(the ratio optimal/unfused is paired within a run); the table gives every run's ratio per tree
and their median. Plans come from the same cache (the cost model is the same in both trees).
Results go to ``benchmarks/results/fused.md``.

    git archive f1107fa | tar -x -C /tmp/base
    PYTHONPATH=. python benchmarks/fused_ab.py --base /tmp/base --models convnext_dynamo,clip_vision_ts
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROW = re.compile(r"^\| (\w+) \| (\d+) \| \d+ \| [\d/]+ \| [\d.]+ \| ([\d.]+) \| ([\d.]+) \|")


def one_run(tree: Path, models: str, threads: int, rounds: int) -> dict:
    """(model, threads) -> (optimal µs, unfused µs) of one ``transformers_speed.py`` run from ``tree``."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "t.md"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, str(tree / "benchmarks" / "transformers_speed.py"), "--models", models,
                        "--threads", str(threads), "--rounds", str(rounds), "--out", str(out)],
                       cwd=tree, env=env, check=True, capture_output=True)
        rows = {}
        for ln in out.read_text().splitlines():
            m = ROW.match(ln)
            if m:
                rows[(m.group(1), int(m.group(2)))] = (float(m.group(3)), float(m.group(4)))
        return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the source tree before the change")
    ap.add_argument("--models", default="convnext_dynamo,convnext_ts,clip_vision_ts,efficientnet_ts")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=3, help="alternating runs per tree and thread count")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--label", default="", help="what the base tree is (a commit)")
    ap.add_argument("--out", default=str(HERE / "results" / "fused.md"))
    args = ap.parse_args(argv)
    trees = {"before": Path(args.base).resolve(), "after": ROOT}
    load0 = os.getloadavg()
    res: dict = {}
    for th in [int(t) for t in args.threads.split(",")]:
        for _ in range(args.runs):
            for name, tree in trees.items():
                for key, v in one_run(tree, args.models, th, args.rounds).items():
                    res.setdefault(key, {}).setdefault(name, []).append(v)
    load1 = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Fused vs unfused C, before and after ({now})", "",
             "Written by `benchmarks/fused_ab.py`: `transformers_speed.py` run alternately from the tree before "
             f"the change ({args.label or args.base}) and after it, {args.runs} runs each per thread count, "
             f"{args.rounds} interleaved rounds per run. Ratio = optimal plan's C time / unfused plan's C "
             "time of the same run (median of rounds, each the median of 20 warm runs); below 1 the fused "
             "plan is faster.", "",
             f"**Noise:** a shared machine (2 cores, other jobs running): load average {load0[0]:.1f} at the "
             f"start, {load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at the end. Read the ratios, not the times.",
             "", "| model | threads | before: optimal/unfused per run | after: per run | before median | after median |",
             "|---|---|---|---|---|---|"]
    for (model, th), v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = []
        for name in trees:
            cells.append(", ".join(f"{o / u:.2f}" for o, u in v.get(name, [])))
        med = [statistics.median(o / u for o, u in v[name]) if v.get(name) else float("nan") for name in trees]
        lines.append(f"| {model} | {th} | {cells[0]} | {cells[1]} | {med[0]:.2f} | {med[1]:.2f} |")
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
