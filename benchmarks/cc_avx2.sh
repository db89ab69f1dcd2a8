#!/bin/sh
# cc for an AVX2-only target on an AVX-512 host (benchmarks/gemm_speed.py --cc)
exec cc "$@" -mno-avx512f
