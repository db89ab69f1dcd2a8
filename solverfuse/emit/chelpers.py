"""C text of the helper functions shared by every kernel of a program, one copy each, compiled
once (:func:`helper_text`): the register-blocked GEMM and conv tiles (AVX-512 / portable, AVX2 +
FMA intrinsics by the compiler's target macros), the depthwise / matrix-vector tiles, the conv
input copies and weight packs, the pooling plane helper. Apart from :mod:`~solverfuse.emit.ctext`
(the fixed prelude, counters, timing, ``model.h``): these are generated per blocking size and are
most of the C text. A leaf: it builds on no other emit module.

>>> "sf_conv_tile8" in helper_text("sf_conv_tile8"), CHUNK
(True, 32)
"""
from __future__ import annotations

#: Output positions per register-blocked chunk (two 16-lane vectors of accumulators per channel;
#: measured: 16 makes GCC 12 keep the accumulators in memory, 10x slower).
CHUNK = 32


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
    if name.startswith("sf_mm_tile"):
        mb = int(name[len("sf_mm_tile"):])

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
            decl, fma = _v8_block(rows, "ar + {i}", "xt", "                ")
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
                    const float *restrict ar = ap[r] + i0;
{fma}
                }}
{store}
                }}
"""
        return f"""/* Register-blocked matmul tile: T[i*n2 + j] = sum over r < K of a[i*lda + r] * B[r][j], i < {mb},
   q0 <= j < q1 (multiples of {CHUNK}: the threads may share the columns of one block of rows);
   A's rows from mr on are past the output's last row (M not a multiple of {mb}): read as 0,
   B packed in panels of {CHUNK} columns (B[r][q + e] at b[q*K + r*{CHUNK} + e]: one contiguous
   stream per chunk); the A block is transposed 256 columns at a time (its rows may share an L1 set). */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T, long n2, const float *restrict a, long lda, long K,
    const float *restrict b, long q0, long q1, long mr)
{{
    float ap[256][{mb}];
    for (int i = 0; i < {mb}; i++) for (long j = q0; j < q1; j++) T[i*n2 + j] = 0;
    for (long k0 = 0; k0 < K; k0 += 256) {{
        const long kn = K - k0 < 256 ? K - k0 : 256;
        for (long r = 0; r < kn; r++) for (int i = 0; i < {mb}; i++) ap[r][i] = i < mr ? a[i*lda + k0 + r] : 0.0f;
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
