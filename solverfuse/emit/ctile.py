"""C-text building blocks of the register-blocked tiles that the GEMM and conv helper texts
(:mod:`~solverfuse.emit.chelpers`, :mod:`~solverfuse.emit.conv_helpers`) share: the chunk width,
the unrolled multiply-add lines, the AVX2 block of eight-lane accumulators, the choice between
the AVX-512 / portable and the AVX2 loop nests, and the AVX2 8x8 vector transpose. A leaf: it
builds on no other emit module.

>>> CHUNK, acc_lines(1, "w[{i}]", 4).strip()
(32, 'for (int e = 0; e < 4; e++) acc[0][e] = SF_FMA(w[0], xt[e], acc[0][e]);')
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


def register_blocks(mb: int, body, avx2) -> str:
    """The loop nest of a register-blocked tile for the target the compiler builds for:
    ``body(rows, CHUNK)`` (blocks of ``rows`` = min(mb, 8) x CHUNK accumulators, auto-vectorised:
    16 zmm with AVX-512, and the portable form) unless the target has AVX2 + FMA without
    AVX-512 (``SF_AVX2_TILES``); there ``avx2(rows)`` -- blocks of ``rows`` <= 4 x 16 accumulators, AVX2 intrinsics: 16 vector
    registers do not hold 8 x 32 accumulators (spilled: 25 GFLOP/s on a 3x3 conv where AVX-512
    reaches 105, on the same Zen 4 core built with -mno-avx512f; the 4 x 16 blocks: 48, and 105
    with the inputs pinned in registers), and GCC 12 leaves 4 x 16 float arrays in memory."""
    return f"#if defined(SF_AVX2_TILES)\n{avx2(min(mb, 4))}#else\n{body(min(mb, 8), CHUNK)}#endif\n"


def v8_block(rows: int, weight: str, xptr: str, indent: str, masked: bool = False,
              init: str = "", vecs: int = 2) -> tuple[str, str]:
    """(declarations, multiply-adds) of ``rows`` x ``vecs`` eight-lane accumulators ``c<i>_<v>``
    (AVX2): row i's weight is at ``weight.format(i=i)``, its 8 x ``vecs`` inputs start at ``xptr``
    (``masked``, two vectors only: only the lanes of the masks ``m0``, ``m1`` are loaded, the
    others read as 0); ``init``: the C expression of row i's vector v's start value
    (``init.format(i=i, v=v, e=8 * v)``; default 0). At 4 rows x 3 vectors the 12 accumulators,
    3 inputs and the broadcast take all 16 ymm registers."""
    assert not masked or vecs == 2
    init = init or "_mm256_setzero_ps()"
    decl = indent + " ".join(f"__m256 c{i}_{v} = {init.format(i=i, v=v, e=8 * v)};" for i in range(rows) for v in range(vecs))
    # the empty asm pins the input vectors in registers: else GCC folds them into every
    # multiply-add as a memory operand -- 3 loads per 2 FMAs, load-bound at half the FMA rate
    if masked:
        load = f"x0 = _mm256_maskload_ps({xptr}, m0), x1 = _mm256_maskload_ps({xptr} + 8, m1)"
    else:
        load = ", ".join(f"x{v} = _mm256_loadu_ps({xptr}" + (f" + {8 * v})" if v else ")") for v in range(vecs))
    pin = ", ".join(f'"+x"(x{v})' for v in range(vecs))
    body = [f"{indent}    __m256 {load};",
            f'{indent}    __asm__("" : {pin});']
    for i in range(rows):
        body.append(f"{indent}    {{ const __m256 wv = _mm256_broadcast_ss({weight.format(i=i)}); "
                    + " ".join(f"c{i}_{v} = _mm256_fmadd_ps(wv, x{v}, c{i}_{v});" for v in range(vecs)) + " }")
    return decl, "\n".join(body)


#: C text of ``sf_transpose8(dst, ldd, a, lda, mr)`` (AVX2): dst[j*ldd + i] = a[i*lda + j] for rows
#: i < mr, 0 for the others, j < 8 -- an 8x8 block transposed in vector registers (unpack, shuffle
#: and lane-permute stages: the same values as an element loop). The matmul tile's A block (ldd 8)
#: and the AVX2 channel tile's position-major partial sums into its channel-major tile use it.
TRANSPOSE8 = """#if defined(SF_AVX2_TILES) && !defined(SF_TRANSPOSE8)
#define SF_TRANSPOSE8 1
SF_UNUSED static inline void sf_transpose8(float *restrict dst, long ldd, const float *restrict a, long lda, long mr)
{
    __m256 r[8];
    for (int i = 0; i < 8; i++) r[i] = i < mr ? _mm256_loadu_ps(a + i*lda) : _mm256_setzero_ps();
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(dst + 1*ldd, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(dst + 2*ldd, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(dst + 3*ldd, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(dst + 4*ldd, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(dst + 5*ldd, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(dst + 6*ldd, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(dst + 7*ldd, _mm256_permute2f128_ps(s3, s7, 0x31));
}
#endif
"""
