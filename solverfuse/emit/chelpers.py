"""C text of the helper functions shared by every kernel of a program, one copy each, compiled
once (:func:`helper_text`): the register-blocked GEMM tiles (AVX-512 / portable, AVX2 + FMA
intrinsics by the compiler's target macros), the matrix-vector tile, the MatMul B pack, the
pooling plane helper; the row helpers (vector exp and GELU, softmax rows, non-temporal stores)
come from :mod:`~solverfuse.emit.row_helpers`, the conv tiles, input copies and weight pack from
:mod:`~solverfuse.emit.conv_helpers`. Apart from :mod:`~solverfuse.emit.ctext` (the fixed
prelude, counters, timing, ``model.h``): these are generated per blocking size and are most of
the C text. Builds on :mod:`~solverfuse.emit.ctile`, :mod:`~solverfuse.emit.conv_helpers` and
:mod:`~solverfuse.emit.row_helpers`.

>>> "sf_conv_tile8" in helper_text("sf_conv_tile8"), CHUNK
(True, 32)
"""
from __future__ import annotations

from .conv_helpers import conv_helper_text
from .ctile import CHUNK, TRANSPOSE8, acc_lines, register_blocks, v8_block
from .row_helpers import ROW_HELPERS, SIMD_DEFS


def helper_text(name: str) -> str:
    """C text of a helper shared by every kernel of a program (one copy each, compiled once)."""
    if name in ROW_HELPERS:
        return ROW_HELPERS[name]
    if name.startswith("sf_conv_"):
        return conv_helper_text(name)
    if name == "sf_mm_tile1":
        return f"""/* Matmul tile of one row (a matrix-vector product, a linear layer at batch 1): T[q] = sum over
   r < K of a[r] * B[r][q] for q0 <= q < q1 (multiples of {CHUNK}), B packed in panels of {CHUNK} columns
   (B[r][q + e] at b[q*K + r*{CHUNK} + e]): each panel one contiguous stream read once, its {CHUNK} sums
   in registers, 4 rows of B per step into separate accumulators (independent FMA chains).
   Memory-bound: B is read at the rate of a plain sum over it (measured on Zen 4; a software
   prefetch 2-8 KiB ahead was no faster: the hardware prefetcher follows one contiguous stream),
   and threads given disjoint column ranges read disjoint streams. */
SF_NOINLINE SF_NOCLONE SF_UNUSED static void sf_mm_tile1(float *restrict T, long q0, long q1, const float *restrict a,
    long K, const float *restrict b)
{{
    for (long q = q0; q < q1; q += {CHUNK}) {{
        const float *restrict x = b + q*K;
        long r = 0;
#if defined(SF_AVX512_TILES)
        sf_v16 c0 = SF_ZERO16, c1 = SF_ZERO16, c2 = SF_ZERO16, c3 = SF_ZERO16;
        sf_v16 c4 = SF_ZERO16, c5 = SF_ZERO16, c6 = SF_ZERO16, c7 = SF_ZERO16;
        for (; r + 4 <= K; r += 4, x += 128) {{
            const sf_v16 a0 = SF_SET1(a[r]), a1 = SF_SET1(a[r + 1]), a2 = SF_SET1(a[r + 2]), a3 = SF_SET1(a[r + 3]);
            c0 = SF_FMA16(a0, SF_LOAD16(x), c0); c1 = SF_FMA16(a0, SF_LOAD16(x + 16), c1);
            c2 = SF_FMA16(a1, SF_LOAD16(x + 32), c2); c3 = SF_FMA16(a1, SF_LOAD16(x + 48), c3);
            c4 = SF_FMA16(a2, SF_LOAD16(x + 64), c4); c5 = SF_FMA16(a2, SF_LOAD16(x + 80), c5);
            c6 = SF_FMA16(a3, SF_LOAD16(x + 96), c6); c7 = SF_FMA16(a3, SF_LOAD16(x + 112), c7);
        }}
        for (; r < K; r++, x += 32) {{
            const sf_v16 a0 = SF_SET1(a[r]);
            c0 = SF_FMA16(a0, SF_LOAD16(x), c0); c1 = SF_FMA16(a0, SF_LOAD16(x + 16), c1);
        }}
        SF_STORE16(T + q, (c0 + c2) + (c4 + c6));
        SF_STORE16(T + q + 16, (c1 + c3) + (c5 + c7));
#elif defined(SF_AVX2_TILES)
        __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
        for (; r + 2 <= K; r += 2, x += 64) {{
            const __m256 a0 = _mm256_broadcast_ss(a + r), a1 = _mm256_broadcast_ss(a + r + 1);
            c0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x), c0); c1 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x + 8), c1);
            c2 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x + 16), c2); c3 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x + 24), c3);
            c4 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(x + 32), c4); c5 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(x + 40), c5);
            c6 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(x + 48), c6); c7 = _mm256_fmadd_ps(a1, _mm256_loadu_ps(x + 56), c7);
        }}
        for (; r < K; r++, x += 32) {{
            const __m256 a0 = _mm256_broadcast_ss(a + r);
            c0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x), c0); c1 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x + 8), c1);
            c2 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x + 16), c2); c3 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(x + 24), c3);
        }}
        _mm256_storeu_ps(T + q, _mm256_add_ps(c0, c4)); _mm256_storeu_ps(T + q + 8, _mm256_add_ps(c1, c5));
        _mm256_storeu_ps(T + q + 16, _mm256_add_ps(c2, c6)); _mm256_storeu_ps(T + q + 24, _mm256_add_ps(c3, c7));
#else
        float acc[{CHUNK}];
        for (int e = 0; e < {CHUNK}; e++) acc[e] = 0;
        for (; r < K; r++, x += {CHUNK})
            for (int e = 0; e < {CHUNK}; e++) acc[e] = SF_FMA(a[r], x[e], acc[e]);
        for (int e = 0; e < {CHUNK}; e++) T[q + e] = acc[e];
#endif
    }}
}}
"""
    if name.startswith("sf_mm_ptile"):
        mb = int(name[len("sf_mm_ptile"):])
        assert 2 <= mb <= 8, mb
        return f"""/* Register-blocked matmul tile on a packed A: as sf_mm_tile{mb}, with the block's rows of A already
   transposed as [K][{mb}] at pa (sf_pack_a, once per kernel: a B read in column slabs makes every
   block of rows compute once per slab, and each sf_mm_tile{mb} call transposed its A block again),
   the whole reduction in one pass. */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T, long n2, const float *restrict pa, long K,
    const float *restrict b, long q0, long q1)
{{
    const float (*const ap)[{mb}] = (const float (*)[{mb}])pa;
    const long k0 = 0, kn = K;
    for (int i = 0; i < {mb}; i++) for (long j = q0; j < q1; j++) T[i*n2 + j] = 0;
{_mm_blocks(mb)}}}
"""
    if name.startswith("sf_mm_tile"):
        mb = int(name[len("sf_mm_tile"):])
        scalar = f"for (; r < kn; r++) for (int i = 0; i < {mb}; i++) ap[r][i] = i < mr ? a[i*lda + k0 + r] : 0.0f;\n"
        if mb == 8:
            # AVX2, 8 rows: the A block's transpose in 8x8 blocks of vectors (the element loop took a
            # third of a 128x768x3072 GEMM's time, tiles of 64 columns transposing A each)
            fill = ("        long r = 0;\n#if defined(SF_AVX2_TILES)\n        for (; r + 8 <= kn; r += 8) "
                    "sf_transpose8(&ap[r][0], 8, a + k0 + r, lda, mr);\n#endif\n        " + scalar)
        elif mb > 8:
            assert mb % 4 == 0, mb
            # AVX2, 32 or 64 rows: the A block as [mb / 4][256][4] (a4), so that the 4-row register
            # blocks read 16 contiguous bytes per step, not 16 bytes of each 4 * mb-byte row of ap
            # (standalone, BERT's FFN output projection 128 x 3072 x 768 in 64-row tiles: 0.84-0.87
            # of the time)
            fill = ("#if defined(SF_AVX2_TILES)\n"
                    f"        for (int i = 0; i < {mb}; i++) for (long r = 0; r < kn; r++) "
                    "a4[i / 4][r][i % 4] = i < mr ? a[i*lda + k0 + r] : 0.0f;\n#else\n"
                    "        long r = 0;\n        " + scalar + "#endif\n")
        else:
            fill = "        long r = 0;\n        " + scalar
        a4 = ("#if defined(SF_AVX2_TILES)\n    float (*const a4)[256][4] = (float (*)[256][4])(void *)ap;\n#endif\n"
              if mb > 8 else "")
        return (TRANSPOSE8 if mb == 8 else "") + f"""/* Register-blocked matmul tile: T[i*n2 + j] = sum over r < K of a[i*lda + r] * B[r][j], i < {mb},
   q0 <= j < q1 (multiples of {CHUNK}: the threads may share the columns of one block of rows);
   A's rows from mr on are past the output's last row (M not a multiple of {mb}): read as 0,
   B packed in panels of {CHUNK} columns (B[r][q + e] at b[q*K + r*{CHUNK} + e]: one contiguous
   stream per chunk); the A block is transposed 256 columns at a time (its rows may share an L1 set). */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T, long n2, const float *restrict a, long lda, long K,
    const float *restrict b, long q0, long q1, long mr)
{{
    float ap[256][{mb}];
{a4}    for (int i = 0; i < {mb}; i++) for (long j = q0; j < q1; j++) T[i*n2 + j] = 0;
    for (long k0 = 0; k0 < K; k0 += 256) {{
        const long kn = K - k0 < 256 ? K - k0 : 256;
{fill}{_mm_blocks(mb)}    }}
}}
"""
    return {
        "sf_pool2d": SIMD_DEFS + """/* One plane of a 2-D MaxPool (avg = 0) or the window sums of an AveragePool (avg = 1), dilation 1:
   T[o*OW + j] = max / sum over the taps inside the input of x[o*sh - ph + r][j*sw - pw + c].
   Per output row, first the rows of its window into V (contiguous vector loops; V[pw + q] holds
   column q, its pads the neutral value), then the columns at stride sw out of V (in L1). Inlined
   into every call: constant window and strides, so the column loop vectorises (the former
   column-first pass did the strided reads on every input row, 2.5x slower than ONNX Runtime).
   At stride 2 with AVX-512, blocks of 16 outputs from the even and odd columns of V (aligned
   loads, one vpermt2ps each; tap c = the even or odd stream shifted by c / 2, from this block and
   the next), max / add in the scalar loop's order and NaN rule. GCC's own vector code for the
   strided loop, paired standalone per plane set: 64x111x111 3x3/2 0.113-0.128 ms, 128x55x55
   0.132-0.135, 96x54x54 0.099; these blocks 0.106 / 0.093 / 0.062 (unaligned loads per tap, tried
   first: 0.151-0.161 on the 111 planes). V holds VW + SF_POOL_SLACK floats: the next block's loads
   reach 2 OW + 31 (lanes past VW feed no output). */
#define SF_POOL_SLACK 48
__attribute__((always_inline)) SF_UNUSED static inline void sf_pool2d(float *restrict T, const float *restrict x,
    long H, long W, long OH, long OW, long kh, long kw, long sh, long sw, long ph, long pw, int avg,
    float *restrict V, long VW)
{
    const float init = avg ? 0.0f : -INFINITY;
    for (long q = 0; q < VW + SF_POOL_SLACK; q++) V[q] = init;
    for (long o = 0; o < OH; o++) {
        const long r0 = o*sh - ph < 0 ? ph - o*sh : 0;
        const long r1 = H + ph - o*sh < kh ? H + ph - o*sh : kh;
        float *restrict v = V + pw;
        const float *restrict xr = x + (o*sh - ph + r0)*W;
        if (r0 == 0 && r1 == kh) {
            /* the whole window inside the input: its rows in one loop (kh constant: unrolled), V
               stored once (a pass per row loaded and stored V kh times: 64x111x111 3x3/2, AVX2
               Zen 3, paired, per-tap column loads: 134 -> 85 us in all) */
            for (long q = 0; q < W; q++) {
                float m = xr[q];
                for (long r = 1; r < kh; r++) {
                    const float e = xr[r*W + q];
                    m = avg ? m + e : (e > m ? e : m);
                }
                v[q] = m;
            }
        } else {
            if (r0 >= r1) for (long q = 0; q < W; q++) v[q] = init;  /* a window wholly in the padding */
            else for (long q = 0; q < W; q++) v[q] = xr[q];
            for (long r = r0 + 1; r < r1; r++) {
                xr += W;
                if (avg) for (long q = 0; q < W; q++) v[q] += xr[q];
                else for (long q = 0; q < W; q++) v[q] = xr[q] > v[q] ? xr[q] : v[q];
            }
        }
        float *restrict t = T + o*OW;
        long j0 = 0;
#if defined(SF_ROW_SIMD)
        if (sw == 2 && kw <= 32) {
            /* E / O: the even / odd columns of the 32 from 2*j0 (two aligned loads, one vpermt2ps
               each); tap c is E or O of this block and the next, shifted by c / 2 columns */
            typedef int sf_v16e __attribute__((vector_size(64)));
            static const sf_v16e sel[2] = {{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
                                           {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};
            sf_v16 E = SF_PERM32(SF_LOAD16(V), (sf_v16)sel[0], SF_LOAD16(V + 16));
            sf_v16 O = SF_PERM32(SF_LOAD16(V), (sf_v16)sel[1], SF_LOAD16(V + 16));
            for (; j0 + 16 <= OW; j0 += 16) {
                const float *restrict p = V + 2*j0 + 32;
                const sf_v16 E2 = SF_PERM32(SF_LOAD16(p), (sf_v16)sel[0], SF_LOAD16(p + 16));
                const sf_v16 O2 = SF_PERM32(SF_LOAD16(p), (sf_v16)sel[1], SF_LOAD16(p + 16));
                sf_v16 acc = E;
                for (long c = 1; c < kw; c++) {
                    const long sh = c / 2;
                    const sf_v16 a = c & 1 ? O : E, b = c & 1 ? O2 : E2;
                    sf_v16e shift;
                    for (int l = 0; l < 16; l++) shift[l] = (int)sh + l;
                    const sf_v16 e = sh ? SF_PERM32(a, (sf_v16)shift, b) : a;
                    acc = avg ? acc + e : SF_MAX16(e, acc);
                }
                SF_STORE16(t + j0, acc);
                E = E2;
                O = O2;
            }
        }
#elif defined(SF_AVX2_TILES)
        /* AVX2, stride 2: blocks of 8 outputs. Up to 3 columns wide: E / O, the even / odd floats
           of the 16 from 2 j0 (two aligned loads; shuffle gives [a0 a2 b0 b2 | a4 a6 b4 b6], a
           64-bit permute the order), tap 2 = E shifted by one float, its last from the next
           block's E. Wider: each tap's even floats from unaligned loads. 64x111x111 3x3/2 on a
           Zen 3 core, paired (with the whole-window row loop above, planes written in place):
           per-tap loads 85 us, these 71; GCC's strided loop of the scalar code below took 191
           (`run --time`, with a stack tile and its copy), ONNX Runtime 87 (its profile). */
        if (sw == 2 && kw <= 3) {
            __m256 a = _mm256_load_ps(V), b = _mm256_load_ps(V + 8);
            __m256 E = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
            __m256 O = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
            for (; j0 + 8 <= OW; j0 += 8) {
                a = _mm256_load_ps(V + 2*j0 + 16);
                b = _mm256_load_ps(V + 2*j0 + 24);
                const __m256 E2 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
                const __m256 O2 = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
                __m256 acc = E;
                if (kw > 1) acc = avg ? _mm256_add_ps(acc, O) : _mm256_max_ps(O, acc);
                if (kw > 2) {
                    const __m256 h = _mm256_permute2f128_ps(E, E2, 0x21);
                    const __m256 e = _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(h), _mm256_castps_si256(E), 4));
                    acc = avg ? _mm256_add_ps(acc, e) : _mm256_max_ps(e, acc);
                }
                _mm256_storeu_ps(t + j0, acc);
                E = E2;
                O = O2;
            }
        } else if (sw == 2) {
            for (; j0 + 8 <= OW; j0 += 8) {
                __m256 acc = _mm256_setzero_ps();
                for (long c = 0; c < kw; c++) {
                    const float *p = V + 2*j0 + c;
                    const __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(
                        _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), 0x88)), 0xD8));
                    acc = c == 0 ? e : avg ? _mm256_add_ps(acc, e) : _mm256_max_ps(e, acc);
                }
                _mm256_storeu_ps(t + j0, acc);
            }
        }
#endif
        for (long j = j0; j < OW; j++) t[j] = V[j*sw];
        for (long c = 1; c < kw; c++) {
            if (avg) for (long j = j0; j < OW; j++) t[j] += V[j*sw + c];
            else for (long j = j0; j < OW; j++) t[j] = V[j*sw + c] > t[j] ? V[j*sw + c] : t[j];
        }
    }
}
""",
        "sf_pack_a": """/* The rows of a MatMul/Gemm A (M x K, row pitch lda) packed for sf_mm_ptile<mb>: block j of mb
   rows as [K][mb] at dst + j*K*mb, the rows from M on zero; blocks j0 .. j0 + nj - 1 (one
   thread's share). */
SF_NOINLINE SF_UNUSED static void sf_pack_a(float *restrict dst, const float *restrict a, long lda, long M, long K,
    long mb, long j0, long nj)
{
    for (long j = j0; j < j0 + nj; j++)
        for (long i = 0; i < mb; i++) {
            float *restrict d = dst + j*K*mb + i;
            const long row = j*mb + i;
            if (row < M) for (long r = 0; r < K; r++) d[r*mb] = a[row*lda + r];
            else for (long r = 0; r < K; r++) d[r*mb] = 0.0f;
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


def _mm_blocks(mb: int) -> str:
    """The register-blocked loop nest of the matmul tiles ``sf_mm_tile<mb>`` and
    ``sf_mm_ptile<mb>``: over the chunks of columns q0..q1 and the blocks of rows, the reduction
    over ``kn`` rows of B from ``k0``, the A block read from ``ap[r]`` (``[K][mb]``; mb > 8: the
    AVX2 form reads ``a4``), the sums added into T."""
    def mm_body(rows, cols):
        return f"""        for (long q = q0; q < q1; q += {CHUNK})
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
        decl, fma = v8_block(rows, "ar + {i}", "xt", "                ")
        store = "\n".join(
            f"                {{ float *p = T + (i0 + {i})*n2 + q + e0; "
            f"_mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), c{i}_0)); "
            f"_mm256_storeu_ps(p + 8, _mm256_add_ps(_mm256_loadu_ps(p + 8), c{i}_1)); }}" for i in range(rows))
        return f"""        for (long q = q0; q < q1; q += {CHUNK})
            for (int i0 = 0; i0 < {mb}; i0 += {rows})
                for (int e0 = 0; e0 < {CHUNK}; e0 += 16) {{
{decl}
                for (long r = 0; r < kn; r++) {{
                    const float *restrict xt = b + q*K + (k0 + r)*{CHUNK} + e0;
                    const float *restrict ar = {"&a4[i0 / 4][r][0]" if mb > 8 else "ap[r] + i0"};
{fma}
                }}
{store}
                }}
"""
    return register_blocks(mb, mm_body, mm_avx2)
