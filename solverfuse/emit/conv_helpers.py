"""C text of the conv helpers shared by every kernel of a program (one copy each, compiled once,
through :func:`~solverfuse.emit.chelpers.helper_text`): the register-blocked conv tiles
``sf_conv_tile<mb>`` (position-vectorised, with their masked tails ``sf_conv_tail<mb>``; with
AVX-512 explicit vector code that prefetches the epilogue's output and residual lines while it
computes and reduces inputs over 4 MiB in blocks of channels), the channel-vectorised
``sf_conv_tile32`` for small planes (prefetching the next block's weights), the depthwise
``sf_conv_tile1``, the conv input copies and the weight pack. Builds on
:mod:`~solverfuse.emit.ctile` only.

>>> "sf_conv_tail8" in conv_helper_text("sf_conv_tile8"), CM_CHANNELS
(True, 32)
"""
from __future__ import annotations

from .ctile import CHUNK, acc_lines, register_blocks, v8_block

#: Output channels of the channel-vectorised conv tile (``sf_conv_tile32``) and its positions per
#: pass (2 x 14 accumulators, 2 weight vectors, a broadcast: 31 of the 32 zmm registers; 14
#: divides the 14x14 and 28x28 planes, 49 = 3 x 14 + 7; paired in-model CPU times on ResNet-50's
#: 7x7 and 14x14 convs 4-5% faster than 12 per pass).
CM_CHANNELS, CM_POSITIONS = 32, 14


#: Input-channel blocking of the position-vectorised tile (AVX-512): inputs over 4 MiB (VGG-19's
#: 512-channel 28x28 planes: 5.2 MB, every chunk of 32 positions read ~600 KB of it from the
#: L3) are reduced in blocks of channels whose copy is 512 KiB, so the chunks reuse it from the
#: L2. Standalone, paired: 512ch 28x28 3x3 0.89-0.96 of the time, 256ch 56x56 1.00-1.05; with a
#: 1 MiB threshold the 64/128-channel planes of ResNet-50 were 2-3% slower. The AVX2 form (the
#: hosts measured had a 512 KiB L2) blocks inputs over 1 MiB into 256 KiB: VGG-19's 512-channel
#: 28x28 3x3 conv, standalone against ONNX Runtime in one run, 1.20 -> 1.15 of its time.
CBLOCK_DEFS = """#if !defined(SF_CONV_CBLOCK)
#define SF_CONV_CBLOCK (512L*1024)
#define SF_CONV_CBLOCK_MIN (4L*1024*1024)
#endif
#if !defined(SF_CONV_CBLOCK_AVX2)
#define SF_CONV_CBLOCK_AVX2 (256L*1024)
#define SF_CONV_CBLOCK_MIN_AVX2 (1L*1024*1024)
#endif
"""


def _cm_pass(p: int, loop: str, step: str = "", prefetch: bool = False) -> str:
    """One pass shape of ``sf_conv_tile32`` (AVX-512): ``loop`` runs it over q0 while ``p``
    positions are left, 32 channels x ``p`` positions in registers (2 x p accumulators, 2 weight
    vectors, one broadcast: 31 of the 32 zmm registers at p = 14). ``prefetch``: passes 1 and 2
    pull the next block's packed weights (they follow this block's) into the cache, a line per
    step: a block's first pass otherwise reads its weights from memory at the FMA rate (cold
    weights, standalone tile, same run: ResNet-50's 7x7 1x1 convs 3-12% faster, the 3x3 convs
    0-4%; prefetching past the last block reads nothing: prefetches never fault)."""
    acc = " ".join(f"sf_v16 c{i}_0 = b0, c{i}_1 = b1;" for i in range(p))
    fma = "\n".join(f"                {{ const sf_v16 xb = SF_SET1(xt[{i}]); c{i}_0 = SF_FMA16(xb, w0, c{i}_0); "
                    f"c{i}_1 = SF_FMA16(xb, w1, c{i}_1); }}" for i in range(p))
    if p >= 7:
        store = _transposed_store(p)
    else:
        store = "\n".join(f"        SF_STORE16(o, c{i}_0); SF_STORE16(o + 16, c{i}_1); "
                          f"for (int a = 0; a < 32; a++) T[a*span + q0 + {i}] = o[a];" for i in range(p))
    pf_decl = pf_step = ""
    if prefetch:
        pf_decl = f"""
        const long pass = q0 / {p}, on = pass == 1 || pass == 2;
        const char *pf = (const char *)(on ? wp + (pass + 1)*C*taps*16 : wp);
        const long pfs = on ? 64 : 0;"""
        pf_step = "\n                __builtin_prefetch(pf, 0, 3); pf += pfs;"
    return f"""    {loop} {{
        {acc}{pf_decl}
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++) {{
                const float *restrict xt = x + c*cplane + off[t] + q0;
                const float *restrict w = wp + (c*taps + t)*32;
                const sf_v16 w0 = SF_LOAD16(w), w1 = SF_LOAD16(w + 16);
{fma}{pf_step}
            }}
{store}
        {step}
    }}
"""


#: Positions per pass of the channel-vectorised tile's AVX2 form: 16 channels (two 8-lane weight
#: vectors) x 6 positions = 12 accumulators, 2 weight vectors and a broadcast, 15 of the 16 ymm
#: registers.
CM_POSITIONS_AVX2 = 6

#: The AVX2 channel-vectorised tile reduces in blocks of input channels when its packed weights
#: exceed SF_CM_BLOCK_MIN bytes: each block's weights and input (SF_CM_BLOCK bytes together) stay in
#: the L1 while every pass of positions reads them, the partial sums kept position-major in A.
#: Unblocked, a pass streamed all the weights and the whole input from the L2 or beyond (ResNet-50's
#: 512-channel 7x7 3x3 conv: 590 KB of weights per pass of 6 positions).
CM_BLOCK_DEFS = """#if !defined(SF_CM_BLOCK)
#define SF_CM_BLOCK (24L*1024)
#define SF_CM_BLOCK_MIN (128L*1024)
#endif
"""


def _cm_pass_avx2(p: int, loop: str, step: str = "") -> str:
    """One pass shape of ``sf_conv_tile32``'s AVX2 form: ``loop`` runs it over q0 while ``p``
    positions are left; for each half of the 32 channels, 16 channels x ``p`` positions in
    registers over the block's (channel, tap) reduction. The first block starts at the bias,
    later ones at the partial sums in A; a blocked reduction leaves its sums in A, an unblocked one
    scatters them into the channel-major tile through ``o``."""
    init = " ".join(f"__m256 c{i}_0 = cs ? _mm256_load_ps(A + (q0 + {i})*32 + h) : b0, "
                    f"c{i}_1 = cs ? _mm256_load_ps(A + (q0 + {i})*32 + h + 8) : b1;" for i in range(p))
    fma = "\n".join(f"                {{ const __m256 xb = _mm256_broadcast_ss(xt + {i}); "
                    f"c{i}_0 = _mm256_fmadd_ps(xb, w0, c{i}_0); c{i}_1 = _mm256_fmadd_ps(xb, w1, c{i}_1); }}"
                    for i in range(p))
    to_a = " ".join(f"_mm256_store_ps(A + (q0 + {i})*32 + h, c{i}_0); _mm256_store_ps(A + (q0 + {i})*32 + h + 8, c{i}_1);"
                    for i in range(p))
    to_o = " ".join(f"_mm256_store_ps(o + {16 * i}, c{i}_0); _mm256_store_ps(o + {16 * i + 8}, c{i}_1);"
                    for i in range(p))
    return f"""    {loop} {{
    for (int h = 0; h < 32; h += 16) {{
        const __m256 b0 = bias ? _mm256_loadu_ps(bias + h) : _mm256_setzero_ps();
        const __m256 b1 = bias ? _mm256_loadu_ps(bias + h + 8) : _mm256_setzero_ps();
        {init}
        for (long c = cs; c < ce; c++)
            for (long t = 0; t < taps; t++) {{
                const float *restrict xt = x + c*cplane + off[t] + q0;
                const float *restrict w = wp + (c*taps + t)*32 + h;
                const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
{fma}
            }}
        if (cb < C) {{ {to_a} }}
        else {{
            {to_o}
            for (int a = 0; a < 16; a++) for (int i = 0; i < {p}; i++) T[(h + a)*span + q0 + i] = o[16*i + a];
        }}
    }}
    {step}
    }}
"""


#: A two-vector shuffle with constant lane indices: ``__builtin_shufflevector`` (clang, GCC 12+),
#: else GCC's ``__builtin_shuffle`` with an index vector (GCC 11 has no __builtin_shufflevector).
SHUF_DEFS = """#if defined(SF_AVX512_TILES) && !defined(SF_SHUF16)
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define SF_SHUF16(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
typedef int sf_v16_lanes __attribute__((vector_size(64)));
#define SF_SHUF16(a, b, ...) __builtin_shuffle(a, b, (sf_v16_lanes){__VA_ARGS__})
#endif
#endif
"""


def _transposed_store(p: int) -> str:
    """The C lines storing a pass's ``p`` positions (7 <= p <= 16) x 32 channels (``c<i>_<h>``:
    position i, channels 16h..16h+15) into the channel-major tile ``T[a*span + q0 + i]``: each half
    transposed in registers (a 16x16 butterfly, 4 stages of 16 two-vector shuffles, ``SF_SHUF16``
    of :data:`SHUF_DEFS`; rows past
    ``p`` are filler whose lanes are not stored), then one masked store of ``p`` positions per
    channel. Standalone tile against the former per-position scatter through a stack array (32
    scalar stores per position): squeezenet's 13x13 3x3 convs 0.98 of the time, 1x1 0.90."""
    lines = [f"        const sf_mask16 mp = (sf_mask16){(1 << p) - 1}u;"]
    for h in range(2):
        rows = [f"c{i if i < p else 0}_{h}" for i in range(16)]
        for stage, b in enumerate((8, 4, 2, 1)):
            new = list(rows)
            for i in range(16):
                if i & b:
                    continue
                j = i + b
                lo = ", ".join(str(16 + q - b if q & b else q) for q in range(16))
                hi = ", ".join(str(16 + q if q & b else q + b) for q in range(16))
                new[i], new[j] = f"r{h}_{stage}_{i}", f"r{h}_{stage}_{j}"
                lines.append(f"        const sf_v16 {new[i]} = SF_SHUF16({rows[i]}, {rows[j]}, {lo});")
                lines.append(f"        const sf_v16 {new[j]} = SF_SHUF16({rows[i]}, {rows[j]}, {hi});")
            rows = new
        lines += [f"        SF_STOREM(T + {16 * h + a}*span + q0, mp, {rows[a]});" for a in range(16)]
    return "\n".join(lines)


def _conv_tile_cm(name: str, conv_body) -> str:
    """``sf_conv_tile32``: with AVX-512 the vectors run across the 32 output channels of the block
    (two weight vectors per tap, one broadcast input per position, CM_POSITIONS per pass,
    then 7, then one at a time; on a plane of a multiple of 13 positions but not of 14 -- 13x13:
    169 = 12 x 14 + 1, the last pass latency-bound -- 13 per pass: standalone, paired, squeezenet's
    13x13 convs 0.99 of the time), so a plane whose positions fill the 16-lane vectors badly (7x7: 49
    positions in 4 masked vectors, 77% of the lanes; 14x14: 196 in 13) wastes no lanes; the same packed weights
    ([C][taps][32]) feed the position-vectorised form in 4 blocks of 8 channels on the other targets."""
    p = CM_POSITIONS
    passes = (_cm_pass(p - 1, f"if (span % {p - 1} == 0 && span % {p}) for (; q0 < span; q0 += {p - 1})", prefetch=True)
              + _cm_pass(p, f"for (; q0 + {p} <= span; q0 += {p})", prefetch=True)
              + _cm_pass(7, "if (q0 + 7 <= span)", "q0 += 7;")
              + _cm_pass(1, "for (; q0 < span; q0++)"))
    pa = CM_POSITIONS_AVX2
    avx2 = (_cm_pass_avx2(pa, f"for (; q0 + {pa} <= span; q0 += {pa})")
            + _cm_pass_avx2(3, "if (q0 + 3 <= span)", "q0 += 3;")
            + _cm_pass_avx2(1, "for (; q0 < span; q0++)"))
    return SHUF_DEFS + CM_BLOCK_DEFS + f"""/* Channel-vectorised conv tile: T[a*span + q] = sum over c < C, t < taps of
   wp[(c*taps + t)*32 + a] * x[c*cplane + off[t] + q], a < 32, q < span; the accumulators start at
   bias[a] (NULL: 0). AVX-512: 32 channels x {p} positions in registers per pass over the taps.
   Not specialised per call site: GCC 12's clones for a known span flagged the remainder passes
   with -Waggressive-loop-optimizations (a false alarm; same speed without the clone). */
SF_NOINLINE SF_NOCLONE SF_UNUSED static void {name}(float *restrict T, long span, const float *restrict x, long cplane,
    const float *restrict wp, long C, long taps, const long *restrict off, const float *restrict bias)
{{
#if defined(SF_AVX512_TILES)
    sf_v16 b0 = SF_ZERO16, b1 = SF_ZERO16;
    if (bias) {{ b0 = SF_LOAD16(bias); b1 = SF_LOAD16(bias + 16); }}
    float o[32];
    long q0 = 0;
{passes}#elif defined(SF_AVX2_TILES)
    float o[16 * {CM_POSITIONS_AVX2}] SF_ALIGN64, A[256 * 32] SF_ALIGN64;  /* span <= 256 */
    long cb = C;
    if (C*taps*128 > SF_CM_BLOCK_MIN) {{ cb = SF_CM_BLOCK / (taps*128 + cplane*4); if (cb < 1) cb = 1; }}
    for (long cs = 0; cs < C; cs += cb) {{
    const long ce = cs + cb < C ? cs + cb : C;
    long q0 = 0;
{avx2}    }}
    if (cb < C) for (int a = 0; a < 32; a++) for (long q = 0; q < span; q++) T[a*span + q] = A[q*32 + a];
#else
{conv_body(8, CHUNK)}#endif
}}
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
       latency-bound), then 8 at a time; GCC 12 kept the GNU vector below in memory on AVX2
       (a load, a multiply, an add and a store per 8 lanes and tap: 3.5x ONNX Runtime's time) */
    for (; q + 64 <= span; q += 64) {{
        __m256 a[8];
        for (int v = 0; v < 8; v++) a[v] = _mm256_set1_ps(b0);
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++) {{
                const float *xt = x + c*cplane + off[t] + q;
                const __m256 w = _mm256_broadcast_ss(wp + c*taps + t);
                for (int v = 0; v < 8; v++) a[v] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xt + 8*v), a[v]);
            }}
        for (int v = 0; v < 8; v++) _mm256_storeu_ps(T + q + 8*v, a[v]);
    }}
    for (; q + 8 <= span; q += 8) {{
        __m256 a0 = _mm256_set1_ps(b0);
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++)
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wp + c*taps + t), _mm256_loadu_ps(x + c*cplane + off[t] + q), a0);
        _mm256_storeu_ps(T + q, a0);
    }}
    if (q < span) {{  /* the last partial vector, masked */
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(span - q)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 a0 = _mm256_set1_ps(b0);
        for (long c = 0; c < C; c++)
            for (long t = 0; t < taps; t++)
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wp + c*taps + t), _mm256_maskload_ps(x + c*cplane + off[t] + q, m), a0);
        _mm256_maskstore_ps(T + q, m, a0);
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
            for (long c = cs; c < ce; c++)
                for (long t = 0; t < taps; t++) {{
                    const float *restrict xt = x + c*cplane + off[t] + q;
                    const float *restrict w = wp + (c*taps + t)*{mb} + a0;
{fma}
                }}
{store}
        }}"""
            # 24 positions per pass (4 x 3 accumulators: standalone, paired, 64- and 128-channel
            # 3x3 convs 12-15% faster than 16), then one of 16, then the masked tail; an input
            # over SF_CONV_CBLOCK_MIN_AVX2 bytes in blocks of channels, as in the AVX-512 form
            return f"""    long cb = C, q = 0;
    if (C*cplane*4 > SF_CONV_CBLOCK_MIN_AVX2) {{ cb = SF_CONV_CBLOCK_AVX2 / (cplane*4); if (cb < 16) cb = 16; }}
    for (long cs = 0; cs < C; cs += cb) {{
    const long ce = cs + cb < C ? cs + cb : C;
    q = 0;
    for (; q + 24 <= span; q += 24)
{blocks(wdecl, wfma, wstore)}
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
            return _conv_tile_cm(name, conv_body)
        wide = _chunk_pass(mb, WIDE, f"for (; q + {16 * WIDE} <= span; q += {16 * WIDE})")
        avx512 = f"""    /* an input of more than SF_CONV_CBLOCK_MIN bytes (it cannot stay in the L2 while the chunks
       walk over it) in blocks of input channels of SF_CONV_CBLOCK bytes, the partial sums in T */
    long cb = C, q = 0;
    if (C*cplane*4 > SF_CONV_CBLOCK_MIN) {{ cb = SF_CONV_CBLOCK / (cplane*4); if (cb < 16) cb = 16; }}
    for (long cs = 0; cs < C; cs += cb) {{
    const long ce = cs + cb < C ? cs + cb : C;
    q = 0;
{wide}{_chunk_pass(mb, 2, f"for (; q + {CHUNK} <= span; q += {CHUNK})")}    }}
    if (q < span) sf_conv_tail{mb}(T, span, q, x, cplane, wp, C, taps, off, bias);
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
   pw, pr (NULL: none): where the caller's epilogue will write / read this tile's values, channel
   a's position q at pw[a*ps + q] (approximately: junk columns shift it); each chunk prefetches
   its lines there, so that those misses overlap the multiply-adds (the epilogue of a large
   plane otherwise waits for them, memory-bound, after the compute-bound tile). */
SF_NOINLINE SF_UNUSED static void {name}(float *restrict T, long span, const float *restrict x, long cplane,
    const float *restrict wp, long C, long taps, const long *restrict off, const float *restrict bias,
    float *pw, const float *pr, long ps)
{{
    (void)pw; (void)pr; (void)ps;
#if defined(SF_AVX512_TILES)
{avx512}#else
{register_blocks(mb, conv_body, conv_avx2)}#endif
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
