"""Memory-bound motifs' achieved bandwidth against the STREAM triad at 1 thread, and the compute
each costs per element with its data in cache (issue 15: every motif >= 75% of the triad).

For every streaming motif of ``run.motif_graphs`` (``matmul_bias_relu`` is a GEMM: see gemm.md):
the optimal plan's C at tensors ``--factor`` x the last-level cache, timed interleaved with the
triad (``benchmarks/triad.c``, the emitter's flags) over ``--rounds`` rounds -- achieved GB/s =
the plan's predicted bytes (which the instrumented build's byte counters equal) / median time, and
the median over rounds of the per-round ratio to the triad (each round's pair ran back to back, so
that ratio sees the same machine load); and, load-robust, the same plan's C on a copy of the motif
whose tensors are ~256 KiB (they stay in L2), timed by the thread's CPU clock (best of
``--rounds``): nanoseconds of compute per output element; and from it the ceiling that compute
puts on the bandwidth column: the triad's time for the predicted bytes over the larger of that and
the in-cache compute time scaled to the large motif (memory and compute fully overlapped; 100%
where the compute is the shorter). On a shared machine the bandwidth
columns move with the other jobs (read the ratios; the load is stated); the in-cache column does not
much. Results are appended to ``benchmarks/results/motifbw.md`` under ``--title``.

To compare two source trees, run a copy of this script inside each (``benchmarks/run.py`` puts
the tree the script sits in first on ``sys.path``, so that tree's ``solverfuse`` is measured; the
section names it):

    cp benchmarks/motifbw.py /path/to/old/tree/benchmarks/
    (cd /path/to/old/tree && PYTHONPATH=. python benchmarks/motifbw.py --title before --out /abs/motifbw.md --append)
    PYTHONPATH=. python benchmarks/motifbw.py --title after --append
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import machine  # noqa: E402  (benchmarks/machine.py)
from report import write_results  # noqa: E402  (benchmarks/report.py)
import run as bench  # noqa: E402  (benchmarks/run.py: motifs, interleaving)

from solverfuse import api  # noqa: E402
from solverfuse.emit.build import BASE_FLAGS, compile_plan  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.hardware import detect  # noqa: E402

#: Bytes of a motif's large tensors in the in-cache runs (L2-resident on the machines measured).
HOT_BYTES = 256 * 1024
#: The hardware model the plans are made for: transformers_speed.py's motif section (the numbers
#: issue 15 quotes) plans with it too; the motifs' sizes come from the host's caches.
PLAN_HW = "nvidia-h100"


HEADER = ("# Memory-bound motifs vs the STREAM triad at 1 thread (issue 15)\n\n"
          "Sections written by `benchmarks/motifbw.py`, one per run. Bandwidth columns: the plan's predicted "
          "bytes (equal to the instrumented build's byte counters) over the median time, against the triad timed "
          "in the same interleaved rounds; they move with the machine's load (stated per run). The last column, "
          "nanoseconds of CPU time per output element with the motif's tensors in cache, is the kernel's compute "
          "and moves little with load: a motif whose compute per element exceeds the memory time per element at "
          "triad speed cannot reach the triad, and one whose memory and compute do not overlap runs at about "
          "memory + compute. The last column puts that in one number: the share of the triad the motif could reach "
          "if its memory traffic and its in-cache compute overlapped completely (the in-cache copy's code differs "
          "from the large one only in its row count and, in the softmax motifs, in writing each row's output with "
          "ordinary stores where the large one streams it past the caches; in l1_overflow the unstreamed row also "
          "keeps its max pass and exponentials as two loops, which the large one runs as one pipelined loop "
          "under AVX-512 (emit/softmax_pipeline.py), so there the achieved share can exceed this one).")


def motif_pairs(factor: float) -> tuple[list, object]:
    """Every streaming motif of ``run.motif_graphs`` (``matmul_bias_relu`` is a GEMM: see gemm.md)
    as (name, graph at ``factor`` x the last-level cache, its in-cache copy of ~``HOT_BYTES``
    tensors), and the triad on arrays of the large size (the emitter's flags, 1 thread)."""
    hw = detect()
    llc = hw.l3_bytes or hw.l2_bytes
    triad = machine.TriadLib(int(factor * llc) // 4, 1, BASE_FLAGS + ["-march=native"])
    hot = dict(bench.motif_graphs(llc, HOT_BYTES / llc, hw))
    return [(name, g, hot[name]) for name, g in bench.motif_graphs(llc, factor, hw) if name != "matmul_bias_relu"], triad


def out_elems(g) -> int:
    """Elements of the motif's largest output: the per-element unit of the in-cache column."""
    return max(math.prod(g.tensors[o].shape) for o in g.outputs)


def compute_ceiling(memory_s: float, compute_s: float) -> float:
    """The share of the triad a motif reaches at best when its memory traffic (``memory_s`` at the
    triad's speed) and its compute (``compute_s``, measured with the data in cache) overlap fully:
    the time is then the larger of the two.

    >>> compute_ceiling(5.0, 7.5), compute_ceiling(5.0, 2.0)
    (0.6666666666666666, 1.0)
    """
    return memory_s / max(memory_s, compute_s)


def measure(rounds: int, factor: float, cache: str) -> list[str]:
    """The table rows: one per streaming motif."""
    pairs, triad = motif_pairs(factor)
    rows = ["| motif | predicted bytes | C ms | achieved GB/s | triad GB/s | of triad (medians) | "
            "of triad (median of per-round ratios) | in-cache ns/element | of triad at most (compute) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, g, gh in pairs:
        plan = api.plan(g, PLAN_HW, strategy="optimal", time_limit=20, workers=1)
        prog = compile_plan(plan, g, threads=1, cache_dir=cache)
        x, cs = random_inputs(g, 0), constants(g, 0)
        times = bench.time_side_by_side({"c": lambda: prog.time(x, cs, repeats=2)[1], "triad": bench.warm(triad)},
                                        rounds)
        c, t = statistics.median(times["c"]), statistics.median(times["triad"])
        gbs, tgbs = plan.traffic_bytes / c / 1e9, triad.nbytes / t / 1e9
        per_round = statistics.median((plan.traffic_bytes / a) / (triad.nbytes / b)
                                      for a, b in zip(times["c"], times["triad"]))
        ph = api.plan(gh, PLAN_HW, strategy="optimal", time_limit=20, workers=1)
        progh = compile_plan(ph, gh, threads=1, cache_dir=cache)
        xh, csh = random_inputs(gh, 0), constants(gh, 0)
        best = min(min(progh.time(xh, csh, repeats=20, cpu=True)) for _ in range(rounds))
        per_elem = best / out_elems(gh)
        rows.append(f"| {name} | {plan.traffic_bytes / 1e6:.1f} MB | {1e3 * c:.1f} | {gbs:.1f} | {tgbs:.1f} | "
                    f"{100 * gbs / tgbs:.0f}% | {100 * per_round:.0f}% | {1e9 * per_elem:.3f} | "
                    f"{100 * compute_ceiling(plan.traffic_bytes / tgbs / 1e9, per_elem * out_elems(g)):.0f}% |")
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--factor", type=float, default=2.0, help="motif tensor size / LLC")
    ap.add_argument("--title", default="motifs vs triad")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "solverfuse-motifbw"))
    ap.add_argument("--out", default=str(HERE / "results" / "motifbw.md"))
    ap.add_argument("--append", action="store_true", help="add this run's section to --out")
    args = ap.parse_args(argv)
    started, load0 = time.time(), os.getloadavg()
    rows = measure(args.rounds, args.factor, args.cache)
    load1 = os.getloadavg()
    import solverfuse
    head = [] if args.append and Path(args.out).exists() else [HEADER, ""]
    text = head + [f"## {args.title} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
            f"Written by `benchmarks/motifbw.py` (solverfuse from `{Path(solverfuse.__file__).parent.parent}`): "
            f"1 thread, tensors {args.factor:g}x the last-level cache, {args.rounds} interleaved rounds with the "
            f"triad. **Load:** {load0[0]:.1f} at the start, {load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} at "
            f"the end (a shared 2-core machine); run time {time.time() - started:.0f} s.", "",
            f"Machine: {machine.describe().get('cpu', '')}", "", *rows]
    print(write_results(args.out, text, args.append))
    return 0


if __name__ == "__main__":
    sys.exit(main())
