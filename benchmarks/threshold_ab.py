"""The emitter's beyond-the-L2 thresholds, A/B on one host: GEMM/conv kernels built with the
4 MiB thresholds as they are and with lower ones, timed interleaved with ONNX Runtime.

Two thresholds decide when a kernel stops re-reading a large operand whole per block of output:
``gemm_tiles.SLAB_MIN`` (a MatMul B read in column slabs that every block of rows uses while it is
in the L2) and ``conv_helpers.CONV_CBLOCK_MIN`` (a conv input copy reduced in blocks of channels,
each used by the tile's blocks of output channels in turn: ``conv_tiles._sub_blocks``, and in the
rendered C ``SF_CONV_CBLOCK_MIN``). Both were 4 MiB, measured on Zen 3/4 cores whose L3 is close.
On a 16-core Xeon (2 MiB L2, a slow mesh L3) a 4 MiB B and a 3.4 MB conv input, under the
thresholds and so re-read from the L3 per block, ran at 0.6-0.85 of MLAS (``results/conv.md``);
this script's run there moved the conv threshold to 2 MiB (``results/thresholds.md``; SLAB_MIN
stays at 4). Each ``--mib`` value is one build of every case with both thresholds at that value
(patched in this process, the C define substituted in the rendered source).

    PYTHONPATH=. python benchmarks/threshold_ab.py [--mib 4,2,1] [--threads 1,2] [--rounds 7] [--out F]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see emit_speed.py
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
import run as bench  # noqa: E402  (benchmarks/run.py: ORT runner, interleaving)
from report import write_results  # noqa: E402  (benchmarks/report.py)
from emit_speed import HW  # noqa: E402
from emit_speed_cases import kernel_flops  # noqa: E402
from gemm_speed import graph_for  # noqa: E402
from run import ort_session  # noqa: E402

from solverfuse import api  # noqa: E402
from solverfuse.emit import conv_tiles, gemm_tiles  # noqa: E402
from solverfuse.emit.build import Program, buffer_table, build  # noqa: E402
from solverfuse.emit.conv_helpers import CONV_CBLOCK_MIN  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.emit.program import render  # noqa: E402

#: VGG-19's 256-channel 56x56 conv (a 3.4 MB input copy), its 512-channel 28x28 one (5.2 MB), a
#: 1024x1024 linear layer (a 4 MiB B), BERT's 768x768 and FFN projections (2.4 and 9.4 MB).
CASES = ["conv:256x56x56x256x3x1x1", "conv:512x28x28x512x3x1x1", "gemm:256x1024x1024",
         "gemm:128x768x768", "gemm:128x768x3072"]
DEFINE = "#define SF_CONV_CBLOCK_MIN ({}L*1024*1024)"


def program(g, threads: int, mib: int, cache: str) -> tuple[Program, str]:
    """The optimal plan's C for ``g`` built with both thresholds at ``mib`` MiB, and its source."""
    saved = gemm_tiles.SLAB_MIN, conv_tiles.CONV_CBLOCK_MIN
    gemm_tiles.SLAB_MIN = conv_tiles.CONV_CBLOCK_MIN = mib << 20
    try:
        plan = api.plan(g, HW, strategy="optimal", time_limit=20, workers=1)
        files = render(plan, g, threads=threads)
    finally:
        gemm_tiles.SLAB_MIN, conv_tiles.CONV_CBLOCK_MIN = saved
    files.pop("buffers.json")
    old, new = DEFINE.format(CONV_CBLOCK_MIN >> 20), DEFINE.format(mib)
    files = {name: text.replace(old, new) for name, text in files.items()}
    return (Program(plan, g, buffer_table(plan, g), build(files, threads=threads, cache_dir=cache),
                    sanitize=False, counters=False, threads=threads), "".join(files.values()))


def time_case(spec: str, threads: int, mibs: list[int], rounds: int, cache: str) -> dict:
    g = graph_for(spec)
    x, cs = random_inputs(g, seed=0), constants(g, seed=0)
    runners, same, first = {}, set(), None
    for mib in mibs:
        prog, src = program(g, threads, mib, cache)
        first = first or src
        if src == first and mib != mibs[0]:
            same.add(f"{mib} MiB")  # the thresholds did not change this case's C
        runners[f"{mib} MiB"] = (lambda prog=prog: prog.time(x, cs, repeats=2)[1])
    runners["ORT"] = bench.ort_runner(ort_session(g, cs, threads), x)
    best = {k: min(v) for k, v in bench.time_side_by_side(runners, rounds).items()}
    return {"case": spec, "threads": threads, "same": same,
            "gflops": {k: kernel_flops(spec) / t / 1e9 for k, t in best.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", default="4,2,1", help="threshold values in MiB (both thresholds at each)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-threshold-ab"))
    ap.add_argument("--out", default=str(HERE / "results" / "thresholds.md"))
    ap.add_argument("--append", action="store_true", help="add this run's section to --out")
    args = ap.parse_args(argv)
    mibs = [int(v) for v in args.mib.split(",")]
    started, load0 = time.time(), os.getloadavg()
    cols = [f"{m} MiB" for m in mibs] + ["ORT"]
    rows = ["| case | threads | " + " | ".join(f"{c} GFLOP/s" for c in cols) + " |", "|---" * (2 + len(cols)) + "|"]
    for spec in args.cases.split(","):
        for th in (int(t) for t in args.threads.split(",")):
            r = time_case(spec, th, mibs, args.rounds, args.cache)
            rows.append(f"| {spec} | {th} | " + " | ".join(
                f"{r['gflops'][c]:.1f}" + (" (same C)" if c in r["same"] else "") for c in cols) + " |")
            print(rows[-1], flush=True)
    text = machine.section(
        "Beyond-the-L2 thresholds, A/B",
        f"Written by `benchmarks/threshold_ab.py`: each case built with `gemm_tiles.SLAB_MIN` and "
        f"`CONV_CBLOCK_MIN` at {', '.join(cols[:-1])}, timed interleaved with ONNX Runtime, the best of "
        f"{args.rounds} rounds (same C: the thresholds left that case's C as the first build's).", started,
        load0[0], json.dumps(machine.describe()), [*rows, ""])
    write_results(args.out, text, append=args.append)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
