"""Before/after table of the conv-kernel changes (helper "convs"): :mod:`conv_ab` (paired,
alternating rounds, each kernel's fastest CPU time at 1 thread) of this tree against a base tree
on each model, written to ``benchmarks/results/convs.md`` with the load and both commits.

    PYTHONPATH=. python benchmarks/convs_report.py --before /path/to/base/tree [--rounds 7]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ("light:squeezenet", "light:vgg19", "light:resnet50", "light:inception_v2")


def _commit(tree: str) -> str:
    r = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return r.stdout.strip() or "(not a git tree)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the base tree (its solverfuse and benchmarks)")
    ap.add_argument("--label", default="", help="what the base tree is (default: its git commit)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--top", type=int, default=14)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--out", default=str(HERE / "results" / "convs.md"))
    ap.add_argument("--append", action="store_true", help="add the tables as a further run to --out")
    args = ap.parse_args(argv)
    parts = ["# Conv kernels at 1 thread: paired before/after (helper convs)\n",
             f"`benchmarks/convs_report.py`: `conv_ab.py` per model, {args.rounds} alternating rounds, each kernel's "
             f"fastest CPU time of the calling thread; before = `{args.before}` ({args.label or _commit(args.before)}), after = this "
             f"tree ({_commit(str(HERE.parent))}). The machine has 2 cores shared with other jobs: per-kernel ratios "
             "move by a few percent between runs; the load is in each table's first line.\n"]
    for spec in args.models:
        r = subprocess.run([sys.executable, str(HERE / "conv_ab.py"), spec, "--before", args.before,
                            "--rounds", str(args.rounds), "--top", str(args.top)],
                           capture_output=True, text=True, check=False,
                           env={**os.environ, "PYTHONPATH": str(HERE.parent)})
        body = r.stdout.strip() if r.returncode == 0 else f"failed:\n```\n{r.stderr[-1500:]}\n```"
        parts.append(f"## {spec}\n\n{body}\n")
        print(parts[-1], flush=True)
    if args.append:
        parts[0] = f"# A further run ({', '.join(args.models)})\n"
        with open(args.out, "a") as f:
            f.write("\n" + "\n".join(parts))
    else:
        Path(args.out).write_text("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
