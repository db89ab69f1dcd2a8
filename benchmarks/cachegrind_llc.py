"""Cachegrind's simulated last-level misses of emitted C against the cost model's predicted bytes.

One motif (the 6-op elementwise chain, and x - mean(x)) is rendered as C for its optimal and its
unfused plan, linked with a small driver (``main``: allocate every buffer, fill the inputs, evict
the cache by streaming a scratch array twice the LL size, then ``sf_run`` once), compiled with the
emitter's flags plus ``-g`` (``-march=native`` becomes ``-march=x86-64-v3``: valgrind cannot decode
AVX-512), and run under ``valgrind --tool=cachegrind`` with a simulated LL cache
of :data:`LL_BYTES`. Only events whose source line is in ``model.c`` (the kernels and the driver
that calls them) are summed, so the fill and the eviction do not count.

Cachegrind counts a miss for every line brought into the LL on a read (DLmr) and on a write
(DLmw: it models write-allocate); it does not count write-backs. So ``(DLmr + DLmw) * 64`` is the
bytes moved into the cache, which the model predicts as the plan's reads + writes.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

LL_BYTES = 4 << 20           # simulated last-level cache: 4 MiB, 16-way, 64-byte lines
LINE = 64

DRIVER = r"""
#include <stdlib.h>
#include <string.h>
#include "model.h"
int main(void) {
    void *B[SF_NUM_BUFFERS + 1];
    for (int i = 0; i < SF_NUM_BUFFERS; i++) {
        B[i] = aligned_alloc(64, ((sf_numel[i] * sf_isize[i] + 63) / 64) * 64 + 64);
        if (!B[i]) return 3;
        if (sf_is_input[i]) {
            float *f = (float *)B[i];
            if (sf_isize[i] == 4) for (long long j = 0; j < sf_numel[i]; j++) f[j] = 0.001f * (float)(j % 1000) - 0.4f;
            else memset(B[i], 1, sf_numel[i] * sf_isize[i]);
        }
    }
    size_t n = 2 * (size_t)LL_BYTES;                  /* evict: stream 2x the LL size */
    volatile char *scratch = malloc(n);
    for (size_t j = 0; j < n; j += 64) scratch[j] = (char)j;
    int rc = sf_run(B);
    return rc;
}
"""


def _cflags() -> list[str]:
    try:
        from solverfuse.emit.build import CFLAGS
        return list(CFLAGS)
    except ImportError:
        return ["-O3", "-march=native"]


def llc_misses(plan, graph, workdir: Path) -> dict:
    """Run one plan's C under cachegrind; LL read/write misses inside model.c."""
    from solverfuse.emit.program import render
    files = render(plan, graph, threads=1)
    d = Path(tempfile.mkdtemp(dir=workdir))
    for name, text in files.items():
        (d / name).write_text(text)
    (d / "main.c").write_text(DRIVER.replace("LL_BYTES", str(LL_BYTES)))
    # valgrind 3.19 cannot decode AVX-512: the simulated build targets AVX2 (x86-64-v3) instead
    flags = [("-march=x86-64-v3" if f == "-march=native" else f) for f in _cflags() if f != "-fopenmp"]
    subprocess.run(["cc", *flags, "-g", "-o", str(d / "prog"), str(d / "model.c"), str(d / "main.c"), "-lm"],
                   check=True, capture_output=True, text=True, timeout=300)
    out = d / "cg.out"
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--LL={LL_BYTES},16,{LINE}",
                    "--D1=32768,8,64", "--I1=32768,8,64", f"--cachegrind-out-file={out}", str(d / "prog")],
                   check=True, capture_output=True, text=True, timeout=1200)
    return parse(out.read_text(), "model.c")


def parse(text: str, source: str) -> dict:
    """Sum cachegrind events over the lines of files whose name ends with ``source``.

    >>> parse("events: Ir DLmr DLmw\\nfl=/x/model.c\\nfn=k0\\n3 10 2 1\\nfl=/x/main.c\\nfn=main\\n5 9 9 9\\n", "model.c")
    {'Ir': 10, 'DLmr': 2, 'DLmw': 1}
    """
    events: list[str] = []
    totals: dict[str, int] = {}
    fl = fi = None
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            totals = {e: 0 for e in events}
        elif line.startswith("fl="):
            fl, fi = line[3:], None
        elif line.startswith(("fi=", "fe=")):
            fi = line[3:]
        elif line.startswith("fn="):
            fi = None
        elif line and (line[0].isdigit()) and events:
            cur = fi or fl or ""
            if cur.endswith(source):
                nums = [int(x) for x in line.split()[1:]]
                for e, v in zip(events, nums):
                    totals[e] += v
    return totals


def measure(quick: bool = False) -> dict:
    """Optimal and unfused plans of two motifs with tensors 4x the simulated LL."""
    if shutil.which("valgrind") is None:
        return {"error": "valgrind not installed"}
    from solverfuse import greedy, zoo
    from solverfuse.api import plan as make_plan
    from solverfuse.hardware import detect
    hw = detect()
    factor = 1 if quick else 4
    n = factor * LL_BYTES // 4                       # floats per tensor
    cases = {"elementwise_chain": zoo.elementwise_chain(n // 1024, 1024),
             "center": zoo.center(n // 1024, 1024)}
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, g in cases.items():
            for label, p in (("optimal", make_plan(g, hw, strategy="optimal", time_limit=10, workers=1)),
                             ("unfused", greedy.greedy_plan(g, hw, "unfused"))):
                ev = llc_misses(p, g, Path(tmp))
                rd, wr = ev.get("DLmr", 0) * LINE, ev.get("DLmw", 0) * LINE
                rows[f"{name} / {label} ({len(p.groups)} kernels)"] = {
                    "predicted": p.traffic_bytes, "read_miss_bytes": rd, "write_miss_bytes": wr,
                    "miss_bytes": rd + wr, "events": ev}
    desc = (f"valgrind {_version()} cachegrind, simulated LL {LL_BYTES >> 20} MiB 16-way 64-byte lines, "
            f"D1 32 KiB, kernels built for AVX2 (valgrind cannot decode AVX-512); tensors of {factor * LL_BYTES >> 20} MiB ({factor}× the simulated LL); events "
            "counted only in the kernels (`model.c`), after the inputs were written and the cache "
            "evicted. Misses × 64 bytes = bytes brought into the LL (cachegrind models write-allocate "
            "and does not count write-backs), against `cost.plan_traffic` (reads + writes).")
    return {"description": desc, "plans": rows}


def _version() -> str:
    out = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    return re.sub(r"^valgrind-", "", out)
