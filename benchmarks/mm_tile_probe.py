"""The matmul tile alone in a C harness, at operand sizes from the L1 to memory: GFLOP/s of
``sf_mm_tile8`` (the tile as a GEMM whose B fits whole calls it: its block of A transposed per
call) and ``sf_mm_ptile8`` (A packed once: a B read in column slabs), one block of 8 rows, the C
text exactly as the emitter renders it (:func:`solverfuse.emit.chelpers.helper_text`).

Why: on a 16-core Xeon the GEMM ran at half of MLAS's speed (``results/conv.md``, twenty-seventh
session) with its inner loop 16 zmm FMAs per 10 loads, and B in L2-sized slabs was no faster than
B from the L3. This probe separates the two suspects on such a host: a tile slow with everything
in the L1 is the core's execution of the loop; one slow only once B leaves the L1 or L2 is the
memory levels. Two more columns (AVX-512 only) size the first case: the core's multiply-add peak
(24 chains of FMAs in registers) and a 12-row candidate tile written here with intrinsics (MLAS's
AVX-512 SGEMM shape: 12 rows x 32 columns, 24 accumulators), whose sums are checked too. Each size is timed by repeated calls over the same operands (B packed in panels of
32 columns, as the emitter packs weights), best of ``--rounds`` runs of at least 50 ms each;
both tiles' sums are checked against a plain dot product first.

    PYTHONPATH=. python benchmarks/mm_tile_probe.py [--rounds 5] [--sizes KxN,...] [--cc cc] [--out F] [--append]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import machine  # noqa: E402  (benchmarks/machine.py)
from report import write_results  # noqa: E402  (benchmarks/report.py)

from solverfuse.emit.build import BASE_FLAGS  # noqa: E402
from solverfuse.emit.chelpers import helper_text  # noqa: E402
from solverfuse.emit.ctext import PRELUDE, header  # noqa: E402

#: (K, N) of B: 8 KB (L1), 128 KB, 512 KB (L2), 2 MB, 4 MB (a 1024 x 1024 linear layer), 64 MB.
SIZES = [(64, 32), (512, 64), (1024, 128), (1024, 512), (1024, 1024), (4096, 4096)]

MAIN = r"""
#include <stdio.h>
static double sf_probe_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#if defined(__AVX512F__)
#include <immintrin.h>
/* A candidate, not the emitter's: 12 rows x 32 columns in registers (24 accumulators, MLAS's
   AVX-512 SGEMM shape), A packed as [K][12], each step 2 loads of B and 12 broadcasts of A. */
__attribute__((noinline)) static void probe_tile12(float *restrict T, long n2, const float *restrict pa, long K,
    const float *restrict b, long q0, long q1)
{
    for (long q = q0; q < q1; q += 32) {
        const float *restrict x = b + q * K;
        __m512 c[12][2];
        for (int i = 0; i < 12; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
        for (long r = 0; r < K; r++, x += 32) {
            const __m512 b0 = _mm512_loadu_ps(x), b1 = _mm512_loadu_ps(x + 16);
            for (int i = 0; i < 12; i++) {
                const __m512 av = _mm512_set1_ps(pa[r * 12 + i]);
                c[i][0] = _mm512_fmadd_ps(av, b0, c[i][0]);
                c[i][1] = _mm512_fmadd_ps(av, b1, c[i][1]);
            }
        }
        for (int i = 0; i < 12; i++) {
            _mm512_storeu_ps(T + i * n2 + q, c[i][0]);
            _mm512_storeu_ps(T + i * n2 + q + 16, c[i][1]);
        }
    }
}

/* The core's multiply-add peak: 24 independent chains of zmm FMAs in registers. */
static double probe_peak(void)
{
    __m512 c[24];
    for (int i = 0; i < 24; i++) c[i] = _mm512_set1_ps(0.001f * i);
    __m512 m = _mm512_set1_ps(0.9999f);
    const __m512 d = _mm512_set1_ps(1e-5f);
    double best = 0;
    for (int rd = 0; rd < 5; rd++) {
        const long n = 2000000;
        const double t0 = sf_probe_now();
        for (long it = 0; it < n; it++) {
#pragma GCC unroll 24
            for (int i = 0; i < 24; i++) c[i] = _mm512_fmadd_ps(m, c[i], d);
            __asm__("" : "+v"(m));
        }
        const double g = 2.0 * 16 * 24 * n / (sf_probe_now() - t0) / 1e9;
        if (g > best) best = g;
    }
    float s = 0;
    for (int i = 0; i < 24; i++) s += _mm512_reduce_add_ps(c[i]);
    return s == 12345.0f ? 0 : best;
}
#endif

/* argv: K N rounds. Prints: K N tile_gflops ptile_gflops tile12_gflops peak_gflops error (the
   largest error of any tile's sums against a plain dot product, relative to the sum of the
   products' magnitudes; 0 GFLOP/s for the candidate and the peak without AVX-512) */
int main(int argc, char **argv)
{
    if (argc < 4) return 64;
    const long K = atol(argv[1]), N = atol(argv[2]);
    const int rounds = atoi(argv[3]);
    float *a = aligned_alloc(64, sizeof(float) * 12 * K), *pa = aligned_alloc(64, sizeof(float) * 8 * K);
    float *pa12 = aligned_alloc(64, sizeof(float) * 12 * K);
    float *b = aligned_alloc(64, sizeof(float) * K * N), *T = aligned_alloc(64, sizeof(float) * 12 * N);
    if (!a || !pa || !pa12 || !b || !T) return 65;
    for (long i = 0; i < 12 * K; i++) a[i] = (float)((i * 7) % 13) / 13.0f;
    for (long r = 0; r < K; r++) for (long i = 0; i < 8; i++) pa[r * 8 + i] = a[i * K + r];
    for (long r = 0; r < K; r++) for (long i = 0; i < 12; i++) pa12[r * 12 + i] = a[i * K + r];
    for (long i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 11) / 11.0f;
    double best[3] = {0, 0, 0}, peak = 0;
#if defined(__AVX512F__)
    const int kinds = 3;
    peak = probe_peak();
#else
    const int kinds = 2;
#endif
    for (int rd = 0; rd < rounds; rd++)
        for (int which = 0; which < kinds; which++) {
            long calls = 0;
            const double t0 = sf_probe_now();
            double t1 = t0;
            do {
                for (int c = 0; c < 4; c++)
                    if (which == 1) sf_mm_ptile8(T, N, pa, K, b, 0, N);
                    else if (which == 0) sf_mm_tile8(T, N, a, K, K, b, 0, N, 8);
#if defined(__AVX512F__)
                    else probe_tile12(T, N, pa12, K, b, 0, N);
#endif
                calls += 4;
                t1 = sf_probe_now();
            } while (t1 - t0 < 0.05);
            const double g = 2.0 * (which == 2 ? 12 : 8) * K * N * calls / (t1 - t0) / 1e9;
            if (g > best[which]) best[which] = g;
        }
    /* every tile against a plain dot product (B packed: B[r][j] at b[(j/32)*32*K + r*32 + j%32]) */
    float *T2 = aligned_alloc(64, sizeof(float) * 8 * N), *T3 = aligned_alloc(64, sizeof(float) * 12 * N);
    if (!T2 || !T3) return 65;
    sf_mm_tile8(T, N, a, K, K, b, 0, N, 8);
    sf_mm_ptile8(T2, N, pa, K, b, 0, N);
#if defined(__AVX512F__)
    probe_tile12(T3, N, pa12, K, b, 0, N);
#endif
    double err = 0;
    for (long i = 0; i < 12; i++)
        for (long j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (long r = 0; r < K; r++) {
                const double p = (double)a[i * K + r] * b[(j / 32) * 32 * K + r * 32 + j % 32];
                ref += p;
                mag += p < 0 ? -p : p;
            }
            double e[3] = {0, 0, 0};
            if (i < 8) {
                e[0] = (T[i * N + j] - ref) / (mag + 1e-30);
                e[1] = (T2[i * N + j] - ref) / (mag + 1e-30);
            }
            if (kinds == 3) e[2] = (T3[i * N + j] - ref) / (mag + 1e-30);
            for (int w = 0; w < 3; w++) if (e[w] > err || -e[w] > err) err = e[w] < 0 ? -e[w] : e[w];
        }
    printf("%ld %ld %.2f %.2f %.2f %.2f %.3g\n", K, N, best[0], best[1], best[2], peak, err);
    return 0;
}
"""


def build_probe(cc: str, tmp: str) -> str:
    """Compile the harness (the emitter's prelude and tile helpers, then ``MAIN``); its path."""
    src = PRELUDE + "\n" + helper_text("sf_mm_tile8") + helper_text("sf_mm_ptile8") + MAIN
    Path(tmp, "model.h").write_text(header(1, 1, False))
    Path(tmp, "probe.c").write_text(src)
    flags = [f for f in BASE_FLAGS if f not in ("-fPIC", "-Wall", "-Wextra")]
    subprocess.run([cc, *flags, "-march=native", "-o", "probe", "probe.c", "-lm"], cwd=tmp, check=True)
    return str(Path(tmp, "probe"))


def run_probe(exe: str, k: int, n: int, rounds: int) -> dict:
    """GFLOP/s of ``tile`` (sf_mm_tile8), ``ptile`` (sf_mm_ptile8), ``tile12`` (the harness's 12 x 32
    candidate) and ``peak`` (register-only FMAs; both 0 without AVX-512), and ``err``, the largest
    relative error of their sums, at B = k x n."""
    out = subprocess.run([exe, str(k), str(n), str(rounds)], capture_output=True, text=True, check=True)
    vals = out.stdout.split()[2:]
    return dict(zip(("tile", "ptile", "tile12", "peak", "err"), map(float, vals)))


def _sizes(text: str) -> list[tuple[int, int]]:
    """``KxN,...`` as (K, N) pairs; N must be a multiple of 32 (the tiles compute whole 32-column
    panels of B, and the harness allocates exactly N columns)."""
    sizes = [tuple(int(v) for v in s.split("x")) for s in text.split(",")]
    bad = [f"{k}x{n}" for k, n in sizes if k < 1 or n < 32 or n % 32]
    if bad:
        raise argparse.ArgumentTypeError(f"N must be a positive multiple of 32 (and K positive): {', '.join(bad)}")
    return sizes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--out", default=str(HERE / "results" / "gemm.md"))
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--sizes", type=_sizes, default=SIZES, help="KxN,... (default: L1 to memory)")
    args = ap.parse_args(argv)
    load0, start = os.getloadavg()[0], time.time()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_probe(args.cc, tmp)
        for k, n in args.sizes:
            r = run_probe(exe, k, n, args.rounds)
            if r["err"] > 1e-5:
                raise SystemExit(f"the tiles' sums are off by {r['err']:.3g} (relative) at K={k}, N={n}")
            rows.append(f"| {k} x {n} | {4 * k * n / 1024:.0f} KiB | {r['tile']:.1f} | {r['ptile']:.1f} "
                        f"| {r['tile12']:.1f} | {r['peak']:.1f} |")
            print(rows[-1], flush=True)
    lines = machine.section(
        "The matmul tile alone, B from the L1 to memory",
        f"Written by `benchmarks/mm_tile_probe.py`: one block of 8 rows, repeated calls on the same operands, "
        f"best of {args.rounds} runs of at least 50 ms; `sf_mm_tile8` transposes its block of A per call, "
        f"`sf_mm_ptile8` reads it packed; the 12 x 32 candidate (24 accumulators, MLAS's shape) is the "
        f"harness's own, not emitted; peak: register-only multiply-adds.", start, load0,
        json.dumps(machine.describe()),
        ["| B (K x N) | B bytes | sf_mm_tile8 GFLOP/s | sf_mm_ptile8 GFLOP/s | 12 x 32 candidate GFLOP/s "
         "| core peak GFLOP/s |", "|---|---|---|---|---|---|", *rows], level="#")
    write_results(args.out, lines, append=args.append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
