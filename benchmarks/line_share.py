"""What a cache line costs a thread when another core touched it last: writes into lines every
thread has read (a channel-split conv's input reused for a later output), reads of lines another
thread wrote (a consumer that is not the producer), against the same accesses to lines in the
thread's own cache and to lines in no cache.

Our 2-thread kernels split convolutions by output channels, so every thread reads all of a
conv's input, and the arena hands that memory to a later tensor: at 2 threads a kernel's writes
land in lines the other core holds. On the 2-vCPU guest such writes ran at a third of the
speed of writes to the thread's own lines, a tenth at the host's worst moments
(results/omp.md): where DenseNet-121's per-channel passes lose their second thread. This
measures it on any host (``line_share.c``: the scenarios), so that a host where a thread gains
less than ONNX Runtime's (the 16-core Xeon: results/scaling.md) can say whether this is why.

    PYTHONPATH=. python benchmarks/line_share.py [--threads 2] [--kib 256,1280,8192] [--rounds 21]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from report import write_results  # noqa: E402

from solverfuse.emit.build import BASE_FLAGS  # noqa: E402
from solverfuse.hardware import detect  # noqa: E402

#: Each timed access and the untouched-by-others access it is compared with.
BASELINE = {"own-write": "own-write", "shared-write": "own-write", "cold-write": "own-write",
            "own-read": "own-read", "other-read": "own-read", "all-read": "own-read"}
HEADER = ["| buffer KiB | threads | access | bytes per thread | median us | GB/s per thread | time per byte vs own |",
          "|---|---|---|---|---|---|---|"]


def build(cc: str, out: Path) -> Path:
    """``line_share.c`` built with the emitter's flags for this host, with OpenMP."""
    flags = [f for f in BASE_FLAGS if f != "-fopenmp-simd"] + ["-march=native", "-fopenmp"]
    subprocess.run([cc, *flags, str(HERE / "line_share.c"), "-o", str(out)], check=True, capture_output=True)
    return out


def measure(exe: Path, kib: int, threads: int, rounds: int, evict_bytes: int) -> dict[str, tuple[int, list[float]]]:
    """Scenario -> (bytes each thread touched, per-round seconds of the slowest thread)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.setdefault("OMP_WAIT_POLICY", "passive")
    run = subprocess.run([str(exe), str(kib * 256), str(evict_bytes // 4), str(rounds)], env=env, check=True,
                         capture_output=True, text=True)
    res = {}
    for line in run.stdout.splitlines():
        name, nbytes, *secs = line.split()
        res[name] = (int(nbytes), [float(s) for s in secs])
    return res


def rows(res: dict, kib: int, threads: int) -> list[str]:
    """Table rows of one buffer size: median time, bandwidth, and time per byte against the
    access to the thread's own lines (the slowest thread's time each round)."""
    out = []
    per_byte = {k: statistics.median(s) / b for k, (b, s) in res.items()}
    for name, (nbytes, secs) in res.items():
        t = statistics.median(secs)
        out.append(f"| {kib} | {threads} | {name} | {nbytes / 1e6:.3f} MB | {1e6 * t:.1f} | {nbytes / t / 1e9:.1f} | "
                   f"{per_byte[name] / per_byte[BASELINE[name]]:.2f} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2", help="comma-separated thread counts")
    ap.add_argument("--kib", default="256,1280,8192", help="comma-separated buffer sizes in KiB")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--title", default="")
    ap.add_argument("--out", help="markdown file to write")
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args(argv)
    hw = detect()
    evict = 4 * (hw.l3_bytes or hw.l2_bytes or 1 << 25)
    started, load0 = time.time(), os.getloadavg()[0]
    body = list(HEADER)
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(args.cc, Path(tmp) / "line_share")
        for threads in (int(t) for t in args.threads.split(",")):
            for kib in (int(k) for k in args.kib.split(",")):
                body += rows(measure(exe, kib, threads, args.rounds, evict), kib, threads)
    lines = machine.section(f"What a line another core touched costs{': ' + args.title if args.title else ''}",
                        f"Written by `benchmarks/line_share.py` (`line_share.c`): per round every access once, the "
                        f"slowest thread's time; medians of {args.rounds} rounds. The buffer is split evenly between "
                        f"the threads; cold-write evicts it first by reading {evict >> 20} MiB.", started, load0,
                        machine.describe()["cpu"], body)
    if args.out:
        write_results(args.out, lines, append=args.append)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
