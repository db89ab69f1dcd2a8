"""C text of the conv helpers shared by every kernel of a program (one copy each, compiled once,
through :func:`~solverfuse.emit.chelpers.helper_text`): the register-blocked conv tiles
``sf_conv_tile<mb>`` (position-vectorised, with their masked tails ``sf_conv_tail<mb>``; with
AVX-512 explicit vector code that prefetches the epilogue's output and residual lines while it
computes and reduces inputs over 2 MiB in blocks of channels), the channel-vectorised
``sf_conv_tile32`` for small planes (prefetching the next block's weights), the depthwise
``sf_conv_tile1``, the conv input copies and the weight pack. Each tile has an AVX2 + FMA form
in intrinsics (hosts without AVX-512) and a portable one. Builds on
:mod:`~solverfuse.emit.ctile` and :mod:`~solverfuse.emit.conv_cm` (the channel-vectorised tile).

>>> "sf_conv_tail8" in conv_helper_text("sf_conv_tile8"), CM_CHANNELS
(True, 32)
"""
from __future__ import annotations

from .conv_cm import CM_CHANNELS, conv_tile_cm
from .ctile import CHUNK, acc_lines, register_blocks, v8_block


#: Input-channel blocking of the position-vectorised tile (AVX-512): inputs over 2 MiB (VGG-19's
#: 512-channel 28x28 planes: 5.2 MB, every chunk of 32 positions read ~600 KB of it from the
#: L3) are reduced in blocks of channels whose copy is 512 KiB, so the chunks reuse it from the
#: L2. Standalone, paired: 512ch 28x28 3x3 0.89-0.96 of the time, 256ch 56x56 1.00-1.05; with a
#: 1 MiB threshold the 64/128-channel planes of ResNet-50 were 2-3% slower. 2 MiB, not the 4 MiB
#: measured on Zen 4 first: a 16-core Xeon (2 MiB L2, a mesh L3) ran VGG-19's 256-channel 56x56
#: conv (a 3.4 MB copy) at 155 / 311 GFLOP/s (1 / 2 threads) with it against 133 / 231 with 4 MiB
#: (MLAS 168 / 325), the 512-channel 28x28 one 131 / 228 against 130 / 196; on the Zen 4 guest
#: the kernel cases were unchanged and VGG-19, ResNet-50 and DenseNet-121 0.98-1.03 of their
#: time (benchmarks/results/thresholds.md). The AVX2 form blocks
#: for the L1 instead (``sf_conv_cblock_l1``): a pass of 24 positions over all the channels read
#: more input lines than the L1 holds (a 3x3 conv on 28x28 column copies: 64 channels x 9 taps'
#: windows, ~72 KB), so each pass refetched from the L2 what the pass before had read. Blocks of
#: channels whose pass windows fit SF_CONV_L1_AVX2 (8 KB: 7 channels of a 3x3, 51 of a 1x1), every
#: pass then finding most of its lines in the L1. Standalone tiles, variants alternated in one
#: process (Zen 3, 32 KB L1), time against unblocked: 3x3 64 and 128 channels on 28x28 0.87-0.93,
#: 3x3 64 channels on 56x56 0.90-0.92, 1x1 256 channels on 28x28 0.90-0.93, 1x1 64 channels on
#: 56x56 0.95-0.99; budgets of 12 and 16 KB were as good or up to 3% slower. VGG-19's 512-channel
#: 28x28 3x3 conv, which had been blocked for the L2 (inputs over 1 MiB in 256 KiB blocks): 0.95-1.05.
CONV_CBLOCK, CONV_CBLOCK_MIN = 512 * 1024, 2 * 1024 * 1024
CBLOCK_DEFS = f"""#if !defined(SF_CONV_CBLOCK)
#define SF_CONV_CBLOCK ({CONV_CBLOCK // 1024}L*1024)
#define SF_CONV_CBLOCK_MIN ({CONV_CBLOCK_MIN // 2**20}L*1024*1024)
#endif
#if !defined(SF_CONV_CBLOCK_L1)
#define SF_CONV_CBLOCK_L1 1
#if !defined(SF_CONV_L1_AVX2)
#define SF_CONV_L1_AVX2 (8L*1024)
#endif
/* Input channels per block of the AVX2 position tile: as many as keep the input that one pass of
   24 positions reads within SF_CONV_L1_AVX2 bytes, so that the next pass finds those lines in the
   L1. fp: the floats one channel's pass reads (conv_tiles.pass_floats, rendered after the taps'
   offsets). */
SF_UNUSED static long sf_conv_cblock_l1(long C, long fp)
{{
    const long cb = SF_CONV_L1_AVX2 / (4*(fp > 0 ? fp : 1));
    return cb < 1 ? 1 : cb > C ? C : cb;
}}
#endif
"""


#: 16-lane vectors of positions per pass of the position-vectorised tile's main loop (AVX-512):
#: 8 channels x 3 vectors = 24 accumulators, 3 input vectors, 28 of the 32 zmm registers; per
#: input (channel, tap) 3 vector loads and 8 broadcasts feed 24 multiply-adds (2 and 8 for 16 at
#: 2 vectors), and the per-pass start and stores are paid once per 48 positions. The positions
#: left (fewer than 48) take one 2-vector pass if 32 remain, then the masked tail.
WIDE = 3


def _chunk_pass(mb: int, v: int, loop: str) -> str:
    """One loop of ``sf_conv_tile<mb>``'s AVX-512 main part: ``mb`` channels x ``v`` 16-lane
    vectors of positions in registers per pass over the (channel block, tap) reduction; the
    partial sums of an earlier channel block (cs > 0) restart the accumulators."""
    decl = " ".join(f"sf_v16 c{i}_0 = cs ? (sf_v16)SF_LOAD16(T + {i}*span + q) : SF_SET1(bias ? bias[{i}] : 0.0f);"
                    + "".join(f" sf_v16 c{i}_{e} = cs ? (sf_v16)SF_LOAD16(T + {i}*span + q + {16 * e}) : c{i}_0;"
                              for e in range(1, v)) for i in range(mb))
    xs = ", ".join(f"x{e} = SF_LOAD16(xt + {16 * e})" for e in range(v))
    pin = ", ".join(f'"+v"(x{e})' for e in range(v))
    fma = "\n".join(f"                {{ const sf_v16 wv = SF_SET1(w[{i}]); "
                    + " ".join(f"c{i}_{e} = SF_FMA16(wv, x{e}, c{i}_{e});" for e in range(v)) + " }" for i in range(mb))
    store = "\n".join("        " + " ".join(f"SF_STORE16(T + {i}*span + q + {16 * e}, c{i}_{e});" for e in range(v))
                      for i in range(mb))
    lines = " ".join(f"__builtin_prefetch(pa + {64 * e}, {{rw}}, 3);" for e in range(v))
    prefetch = "\n".join(f"""        if ({p} && ce == C) for (int a = 0; a < {mb}; a++) {{
            const char *pa = (const char *)({p} + a*ps + q);
            {lines.format(rw=rw)}
        }}""" for p, rw in (("pw", 1), ("pr", 0)))
    return f"""    {loop} {{
        {decl}
        for (long c = cs; c < ce; c++)
            for (long t = 0; t < taps; t++) {{
                const float *restrict xt = x + c*cplane + off[t] + q;
                const float *restrict w = wp + (c*taps + t)*{mb};
                sf_v16 {xs};
                __asm__("" : {pin});
{fma}
            }}
{store}
{prefetch}
    }}
"""


def conv_helper_text(name: str) -> str:
    """C text of the conv helper ``name`` (``sf_conv_tile<mb>``, ``sf_conv_copy*``, ``sf_conv_pack``)."""
    if name == "sf_conv_tile1":
        return f"""/* Conv tile of one output channel (depthwise convolutions): T[q] = sum over c < C, t < taps of
   wp[c*taps + t] * x[c*cplane + off[t] + q], q < span. {CHUNK} positions per step in registers
   (a GNU vector; written as a plain loop, GCC 12 scalarised the accumulators and vectorised the
   tap loop with gathers, 3x slower), the last partial chunk masked (AVX-512, AVX2) or scalar. */
#if defined(SF_AVX2_TILES) && !defined(SF_AVX512_TILES) && !defined(SF_DW_VECS_DONE)
#define SF_DW_VECS_DONE 1
/* sf_conv_tile1's AVX2 step: nv (a constant, <= 8) vectors of 8 positions from T and x, one
   accumulator each; the last vector's lanes below ``last`` only (masked) unless ``full``. */
__attribute__((always_inline)) static inline void sf_conv_dw_vecs(float *restrict T, const float *restrict x,
    long cplane, const float *restrict wp, long C, long taps, const long *restrict off, float b0, const int nv,
    const int full, long last)
{{
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)last), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 a[8];
    for (int v = 0; v < nv; v++) a[v] = _mm256_set1_ps(b0);
    for (long c = 0; c < C; c++)
        for (long t = 0; t < taps; t++) {{
            const float *xt = x + c*cplane + off[t];
            const __m256 w = _mm256_broadcast_ss(wp + c*taps + t);
            for (int v = 0; v < nv - 1; v++) a[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xt + 8*v), a[v]);
            a[nv - 1] = _mm256_fmadd_ps(w, full ? _mm256_loadu_ps(xt + 8*(nv - 1)) : _mm256_maskload_ps(xt + 8*(nv - 1), m),
                                        a[nv - 1]);
        }}
    for (int v = 0; v < nv - 1; v++) _mm256_storeu_ps(T + 8*v, a[v]);
    if (full) _mm256_storeu_ps(T + 8*(nv - 1), a[nv - 1]);
    else _mm256_maskstore_ps(T + 8*(nv - 1), m, a[nv - 1]);
}}
#endif
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
#elif defined(SF_AVX2_TILES)
    /* 64 positions in 8 accumulators (independent FMA chains: a 9-tap reduction in 4 was
       latency-bound); GCC 12 kept a GNU vector in memory on AVX2 (a load, a multiply, an add and
       a store per 8 lanes and tap: 3.5x ONNX Runtime's time). The last 1-63 positions in one
       pass too, as many accumulators as vectors, the last masked: one masked vector at a time
       was a chain of dependent FMAs (a 3x3 on 7x7 planes, 49 positions, 69.5 -> 29.0 ns per
       channel; 14x14 and 28x28 planes 1.1-1.4x; the values are the same) */
    for (; q + 64 <= span; q += 64) sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 8, 1, 8);
    if (q < span) {{
        const long r = span - q, last = r - (r - 1) / 8 * 8;
        switch ((r + 7) / 8) {{  /* constant vector counts: the accumulators stay in registers */
        case 1: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 1, 0, last); break;
        case 2: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 2, 0, last); break;
        case 3: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 3, 0, last); break;
        case 4: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 4, 0, last); break;
        case 5: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 5, 0, last); break;
        case 6: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 6, 0, last); break;
        case 7: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 7, 0, last); break;
        default: sf_conv_dw_vecs(T + q, x + q, cplane, wp, C, taps, off, b0, 8, 0, last); break;
        }}
    }}
    q = span;
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
            # each (channel, tap) of a 24-position pass pulls the line the next pass reads into the
            # L1 (paired in-model CPU times, Zen 3: ResNet-50's 3x3 convs 0.95-0.98 of the time,
            # its 1x1 convs 0.85-0.96, DenseNet-121's 1x1 convs 0.91-0.94, VGG-19's 3x3 convs
            # 0.97-0.99; 48, 64 and 96 floats ahead as good, 32 best on the 1x1 convs)
            pfx = "\n                    __builtin_prefetch(xt + 32, 0, 3);"
            # the first block of input channels starts at the bias, later ones at the partial sums
            init = "cs ? _mm256_loadu_ps(T + (a0 + {i})*span + q + {e}) : _mm256_set1_ps(bias ? bias[a0 + {i}] : 0.0f)"
            minit = ("cs ? _mm256_maskload_ps(T + (a0 + {i})*span + q + {e}, m{v}) "
                     ": _mm256_set1_ps(bias ? bias[a0 + {i}] : 0.0f)")
            decl, fma = v8_block(rows, "w + {i}", "xt", "            ", init=init)
            mdecl, mfma = v8_block(rows, "w + {i}", "xt", "            ", masked=True, init=minit)
            wdecl, wfma = v8_block(rows, "w + {i}", "xt", "            ", init=init, vecs=3)
            store, wstore = ("\n".join("            " + " ".join(
                f"_mm256_storeu_ps(T + (a0 + {i})*span + q{f' + {8 * v}' if v else ''}, c{i}_{v});" for v in range(n))
                for i in range(rows)) for n in (2, 3))
            mstore = "\n".join(f"            _mm256_maskstore_ps(T + (a0 + {i})*span + q, m0, c{i}_0); "
                               f"_mm256_maskstore_ps(T + (a0 + {i})*span + q + 8, m1, c{i}_1);" for i in range(rows))
            def blocks(decl, fma, store):  # the chunk's output channels, {rows} at a time
                return f"""        for (int a0 = 0; a0 < {mb}; a0 += {rows}) {{
{decl}
            if (taps == 1) {{  /* a 1x1 conv: one loop over the channels (see sf_conv_tile32) */
                const float *restrict xt = x + cs*cplane + off[0] + q;
                const float *restrict w = wp + cs*{mb} + a0;
                for (long c = cs; c < ce; c++, xt += cplane, w += {mb}) {{
{fma}
                }}
            }} else
            for (long c = cs; c < ce; c++)
                for (long t = 0; t < taps; t++) {{
                    const float *restrict xt = x + c*cplane + off[t] + q;
                    const float *restrict w = wp + (c*taps + t)*{mb} + a0;
{fma}
                }}
{store}
        }}"""
            # 24 positions per pass (4 x 3 accumulators: standalone, paired, 64- and 128-channel
            # 3x3 convs 12-15% faster than 16), then one of 16, then the masked tail; the input
            # channels in blocks whose pass windows fit the L1 (sf_conv_cblock_l1); a 1x1 conv in
            # one loop over the channels (as sf_conv_tile32's: ResNet-50's 28x28 1x1 convs 0.92-0.94
            # of the time in paired in-model runs, its 56x56 ones 0.96-1.03)
            return f"""    const long cb = sf_conv_cblock_l1(C, off[taps]);
    long q = 0;
    for (long cs = 0; cs < C; cs += cb) {{
    const long ce = cs + cb < C ? cs + cb : C;
    q = 0;
    for (; q + 24 <= span; q += 24)
{blocks(wdecl, wfma + pfx, wstore)}
    for (; q + 16 <= span; q += 16)
{blocks(decl, fma, store)}
    if (q < span) {{
        /* the last partial chunk: masked loads and stores */
        const __m256i n = _mm256_set1_epi32((int)(span - q));
        const __m256i m0 = _mm256_cmpgt_epi32(n, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i m1 = _mm256_cmpgt_epi32(n, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15));
{blocks(mdecl, mfma, mstore)}
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
            return conv_tile_cm(name, conv_body)
        wide = _chunk_pass(mb, WIDE, f"for (; q + {16 * WIDE} <= span; q += {16 * WIDE})")
        sub = f"""    /* sub-block b: output channels b*{mb}.. (their packed weights follow block b - 1's) */
    float *restrict T = T0 + b*{mb}*span;
    const float *restrict wp = wp0 + b*C*taps*{mb};
    const float *restrict bias = bias0 ? bias0 + b*{mb} : 0;
    float *pw = pw0 ? pw0 + b*{mb}*ps : 0;
    const float *pr = pr0 ? pr0 + b*{mb}*ps : 0;
    (void)pw; (void)pr;
"""
        avx512 = f"""    /* an input of more than SF_CONV_CBLOCK_MIN bytes (it cannot stay in the L2 while the chunks
       walk over it) in blocks of input channels of SF_CONV_CBLOCK bytes, the partial sums in T;
       the nb sub-blocks of output channels reduce each block of input channels in turn, so it is
       fetched from beyond the L2 once per nb*{mb} output channels, not once per {mb} */
    long cb = C, q = 0;
    if (C*cplane*4 > SF_CONV_CBLOCK_MIN) {{ cb = SF_CONV_CBLOCK / (cplane*4); if (cb < 16) cb = 16; }}
    for (long cs = 0; cs < C; cs += cb) {{
    const long ce = cs + cb < C ? cs + cb : C;
    for (long b = 0; b < nb; b++) {{
{sub}    q = 0;
{wide}{_chunk_pass(mb, 2, f"for (; q + {CHUNK} <= span; q += {CHUNK})")}    }}
    }}
    if (q < span) for (long b = 0; b < nb; b++) {{
{sub}    sf_conv_tail{mb}(T, span, q, x, cplane, wp, C, taps, off, bias);
    }}
"""
        return CBLOCK_DEFS + tail_fn + f"""/* Register-blocked conv tile: T[a*span + q] = sum over c < C, t < taps of
   wp[(c*taps + t)*{mb} + a] * x[c*cplane + off[t] + q], q < span; {mb} channels x {CHUNK} positions in
   registers (AVX-512: {16 * WIDE} positions per pass, then one pass of {CHUNK}; explicit vector operations,
   the input vectors pinned in registers -- GCC
   else folds them into each multiply-add as a memory operand; paired against the auto-vectorised
   form, standalone: a 3-channel 3x3 stem 0.88 of the time, a 64-channel 1x1 0.94, 64-channel 3x3
   0.98); the positions past the last whole chunk with masked loads and stores, so a small
   plane (13x13: 169 positions) costs no multiply-adds on padding (rounded up to 192 before).
   The accumulators start at bias[a] (NULL: 0): no pass of its own over the tile.
   nb: sub-blocks of {mb} channels, sub-block b's tile at T0 + b*{mb}*span, its packed weights at
   wp0 + b*C*taps*{mb} (the next block's), its bias at bias0 + b*{mb}.
   pw, pr (NULL: none): where the caller's epilogue will write / read this tile's values, channel
   a's position q at pw[a*ps + q] (approximately: junk columns shift it); each chunk prefetches
   its lines there, so that those misses overlap the multiply-adds (the epilogue of a large
   plane otherwise waits for them, memory-bound, after the compute-bound tile). */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T0, long span, const float *restrict x, long cplane,
    const float *restrict wp0, long C, long taps, const long *restrict off, const float *restrict bias0,
    float *pw0, const float *pr0, long ps, long nb)
{{
    (void)pw0; (void)pr0; (void)ps;
#if defined(SF_AVX512_TILES)
{avx512}#else
    for (long b = 0; b < nb; b++) {{
{sub}{register_blocks(mb, conv_body, conv_avx2)}    }}
#endif
}}
"""
    return {
        "sf_conv_copy": """/* Zero-padded, stride-phase-split copy of NC planes HxW: dst[nc][ph][pw][i][j] = x at padded
   (i*s0 + ph, j*s1 + pw), i.e. x[nc][i*s0 + ph - p0][j*s1 + pw - p1] when inside, else 0. */
SF_UNUSED static SF_INLINE_COPY void sf_conv_copy(float *restrict dst, const float *restrict x, long NC, long H, long W,
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
        "sf_conv_copy_sub": """/* The positions a strided 1x1 convolution without padding reads, one plane per channel:
   dst[nc][i][j] = x[nc][i*s0][j*s1], i < OH, j < OW (the stride-phase-split copy also wrote the
   s0*s1 - 1 phases no tap reads: 3/4 of a stride-2 input). */
SF_NOINLINE SF_UNUSED static void sf_conv_copy_sub(float *restrict dst, const float *restrict x, long NC, long H, long W,
    long s0, long s1, long OH, long OW)
{
    for (long nc = 0; nc < NC; nc++)
        for (long i = 0; i < OH; i++, dst += OW) {
            const float *restrict row = x + (nc*H + i*s0)*W;
            for (long j = 0; j < OW; j++) dst[j] = row[j*s1];
        }
}
""",
        "sf_conv_copy_cols": """/* Zero-padded, column-shifted copy of NC planes HxW for a kernel KW columns wide (dilation d1):
   dst[nc][ph][kw][i][j] = x at padded (i*s0 + ph, j*s1 + kw*d1), j < OW, i.e.
   x[nc][i*s0 + ph - p0][j*s1 + kw*d1 - p1] when inside, else 0. Tap (r, kw) then reads its
   output positions as one contiguous run of row pitch OW: no junk columns, no strided loads. */
SF_UNUSED static SF_INLINE_COPY void sf_conv_copy_cols(float *restrict dst, const float *restrict x, long NC, long H,
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
    }[name]
