"""C text of the channel-vectorised conv tile ``sf_conv_tile32`` (small planes: the vectors run
across 32 output channels, one broadcast input per position): its AVX-512 passes (transposed
stores, the next block's weights prefetched), its AVX2 passes (16 channels x 6 positions, the
reduction blocked in L1-sized blocks of input channels when the weights are large), and the
portable form the caller supplies. Served through :mod:`~solverfuse.emit.conv_helpers`. Builds
on :mod:`~solverfuse.emit.ctile` only.

>>> "sf_conv_tile32" in conv_tile_cm("sf_conv_tile32", lambda mb, cols: ""), CM_CHANNELS, CM_POSITIONS_AVX2
(True, 32, 6)
"""
from __future__ import annotations

from .ctile import CHUNK, TRANSPOSE8

#: Output channels of the channel-vectorised conv tile (``sf_conv_tile32``) and its positions per
#: pass (2 x 14 accumulators, 2 weight vectors, a broadcast: 31 of the 32 zmm registers; 14
#: divides the 14x14 and 28x28 planes, 49 = 3 x 14 + 7; paired in-model CPU times on ResNet-50's
#: 7x7 and 14x14 convs 4-5% faster than 12 per pass).
CM_CHANNELS, CM_POSITIONS = 32, 14


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
#: exceed SF_CM_BLOCK_MIN bytes, or SF_CM_BLOCK_MIN_SMALL bytes on a span of at most
#: SF_CM_SMALL_SPAN positions: each block's weights and input (SF_CM_BLOCK bytes together) stay in
#: the L1 while every pass of positions reads them, the partial sums kept position-major in A.
#: Unblocked, a pass streamed all the weights and the whole input from the L2 or beyond (ResNet-50's
#: 512-channel 7x7 3x3 conv: 590 KB of weights per pass of 6 positions). On up to 64 positions A
#: (8 KB) fits the L1 beside the block, so smaller weights gain too (kernels against ONNX Runtime in
#: the same run, two runs: ResNet-50's 7x7 1x1 convs 512 -> 2048 1.72-1.81 -> 1.43-1.45 of its time,
#: 1024 -> 512 1.30-2.00 -> 1.09-1.52); on squeezenet's 13x13 classifier (A 21.6 KB) it lost
#: (1.16-1.38 -> 1.42-1.50). Larger spans with weights between the two thresholds run in chunks of
#: SF_CM_CHUNK positions instead (0: none), each blocked by SF_CM_CBLOCK bytes of weights and
#: input, so that a chunk's partial sums (3.75 KB) stay in the L1 too; the weights are read once
#: per chunk. Standalone tiles with their own weights, best of 6 alternating runs: 512 -> 1000 on
#: 13x13 62 -> 73 GFLOP/s, 512 and 1024 channels 1x1 on 14x14 +6% / +4%, 256-channel 1x1 and
#: 64-channel 3x3 -1%. The macros are overridden together (-D on all six).
CM_BLOCK_DEFS = """#if !defined(SF_CM_BLOCK)
#define SF_CM_BLOCK (24L*1024)
#define SF_CM_BLOCK_MIN (128L*1024)
#define SF_CM_BLOCK_MIN_SMALL (16L*1024)
#define SF_CM_SMALL_SPAN 64
#define SF_CM_CHUNK 30
#define SF_CM_CBLOCK (20L*1024)
#endif
"""


def _cm_pass_avx2(p: int, loop: str, step: str = "", prefetch: bool = False) -> str:
    """One pass shape of ``sf_conv_tile32``'s AVX2 form: ``loop`` runs it over q0 while ``p``
    positions are left; for each half of the 32 channels, 16 channels x ``p`` positions in
    registers over the block's (channel, tap) reduction. The first block starts at the bias,
    later ones at the partial sums in A; a blocked reduction leaves its sums in A, an unblocked one
    scatters them into the channel-major tile through ``o``. ``prefetch``: the second pass of a
    chunk (q0 = s0 + p) pulls the packed weights that follow the block's (the next block's, or
    after the last block the next tile's first) into the L2, a line per (channel, tap) and half:
    else the first pass of each block waited on them (standalone, 64 tiles of ResNet-50's 512 ->
    2048 1x1 conv on 7x7 with their own weights: 27 GFLOP/s, 47-81 with one tile's weights
    reused). A 1x1 conv (taps == 1) reduces in one loop over the channels, stepping its pointers:
    the general (channel, tap) nest spent about as many instructions on indices and loop control
    (an offset load, products, two loop tests) as on the 12 multiply-adds, and the 6-wide front
    end, not the FMA pipes, set the pace. Paired in-model CPU times (Zen 3): SqueezeNet's 13x13
    512 -> 1000 classifier 2.56 -> 2.11 ms, ResNet-50's 14x14 and 7x7 1x1 convs 0.84-0.90 of the
    time; standalone tiles 80-84 -> 86-89 GFLOP/s. Unrolling the 9 taps of a 3x3 the same way
    gained nothing (0.93-1.08 per conv, the model's total unchanged)."""
    init = " ".join(f"__m256 c{i}_0 = cs ? _mm256_load_ps(A + (q0 + {i})*32 + h) : b0, "
                    f"c{i}_1 = cs ? _mm256_load_ps(A + (q0 + {i})*32 + h + 8) : b1;" for i in range(p))
    fma = "\n".join(f"                {{ const __m256 xb = _mm256_broadcast_ss(xt + {i}); "
                    f"c{i}_0 = _mm256_fmadd_ps(xb, w0, c{i}_0); c{i}_1 = _mm256_fmadd_ps(xb, w1, c{i}_1); }}"
                    for i in range(p))
    to_a = " ".join(f"_mm256_store_ps(A + (q0 + {i})*32 + h, c{i}_0); _mm256_store_ps(A + (q0 + {i})*32 + h + 8, c{i}_1);"
                    for i in range(p))
    to_o = " ".join(f"_mm256_store_ps(o + {16 * i}, c{i}_0); _mm256_store_ps(o + {16 * i + 8}, c{i}_1);"
                    for i in range(p))
    pf_decl = f"\n    const long pfo = q0 == s0 + {p} ? (ce - cs)*taps*32 : 0;" if prefetch else ""
    pf_step = "\n                __builtin_prefetch(w + pfo, 0, 2);" if prefetch else ""
    return f"""    {loop} {{{pf_decl}
    for (int h = 0; h < 32; h += 16) {{
        const __m256 b0 = bias ? _mm256_loadu_ps(bias + h) : _mm256_setzero_ps();
        const __m256 b1 = bias ? _mm256_loadu_ps(bias + h + 8) : _mm256_setzero_ps();
        {init}
        if (taps == 1) {{
            /* a 1x1 conv: one loop over the channels, stepping the pointers */
            const float *restrict xt = x + cs*cplane + off[0] + q0;
            const float *restrict w = wp + cs*32 + h;
            for (long c = cs; c < ce; c++, xt += cplane, w += 32) {{
                const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);{pf_step}
{fma}
            }}
        }} else
        for (long c = cs; c < ce; c++)
            for (long t = 0; t < taps; t++) {{
                const float *restrict xt = x + c*cplane + off[t] + q0;
                const float *restrict w = wp + (c*taps + t)*32 + h;
                const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);{pf_step}
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


def _cm_pass1_avx2() -> str:
    """The one-position pass of ``sf_conv_tile32``'s AVX2 form (the last position of a span of
    6k + 1: 7x7 planes, 13x13): all 32 channels at once, the reduction split over even and odd
    input channels, so 8 independent accumulators keep both FMA pipes busy (as two 16-channel
    halves of 2 accumulators each, every multiply-add waited on the one before: 4 cycles per
    (channel, tap) and half). The first block starts at the bias, later ones at A."""
    init = " ".join(f"__m256 e{j} = cs ? _mm256_load_ps(A + q0*32 + {8 * j}) : (bias ? _mm256_loadu_ps(bias + {8 * j}) "
                    f": _mm256_setzero_ps()), f{j} = _mm256_setzero_ps();" for j in range(4))
    fma = "\n".join(f"                {acc}{j} = _mm256_fmadd_ps({xb}, _mm256_loadu_ps({w} + {8 * j}), {acc}{j});"
                     for acc, xb, w in (("e", "xe", "we"), ("f", "xf", "wf")) for j in range(4))
    fma_e = "\n".join(f"                e{j} = _mm256_fmadd_ps(xe, _mm256_loadu_ps(we + {8 * j}), e{j});" for j in range(4))
    to_a = " ".join(f"_mm256_store_ps(A + q0*32 + {8 * j}, e{j});" for j in range(4))
    to_o = " ".join(f"_mm256_store_ps(o + {8 * j}, e{j});" for j in range(4))
    return f"""    for (; q0 < s1; q0++) {{
        {init}
        long c = cs;
        for (; c + 1 < ce; c += 2)
            for (long t = 0; t < taps; t++) {{
                const __m256 xe = _mm256_broadcast_ss(x + c*cplane + off[t] + q0);
                const __m256 xf = _mm256_broadcast_ss(x + (c + 1)*cplane + off[t] + q0);
                const float *restrict we = wp + (c*taps + t)*32, *restrict wf = we + taps*32;
{fma}
            }}
        for (; c < ce; c++)
            for (long t = 0; t < taps; t++) {{
                const __m256 xe = _mm256_broadcast_ss(x + c*cplane + off[t] + q0);
                const float *restrict we = wp + (c*taps + t)*32;
{fma_e}
            }}
        {" ".join(f"e{j} = _mm256_add_ps(e{j}, f{j});" for j in range(4))}
        if (cb < C) {{ {to_a} }}
        else {{
            {to_o}
            for (int a = 0; a < 32; a++) T[a*span + q0] = o[a];
        }}
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


def conv_tile_cm(name: str, conv_body) -> str:
    """``sf_conv_tile32``: with AVX-512 the vectors run across the 32 output channels of the block
    (two weight vectors per tap, one broadcast input per position, CM_POSITIONS per pass,
    then 7, then one at a time; on a plane of a multiple of 13 positions but not of 14 -- 13x13:
    169 = 12 x 14 + 1, the last pass latency-bound -- 13 per pass: standalone, paired, squeezenet's
    13x13 convs 0.99 of the time), so a plane whose positions fill the 16-lane vectors badly (7x7: 49
    positions in 4 masked vectors, 77% of the lanes; 14x14: 196 in 13) wastes no lanes. AVX2: 16
    channels x 6 positions per pass (:func:`_cm_pass_avx2`; ResNet-50's 7x7 and 14x14 convs had
    run at 23-49 GFLOP/s as position-vectorised blocks of 4 channels, on a Zen 3 core that peaks
    at 96), a last single position over all 32 channels (:func:`_cm_pass1_avx2`: standalone,
    alternated in one process against two 16-channel halves, ResNet-50's 7x7 3x3 conv 0.96 of the
    time in both copies of the code, its 512 -> 2048 1x1 0.96 in one copy and 1.08 in the other --
    code placement moves it that much); the same packed weights ([C][taps][32]) feed the
    position-vectorised form in 4 blocks of 8 channels on the portable target."""
    p = CM_POSITIONS
    passes = (_cm_pass(p - 1, f"if (span % {p - 1} == 0 && span % {p}) for (; q0 < span; q0 += {p - 1})", prefetch=True)
              + _cm_pass(p, f"for (; q0 + {p} <= span; q0 += {p})", prefetch=True)
              + _cm_pass(7, "if (q0 + 7 <= span)", "q0 += 7;")
              + _cm_pass(1, "for (; q0 < span; q0++)"))
    pa = CM_POSITIONS_AVX2
    avx2 = (_cm_pass_avx2(pa, f"for (; q0 + {pa} <= s1; q0 += {pa})", prefetch=True)
            + _cm_pass_avx2(3, "if (q0 + 3 <= s1)", "q0 += 3;")
            + _cm_pass1_avx2())
    return SHUF_DEFS + TRANSPOSE8 + CM_BLOCK_DEFS + f"""/* Channel-vectorised conv tile: T[a*span + q] = sum over c < C, t < taps of
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
    long cb = C, sc = span;  /* blocks of input channels; chunks of positions */
    if (C*taps*128 > SF_CM_BLOCK_MIN || (span <= SF_CM_SMALL_SPAN && C*taps*128 > SF_CM_BLOCK_MIN_SMALL)) {{
        cb = SF_CM_BLOCK / (taps*128 + cplane*4);
        if (cb < 1) cb = 1;
    }} else if (C*taps*128 > SF_CM_BLOCK_MIN_SMALL && SF_CM_CHUNK) {{
        long reach = 0;  /* the farthest tap offset */
        for (long t = 0; t < taps; t++) if (off[t] > reach) reach = off[t];
        sc = SF_CM_CHUNK;
        const long xs = sc + reach < cplane ? sc + reach : cplane;  /* the input floats a block reads per channel */
        cb = SF_CM_CBLOCK / (taps*128 + xs*4);
        if (cb < 1) cb = 1;
    }}
    for (long s0 = 0; s0 < span; s0 += sc) {{
    const long s1 = s0 + sc < span ? s0 + sc : span;
    for (long cs = 0; cs < C; cs += cb) {{
    const long ce = cs + cb < C ? cs + cb : C;
    long q0 = s0;
{avx2}    }}
    }}
    if (cb < C) {{
        /* the position-major partial sums into the channel-major tile in 8x8 blocks transposed in
           registers (the element loop: ResNet-50's chunked 14x14 and 7x7 1x1 convs 1.02-1.06x) */
        long q = 0;
        for (; q + 8 <= span; q += 8)
            for (int a = 0; a < 32; a += 8) sf_transpose8(T + a*span + q, span, A + q*32 + a, 32, 8);
        for (; q < span; q++) for (int a = 0; a < 32; a++) T[a*span + q] = A[q*32 + a];
    }}
#else
{conv_body(8, CHUNK)}#endif
}}
"""
