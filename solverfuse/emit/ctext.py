"""The fixed C text of a program: the prelude (includes, math vector variants, small runtime
functions), the counter runtime of instrumented builds, the timing entry point and ``model.h``.
The helper functions shared by every kernel (register-blocked tiles, copies, packs) are in
:mod:`~solverfuse.emit.chelpers`. A leaf: it builds on no other emit module.

>>> "SF_NUM_GROUPS 3" in header(5, 3, False), RC_MESSAGES[2]
(True, 'out of memory')
"""
from __future__ import annotations

#: Return codes of the generated functions.
RC_MESSAGES = {1: "a shape/axes parameter tensor differs from the value the program was built for",
               2: "out of memory", 3: "an index tensor holds an out-of-range index"}


PRELUDE = r"""#define _POSIX_C_SOURCE 199309L
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
/* Auto-vectorised loops in 512-bit vectors wherever the target has them: GCC's tuning for Intel
   server cores (-march=native on a Sapphire Rapids class Xeon) prefers 256-bit ones, and there the
   matmul tile's 8 x 32 accumulators became 32 ymm multiply-adds, half the work per instruction
   of 16 zmm ones: with this, a 256 x 1024 x 1024 GEMM took 0.82-0.85 of the time on one core of
   a 16-core Xeon (still about half of MLAS's speed there: results/conv.md). The explicit AVX-512
   tiles are 512-bit either way; on AMD Zen 4 GCC already uses zmm (the code is the same). */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tgmath.h>
#include "model.h"
/* The calling thread's number in its OpenMP team (0 without OpenMP: a sanitizer build). */
#ifdef _OPENMP
#include <omp.h>
#define SF_TID() omp_get_thread_num()
#else
#define SF_TID() 0
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__GLIBC__) \
    && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
/* glibc's libmvec has vector variants of these (linked through -lm): declaring them lets -O3
   vectorise the loops that call them instead of making one scalar call per element. */
#define SF_SIMD __attribute__((__simd__("notinbranch")))
SF_SIMD float expf(float); SF_SIMD float logf(float); SF_SIMD float erff(float);
SF_SIMD float tanhf(float); SF_SIMD float sinf(float); SF_SIMD float cosf(float);
SF_SIMD float powf(float, float);
#endif

/* A kernel inlined into sf_run (one call site) was measured up to 10x slower (GCC 12). */
#if defined(__GNUC__)
#define SF_NOINLINE __attribute__((noinline))
#define SF_HIDDEN __attribute__((visibility("hidden")))
#define SF_UNUSED __attribute__((unused))
/* Every stack array of a kernel is declared SF_ALIGN64: GCC 12 once put a 20-float tile at 8 mod 16
   in a leaf kernel and read it with an aligned 16-byte load (a segfault); with the alignment
   asked for, the frame is realigned and vector loads may assume it. */
#define SF_ALIGN64 __attribute__((aligned(64)))
#else
#define SF_NOINLINE
#define SF_HIDDEN
#define SF_UNUSED
#define SF_ALIGN64
#endif
/* The one-row/one-channel tiles are not specialised per call site (their GNU-vector loops are
   the form wanted); the register-blocked ones may be, as before (GCC's clone with the tap count
   and channel count known). noipa, not just noclone: without a clone GCC's IPA constant
   propagation still specialises the body when every call site passes the same sizes (all of a small
   model's MatMuls: 32x32), and that form was 4x slower (vit_dynamo 155 -> 38 us per run, 1 thread). */
#if defined(__GNUC__) && !defined(__clang__)
#define SF_NOCLONE __attribute__((noipa))
#else
#define SF_NOCLONE
#endif
/* The input copies of a convolution (sf_conv_copy*): inlined at every call site, where the plane
   sizes, strides and padding are constants, so each copy is a few fixed-length row moves. Out of
   line, GCC specialised the one copy only where a translation unit had a single call geometry:
   ConvNeXt's 7x7 depthwise conv with a LayerNorm fused (two geometries in one unit) took 1.2-1.7
   us more per conv than the same conv alone in its unit (the generic copy, per channel). */
#if defined(__GNUC__)
#define SF_INLINE_COPY __attribute__((always_inline)) inline
#else
#define SF_INLINE_COPY inline
#endif
/* A kernel of a program split over several translation units (one library). */
#define SF_KERNEL SF_NOINLINE SF_HIDDEN

/* Accumulation inside an anchor's tile: a fused multiply-add where the hardware has one (the
   order of a dot product's roundings is the implementation's choice; between ops it is not). */
#if defined(__GNUC__) && defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
/* the register-blocked tiles' AVX2 form (see their #if) */
#define SF_AVX2_TILES 1
#if !defined(__clang__) && __GNUC__ >= 5
/* GCC: the SSE-AVX2 and FMA headers the emitted code uses, not all of <immintrin.h> (whose
   AVX-512, AMX, ... headers took 0.38 of its 0.42 s of parsing per translation unit with
   -march=native, GCC 12; a DenseNet-121 unit 65,000 -> 11,600 preprocessed lines). Each of these
   headers refuses to be included without <immintrin.h>'s guard macro, defined here for them and
   undefined after (code that includes <immintrin.h> later still gets all of it). */
#define _IMMINTRIN_H_INCLUDED 1
#include <xmmintrin.h>
#include <emmintrin.h>
#include <pmmintrin.h>
#include <tmmintrin.h>
#include <smmintrin.h>
#include <avxintrin.h>
#include <avx2intrin.h>
#include <fmaintrin.h>
#undef _IMMINTRIN_H_INCLUDED
#else
#include <immintrin.h>
#endif
#endif
#if defined(__GNUC__) && defined(__AVX512F__)
/* the conv tiles' last partial chunk: masked loads and stores (no work on padding positions).
   GCC: its builtins, as <immintrin.h> costs ~0.3-0.8 s of parsing in every translation unit. */
#define SF_AVX512_TILES 1
#if defined(__clang__)
#include <immintrin.h>
typedef __m512 sf_v16;
typedef __mmask16 sf_mask16;
#define SF_LOAD16(p) _mm512_loadu_ps(p)
#define SF_STORE16(p, v) _mm512_storeu_ps(p, v)
#define SF_LOADM(m, p) _mm512_maskz_loadu_ps(m, p)
#define SF_STOREM(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define SF_FMA16(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SF_SET1(x) _mm512_set1_ps(x)
#define SF_ZERO16 _mm512_setzero_ps()
#else
typedef float sf_v16 __attribute__((vector_size(64)));
typedef float sf_v16u __attribute__((vector_size(64), aligned(4), may_alias));
typedef unsigned short sf_mask16;
#define SF_LOAD16(p) (*(const sf_v16u *)(p))
#define SF_STORE16(p, v) (*(sf_v16u *)(p) = (v))
#define SF_LOADM(m, p) __builtin_ia32_loadups512_mask((p), (sf_v16){0}, (m))
#define SF_STOREM(p, m, v) __builtin_ia32_storeups512_mask((p), (v), (m))
#define SF_FMA16(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (sf_mask16)-1, 4)
/* x + -0.0f is x for every x, so GCC folds the add away and broadcasts from memory (often into the
   FMA's {1to16} operand); {0} + x is not (-0.0f + 0 is +0), which left a vaddss and a register
   vbroadcastss, on the FMA's pipe, per broadcast: ~10% of the channel-vectorised conv tile */
#define SF_SET1(x) ((sf_v16){-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, \
                            -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f} + (x))
#define SF_ZERO16 ((sf_v16){0})
#endif
#endif
#if defined(__FMA__)
#define SF_FMA(a, b, c) fmaf(a, b, c)
#else
#define SF_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline long sf_fdiv(long a, long b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static inline long sf_cdiv(long a, long b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static inline long sf_min(long a, long b) { return a < b ? a : b; }
static inline long sf_max(long a, long b) { return a > b ? a : b; }

/* e^x of a float, inline and branch-free so that a loop calling it vectorises at every vector width
   (the clamps are integer min/max on the bit pattern: GCC 12 would not if-convert float selects
   below AVX-512), with no call and no spilled registers around it (glibc's vector expf is a call).
   x is clamped to [-104, 88.74] (e^x is 0 below, +inf above, both exact in float32); n = round(x /
   ln 2) by the 1.5 * 2^23 shift; r = x - n ln 2 in two parts (Cody-Waite, Cephes' constants);
   e^r = 1 + r + r^2 P(r), P Cephes' degree-5 expf polynomial; 2^n applied as two factors 2^(n/2),
   so results down to the smallest subnormal round once. NaN in, NaN out. Max error 1.25 ulp
   against float64 exp, 1.2e-7 relative on normal results (tests/test_emit_math.py checks it). */
static inline float sf_expf(float x)
{
    union { float f; int32_t i; uint32_t u; } a, t, s1, s2, y;
    a.f = x;
    a.i = a.i < 0x42B17AE1 ? a.i : 0x42B17AE1;          /* x <= 88.74 (NaN, +inf: 88.74) */
    a.u = a.u < 0xC2D00000u ? a.u : 0xC2D00000u;        /* x >= -104 (-inf: -104) */
    const float xc = a.f;
    t.f = SF_FMA(xc, 1.44269504088896341f, 12582912.0f);
    const float n = t.f - 12582912.0f;
    float r = SF_FMA(n, -0.693359375f, xc);
    r = SF_FMA(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = SF_FMA(p, r, 1.3981999507e-3f);
    p = SF_FMA(p, r, 8.3334519073e-3f);
    p = SF_FMA(p, r, 4.1665795894e-2f);
    p = SF_FMA(p, r, 1.6666665459e-1f);
    p = SF_FMA(p, r, 5.0000001201e-1f);
    p = SF_FMA(p, r * r, r + 1.0f);
    const int32_t ni = (int32_t)(t.u - 0x4B400000u), h = ni >> 1;
    s1.u = (uint32_t)(h + 127) << 23;
    s2.u = (uint32_t)(ni - h + 127) << 23;
    y.f = p * s1.f * s2.f;
    a.f = x;
    y.u |= (a.u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : 0u;   /* NaN stays NaN */
    return y.f;
}

/* erf of a float: x * P(x^2) / Q(x^2) with |x| clamped to 3.6 (sf_erf_fit, from |x|'s bit
   pattern and the sign; sf_geluf without FMA shares it), a rational least-squares fit of degree 5/5 in x^2
   (it stays <= 1 there; erf(3.6) = 1 - 3.6e-7), ~13 FMAs and a division per lane; max abs and
   rel error 3.6e-7 in float32 (tests/test_emit_math.py checks it against math.erf); NaN in, NaN
   out. The clamp is an integer min on |x|'s bit pattern, the sign put back after (as sf_expf's):
   GCC 12 made the float selects 10 mask instructions per vector at AVX-512 and left the loop
   scalar below it, so AVX2 called glibc's vector erff (a call, 0.60 ns per GELU element in L1
   here, this 0.40; AVX-512: 0.38 -> 0.34 ns). */
static inline float sf_erf_fit(uint32_t mag, uint32_t sign)
{
    union { float f; uint32_t u; } a;
    a.u = mag < 0x40666666u ? mag : 0x40666666u;      /* |x| <= 3.6f (inf, NaN: 3.6f) */
    const float z = a.f * a.f;
    float p = 1.9749196857e-06f, q = 3.7481442686e-05f;
    p = SF_FMA(p, z, 2.8803467792e-04f); q = SF_FMA(q, z, 1.2162721794e-03f);
    p = SF_FMA(p, z, 4.0032704067e-03f); q = SF_FMA(q, z, 1.5443666720e-02f);
    p = SF_FMA(p, z, 5.3466319685e-02f); q = SF_FMA(q, z, 1.1647273700e-01f);
    p = SF_FMA(p, z, 1.9623998469e-01f); q = SF_FMA(q, z, 5.0724431928e-01f);
    p = SF_FMA(p, z, 1.1283789766e+00f); q = SF_FMA(q, z, 1.0f);
    a.u |= sign;
    return a.f * p / q;
}

static inline float sf_erff(float x)
{
    union { float f; uint32_t u; } a, y;
    a.f = x;
    const uint32_t mag = a.u & 0x7FFFFFFFu;
    y.f = sf_erf_fit(mag, a.u & 0x80000000u);
    y.u |= mag > 0x7F800000u ? 0x7FC00000u : 0u;       /* NaN stays NaN */
    return y.f;
}

/* GELU with erf, x * Phi(x) = x (1/2 + erf(x / sqrt 2) / 2). With FMA: sf_erf_fit's rational
   fit in x itself, |x| clamped to 3.6 sqrt 2 (its next float up), the 1/sqrt 2 and the 1/2 in
   the coefficients (with z = x^2 = 2 s^2: P(z/2) / 2, exact, and sqrt 2 Q(z/2), rounded), then
   x * fma(a, P/Q, 1/2), a the clamped x: 13 multiplies and FMAs per lane where
   sf_erf_fit behind x / sqrt 2 and h + h erf took 15 (residual_layernorm_gelu in L1: 6% less
   CPU time here, the row loop being FMA-bound). Within 0.80 of the GELU bound that
   tests/test_emit_erf.py checks against float64 (0.5 |x| sf_erff's bound + 2 spacings; the
   clamp's tail sets it: 1/2 + erf/2 at the clamp is 1.8e-7, not 0) where the 15-operation form
   reached 0.97; a NaN carried by x, +inf -> +inf. Without FMA, x * (erf + 1) / 2 with
   sf_erff's fit: the sum is exact where it cancels (erf in [-1, -1/2]). Below x = -5.5 (and at
   -inf) Phi is taken as 0, as float64 and ONNX Runtime have it there: -0 for a finite x (the
   clamped fit left x Phi(-5.09) = -4e-6 at x = -30) and NaN for -inf (-inf * 0), not -inf. The
   test is one unsigned compare of x's bits (above those of -5.5: negative and larger in
   magnitude), so the loop stays a vector loop. */
/* P and Q of that fit at z = |x|^2 by Horner's rule, for sf_geluf and the row loop's 8-lane form
   (sf_gelu8): FMA and C make the multiply-add and a constant of either type. */
#define SF_GELU_PQ(FMA, C, p, q, z) do { \
    p = C(0x1.0911bap-25f); q = C(0x1.bca72ap-20f); \
    p = FMA(p, z, C(0x1.2e06b8p-17f)); q = FMA(q, z, C(0x1.c2e7dap-14f)); \
    p = FMA(p, z, C(0x1.065bbcp-12f)); q = FMA(q, z, C(0x1.65d64cp-9f)); \
    p = FMA(p, z, C(0x1.b5ff00p-8f)); q = FMA(q, z, C(0x1.515752p-5f)); \
    p = FMA(p, z, C(0x1.91e644p-5f)); q = FMA(q, z, C(0x1.6f48bcp-2f)); \
    p = FMA(p, z, C(0x1.20dd72p-1f)); q = FMA(q, z, C(0x1.6a09e6p+0f)); \
} while (0)
static inline float sf_geluf(float x)
{
    union { float f; uint32_t u; } a, phi;
    a.f = x;
    const uint32_t keep = a.u > 0xC0B00000u ? 0u : 0xFFFFFFFFu;
#if defined(__FMA__)
    const uint32_t sign = a.u & 0x80000000u, mag = a.u & 0x7FFFFFFFu;
    a.u = mag < 0x40A2EADBu ? mag : 0x40A2EADBu;     /* |x| <= 5.091169f (inf, NaN: 5.091169f) */
    const float z = a.f * a.f;
    float p, q;
    SF_GELU_PQ(fmaf, , p, q, z);
    a.u |= sign;
    phi.f = fmaf(a.f, p / q, 0.5f);
#else
    union { float f; uint32_t u; } s;
    s.f = x * 0.707106781f;
    phi.f = 0.5f * (sf_erf_fit(s.u & 0x7FFFFFFFu, s.u & 0x80000000u) + 1.0f);
#endif
    phi.u &= keep;
    return x * phi.f;
}
"""

COUNTER_PRELUDE = r"""
/* Instrumented build: every global element touched is marked once per kernel pass (bit p of its
   mark: a looped kernel sets sf_pass_bit to 1 << p before its pass p; every other kernel is one
   pass), so a read is charged once per pass that makes it. A tensor the kernel reads only as the
   data operand of gathers is charged the bytes gathered (each output element of one of those
   gathers computed reads one data element; repeated indices count again), capped at its size, per
   pass: gather j of the kernel marks sf_gmap[j] at its output element. */
static unsigned char *sf_rmap[SF_NUM_BUFFERS + 1], *sf_wmap[SF_NUM_BUFFERS + 1], **sf_gmap;
static unsigned char sf_pass_bit = 1;
#define SFR(p, i, o) (sf_rmap[i][o] |= sf_pass_bit, (p)[o])
#define SFW(p, i, o) (*(sf_wmap[i][o] = 1, &(p)[o]))
#define SFG(j, o) (sf_gmap[j][o] |= sf_pass_bit)
#define SF_PASS(p) (sf_pass_bit = (unsigned char)(1u << (p)))
static long long sf_cnt[2 * SF_NUM_GROUPS + 1];

static int sf_bits(unsigned char m)
{
    int n = 0;
    for (; m; m &= (unsigned char)(m - 1)) n++;
    return n;
}

/* gd[j]: the data buffer gather j reads, gn[j]: its output elements (ng gathers) */
static int sf_counted(int g, int (*kern)(void *const *), void *const *B,
                      const int *rd, int nrd, const int *wr, int nwr,
                      const int *gd, const long long *gn, int ng)
{
    int rc = 0;
    for (int i = 0; i < nrd; i++) sf_rmap[rd[i]] = calloc(sf_numel[rd[i]] + 1, 1);
    for (int i = 0; i < nwr; i++) sf_wmap[wr[i]] = calloc(sf_numel[wr[i]] + 1, 1);
    sf_gmap = calloc(ng + 1, sizeof *sf_gmap);
    for (int j = 0; sf_gmap && j < ng; j++) if (!(sf_gmap[j] = calloc(gn[j] + 1, 1))) rc = 2;
    for (int i = 0; i < nrd; i++) if (!sf_rmap[rd[i]]) rc = 2;
    for (int i = 0; i < nwr; i++) if (!sf_wmap[wr[i]]) rc = 2;
    if (!sf_gmap) rc = 2;
    sf_pass_bit = 1;
    if (!rc) rc = kern(B);
    sf_pass_bit = 1;
    sf_cnt[2 * g] = sf_cnt[2 * g + 1] = 0;
    for (int i = 0; i < nrd; i++) {
        for (long long e = 0; sf_rmap[rd[i]] && e < sf_numel[rd[i]]; e++)
            sf_cnt[2 * g] += sf_bits(sf_rmap[rd[i]][e]) * sf_isize[rd[i]];
        free(sf_rmap[rd[i]]); sf_rmap[rd[i]] = 0;
    }
    for (int j = 0; sf_gmap && j < ng; j++) {
        int first = 1;  /* each data buffer once: the sum over all its gathers, capped per pass */
        for (int i = 0; i < j; i++) if (gd[i] == gd[j]) first = 0;
        for (int b = 0; first && b < 8; b++) {
            long long n = 0;
            for (int i = j; i < ng; i++)
                for (long long e = 0; gd[i] == gd[j] && sf_gmap[i] && e < gn[i]; e++) n += (sf_gmap[i][e] >> b) & 1;
            sf_cnt[2 * g] += (n < sf_numel[gd[j]] ? n : sf_numel[gd[j]]) * sf_isize[gd[j]];
        }
    }
    for (int j = 0; sf_gmap && j < ng; j++) free(sf_gmap[j]);
    free(sf_gmap); sf_gmap = 0;
    for (int i = 0; i < nwr; i++) {
        for (long long e = 0; sf_wmap[wr[i]] && e < sf_numel[wr[i]]; e++)
            sf_cnt[2 * g + 1] += sf_wmap[wr[i]][e] * sf_isize[wr[i]];
        free(sf_wmap[wr[i]]); sf_wmap[wr[i]] = 0;
    }
    return rc;
}

int sf_counters(long long *out)
{
    for (int i = 0; i < 2 * SF_NUM_GROUPS; i++) out[i] = sf_cnt[i];
    return 0;
}
"""

#: The arena and the run's slot pointers (a template: ``str.format`` fills the numbers).
ARENA = """/* One arena, allocated once (sf_init), for every intermediate buffer and kernel scratch (slot i
   at byte sf_offset[i]; slots with disjoint lifetimes share memory, and every kernel's per-thread
   scratch starts at one offset, so a thread's part holds lines only it used) and the packed weights.
   Sanitizer builds (SF_SEPARATE_SLOTS) give every slot an allocation of its own instead, so that
   an overrun of one slot is reported rather than landing in its neighbour. */
#define SF_NUM_SLOTS {nslots}
#define SF_ARENA_BYTES {nbytes}LL
static const long long sf_offset[SF_NUM_SLOTS + 1] = {{{offsets}}};
SF_UNUSED static const long long sf_slot_bytes[SF_NUM_SLOTS + 1] = {{{sizes}}};
static const int sf_pack_src[{npack} + 1] = {{{sources}}};
static unsigned char *sf_arena;
static const void *sf_packed_from[SF_NUM_BUFFERS + 1];
static int sf_packed;
#if defined(SF_SEPARATE_SLOTS)
static unsigned char *sf_slot_mem[SF_NUM_SLOTS + 1];
#define SF_SLOT(i) ((void *)sf_slot_mem[i])
#else
#define SF_SLOT(i) ((void *)(sf_arena + sf_offset[i]))
#endif

void sf_release(void)
{{
#if defined(SF_SEPARATE_SLOTS)
    for (int i = 0; i < SF_NUM_SLOTS; i++) {{ free(sf_slot_mem[i]); sf_slot_mem[i] = 0; }}
#endif
    free(sf_arena);
    sf_arena = 0;
    sf_packed = 0;
}}

#if defined(__linux__) && !defined(SF_SEPARATE_SLOTS) && !defined(SF_NO_HUGE_PAGES)
/* the prelude's _POSIX_C_SOURCE hides madvise; MADV_HUGEPAGE is 14 on every Linux target.
   -DSF_NO_HUGE_PAGES: plain 64-byte aligned arena (benchmarks: a paired A/B with a cc wrapper) */
extern int madvise(void *, size_t, int);
#define SF_HUGE ((size_t)2 << 20)
#endif

int sf_init(void)
{{
    if (!sf_arena) {{
#if defined(SF_HUGE)
        /* an arena of 4 MiB and more in 2 MiB pages where the kernel allows them (transparent
           huge pages in madvise mode): streamed weights and activations miss the TLB far less */
        if (SF_ARENA_BYTES >= 2 * SF_HUGE) {{
            const size_t n = ((size_t)SF_ARENA_BYTES + SF_HUGE - 1) / SF_HUGE * SF_HUGE;
            if ((sf_arena = aligned_alloc(SF_HUGE, n))) (void)madvise(sf_arena, n, 14);
        }} else
#endif
        sf_arena = aligned_alloc(64, SF_ARENA_BYTES);
        sf_packed = 0;
#if defined(SF_SEPARATE_SLOTS)
        for (int i = 0; i < SF_NUM_SLOTS && sf_arena; i++)
            if (sf_offset[i] >= 0 && !(sf_slot_mem[i] = calloc((size_t)sf_slot_bytes[i], 1))) sf_release();
#endif
    }}
    return sf_arena ? 0 : 2;
}}

void sf_invalidate(void)
{{
    sf_packed = 0;
}}

static void sf_prepare(void *const *X)
{{
{prepare}
}}

/* The slot pointers of one run; weights are packed again only when a constant they come from
   is another array than last time. */
static int sf_enter(void *const *B, void **X)
{{
    if (sf_init()) return 2;
    for (int i = 0; i < SF_NUM_SLOTS; i++)
        X[i] = sf_offset[i] >= 0 ? SF_SLOT(i) : i < SF_NUM_BUFFERS ? B[i] : 0;
    int stale = !sf_packed;
    for (int i = 0; i < {npack}; i++) stale |= sf_packed_from[sf_pack_src[i]] != B[sf_pack_src[i]];
    if (stale) {{
        sf_prepare(X);
        for (int i = 0; i < {npack}; i++) sf_packed_from[sf_pack_src[i]] = B[sf_pack_src[i]];
        sf_packed = 1;
    }}
    return 0;
}}
"""

TIMING = r"""
static int sf_timed(void *const *B, int repeats, double *seconds, clockid_t clock)
{
    for (int r = 0; r < repeats; r++) {
        struct timespec t0, t1;
        clock_gettime(clock, &t0);
        int rc = sf_run(B);
        clock_gettime(clock, &t1);
        if (rc) return rc;
        seconds[r] = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    return 0;
}

int sf_time(void *const *B, int repeats, double *seconds)
{
    return sf_timed(B, repeats, seconds, CLOCK_MONOTONIC);
}

/* The calling thread's CPU time per run: at 1 thread, the time the kernels took, not counting
   the time other jobs of a loaded machine held the core. */
int sf_time_cpu(void *const *B, int repeats, double *seconds)
{
    return sf_timed(B, repeats, seconds, CLOCK_THREAD_CPUTIME_ID);
}
"""


def header(nbuf: int, ngroups: int, counters: bool) -> str:
    """The text of ``model.h`` for a program of ``nbuf`` buffers and ``ngroups`` kernels."""
    return f"""/* Generated by solverfuse: fused kernels of one plan. Buffer i is row i of buffers.json. */
#ifndef SOLVERFUSE_MODEL_H
#define SOLVERFUSE_MODEL_H
#define SF_NUM_BUFFERS {nbuf}
#define SF_NUM_GROUPS {ngroups}
#define SF_COUNTERS {int(counters)}
extern const long long sf_numel[SF_NUM_BUFFERS + 1];
extern const long long sf_isize[SF_NUM_BUFFERS + 1];
extern const int sf_is_input[SF_NUM_BUFFERS + 1];
/* Allocate the arena of intermediate buffers (sf_run does it on first use); 0 on success. */
int sf_init(void);
/* Free the arena. */
void sf_release(void);
/* Pack the weights again at the next run (another caller's constants may sit at the same addresses). */
void sf_invalidate(void);
/* Run every kernel in plan order on the global buffers B[0..SF_NUM_BUFFERS-1] (intermediate
   buffers live in the arena: their B entries are not used); 0 on success. */
int sf_run(void *const *B);
/* Run `repeats` times; seconds[r] is the wall time of run r measured inside C. */
int sf_time(void *const *B, int repeats, double *seconds);
/* The same, seconds[r] the calling thread's CPU time (the whole run at 1 thread). */
int sf_time_cpu(void *const *B, int repeats, double *seconds);
/* Bytes read and written per group in the last run (instrumented builds only): 2 per group. */
int sf_counters(long long *out);
#endif
"""
