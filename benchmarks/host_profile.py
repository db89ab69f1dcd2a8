"""What the time model's host numbers are, measured on this machine (issue 12, the ``detect`` profile).

Measured, one thread, in one process, interleaved round by round so machine load hits every
measurement alike:

* **bandwidth per working set**: the STREAM triad (``triad.c``, compiled with the emitter's flags,
  one call = one pass over three arrays) at a working set of half the L2, half the L3, and four
  times the L3: bytes by STREAM's 3-array count / median seconds of a pass;
* **per-kernel overhead** of our emitted C: a chain of ``K`` element-wise ops on a tensor of 64
  floats, compiled once unfused (``K`` kernels) and once traffic-optimal (``k`` kernels: the register
  budget splits the chain); ``(t_unfused -
  t_fused) / (K - k)`` minus the extra bytes' time at the L2 bandwidth is what one more kernel
  costs a C call (function call, loop set-up, pointer loads).

Writes ``benchmarks/results/host_profile.md``; ``hardware.detect()`` states these numbers (per
core) as the source of its estimates.

    PYTHONPATH=. python benchmarks/host_profile.py [--rounds 7]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from solverfuse import greedy  # noqa: E402
from solverfuse.emit.build import BASE_FLAGS, compile_plan  # noqa: E402
from solverfuse.emit.data import constants, random_inputs  # noqa: E402
from solverfuse.graph import load_graph  # noqa: E402
from solverfuse.hardware import detect  # noqa: E402
from solverfuse.solve import solve  # noqa: E402
from solverfuse.files import write_atomic  # noqa: E402

CHAIN = 64  # ops in the launch-overhead chain
ELEMS = 64  # floats per tensor of the chain: 256 B, so the kernels' bytes are negligible
OPS = ["Relu", "Neg", "Abs"]


def chain_graph(k: int = CHAIN, n: int = ELEMS):
    """``k`` element-wise ops in a row on ``n`` floats."""
    nodes = [{"name": f"n{i}", "op": OPS[i % len(OPS)], "inputs": [f"t{i}"], "outputs": [f"t{i + 1}"]}
             for i in range(k)]
    return load_graph({"tensors": {"t0": {"shape": [n]}}, "inputs": ["t0"], "outputs": [f"t{k}"], "nodes": nodes})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(HERE / "results" / "host_profile.md"))
    a = ap.parse_args(argv)
    start, load0 = time.monotonic(), os.getloadavg()[0]
    hw = detect()
    l2, l3 = hw.l2_bytes, hw.l3_bytes or 8 * hw.l2_bytes
    flags = [f for f in BASE_FLAGS if not f.startswith("-W")] + ["-march=native"]
    sets = {"L2 (working set L2/2)": l2 // 2, "L3 (working set L3/2)": l3 // 2, "DRAM (working set 4 x L3)": 4 * l3}
    sizes = {k: max(1024, ws // 12) for k, ws in sets.items()}
    nbytes = {k: 12 * n for k, n in sizes.items()}
    g = chain_graph()
    cache = tempfile.mkdtemp(prefix="sf_host_profile_")
    ins, cs = random_inputs(g, seed=0), constants(g, seed=0)
    unf = compile_plan(greedy.greedy_plan(g, hw, "unfused"), g, cache_dir=cache)
    fused_plan = solve(g, hw, workers=1)
    fused = compile_plan(fused_plan, g, cache_dir=cache)
    kf = len(fused_plan.groups)

    def c_call(prog):
        first = prog.time(ins, cs, repeats=3)[2]
        n = int(min(20000, max(5, 0.02 / max(first, 1e-8))))
        return lambda: statistics.median(prog.time(ins, cs, repeats=n))

    # the triad timed inside C: median pass of a run long enough (~50 ms) to leave warm-up behind
    runners = {k: (lambda n=n: statistics.median(machine.triad(n, int(min(5000, max(20, 2e9 * 0.05 / (12 * n)))), 1,
                                                             flags)["seconds"]))
               for k, n in sizes.items()}
    runners["chain unfused"] = c_call(unf)
    runners["chain fused"] = c_call(fused)
    times = {k: [] for k in runners}
    names = list(runners)
    for r in range(a.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(runners[k]())
    med = {k: statistics.median(v) for k, v in times.items()}
    bw = {k: nbytes[k] / med[k] for k in sizes}
    l2_bw = bw["L2 (working set L2/2)"]
    extra_bytes = (CHAIN - kf) * 2 * ELEMS * 4
    launch = (med["chain unfused"] - med["chain fused"] - extra_bytes / l2_bw) / (CHAIN - kf)
    m = machine.describe()
    lines = ["# This host's time-model numbers (measured)", "",
             f"`PYTHONPATH=. python benchmarks/host_profile.py --rounds {a.rounds}` -- one thread; median of "
             f"{a.rounds} interleaved rounds. Machine: {m['cpu']}, {m['cores']} cores, L2 {l2 // 1024} KiB, "
             f"L3 {l3 // 1024} KiB, {m['compiler']}; {m['date_utc']}; load average {load0:.2f} before, "
             f"{os.getloadavg()[0]:.2f} after (shared machine: noisy); run took {time.monotonic() - start:.0f} s.", "",
             "| measurement | working set | median | rounds | result |", "|---|---:|---:|---|---:|"]
    for k in sizes:
        lines.append(f"| triad {k} | {nbytes[k]:,} B | {med[k] * 1e6:.1f} us | "
                     f"{', '.join(f'{x * 1e6:.1f}' for x in times[k])} | **{bw[k] / 1e9:.1f} GB/s** |")
    for k in ("chain unfused", "chain fused"):
        lines.append(f"| {CHAIN}-op chain on {ELEMS} floats, {k} | {ELEMS * 4} B/tensor | {med[k] * 1e9:.0f} ns | "
                     f"{', '.join(f'{x * 1e9:.0f}' for x in times[k])} | |")
    lines += [f"| one more kernel (difference / {CHAIN - kf} kernels: the fused plan is the traffic optimum, "
              f"{kf} kernels under the register budget; minus the extra bytes at L2 bandwidth) | | | | "
              f"**{launch * 1e9:.0f} ns** |", "",
              "`hardware.detect()` uses these per-core numbers (times its core count for bandwidths) as its "
              "estimates on any host, and says so in its `sources`."]
    write_atomic(Path(a.out), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
