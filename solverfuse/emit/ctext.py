"""The fixed C text of a program: the prelude (includes, math vector variants, small runtime
functions), the counter runtime of instrumented builds, the timing entry point, ``model.h``, and
the helper functions shared by every kernel of a program (register-blocked tiles, copies, packs).
A leaf: it builds on no other emit module.

>>> "sf_conv_tile8" in helper_text("sf_conv_tile8"), "SF_NUM_GROUPS 3" in header(5, 3, False)
(True, True)
"""
from __future__ import annotations

#: Return codes of the generated functions.
RC_MESSAGES = {1: "a shape/axes parameter tensor differs from the value the program was built for",
               2: "out of memory", 3: "an index tensor holds an out-of-range index"}

#: Output positions per register-blocked chunk (two 16-lane vectors of accumulators per channel;
#: measured: 16 makes GCC 12 keep the accumulators in memory, 10x slower).
CHUNK = 32



PRELUDE = r"""#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tgmath.h>
#include "model.h"

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
/* A kernel of a program split over several translation units (one library). */
#define SF_KERNEL SF_NOINLINE SF_HIDDEN

/* Accumulation inside an anchor's tile: a fused multiply-add where the hardware has one (the
   order of a dot product's roundings is the implementation's choice; between ops it is not). */
#if defined(__GNUC__) && defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
/* the register-blocked tiles' AVX2 form (see their #if) */
#define SF_AVX2_TILES 1
#include <immintrin.h>
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
#define SF_SET1(x) ((sf_v16){0} + (x))
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

/* erf of a float. With AVX-512 (or without glibc's vector libm): x * P(x^2) / Q(x^2) with x
   clamped to [-3.6, 3.6], a rational least-squares fit of degree 5/5 in x^2 (it stays <= 1 there;
   erf(3.6) = 1 - 3.6e-7), ~13 FMAs and a division per lane; max abs and rel error 3.6e-7 in float32
   (tests/test_emit_math.py checks it against math.erf); NaN in, NaN out. It was ~0.3 ns per element
   faster than glibc's vector erff on a streaming loop here (AVX-512). Below AVX-512, GCC 12 does not
   if-convert the clamp's selects when their result feeds more arithmetic, so the loop would stay
   scalar: there the vector erff of glibc's libmvec is the faster one. */
#if defined(__AVX512F__) || !defined(SF_SIMD)
static inline float sf_erff(float x)
{
    float xc = x > 3.6f ? 3.6f : x;
    xc = xc < -3.6f ? -3.6f : xc;
    const float z = xc * xc;
    float p = 1.9749196857e-06f, q = 3.7481442686e-05f;
    p = SF_FMA(p, z, 2.8803467792e-04f); q = SF_FMA(q, z, 1.2162721794e-03f);
    p = SF_FMA(p, z, 4.0032704067e-03f); q = SF_FMA(q, z, 1.5443666720e-02f);
    p = SF_FMA(p, z, 5.3466319685e-02f); q = SF_FMA(q, z, 1.1647273700e-01f);
    p = SF_FMA(p, z, 1.9623998469e-01f); q = SF_FMA(q, z, 5.0724431928e-01f);
    p = SF_FMA(p, z, 1.1283789766e+00f); q = SF_FMA(q, z, 1.0f);
    return xc * p / q;
}
#else
static inline float sf_erff(float x) { return erff(x); }
#endif
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
   at byte sf_offset[i]; slots with disjoint lifetimes share memory) and the packed weights.
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

int sf_init(void)
{{
    if (!sf_arena) {{
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



def acc_lines(mb: int, a: str, cols: int = CHUNK) -> str:
    """The unrolled multiply-add lines of a register-blocked tile (``a`` formats row ``i``'s weight)."""
    # unrolled over the block's rows/channels: constant accumulator addresses, which the
    # compiler keeps in vector registers across the whole reduction loop
    return "\n".join(f"                for (int e = 0; e < {cols}; e++) acc[{i}][e] = SF_FMA({a.format(i=i)}, xt[e], acc[{i}][e]);"
                     for i in range(mb))


def _register_blocks(mb: int, body, avx2) -> str:
    """The loop nest of a register-blocked tile for the target the compiler builds for:
    ``body(mb, CHUNK)`` (``mb`` x CHUNK accumulators, auto-vectorised: 16 zmm with AVX-512, and
    the portable form) unless the target has AVX2 + FMA without AVX-512 (``SF_AVX2_TILES``); there
    ``avx2(rows)`` -- blocks of ``rows`` <= 4 x 16 accumulators, AVX2 intrinsics: 16 vector
    registers do not hold 8 x 32 accumulators (spilled: 25 GFLOP/s on a 3x3 conv where AVX-512
    reaches 105, on the same Zen 4 core built with -mno-avx512f; the 4 x 16 blocks: 48, and 105
    with the inputs pinned in registers), and GCC 12 leaves 4 x 16 float arrays in memory."""
    return f"#if defined(SF_AVX2_TILES)\n{avx2(min(mb, 4))}#else\n{body(mb, CHUNK)}#endif\n"


def _v8_block(rows: int, weight: str, xptr: str, indent: str, masked: bool = False,
              init: str = "") -> tuple[str, str]:
    """(declarations, multiply-adds) of ``rows`` x 2 eight-lane accumulators ``c<i>_<v>`` (AVX2):
    row i's weight is at ``weight.format(i=i)``, its 16 inputs start at ``xptr`` (``masked``:
    only the lanes of the masks ``m0``, ``m1`` are loaded, the others read as 0); ``init``: the
    C expression of row i's start value (``init.format(i=i)``; default 0)."""
    zero = (lambda i: "_mm256_setzero_ps()") if not init else (lambda i: f"_mm256_set1_ps({init.format(i=i)})")
    decl = indent + " ".join(f"__m256 c{i}_0 = {zero(i)}, c{i}_1 = {zero(i)};" for i in range(rows))
    # the empty asm pins the two input vectors in registers: else GCC folds them into every
    # multiply-add as a memory operand -- 3 loads per 2 FMAs, load-bound at half the FMA rate
    load = (f"_mm256_maskload_ps({xptr}, m0), x1 = _mm256_maskload_ps({xptr} + 8, m1)" if masked
            else f"_mm256_loadu_ps({xptr}), x1 = _mm256_loadu_ps({xptr} + 8)")
    body = [f"{indent}    __m256 x0 = {load};",
            f'{indent}    __asm__("" : "+x"(x0), "+x"(x1));']
    for i in range(rows):
        body.append(f"{indent}    {{ const __m256 wv = _mm256_broadcast_ss({weight.format(i=i)}); "
                    f"c{i}_0 = _mm256_fmadd_ps(wv, x0, c{i}_0); c{i}_1 = _mm256_fmadd_ps(wv, x1, c{i}_1); }}")
    return decl, "\n".join(body)


#: Output channels of the channel-vectorised conv tile (``sf_conv_tile32``) and its positions per
#: pass (2 x 12 accumulators, 2 weight vectors: 26 of the 32 zmm registers).
CM_CHANNELS, CM_POSITIONS = 32, 12


def _conv_tile_cm(name: str, conv_body, conv_avx2) -> str:
    """``sf_conv_tile32``: with AVX-512 the vectors run across the 32 output channels of the block
    (two weight vectors per tap, one broadcast input per position, 12 positions per pass, then one
    at a time), so a plane whose positions fill the 16-lane vectors badly (7x7: 49 positions in 4
    masked vectors, 77% of the lanes) wastes no lanes; the same packed weights ([C][taps][32])
    feed the position-vectorised form in 4 blocks of 8 channels on the other targets."""
    p = CM_POSITIONS
    acc = " ".join(f"sf_v16 c{i}_0 = b0, c{i}_1 = b1;" for i in range(p))
    fma = "\n".join(f"                {{ const sf_v16 xb = SF_SET1(xt[{i}]); c{i}_0 = SF_FMA16(xb, w0, c{i}_0); "
                    f"c{i}_1 = SF_FMA16(xb, w1, c{i}_1); }}" for i in range(p))
    store = "\n".join(f"        SF_STORE16(o, c{i}_0); SF_STORE16(o + 16, c{i}_1); "
                      f"for (int a = 0; a < 32; a++) T[a*span + q0 + {i}] = o[a];" for i in range(p))
    return f"""/* Channel-vectorised conv tile: T[a*span + q] = sum over c < C, t < taps of
   wp[(c*taps + t)*32 + a] * x[c*cplane + off[t] + q], a < 32, q < span; the accumulators start at
   bias[a] (NULL: 0). AVX-512: 32 channels x {p} positions in registers per pass over the taps. */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T, long span, const float *restrict x, long cplane,
    const float *restrict wp, long C, long taps, const long *restrict off, const float *restrict bias)
{{
#if defined(SF_AVX512_TILES)
    sf_v16 b0 = SF_ZERO16, b1 = SF_ZERO16;
    if (bias) {{ b0 = SF_LOAD16(bias); b1 = SF_LOAD16(bias + 16); }}
    float o[32];
    long q0 = 0;
    for (; q0 + {p} <= span; q0 += {p}) {{
        {acc}
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++) {{
                const float *restrict xt = x + c*cplane + off[t] + q0;
                const float *restrict w = wp + (c*taps + t)*32;
                const sf_v16 w0 = SF_LOAD16(w), w1 = SF_LOAD16(w + 16);
{fma}
            }}
{store}
    }}
    for (; q0 < span; q0++) {{
        sf_v16 c0_0 = b0, c0_1 = b1;
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++) {{
                const float *restrict w = wp + (c*taps + t)*32;
                const sf_v16 xb = SF_SET1(x[c*cplane + off[t] + q0]);
                c0_0 = SF_FMA16(xb, SF_LOAD16(w), c0_0); c0_1 = SF_FMA16(xb, SF_LOAD16(w + 16), c0_1);
            }}
        SF_STORE16(o, c0_0); SF_STORE16(o + 16, c0_1);
        for (int a = 0; a < 32; a++) T[a*span + q0] = o[a];
    }}
#elif defined(SF_AVX2_TILES)
{conv_avx2(4)}#else
{conv_body(8, CHUNK)}#endif
}}
"""


def helper_text(name: str) -> str:
    """C text of a helper shared by every kernel of a program (one copy each, compiled once)."""
    if name == "sf_conv_tile1":
        return f"""/* Conv tile of one output channel (depthwise convolutions): T[q] = sum over c < C, t < taps of
   wp[c*taps + t] * x[c*cplane + off[t] + q], q < span. {CHUNK} positions per step in registers
   (a GNU vector; written as a plain loop, GCC 12 scalarised the accumulators and vectorised the
   tap loop with gathers, 3x slower), the last partial chunk masked (AVX-512) or scalar. */
SF_NOINLINE SF_NOCLONE SF_UNUSED static void sf_conv_tile1(float *restrict T, long span, const float *restrict x,
    long cplane, const float *restrict wp, long C, long taps, const long *restrict off, const float *restrict bias)
{{
    const float b0 = bias ? bias[0] : 0.0f;  /* the accumulators start at the bias (NULL: none) */
    long q = 0;
#if defined(SF_AVX512_TILES)
    /* explicit FMAs: a GNU-vector a * b + c is not contracted in ISO C mode */
    for (; q + 32 <= span; q += 32) {{
        sf_v16 a0 = SF_SET1(b0), a1 = SF_SET1(b0);
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++) {{
                const float *xt = x + c*cplane + off[t] + q;
                const sf_v16 w = SF_SET1(wp[c*taps + t]);
                a0 = SF_FMA16(w, SF_LOAD16(xt), a0);
                a1 = SF_FMA16(w, SF_LOAD16(xt + 16), a1);
            }}
        SF_STORE16(T + q, a0); SF_STORE16(T + q + 16, a1);
    }}
    if (q < span) {{  /* the last partial chunk in one pass, masked */
        const long r = span - q;
        const sf_mask16 m0 = (sf_mask16)(r >= 16 ? 0xFFFFu : (1u << r) - 1u);
        const sf_mask16 m1 = (sf_mask16)(r > 16 ? (1u << (r - 16)) - 1u : 0u);
        sf_v16 a0 = SF_SET1(b0), a1 = SF_SET1(b0);
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++) {{
                const float *xt = x + c*cplane + off[t] + q;
                const sf_v16 w = SF_SET1(wp[c*taps + t]);
                a0 = SF_FMA16(w, SF_LOADM(m0, xt), a0);
                if (m1) a1 = SF_FMA16(w, SF_LOADM(m1, xt + 16), a1);
            }}
        SF_STOREM(T + q, m0, a0); SF_STOREM(T + q + 16, m1, a1);
        q = span;
    }}
#elif defined(__GNUC__)
    typedef float sf_vec __attribute__((vector_size({4 * CHUNK}), aligned(4), may_alias));
    for (; q + {CHUNK} <= span; q += {CHUNK}) {{
        sf_vec acc = {{0}};
        acc += b0;
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++)
                acc += wp[c*taps + t] * *(const sf_vec *)(x + c*cplane + off[t] + q);
        *(sf_vec *)(T + q) = acc;
    }}
#endif
#if !defined(SF_AVX512_TILES)
    for (; q < span; q++) {{
        float acc = b0;
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++) acc = SF_FMA(wp[c*taps + t], x[c*cplane + off[t] + q], acc);
        T[q] = acc;
    }}
#endif
}}
"""
    if name.startswith("sf_conv_tile"):
        mb = int(name[len("sf_conv_tile"):])

        def tail(v):  # v (1 or 2) masked 16-lane vectors per channel
            decl = " ".join(f"sf_v16 c{i}_{e} = SF_SET1(bias ? bias[{i}] : 0.0f);" for i in range(mb) for e in range(v))
            loads = " ".join(f"const sf_v16 x{e} = SF_LOADM(m{e}, xt + {16 * e});" for e in range(v))
            fma = "\n".join(f"                {{ const sf_v16 wv = SF_SET1(w[{i}]); "
                            + " ".join(f"c{i}_{e} = SF_FMA16(wv, x{e}, c{i}_{e});" for e in range(v)) + " }"
                            for i in range(mb))
            store = " ".join(f"SF_STOREM(T + {i}*span + q + {16 * e}, m{e}, c{i}_{e});"
                             for i in range(mb) for e in range(v))
            return f"""{{
    {decl}
    for (long c = 0; c < C; c++)
        for (long t = 0; t < taps; t++) {{
            const float *restrict xt = x + c*cplane + off[t] + q;
            const float *restrict w = wp + (c*taps + t)*{mb};
            {loads}
{fma}
        }}
    {store}
}}"""
        def conv_body(rows, cols):
            return f"""    long q = 0;
    for (; q + {CHUNK} <= span; q += {CHUNK})
        for (int a0 = 0; a0 < {mb}; a0 += {rows})
            for (int e0 = 0; e0 < {CHUNK}; e0 += {cols}) {{
        float acc[{rows}][{cols}];
        for (int a = 0; a < {rows}; a++) for (int e = 0; e < {cols}; e++) acc[a][e] = bias ? bias[a0 + a] : 0.0f;
        for (long c = 0; c < C; c++) {{
            for (long t = 0; t < taps; t++) {{
                const float *restrict xt = x + c*cplane + off[t] + q + e0;
                const float *restrict w = wp + (c*taps + t)*{mb} + a0;
{acc_lines(rows, "w[{i}]", cols)}
            }}
        }}
        for (int a = 0; a < {rows}; a++) for (int e = 0; e < {cols}; e++) T[(a0 + a)*span + q + e0 + e] = acc[a][e];
            }}
    /* the last partial chunk in one pass, masked (a function of its own: inline here, it made
       GCC 12 allocate the main loop's registers worse -- 3.5x slower); portable: one at a time */
#if defined(SF_AVX512_TILES)
    if (q < span) sf_conv_tail{mb}(T, span, q, x, cplane, wp, C, taps, off, bias);
#else
    for (; q < span; q++)
        for (int a = 0; a < {mb}; a++) {{
            float s = bias ? bias[a] : 0.0f;
            for (long c = 0; c < C; c++)
                for (long t = 0; t < taps; t++) s = SF_FMA(wp[(c*taps + t)*{mb} + a], x[c*cplane + off[t] + q], s);
            T[a*span + q] = s;
        }}
#endif
"""
        def conv_avx2(rows):
            init = "bias ? bias[a0 + {i}] : 0.0f"
            decl, fma = _v8_block(rows, "w + {i}", "xt", "            ", init=init)
            mdecl, mfma = _v8_block(rows, "w + {i}", "xt", "            ", masked=True, init=init)
            store = "\n".join(f"            _mm256_storeu_ps(T + (a0 + {i})*span + q, c{i}_0); "
                              f"_mm256_storeu_ps(T + (a0 + {i})*span + q + 8, c{i}_1);" for i in range(rows))
            mstore = "\n".join(f"            _mm256_maskstore_ps(T + (a0 + {i})*span + q, m0, c{i}_0); "
                               f"_mm256_maskstore_ps(T + (a0 + {i})*span + q + 8, m1, c{i}_1);" for i in range(rows))
            return f"""    long q = 0;
    for (; q + 16 <= span; q += 16)
        for (int a0 = 0; a0 < {mb}; a0 += {rows}) {{
{decl}
            for (long c = 0; c < C; c++)
                for (long t = 0; t < taps; t++) {{
                    const float *restrict xt = x + c*cplane + off[t] + q;
                    const float *restrict w = wp + (c*taps + t)*{mb} + a0;
{fma}
                }}
{store}
        }}
    if (q < span) {{
        /* the last partial chunk: masked loads and stores */
        const __m256i n = _mm256_set1_epi32((int)(span - q));
        const __m256i m0 = _mm256_cmpgt_epi32(n, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i m1 = _mm256_cmpgt_epi32(n, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15));
        for (int a0 = 0; a0 < {mb}; a0 += {rows}) {{
{mdecl}
            for (long c = 0; c < C; c++)
                for (long t = 0; t < taps; t++) {{
                    const float *restrict xt = x + c*cplane + off[t] + q;
                    const float *restrict w = wp + (c*taps + t)*{mb} + a0;
{mfma}
                }}
{mstore}
        }}
    }}
"""
        tail_fn = f"""#if defined(SF_AVX512_TILES)
/* Positions q.. of sf_conv_tile{mb} (fewer than {CHUNK}), masked. */
SF_NOINLINE SF_UNUSED static void sf_conv_tail{mb}(float *restrict T, long span, long q, const float *restrict x,
    long cplane, const float *restrict wp, long C, long taps, const long *restrict off, const float *restrict bias)
{{
    if (span - q > 16) {{
        const sf_mask16 m0 = 0xFFFF, m1 = (sf_mask16)((1u << (span - q - 16)) - 1u);
        {tail(2)}
    }} else {{
        const sf_mask16 m0 = (sf_mask16)((1u << (span - q)) - 1u);
        {tail(1)}
    }}
}}
#endif
"""
        if mb == CM_CHANNELS:
            return _conv_tile_cm(name, conv_body, conv_avx2)
        return tail_fn + f"""/* Register-blocked conv tile: T[a*span + q] = sum over c < C, t < taps of
   wp[(c*taps + t)*{mb} + a] * x[c*cplane + off[t] + q], q < span; {mb} channels x {CHUNK} positions in
   registers; the positions past the last whole chunk with masked loads and stores, so a small
   plane (13x13: 169 positions) costs no multiply-adds on padding (rounded up to 192 before).
   The accumulators start at bias[a] (NULL: 0): no pass of its own over the tile. */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T, long span, const float *restrict x, long cplane,
    const float *restrict wp, long C, long taps, const long *restrict off, const float *restrict bias)
{{
{_register_blocks(mb, conv_body, conv_avx2)}}}
"""
    if name == "sf_mm_tile1":
        return f"""/* Matmul tile of one row (a matrix-vector product): T[j] = sum over r < K of a[r] * b[r*n2 + j]
   (B row-major: one panel as wide as the row). B is streamed row by row, 4 rows per sweep over T
   (in L1), {CHUNK} columns per step in a GNU vector (registers; see sf_conv_tile1). */
SF_NOINLINE SF_NOCLONE SF_UNUSED static void sf_mm_tile1(float *restrict T, long n2, const float *restrict a, long lda,
    long K, const float *restrict b)
{{
    (void)lda;
    for (long j = 0; j < n2; j++) T[j] = 0;
#if defined(__GNUC__)
    typedef float sf_vec __attribute__((vector_size({4 * CHUNK}), aligned(4), may_alias));
    for (long i = 0; i < K / 4; i++) {{
        const long r = 4*i;
        const float a0 = a[r], a1 = a[r + 1], a2 = a[r + 2], a3 = a[r + 3];
        const float *restrict b0 = b + r*n2;
        for (long q = 0; q < n2; q += {CHUNK})
            *(sf_vec *)(T + q) += a0 * *(const sf_vec *)(b0 + q) + a1 * *(const sf_vec *)(b0 + n2 + q)
                + a2 * *(const sf_vec *)(b0 + 2*n2 + q) + a3 * *(const sf_vec *)(b0 + 3*n2 + q);
    }}
    for (long r = K / 4 * 4; r < K; r++)
        for (long q = 0; q < n2; q += {CHUNK}) *(sf_vec *)(T + q) += a[r] * *(const sf_vec *)(b + r*n2 + q);
#else
    for (long r = 0; r < K; r++)
        for (long j = 0; j < n2; j++) T[j] = SF_FMA(a[r], b[r*n2 + j], T[j]);
#endif
}}
"""
    if name.startswith("sf_mm_tile"):
        mb = int(name[len("sf_mm_tile"):])

        def mm_body(rows, cols):
            return f"""        for (long q = 0; q < n2; q += {CHUNK})
            for (int i0 = 0; i0 < {mb}; i0 += {rows})
                for (int e0 = 0; e0 < {CHUNK}; e0 += {cols}) {{
            float acc[{rows}][{cols}];
            for (int i = 0; i < {rows}; i++) for (int e = 0; e < {cols}; e++) acc[i][e] = 0;
            for (long r = 0; r < kn; r++) {{
                const float *restrict xt = b + q*K + (k0 + r)*{CHUNK} + e0;
                const float *restrict ar = ap[r] + i0;
{acc_lines(rows, "ar[{i}]", cols)}
            }}
            for (int i = 0; i < {rows}; i++) for (int e = 0; e < {cols}; e++) T[(i0 + i)*n2 + q + e0 + e] += acc[i][e];
                }}
"""
        def mm_avx2(rows):
            decl, fma = _v8_block(rows, "ar + {i}", "xt", "                ")
            store = "\n".join(
                f"                {{ float *p = T + (i0 + {i})*n2 + q + e0; "
                f"_mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), c{i}_0)); "
                f"_mm256_storeu_ps(p + 8, _mm256_add_ps(_mm256_loadu_ps(p + 8), c{i}_1)); }}" for i in range(rows))
            return f"""        for (long q = 0; q < n2; q += {CHUNK})
            for (int i0 = 0; i0 < {mb}; i0 += {rows})
                for (int e0 = 0; e0 < {CHUNK}; e0 += 16) {{
{decl}
                for (long r = 0; r < kn; r++) {{
                    const float *restrict xt = b + q*K + (k0 + r)*{CHUNK} + e0;
                    const float *restrict ar = ap[r] + i0;
{fma}
                }}
{store}
                }}
"""
        return f"""/* Register-blocked matmul tile: T[i*n2 + j] = sum over r < K of a[i*lda + r] * B[r][j], i < {mb},
   B packed in panels of {CHUNK} columns (B[r][q + e] at b[q*K + r*{CHUNK} + e]: one contiguous
   stream per chunk); the A block is transposed 256 columns at a time (its rows may share an L1 set). */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T, long n2, const float *restrict a, long lda, long K,
    const float *restrict b)
{{
    float ap[256][{mb}];
    for (long i = 0; i < {mb} * n2; i++) T[i] = 0;
    for (long k0 = 0; k0 < K; k0 += 256) {{
        const long kn = K - k0 < 256 ? K - k0 : 256;
        for (long r = 0; r < kn; r++) for (int i = 0; i < {mb}; i++) ap[r][i] = a[i*lda + k0 + r];
{_register_blocks(mb, mm_body, mm_avx2)}    }}
}}
"""
    return {
        "sf_pool2d": """/* One plane of a 2-D MaxPool (avg = 0) or the window sums of an AveragePool (avg = 1), dilation 1:
   T[o*OW + j] = max / sum over the taps inside the input of x[o*sh - ph + r][j*sw - pw + c].
   Per output row, first the rows of its window into V (contiguous vector loops; V[pw + q] holds
   column q, its pads the neutral value), then the columns at stride sw out of V (in L1). Inlined
   into every call: constant window and strides, so the column loop vectorises (the former
   column-first pass did the strided reads on every input row, 2.5x slower than ONNX Runtime). */
__attribute__((always_inline)) SF_UNUSED static inline void sf_pool2d(float *restrict T, const float *restrict x,
    long H, long W, long OH, long OW, long kh, long kw, long sh, long sw, long ph, long pw, int avg,
    float *restrict V, long VW)
{
    const float init = avg ? 0.0f : -INFINITY;
    for (long q = 0; q < VW; q++) V[q] = init;
    for (long o = 0; o < OH; o++) {
        const long r0 = o*sh - ph < 0 ? ph - o*sh : 0;
        const long r1 = H + ph - o*sh < kh ? H + ph - o*sh : kh;
        float *restrict v = V + pw;
        const float *restrict xr = x + (o*sh - ph + r0)*W;
        if (r0 >= r1) for (long q = 0; q < W; q++) v[q] = init;  /* a window wholly in the padding */
        else for (long q = 0; q < W; q++) v[q] = xr[q];
        for (long r = r0 + 1; r < r1; r++) {
            xr += W;
            if (avg) for (long q = 0; q < W; q++) v[q] += xr[q];
            else for (long q = 0; q < W; q++) v[q] = xr[q] > v[q] ? xr[q] : v[q];
        }
        float *restrict t = T + o*OW;
        for (long j = 0; j < OW; j++) t[j] = V[j*sw];
        for (long c = 1; c < kw; c++) {
            if (avg) for (long j = 0; j < OW; j++) t[j] += V[j*sw + c];
            else for (long j = 0; j < OW; j++) t[j] = V[j*sw + c] > t[j] ? V[j*sw + c] : t[j];
        }
    }
}
""",
        "sf_conv_copy": """/* Zero-padded, stride-phase-split copy of NC planes HxW: dst[nc][ph][pw][i][j] = x at padded
   (i*s0 + ph, j*s1 + pw), i.e. x[nc][i*s0 + ph - p0][j*s1 + pw - p1] when inside, else 0. */
SF_NOINLINE SF_UNUSED static void sf_conv_copy(float *restrict dst, const float *restrict x, long NC, long H, long W,
    long s0, long s1, long hq, long wq, long p0, long p1)
{
    for (long nc = 0; nc < NC; nc++)
        for (long ph = 0; ph < s0; ph++)
            for (long pw = 0; pw < s1; pw++)
                for (long i = 0; i < hq; i++, dst += wq) {
                    /* the valid columns j0 <= j < j1 in three plain loops: no conditional loads
                       (gcc 12 -O3 -march=native mis-vectorised the former per-element ternary) */
                    const long ii = i*s0 + ph - p0;
                    long j0 = pw >= p1 ? 0 : (p1 - pw + s1 - 1) / s1;
                    long j1 = W - 1 + p1 - pw < 0 ? 0 : (W - 1 + p1 - pw) / s1 + 1;
                    if (ii < 0 || ii >= H) j0 = j1 = wq;
                    if (j0 > wq) j0 = wq;
                    if (j1 > wq) j1 = wq;
                    if (j1 < j0) j1 = j0;
                    const long base = (nc*H + ii)*W + pw - p1;
                    for (long j = 0; j < j0; j++) dst[j] = 0.0f;
                    if (s1 == 1) for (long j = j0; j < j1; j++) dst[j] = x[base + j];
                    else for (long j = j0; j < j1; j++) dst[j] = x[base + j*s1];
                    for (long j = j1; j < wq; j++) dst[j] = 0.0f;
                }
}
""",
        "sf_conv_copy_cols": """/* Zero-padded, column-shifted copy of NC planes HxW for a kernel KW columns wide (dilation d1):
   dst[nc][ph][kw][i][j] = x at padded (i*s0 + ph, j*s1 + kw*d1), j < OW, i.e.
   x[nc][i*s0 + ph - p0][j*s1 + kw*d1 - p1] when inside, else 0. Tap (r, kw) then reads its
   output positions as one contiguous run of row pitch OW: no junk columns, no strided loads. */
SF_NOINLINE SF_UNUSED static void sf_conv_copy_cols(float *restrict dst, const float *restrict x, long NC, long H,
    long W, long s0, long s1, long hq, long OW, long p0, long p1, long KW, long d1)
{
    for (long nc = 0; nc < NC; nc++)
        for (long ph = 0; ph < s0; ph++)
            for (long kw = 0; kw < KW; kw++)
                for (long i = 0; i < hq; i++, dst += OW) {
                    const long ii = i*s0 + ph - p0, sh = kw*d1 - p1;
                    /* valid columns j0 <= j < j1: 0 <= j*s1 + sh < W */
                    long j0 = sh >= 0 ? 0 : (-sh + s1 - 1) / s1;
                    long j1 = W - 1 - sh < 0 ? 0 : (W - 1 - sh) / s1 + 1;
                    if (ii < 0 || ii >= H) j0 = j1 = OW;
                    if (j0 > OW) j0 = OW;
                    if (j1 > OW) j1 = OW;
                    if (j1 < j0) j1 = j0;
                    const long base = (nc*H + ii)*W + sh;
                    for (long j = 0; j < j0; j++) dst[j] = 0.0f;
                    if (s1 == 1) for (long j = j0; j < j1; j++) dst[j] = x[base + j];
                    else for (long j = j0; j < j1; j++) dst[j] = x[base + j*s1];
                    for (long j = j1; j < OW; j++) dst[j] = 0.0f;
                }
}
""",
        "sf_conv_pack": """/* Conv weights [G*MG][C][taps] repacked as [G][B][C][taps][mb], B = ceil(MG/mb) blocks of mb
   output channels per group, zero past the group's MG channels. */
SF_NOINLINE SF_UNUSED static void sf_conv_pack(float *restrict dst, const float *restrict w, long G, long MG, long C,
    long taps, long mb)
{
    for (long g = 0; g < G; g++)
        for (long j = 0; j < (MG + mb - 1) / mb; j++)
            for (long c = 0; c < C; c++)
                for (long t = 0; t < taps; t++)
                    for (long a = 0; a < mb; a++, dst++) {
                        const long m = j*mb + a;
                        *dst = m < MG ? w[((g*MG + m)*C + c)*taps + t] : 0.0f;
                    }
}
""",
        "sf_pack_b": """/* MatMul/Gemm B ([nb][K][N], or [N][K] when trans) packed in panels of P columns:
   dst[b][p][r][e] = B[b][r][p*P + e], zero past N (P = N2: row-major, zero-padded). */
SF_NOINLINE SF_UNUSED static void sf_pack_b(float *restrict dst, const float *restrict src, long nb, long K, long N,
    long N2, int trans, long P)
{
    for (long bb = 0; bb < nb; bb++, src += K*N)
        for (long p = 0; p < N2; p += P)
            for (long r = 0; r < K; r++)
                for (long e = 0; e < P; e++, dst++) {
                    const long j = p + e;
                    *dst = j >= N ? 0.0f : trans ? src[j*K + r] : src[r*N + j];
                }
}
""",
    }[name]
