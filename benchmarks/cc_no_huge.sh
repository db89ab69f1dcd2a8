#!/bin/sh
# cc whose programs keep a plain 64-byte aligned arena, no huge pages (benchmarks/gemm_speed.py --cc: a paired A/B)
exec cc "$@" -DSF_NO_HUGE_PAGES
