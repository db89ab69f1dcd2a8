"""C text of the row helpers (used through ``Kernel.use_helper``, one copy per translation unit):
the AVX-512 / AVX2 vector exps ``sf_exp16`` / ``sf_exp8``, the AVX-512 GELU block
``sf_gelu_block``, the softmax row helpers ``sf_expsum*``, ``sf_divq`` and ``sf_drain``, and the
non-temporal row stores ``sf_stream`` with their fence; and :data:`SIMD_DEFS`, the AVX-512
operations they use beyond the prelude's (GCC builtins, no ``<immintrin.h>``). Each is one
standalone C text; :func:`~solverfuse.emit.chelpers.helper_text` serves them with the others.

>>> sorted(ROW_HELPERS)[:3], "sf_exp16" in ROW_HELPERS["sf_expsum"]
(['sf_divq', 'sf_drain', 'sf_expsum'], True)
"""
from __future__ import annotations

from .row_loop import PIPELINE_CHUNK, SUM_BLOCK

# ---- row helpers of the softmax (helper `softmax`): a vector exp and non-temporal row stores.
# Kept apart from helper_text's dict: each is one standalone C text, used through Kernel.use_helper.

#: 2^(j/16), j < 16, rounded to float: the table of sf_exp16's range reduction.
_EXP2_16 = ("0x1p+0f, 0x1.0b5586p+0f, 0x1.172b84p+0f, 0x1.2387a6p+0f, 0x1.306fe0p+0f, 0x1.3dea64p+0f, "
            "0x1.4bfdaep+0f, 0x1.5ab07ep+0f, 0x1.6a09e6p+0f, 0x1.7a1148p+0f, 0x1.8ace54p+0f, 0x1.9c4918p+0f, "
            "0x1.ae89fap+0f, 0x1.c199bep+0f, 0x1.d5818ep+0f, 0x1.ea4afap+0f")

#: AVX-512 operations the row helpers use beyond the prelude's (GCC: builtins, no <immintrin.h>).
SIMD_DEFS = """#if defined(SF_AVX512_TILES) && !defined(SF_ROW_SIMD)
#define SF_ROW_SIMD 1
#if defined(__clang__)
#define SF_MAX16(a, b) _mm512_max_ps(a, b)
#define SF_MIN16(a, b) _mm512_min_ps(a, b)
#define SF_PERM16(t, idx) _mm512_permutexvar_ps(_mm512_castps_si512(idx), t)
#define SF_PERM32(a, idx, b) _mm512_permutex2var_ps(a, _mm512_castps_si512(idx), b)
#define SF_SCALEF16(a, b) _mm512_scalef_ps(a, b)
#define SF_STREAM16(p, v) _mm512_stream_ps(p, v)
#define SF_MASKZ16(m, v) _mm512_maskz_mov_ps(m, v)
#define SF_GE16(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#else
typedef int sf_v16i __attribute__((vector_size(64)));
#define SF_MAX16(a, b) __builtin_ia32_maxps512_mask((a), (b), SF_ZERO16, (sf_mask16)-1, 4)
#define SF_MIN16(a, b) __builtin_ia32_minps512_mask((a), (b), SF_ZERO16, (sf_mask16)-1, 4)
#define SF_PERM16(t, idx) __builtin_ia32_permvarsf512_mask((t), (sf_v16i)(idx), SF_ZERO16, (sf_mask16)-1)
#define SF_PERM32(a, idx, b) __builtin_ia32_vpermt2varps512_mask((sf_v16i)(idx), (a), (b), (sf_mask16)-1)
#define SF_SCALEF16(a, b) __builtin_ia32_scalefps512_mask((a), (b), SF_ZERO16, (sf_mask16)-1, 4)
#define SF_STREAM16(p, v) __builtin_ia32_movntps512((p), (v))
#define SF_MASKZ16(m, v) __builtin_ia32_movaps512_mask((v), SF_ZERO16, (m))
#define SF_GE16(a, b) ((sf_mask16)__builtin_ia32_cmpps512_mask((a), (b), 29, (sf_mask16)-1, 4))  /* _CMP_GE_OQ */
#endif
/* The sum of 16 lanes as a tree of halves (4 dependent adds; a loop over the lanes is 16). */
__attribute__((always_inline)) SF_UNUSED static inline float sf_hsum16(sf_v16 v)
{
#if defined(__clang__) || __GNUC__ >= 12
    typedef float sf_v8h __attribute__((vector_size(32)));
    typedef float sf_v4h __attribute__((vector_size(16)));
    const sf_v8h h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
                   + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const sf_v4h q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
    return (q[0] + q[2]) + (q[1] + q[3]);
#else
    float s = 0;
    for (int l = 0; l < 16; l++) s += v[l];
    return s;
#endif
}
#endif
"""

#: C text of the AVX-512 vector exp ``sf_exp16(x, table)`` (a building block other vector helpers
#: may call: prepend it to their text; it defines itself once per translation unit).
SF_EXP16 = SIMD_DEFS + f"""#if defined(SF_AVX512_TILES) && !defined(SF_EXP16_DONE)
#define SF_EXP16_DONE 1
/* e^x on 16 float lanes (AVX-512): n/16 = x / ln 2 rounded to a multiple of 1/16 by the
   1.5 * 2^19 shift (its low 4 bits are n mod 16); r = x - (n/16) ln2 in two parts (|r| <= ln2/32);
   e^x = 2^floor(n/16) * T[n mod 16] * (1 + r + r^2/2 + r^3/6), T the 16 values 2^(j/16) rounded to
   float (one vpermps reads T[n mod 16] from the low 4 bits of the shifted value), the last step
   T + T * (e^r - 1) as one FMA and 2^floor(n/16) by vscalefps of n/16 itself (overflow to inf,
   subnormal results, underflow to 0, in the hardware; the shift by 2^19, not 2^23, saves the
   multiply by 1/16, with the same n and r). x is clamped to [-104, 89] (NaN passes the clamps:
   max/min return their second operand when either is NaN). 12 vector operations against sf_expf's ~28; error at most 1.5 ulp against float64 exp by the sum of the
   table's rounding (0.5 ulp), the FMA's (0.5) and the polynomial's (~0.15); 1.06 measured over
   every 211th float32 in [-110, 110] (tests/test_emit_softmax.py checks <= 1.5); subnormal
   results rounded twice. ``tab``: SF_LOAD16(sf_exp2_16). */
static const float sf_exp2_16[16] SF_ALIGN64 = {{{_EXP2_16}}};
__attribute__((always_inline)) SF_UNUSED static inline sf_v16 sf_exp16_nonpos(sf_v16 x, sf_v16 tab)
{{
    x = SF_MAX16(SF_SET1(-104.0f), x);
    const sf_v16 t = SF_FMA16(x, SF_SET1(0x1.715476p+0f), SF_SET1(786432.0f));
    const sf_v16 n16 = t - SF_SET1(786432.0f);
    sf_v16 r = SF_FMA16(n16, SF_SET1(-0x1.62e430p-1f), x);
    r = SF_FMA16(n16, SF_SET1(0x1.05c610p-29f), r);
    sf_v16 q = SF_FMA16(SF_SET1(0x1.555556p-3f), r, SF_SET1(0.5f));
    q = SF_FMA16(q, r, SF_SET1(1.0f));
    const sf_v16 T = SF_PERM16(tab, t);
    return SF_SCALEF16(SF_FMA16(T, q * r, T), n16);
}}
/* sf_exp16_nonpos: the same for x <= 0 or NaN (a value less its row's max), without the upper clamp
   (one operation fewer: softmax_rows 5% less time in cache and at 2x the LLC). */
__attribute__((always_inline)) SF_UNUSED static inline sf_v16 sf_exp16(sf_v16 x, sf_v16 tab)
{{
    return sf_exp16_nonpos(SF_MIN16(SF_SET1(89.0f), x), tab);
}}
#endif
"""

#: C text of the AVX-512 GELU of a block of at most 16 floats, ``sf_gelu_block(dst, g, n)`` (the
#: row loop's output block, :mod:`~solverfuse.emit.rows`); its coefficient table is printed by
#: benchmarks/gelu_fit.py.
SF_GELU16 = SIMD_DEFS + """#if defined(SF_AVX512_TILES) && !defined(SF_GELU16_DONE)
#define SF_GELU16_DONE 1
/* Coefficients of r^j (row j) of Phi(x) = 1/2 + erf(x / sqrt 2) / 2 on 32 intervals of x: see sf_gelu16. */
static const float sf_gelu_tab[5][32] SF_ALIGN64 = {
    {0x1.9e271ap-25f, 0x1.33cae2p-22f, 0x1.9ae06ap-20f, 0x1.eccf6ap-18f, 0x1.09ad9p-15f, 0x1.01ab6ap-13f, 0x1.c1e7p-12f, 0x1.61de1ap-10f,
     0x1.f60e36p-9f, 0x1.41a0ecp-7f, 0x1.74bcf4p-6f, 0x1.877f9ep-5f, 0x1.7599e4p-4f, 0x1.44ed0ap-3f, 0x1.028d68p-2f, 0x1.7a4ed4p-2f,
     0x1p-1f, 0x1.42d896p-1f, 0x1.7eb94cp-1f, 0x1.aec4bep-1f, 0x1.d14cc4p-1f, 0x1.e78806p-1f, 0x1.f45a18p-1f, 0x1.faf97cp-1f,
     0x1.fe09f2p-1f, 0x1.ff4f1p-1f, 0x1.ffc7c4p-1f, 0x1.ffefe6p-1f, 0x1.fffbdap-1f, 0x1.ffff0ap-1f, 0x1.ffffccp-1f, 0x1.fffff6p-1f},
    {0x1.1cd712p-22f, 0x1.8eb1f8p-20f, 0x1.f35704p-18f, 0x1.17cbb6p-15f, 0x1.1891ap-13f, 0x1.f77e92p-12f, 0x1.944p-10f, 0x1.226d8cp-8f,
     0x1.756a58p-7f, 0x1.ad9e92p-6f, 0x1.ba4c66p-5f, 0x1.977696p-4f, 0x1.4fe54ap-3f, 0x1.ef8edap-3f, 0x1.471d4ap-2f, 0x1.827048p-2f,
     0x1.9883bp-2f, 0x1.827048p-2f, 0x1.471d4ap-2f, 0x1.ef8edap-3f, 0x1.4fe54ap-3f, 0x1.977696p-4f, 0x1.ba4c66p-5f, 0x1.ad9e92p-6f,
     0x1.756a58p-7f, 0x1.226d8cp-8f, 0x1.944p-10f, 0x1.f77e92p-12f, 0x1.1891ap-13f, 0x1.17cbb6p-15f, 0x1.f35704p-18f, 0x1.8f14dp-20f},
    {0x1.7c09a2p-21f, 0x1.f29ee8p-19f, 0x1.236456p-16f, 0x1.2f3236p-14f, 0x1.189fccp-12f, 0x1.cd9958p-11f, 0x1.50e79cp-9f, 0x1.b3aa4ap-8f,
     0x1.f1e6cap-7f, 0x1.f53a84p-6f, 0x1.ba4c7ep-5f, 0x1.538cfap-4f, 0x1.bfdb4cp-4f, 0x1.ef8d6cp-4f, 0x1.b425b8p-4f, 0x1.019f64p-4f,
     -0x1.fc3a94p-49f, -0x1.019f64p-4f, -0x1.b425b8p-4f, -0x1.ef8d6cp-4f, -0x1.bfdb4cp-4f, -0x1.538cfap-4f, -0x1.ba4c7ep-5f, -0x1.f53a84p-6f,
     -0x1.f1e6cap-7f, -0x1.b3aa4ap-8f, -0x1.50e79cp-9f, -0x1.cd9958p-11f, -0x1.189fccp-12f, -0x1.2f3236p-14f, -0x1.236456p-16f, -0x1.f12be2p-19f},
    {0x1.53a0f6p-20f, 0x1.9d1b26p-18f, 0x1.bd4de2p-16f, 0x1.a8ab06p-14f, 0x1.6581cp-12f, 0x1.08e872p-10f, 0x1.582ca2p-9f, 0x1.85c9f6p-8f,
     0x1.7d83fap-7f, 0x1.3e3a98p-6f, 0x1.b9017ep-6f, 0x1.e01936p-6f, 0x1.58d316p-6f, -0x1.257bep-13f, -0x1.e3cde2p-6f, -0x1.c7e6aap-5f,
     -0x1.0eec8cp-4f, -0x1.c7e6aap-5f, -0x1.e3cde2p-6f, -0x1.257bep-13f, 0x1.58d316p-6f, 0x1.e01936p-6f, 0x1.b9017ep-6f, 0x1.3e3a98p-6f,
     0x1.7d83fap-7f, 0x1.85c9f6p-8f, 0x1.582ca2p-9f, 0x1.08e872p-10f, 0x1.6581cp-12f, 0x1.a8ab06p-14f, 0x1.bd4de2p-16f, 0x1.915c1ap-18f},
    {0x1.9f3a36p-20f, 0x1.d4afd6p-18f, 0x1.d1616cp-16f, 0x1.95196cp-14f, 0x1.33adf8p-12f, 0x1.9514f6p-11f, 0x1.c998a2p-10f, 0x1.b444c8p-9f,
     0x1.5481a6p-8f, 0x1.961e6ap-8f, 0x1.232b5ap-8f, -0x1.9f2734p-10f, -0x1.6cc182p-7f, -0x1.48fd7cp-6f, -0x1.715d02p-6f, -0x1.ecd9f2p-7f,
     0x1.93ae92p-43f, 0x1.ecd9f2p-7f, 0x1.715d02p-6f, 0x1.48fd7cp-6f, 0x1.6cc182p-7f, 0x1.9f2734p-10f, -0x1.232b5ap-8f, -0x1.961e6ap-8f,
     -0x1.5481a6p-8f, -0x1.b444c8p-9f, -0x1.c998a2p-10f, -0x1.9514f6p-11f, -0x1.33adf8p-12f, -0x1.95196cp-14f, -0x1.d1616ap-16f, -0x1.11188ap-17f}
};
/* GELU (erf form), x Phi(x), on 16 lanes: x clamped to [-5.5, 5.0911684] (Phi there 1.9e-8 and
   1 - 1.8e-7, sf_geluf's upper clamp), n = round(3 x) by the 1.5 * 2^23 shift (its low 5 bits,
   n + 16, pick the interval), r = x - n/3 (|r| <= 1/6), Phi = a degree-4 polynomial in r whose
   5 coefficients two-table vpermps read per lane (T: the table's 10 rows of 16). 12 vector
   operations and 5 permutes where sf_geluf's rational fit takes 15 multiplies and FMAs and a
   division (Zen 4, the LN + GELU output loop in L1: 0.34 -> 0.28 ns per element). Error against
   float64 within 0.66 of the bound tests/test_emit_erf.py checks (0.5 |x| 3.7e-7 plus 2
   spacings of the result), the worst at the upper clamp; NaN stays NaN, +inf -> +inf; below
   -5.5 Phi is 0, as in sf_geluf (-0 for a finite x, NaN for -inf, as ONNX Runtime gives). */
__attribute__((always_inline)) SF_UNUSED static inline sf_v16 sf_gelu16(sf_v16 x, const sf_v16 *T)
{
    const sf_v16 xc = SF_MIN16(SF_SET1(0x1.45d5b6p+2f), SF_MAX16(SF_SET1(-5.5f), x));
    const sf_v16 t = SF_FMA16(xc, SF_SET1(3.0f), SF_SET1(12582928.0f));
    const sf_v16 r = SF_FMA16(t - SF_SET1(12582928.0f), SF_SET1(-0x1.555556p-2f), xc);
    sf_v16 p = SF_FMA16(SF_PERM32(T[8], t, T[9]), r, SF_PERM32(T[6], t, T[7]));
    p = SF_FMA16(p, r, SF_PERM32(T[4], t, T[5]));
    p = SF_FMA16(p, r, SF_PERM32(T[2], t, T[3]));
    /* x >= -5.5 (false for NaN too: NaN * 0 is NaN); the zero-masked move folds into the multiply */
    return x * SF_MASKZ16(SF_GE16(x, SF_SET1(-5.5f)), SF_FMA16(p, r, SF_PERM32(T[0], t, T[1])));
}
#endif
"""

#: ``SF_NT_ALIGN``: the bytes a non-temporal vector store is aligned to (AVX-512 64, AVX2 32;
#: undefined where the target has no such stores), for the helpers' scalar prologues.
_NT_ALIGN = """#if defined(SF_AVX512_TILES) && !defined(SF_NT_ALIGN)
#define SF_NT_ALIGN 64
#elif defined(SF_AVX2_TILES) && !defined(SF_NT_ALIGN)
#define SF_NT_ALIGN 32
#endif
"""

#: ``sf_stream_fence()``: orders the non-temporal stores before it (once per translation unit).
_FENCE = """#if !defined(SF_FENCE_DONE)
#define SF_FENCE_DONE 1
SF_UNUSED static inline void sf_stream_fence(void)
{
#if defined(SF_AVX512_TILES) || defined(SF_AVX2_TILES)
    __builtin_ia32_sfence();
#endif
}
#endif
"""

#: C text of the AVX2 vector exps ``sf_exp8_wide(x, table)`` and ``sf_exp8(x, table, nonpos)`` (hosts with AVX2 and FMA, no AVX-512).
SF_EXP8 = """#if defined(SF_AVX2_TILES) && !defined(SF_EXP8_DONE)
#define SF_EXP8_DONE 1
/* e^x on 8 float lanes (AVX2 + FMA): as sf_exp16 with 8 table entries, n = round(8 x / ln 2),
   |r| <= ln2/16, and 2^floor(n/8) built by integer shifts in two factors 2^(k/2) (so subnormal
   results round once, at the last product; overflow to inf, underflow to 0). e^r - 1 is
   r + r^2 (c2 + c3 r), c2 and c3 the minimax pair on |r| <= ln2/16 (2.5e-8 absolute; Taylor's
   1/2, 1/6 leave 1.6e-7), evaluated as r^2 * (c2 + c3 r) + r so that r^2 and c2 + c3 r run side by
   side, and ln 2's low part enters in the last addend only: the chain from x to the result is
   7 operations (Horner to degree 4 was 9 and one more multiply; an in-L1 exp loop 8.6 -> 7.3
   cycles per vector, Zen 3). 22 vector operations against sf_expf's ~28; error at most 1.5 ulp
   against float64 exp (the table's 0.5, the FMA's 0.5, the polynomial's 0.2-0.4), 1.18 measured
   (tests/test_emit_softmax.py checks <= 1.5). ``tab``: _mm256_load_ps(sf_exp2_8). */
static const float sf_exp2_8[8] __attribute__((aligned(32))) = {
    0x1.0p+0f, 0x1.172b84p+0f, 0x1.306fe0p+0f, 0x1.4bfdaep+0f, 0x1.6a09e6p+0f, 0x1.8ace54p+0f, 0x1.ae89fap+0f,
    0x1.d5818ep+0f};
/* The reduction and polynomial both forms share: y = 2^((n mod 8) / 8) e^r, and *t = 1.5 * 2^23 + n
   (n in its low bits). */
__attribute__((always_inline)) SF_UNUSED static inline __m256 sf_exp8_frac(__m256 x, __m256 tab, __m256 *tp)
{
    const __m256 t = *tp = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+3f), _mm256_set1_ps(12582912.0f));
    const __m256 n = _mm256_sub_ps(t, _mm256_set1_ps(12582912.0f));
    const __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0x1.62e430p-4f), x);
    const __m256 rs = _mm256_fmadd_ps(n, _mm256_set1_ps(0x1.05c610p-32f), r);
    const __m256 r2 = _mm256_mul_ps(r, r);
    const __m256 a = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555d88p-3f), r, _mm256_set1_ps(0x1.00087cp-1f));
    const __m256 T = _mm256_permutevar8x32_ps(tab, _mm256_castps_si256(t));
    return _mm256_fmadd_ps(T, _mm256_fmadd_ps(r2, a, rs), T);
}
__attribute__((always_inline)) SF_UNUSED static inline __m256 sf_exp8_wide(__m256 x, __m256 tab)
{
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
    __m256 t;
    const __m256 y = sf_exp8_frac(x, tab, &t);
    const __m256i k = _mm256_srai_epi32(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000)), 3);
    const __m256i h = _mm256_srai_epi32(k, 1), e127 = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, e127), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(k, h), e127), 23));
    return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}
/* sf_exp8_wide where every lane is in [-87, 87] (or, ``nonpos``: every x <= 0 is >= -87): the
   result is a normal float, so 2^floor(n/8) is added to y's exponent bits in one integer add, and
   no clamp is needed (9 of 22 operations fewer, a compare and a movemask more: 0.59 -> 0.45 ns
   per element in an in-L1 exp loop, Zen 3). Any other vector (a NaN, a lane out of the range)
   takes sf_exp8_wide whole; the results are the same as its for the lanes in range. */
__attribute__((always_inline)) SF_UNUSED static inline __m256 sf_exp8(__m256 x, __m256 tab, int nonpos)
{
    const __m256 out = nonpos ? _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_NGE_UQ)
                              : _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(87.0f), _CMP_NLE_UQ);
    if (__builtin_expect(_mm256_movemask_ps(out), 0)) return sf_exp8_wide(x, tab);
    __m256 t;
    const __m256 y = sf_exp8_frac(x, tab, &t);
    /* t's low bits hold n (t = 1.5 * 2^23 + n): (t >> 3) << 23 is floor(n/8) << 23, the bits above wrapping off */
    const __m256i k = _mm256_slli_epi32(_mm256_srai_epi32(_mm256_castps_si256(t), 3), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), k));
}
__attribute__((always_inline)) SF_UNUSED static inline float sf_hsum8(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
#endif
"""

ROW_HELPERS = {
    "sf_lanesum64": SIMD_DEFS + """/* The 64 float partial sums of a row sum (emit/row_loop.py: lane_sums) added as a
   tree of halves: lanes l and l + 32, then l + 16, ..., 1, the order of one loop per level, so
   the float result is the same. AVX-512 (and sf_hsum16's tree): four vector loads, two levels
   of vector adds and sf_hsum16; the loops per level became ~60 scalar adds and shuffles per
   1,024 values in GCC's code (4% of the l1_overflow motif's time in cache). */
__attribute__((always_inline)) SF_UNUSED static inline float sf_lanesum64(const float *p)
{
#if defined(SF_AVX512_TILES) && (defined(__clang__) || __GNUC__ >= 12)
    return sf_hsum16((SF_LOAD16(p) + SF_LOAD16(p + 32)) + (SF_LOAD16(p + 16) + SF_LOAD16(p + 48)));
#else
    float t[32];
    for (int l = 0; l < 32; l++) t[l] = p[l] + p[l + 32];
    for (int w = 16; w; w /= 2)
        for (int l = 0; l < w; l++) t[l] += t[l + w];
    return t[0];
#endif
}
""",
    "sf_gelu_block": SF_GELU16 + """#if defined(SF_AVX2_TILES) && !defined(SF_GELU8_DONE)
#define SF_GELU8_DONE 1
/* sf_geluf (with FMA) on 8 lanes, operation for operation, so bit for bit: the clamp of |x| a
   vminps (a NaN lane takes the clamp, as the unsigned min of sf_geluf does), the sign put back
   with vorps, the x >= -5.5 test a vcmpps that keeps NaN lanes (NaN * phi is NaN either way).
   GCC's vectorised sf_geluf did the clamp, sign and test in integer vector instructions: a
   GELU loop in L1 0.40 -> 0.37 ns per element, residual_layernorm_gelu in cache 2-3% less time
   (Zen 3, medians of 20 side by side); at 2x the LLC no gain beyond noise. */
__attribute__((always_inline)) SF_UNUSED static inline __m256 sf_gelu8(__m256 x)
{
    const __m256 sgn = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_min_ps(_mm256_andnot_ps(sgn, x), _mm256_set1_ps(0x1.45d5b6p+2f));
    const __m256 z = _mm256_mul_ps(a, a);
    __m256 p, q;
    SF_GELU_PQ(_mm256_fmadd_ps, _mm256_set1_ps, p, q, z);
    const __m256 phi = _mm256_fmadd_ps(_mm256_or_ps(a, _mm256_and_ps(sgn, x)), _mm256_div_ps(p, q), _mm256_set1_ps(0.5f));
    return _mm256_mul_ps(x, _mm256_and_ps(phi, _mm256_cmp_ps(x, _mm256_set1_ps(-5.5f), _CMP_NLT_UQ)));
}
#endif
/* dst[i] = GELU(g[i]) for i < n <= 64: sf_gelu16 on each 16 (AVX-512; the last n % 16
   masked), with AVX2 + FMA sf_gelu8 on each 8 (the last n % 8 by sf_geluf), else sf_geluf.
   The table's rows are loads the compiler hoists out of the caller's loop.
   ``stream``: whole vectors at a 64-byte (AVX2: 32-byte) aligned dst are written with
   non-temporal stores (an output too large for the cache: no read of the line before it is
   written; the kernel calls sf_stream_fence() after). */
__attribute__((always_inline)) SF_UNUSED static inline void sf_gelu_block(float *dst, const float *g, long n, int stream)
{
#if defined(SF_AVX512_TILES)
    sf_v16 T[10];
    for (int j = 0; j < 10; j++) T[j] = SF_LOAD16(&sf_gelu_tab[j / 2][16 * (j % 2)]);
    long i = 0;
    if (stream && !((uintptr_t)dst & 63))
        for (; i + 16 <= n; i += 16) SF_STREAM16(dst + i, sf_gelu16(SF_LOAD16(g + i), T));
    for (; i + 16 <= n; i += 16) SF_STORE16(dst + i, sf_gelu16(SF_LOAD16(g + i), T));
    if (i < n) {
        const sf_mask16 k = (sf_mask16)((1u << (n - i)) - 1);
        SF_STOREM(dst + i, k, sf_gelu16(SF_LOADM(k, g + i), T));
    }
#elif defined(SF_AVX2_TILES)
    long i = 0;
    if (stream && !((uintptr_t)dst & 31))
        for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, sf_gelu8(_mm256_loadu_ps(g + i)));
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, sf_gelu8(_mm256_loadu_ps(g + i)));
    for (long j = n / 8 * 8; j < n; j++) dst[j] = sf_geluf(g[j]);
#else
    (void)stream;
    for (long i = 0; i < n; i++) dst[i] = sf_geluf(g[i]);
#endif
}
""" + _FENCE,
    "sf_expsum": SF_EXP16 + SF_EXP8 + """/* The exponentials of a softmax row block in place, e[i] = e^(e[i] - m) for i < n, returning their
   float sum: sf_exp16 on 16 lanes at a time with two partial sums, the remainder masked, the lanes
   added as a tree (AVX-512; an omp simd reduction adds its lanes one by one, 11% of l1_overflow's
   time with a call per 256 elements); with AVX2 + FMA sf_exp8 on 8 lanes, the last < 16 by sf_expf;
   else the prelude's sf_expf in a loop GCC vectorises. pf (or NULL): the line of pf + i is
   prefetched as e[i]'s is computed (the next row's input while this row's exponentials compute),
   into the L1, or with far (a constant where this is inlined) into the L2 only; pf2 (or NULL): the
   line of pf2 + i into the L2 as well (a row further on, emit/softmax.py).
   (No restrict: e and x are one array in sf_expsum; each iteration reads its x before it writes
   its e.) nonpos: m is the max of the values (x - m <= 0 or NaN): sf_exp16_nonpos. xs (or NULL):
   st[0], st[1] = the float sums of d = xs[i] - K and of d * d, i < n, in the same loop (a
   LayerNorm's statistics of the next row, emit/norm_stats.py: their loads and adds run while the
   exponentials keep the FMA units busy); a constant NULL where this is inlined leaves no trace. */
#define SF_PREFETCH_ROW(p, far) do { if (far) __builtin_prefetch((p), 0, 2); else __builtin_prefetch(p); } while (0)
__attribute__((always_inline)) SF_UNUSED static inline float sf_expsum_at(float *e, float m, long n, const float *x,
                                                                          int nonpos, const float *pf, int far,
                                                                          const float *pf2, const float *xs, float K,
                                                                          float *st)
{
#if defined(SF_AVX512_TILES)
#define SF_EXPV(v) (nonpos ? sf_exp16_nonpos((v), tab) : sf_exp16((v), tab))
    long i = 0;
    const sf_v16 tab = SF_LOAD16(sf_exp2_16), mv = SF_SET1(m), kv = SF_SET1(K);
    sf_v16 s0 = SF_ZERO16, s1 = SF_ZERO16, d0 = SF_ZERO16, d1 = SF_ZERO16, q0 = SF_ZERO16, q1 = SF_ZERO16;
    for (; i + 32 <= n; i += 32) {
        if (pf) { SF_PREFETCH_ROW(pf + i, far); SF_PREFETCH_ROW(pf + i + 16, far); }
        if (pf2) { __builtin_prefetch(pf2 + i, 0, 2); __builtin_prefetch(pf2 + i + 16, 0, 2); }
        const sf_v16 a = SF_EXPV(SF_LOAD16(x + i) - mv), b = SF_EXPV(SF_LOAD16(x + i + 16) - mv);
        SF_STORE16(e + i, a); SF_STORE16(e + i + 16, b);
        s0 += a; s1 += b;
        if (xs) {
            const sf_v16 u = SF_LOAD16(xs + i) - kv, v = SF_LOAD16(xs + i + 16) - kv;
            d0 += u; d1 += v; q0 = SF_FMA16(u, u, q0); q1 = SF_FMA16(v, v, q1);
        }
    }
    for (; i < n; i += 16) {  /* the last 1-31: whole vectors, then one masked */
        if (pf) SF_PREFETCH_ROW(pf + i, far);
        if (pf2) __builtin_prefetch(pf2 + i, 0, 2);
        const sf_mask16 k = n - i >= 16 ? (sf_mask16)-1 : (sf_mask16)((1u << (n - i)) - 1);
        const sf_v16 a = SF_MASKZ16(k, SF_EXPV(SF_LOADM(k, x + i) - mv));
#undef SF_EXPV
        SF_STOREM(e + i, k, a);
        s0 += a;
        if (xs) { const sf_v16 u = SF_MASKZ16(k, SF_LOADM(k, xs + i) - kv); d0 += u; q0 = SF_FMA16(u, u, q0); }
    }
    if (xs) { st[0] = sf_hsum16(d0 + d1); st[1] = sf_hsum16(q0 + q1); }
    return sf_hsum16(s0 + s1);
#elif defined(SF_AVX2_TILES)
    long i = 0;
    const __m256 tab = _mm256_load_ps(sf_exp2_8), mv = _mm256_set1_ps(m), kv = _mm256_set1_ps(K);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), d0 = s0, d1 = s0, q0 = s0, q1 = s0;
    for (; i + 16 <= n; i += 16) {
        if (pf) SF_PREFETCH_ROW(pf + i, far);
        if (pf2) __builtin_prefetch(pf2 + i, 0, 2);
        const __m256 a = sf_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), tab, nonpos);
        const __m256 b = sf_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), mv), tab, nonpos);
        _mm256_storeu_ps(e + i, a); _mm256_storeu_ps(e + i + 8, b);
        s0 = _mm256_add_ps(s0, a); s1 = _mm256_add_ps(s1, b);
        if (xs) {
            const __m256 u = _mm256_sub_ps(_mm256_loadu_ps(xs + i), kv), v = _mm256_sub_ps(_mm256_loadu_ps(xs + i + 8), kv);
            d0 = _mm256_add_ps(d0, u); d1 = _mm256_add_ps(d1, v);
            q0 = _mm256_fmadd_ps(u, u, q0); q1 = _mm256_fmadd_ps(v, v, q1);
        }
    }
    float s = sf_hsum8(_mm256_add_ps(s0, s1)), ds = 0, qs = 0;
    if (xs) { ds = sf_hsum8(_mm256_add_ps(d0, d1)); qs = sf_hsum8(_mm256_add_ps(q0, q1)); }
    if (pf && i < n) SF_PREFETCH_ROW(pf + i, far);
    if (pf2 && i < n) __builtin_prefetch(pf2 + i, 0, 2);
    for (; i < n; i++) {
        const float v = sf_expf(x[i] - m);
        e[i] = v; s += v;
        if (xs) { const float u = xs[i] - K; ds += u; qs = fmaf(u, u, qs); }
    }
    if (xs) { st[0] = ds; st[1] = qs; }
    return s;
#else
    (void)nonpos;
    if (pf) for (long q = 0; q < n; q += 16) SF_PREFETCH_ROW(pf + q, far);
    if (pf2) for (long q = 0; q < n; q += 16) __builtin_prefetch(pf2 + q, 0, 2);
    float s = 0;
    #pragma omp simd reduction(+:s)
    for (long j = 0; j < n; j++) {
        const float v = sf_expf(x[j] - m);
        e[j] = v; s += v;
    }
    if (xs) {
        float ds = 0, qs = 0;
        #pragma omp simd reduction(+:ds,qs)
        for (long j = 0; j < n; j++) { const float u = xs[j] - K; ds += u; qs += u * u; }
        st[0] = ds; st[1] = qs;
    }
    return s;
#endif
}
/* A whole row, e[i] = e^(x[i] - m) for i < n: blocks of """ + str(SUM_BLOCK) + """ (emit/row_loop.py:
   SUM_BLOCK), each block's float sum added to the double returned; pf (or NULL): the next row's
   input, one line prefetched per line computed (one call per row, the prefetches spread over the
   exponentials: softmax_rows at 2x the LLC ~10% faster than a call and a burst of 16 prefetches
   per block, Zen 4); far: into the L2 only (emit/row_loop.py: FAR_PREFETCH_ROW_BYTES), the loop
   specialised for each; pf2 (or NULL): a row further on, into the L2 as well. sf_expsum: in
   place (x = e); sf_expsum_from: from the row x (no copy of x - m first); the _max forms for m the
   row's max; the _ln forms also add the sums of xs[i] - K and of its square (sf_expsum_at's st,
   each block's float sums) to sq[0] and sq[1] (doubles; xs may be NULL). noipa (SF_NOCLONE): a
   clone for a constant n made GCC warn of the remainder loop (-Werror builds). */
__attribute__((always_inline)) SF_UNUSED static inline double sf_expsum_row(float *e, float m, long n, const float *x,
                                                                           int nonpos, const float *pf, int far,
                                                                           const float *pf2, const float *xs, float K,
                                                                           double *sq)
{
    double s = 0;
    float st[2] = {0, 0};
    if (far)
        for (long j = 0; j < n; j += """ + str(SUM_BLOCK) + """) {
            s += sf_expsum_at(e + j, m, n - j < """ + str(SUM_BLOCK) + """ ? n - j : """ + str(SUM_BLOCK) + """, x + j, nonpos, pf ? pf + j : 0, 1,
                              pf2 ? pf2 + j : 0, xs ? xs + j : 0, K, st);
            if (xs) { sq[0] += st[0]; sq[1] += st[1]; }
        }
    else
        for (long j = 0; j < n; j += """ + str(SUM_BLOCK) + """) {
            s += sf_expsum_at(e + j, m, n - j < """ + str(SUM_BLOCK) + """ ? n - j : """ + str(SUM_BLOCK) + """, x + j, nonpos, pf ? pf + j : 0, 0,
                              pf2 ? pf2 + j : 0, xs ? xs + j : 0, K, st);
            if (xs) { sq[0] += st[0]; sq[1] += st[1]; }
        }
    return s;
}
SF_NOCLONE SF_UNUSED static double sf_expsum(float *e, float m, long n, const float *pf, int far, const float *pf2)
{
    return sf_expsum_row(e, m, n, e, 0, pf, far, pf2, 0, 0, 0);
}
SF_NOCLONE SF_UNUSED static double sf_expsum_from(float *e, float m, long n, const float *x, const float *pf, int far,
                                                  const float *pf2)
{
    return sf_expsum_row(e, m, n, x, 0, pf, far, pf2, 0, 0, 0);
}
SF_NOCLONE SF_UNUSED static double sf_expsum_max(float *e, float m, long n, const float *pf, int far, const float *pf2)
{
    return sf_expsum_row(e, m, n, e, 1, pf, far, pf2, 0, 0, 0);
}
SF_NOCLONE SF_UNUSED static double sf_expsum_from_max(float *e, float m, long n, const float *x, const float *pf, int far,
                                                      const float *pf2)
{
    return sf_expsum_row(e, m, n, x, 1, pf, far, pf2, 0, 0, 0);
}
SF_NOCLONE SF_UNUSED static double sf_expsum_ln(float *e, float m, long n, const float *pf, int far, const float *pf2,
                                                const float *xs, float K, double *sq)
{
    return sf_expsum_row(e, m, n, e, 0, pf, far, pf2, xs, K, sq);
}
SF_NOCLONE SF_UNUSED static double sf_expsum_ln_max(float *e, float m, long n, const float *pf, int far, const float *pf2,
                                                    const float *xs, float K, double *sq)
{
    return sf_expsum_row(e, m, n, e, 1, pf, far, pf2, xs, K, sq);
}
""",
    "sf_osum": SF_EXP16 + """#if defined(SF_AVX512_TILES) && !defined(SF_OSUM_DONE)
#define SF_OSUM_DONE 1
/* A pipelined softmax row's sums (emit/softmax_pipeline.py): the exponentials of the row's chunk c
   are taken while the max pass computes chunk c + 1, at the running max m_c at chunk c's end (every
   value so far is <= m_c); the sum of exp(x - m) is kept at the largest m so far, rescaled by
   e^(m_old - m_new) when it grows. Float vector partial sums, added in double after each chunk
   (sf_osum_flush; sf_expsum's blocks are """ + str(SUM_BLOCK) + """ values); the same for a LayerNorm's statistics of the next row
   (d = xs - K and d * d: sf_expsum_at's st). */
typedef struct { sf_v16 s, d, q; double tot, dt, qt; float ms; } sf_osum;
__attribute__((always_inline)) SF_UNUSED static inline void sf_osum_init(sf_osum *o)
{
    o->s = o->d = o->q = SF_ZERO16;
    o->tot = o->dt = o->qt = 0;
    o->ms = -INFINITY;
}
__attribute__((always_inline)) SF_UNUSED static inline void sf_osum_flush(sf_osum *o)
{
    o->tot += sf_hsum16(o->s);
    o->dt += sf_hsum16(o->d);
    o->qt += sf_hsum16(o->q);
    o->s = o->d = o->q = SF_ZERO16;
}
/* The sums taken at max m from here on (m >= every earlier m): rescaled by e^(old max - m). */
__attribute__((always_inline)) SF_UNUSED static inline void sf_osum_at(sf_osum *o, float m)
{
    if (m > o->ms) {
        if (o->ms > -INFINITY) {
            const float f = expf(o->ms - m);
            o->s *= SF_SET1(f);
            o->tot *= f;
        }
        o->ms = m;
    }
}
/* e[i] = e^(e[i] - m) for the 16 i < 16 (mask k: the lanes set), m = mv's lanes, o->ms
   (sf_osum_at), >= every e[i] (or NaN beside them), added to o's sum. pf, far, pf2 as
   sf_expsum_at's (one line each); xs (or NULL): the next row's statistics as there (kv = K). */
__attribute__((always_inline)) SF_UNUSED static inline void sf_oexp16(sf_osum *o, float *e, sf_v16 mv, sf_mask16 k,
                                                                      const float *pf, int far, const float *pf2,
                                                                      const float *xs, sf_v16 kv)
{
    if (pf) { if (far) __builtin_prefetch(pf, 0, 2); else __builtin_prefetch(pf); }
    if (pf2) __builtin_prefetch(pf2, 0, 2);
    const sf_v16 a = SF_MASKZ16(k, sf_exp16_nonpos(SF_LOADM(k, e) - mv, SF_LOAD16(sf_exp2_16)));
    SF_STOREM(e, k, a);
    o->s += a;
    if (xs) {
        const sf_v16 u = SF_MASKZ16(k, SF_LOADM(k, xs) - kv);
        o->d += u;
        o->q = SF_FMA16(u, u, o->q);
    }
}
/* sf_oexp16 over e[i], i < n, at max m (sf_osum_at first), then the sums added in double. */
__attribute__((always_inline)) SF_UNUSED static inline void sf_oexp(sf_osum *o, float *e, float m, long n,
                                                                    const float *pf, int far, const float *pf2,
                                                                    const float *xs, float K)
{
    sf_osum_at(o, m);
    const sf_v16 mv = SF_SET1(m), kv = SF_SET1(K);
    for (long i = 0; i < n; i += 16)
        sf_oexp16(o, e + i, mv, n - i >= 16 ? (sf_mask16)-1 : (sf_mask16)((1u << (n - i)) - 1), pf ? pf + i : 0, far,
                  pf2 ? pf2 + i : 0, xs ? xs + i : 0, kv);
    sf_osum_flush(o);
}
/* The row's sum of exponentials (at o->ms, the row's max), its statistics added to sq[0], sq[1]
   (sq may be NULL). */
__attribute__((always_inline)) SF_UNUSED static inline double sf_osum_total(sf_osum *o, double *sq)
{
    sf_osum_flush(o);
    if (sq) { sq[0] += o->dt; sq[1] += o->qt; }
    return o->tot;
}
/* The largest of 16 lanes (none NaN), as a tree of halves in registers (through a stack array,
   its 16 scalar loads of one vector store, l1_overflow at 2x the LLC took 4% more time, Zen 4). */
__attribute__((always_inline)) SF_UNUSED static inline float sf_hmax16(sf_v16 v)
{
#if defined(__clang__) || __GNUC__ >= 12
    v = SF_MAX16(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    v = SF_MAX16(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    v = SF_MAX16(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    v = SF_MAX16(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
    return v[0];
#else
    float h[16];
    SF_STORE16(h, v);
    for (int w = 8; w; w /= 2)
        for (int l = 0; l < w; l++) h[l] = h[l + w] > h[l] ? h[l + w] : h[l];
    return h[0];
#endif
}
#endif
""",
    "sf_divq": """/* a / b given r = 1.0f / b, for a divisor b in [1, 2^64] or NaN (a softmax's normaliser) and a in
   [0, 1] or NaN: q = a r, then one FMA remainder step q + r (a - q b) (Markstein), the remainder
   exact by the FMA. Equal to the division (0.5 ulp) wherever the quotient is >= 1e-30
   (tests/test_emit_softmax.py: 20M quotients); below, where the remainder is subnormal, within
   1 ulp of it. Without FMA hardware the plain division. */
__attribute__((always_inline)) SF_UNUSED static inline float sf_divq(float a, float b, float r)
{
#if defined(__FMA__)
    const float q = a * r;
    return fmaf(fmaf(-q, b, a), r, q);
#else
    (void)r;
    return a / b;
#endif
}
""",
    "sf_drain": SIMD_DEFS + _NT_ALIGN + """/* A row's softmax output left pending (emit/row_stream.py): dst[j] = src[j] * r, or (div) src[j] / s
   as sf_divq computes it (r = 1 / s), written block by block with non-temporal stores while the
   next row computes; with g (not NULL: emit/softmax_pipeline.py) the factor of each chunk of
   SF_OSM_CHUNK is g[chunk] instead of r (the chunk's exponentials were taken at a smaller max).
   The kernel calls sf_stream_fence() after its last sf_drain. */
typedef struct { float *dst; const float *src; float s, r; int div; const float *g; } sf_pend;
#if !defined(SF_OSM_CHUNK)
#define SF_OSM_CHUNK """ + str(PIPELINE_CHUNK) + """
#endif
__attribute__((always_inline)) SF_UNUSED static inline void sf_drain_at(const sf_pend *p, long j0, long len, float r)
{
    float *restrict d = p->dst + j0;
    const float *restrict e = p->src + j0;
    const float s = p->s;
    long i = 0;
#if defined(SF_NT_ALIGN)
    for (; i < len && ((uintptr_t)(d + i) & (SF_NT_ALIGN - 1)); i++) {
        const float q = e[i] * r;
        d[i] = p->div ? fmaf(fmaf(-q, s, e[i]), r, q) : q;
    }
#endif
#if defined(SF_AVX512_TILES)
    const sf_v16 sv = SF_SET1(s), rv = SF_SET1(r);
    if (p->div)
        for (; i + 16 <= len; i += 16) {
            const sf_v16 v = SF_LOAD16(e + i), q = v * rv;
            SF_STREAM16(d + i, SF_FMA16(SF_FMA16(-q, sv, v), rv, q));
        }
    else
        for (; i + 16 <= len; i += 16) SF_STREAM16(d + i, SF_LOAD16(e + i) * rv);
#elif defined(SF_AVX2_TILES)
    const __m256 sv = _mm256_set1_ps(s), rv = _mm256_set1_ps(r);
    if (p->div)
        for (; i + 8 <= len; i += 8) {
            const __m256 v = _mm256_loadu_ps(e + i), q = _mm256_mul_ps(v, rv);
            _mm256_stream_ps(d + i, _mm256_fmadd_ps(_mm256_fnmadd_ps(q, sv, v), rv, q));
        }
    else
        for (; i + 8 <= len; i += 8) _mm256_stream_ps(d + i, _mm256_mul_ps(_mm256_loadu_ps(e + i), rv));
#endif
    if (p->div) {
#if defined(__FMA__)
        for (; i < len; i++) { const float q = e[i] * r; d[i] = fmaf(fmaf(-q, s, e[i]), r, q); }
#else
        for (; i < len; i++) d[i] = e[i] / s;
#endif
    } else {
        for (; i < len; i++) d[i] = e[i] * r;
    }
}
#if defined(SF_AVX512_TILES)
/* 16 values of a product form's row from j (g: the factor of j's chunk, emit/softmax_pipeline.py),
   inline in the loop that overwrites them; non-temporal where the row is aligned for it. */
__attribute__((always_inline)) SF_UNUSED static inline void sf_drain16(const sf_pend *p, long j, sf_v16 g)
{
    if (!p->dst) return;
    const sf_v16 v = SF_LOAD16(p->src + j) * g;
    if ((uintptr_t)(p->dst + j) & 63) SF_STORE16(p->dst + j, v);
    else SF_STREAM16(p->dst + j, v);
}
#endif
SF_UNUSED static void sf_drain(const sf_pend *p, long j0, long len)
{
    if (!p->dst) return;
    if (!p->g) {
        sf_drain_at(p, j0, len, p->r);
        return;
    }
    for (long j = j0; j < j0 + len;) {  /* a pipelined row's chunks, each with its own factor */
        const long c = j / SF_OSM_CHUNK, end = (c + 1) * SF_OSM_CHUNK < j0 + len ? (c + 1) * SF_OSM_CHUNK : j0 + len;
        sf_drain_at(p, j, end - j, p->g[c]);
        j = end;
    }
}
"""  + _FENCE,
    "sf_stream": SIMD_DEFS + _NT_ALIGN + """/* dst[i] = src[i], i < n, with non-temporal stores where the target has them (AVX-512, AVX2): a large
   output that the kernel does not read again goes to memory without first being read into the
   cache (a third of a plain store's traffic). Ends unordered: the kernel calls sf_stream_fence()
   after its last sf_stream. */
SF_UNUSED static void sf_stream(float *restrict dst, const float *restrict src, long n)
{
    long i = 0;
#if defined(SF_NT_ALIGN)
    for (; i < n && ((uintptr_t)(dst + i) & (SF_NT_ALIGN - 1)); i++) dst[i] = src[i];
#endif
#if defined(SF_AVX512_TILES)
    for (; i + 16 <= n; i += 16) SF_STREAM16(dst + i, SF_LOAD16(src + i));
#elif defined(SF_AVX2_TILES)
    for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#endif
    for (; i < n; i++) dst[i] = src[i];
}
"""  + _FENCE,
}
