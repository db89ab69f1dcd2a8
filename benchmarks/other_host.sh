#!/bin/sh
# Issue 15's runtime checks on another host, one command there: thread scaling of our C against
# ONNX Runtime with its ceiling (scaling_bound.py), the motifs against the STREAM triad
# (motifbw.py), GEMM/conv kernels against MLAS (gemm_speed.py), the matmul tile alone from the L1
# to memory (mm_tile_probe.py), the beyond-the-L2 thresholds A/B (threshold_ab.py), where the
# second thread's time goes in ResNet-50 and DenseNet-121 (thread_trace.py, with line_share.py,
# kernel_passes.py and zoo_profile.py --classes) and the exported transformers
# (transformers_speed.py), each result file written to OUTDIR (the repo's results/ are left
# alone). For a host with more, unshared cores than the 2-vCPU guest the results so far come from
# (results/scaling.md: its second vCPU is now and then away).
#
#   sh benchmarks/other_host.sh wheels DIR          # here: the Python dependencies as wheels
#   sh benchmarks/other_host.sh run OUTDIR [DIR]    # there: install DIR's wheels (if given), run
#
# "wheels" fetches what a Python 3.12 x86-64 Linux host without network access lacks of the core
# set (ortools and its protobuf, pydantic) plus ONNX Runtime, at the versions of the development
# venv (about 58 MiB; leave out onnxruntime to use the host's own, and say so with the results).
# PY names the Python (default python3); each model and stage has its own time limit (MODEL_S,
# MOTIFS_S, KERNELS_S, PROBE_S, TRACE_S, LINES_S, PASSES_S, CLASSES_S, THRESH_S, EXPORTS_S seconds), so a slow host still returns what
# finished (one scaling section per model). Seven result files: a device call returns at most 8.
set -e
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-python3}
case "$1" in
wheels)
  DIR=${2:?the folder for the wheels}
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DIR" ortools==9.15.6755 protobuf==6.33.6 pydantic==2.14.4 \
    pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 immutabledict==4.3.1 \
    typing_extensions==4.16.0 onnxruntime==1.32.0
  ;;
run)
  OUT=${2:?the folder for the results}
  mkdir -p "$OUT"
  if [ -n "$3" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sf-site "$3"/*.whl
    export PYTHONPATH=/tmp/sf-site
  fi
  export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  cd "$HERE"
  { date -u; uname -a; lscpu; free -g; cc --version | head -1; "$PY" --version; uptime; } >"$OUT/host.txt" 2>&1
  "$PY" -c "import onnxruntime, ortools, onnx; print('onnxruntime', onnxruntime.__version__, 'ortools', ortools.__version__, 'onnx', onnx.__version__)" | tee -a "$OUT/host.txt"
  for m in squeezenet shufflenet inception_v1 inception_v2 resnet50 densenet121 bvlc_alexnet zfnet512 vgg19; do
    timeout "${MODEL_S:-60}" "$PY" benchmarks/scaling_bound.py --cases "light:$m" --rounds 11 --out "$OUT/scaling.md" \
      --append || true
  done
  timeout "${MOTIFS_S:-120}" "$PY" benchmarks/motifbw.py --rounds 21 --title "other host" --out "$OUT/motifbw.md" || true
  # VGG-19's 3x3 conv shapes, a linear layer and a 1x1 conv against MLAS at 1 and 2 threads (on a
  # 16-core Xeon the 512-channel 28x28 conv ran at 0.4 of MLAS's speed before tiles of several
  # channel blocks: results/conv.md)
  timeout "${KERNELS_S:-90}" "$PY" benchmarks/gemm_speed.py --section kernels --threads 1,2 --rounds 5 \
    --cases conv:64x224x224x64x3x1x1,conv:128x112x112x128x3x1x1,conv:256x56x56x256x3x1x1,conv:512x28x28x512x3x1x1,conv:512x14x14x512x3x1x1,gemm:256x1024x1024,gemm:128x3072x8192,conv:64x56x56x64x1x1x1 \
    --title "other host: GEMM/conv kernels" --out "$OUT/kernels.md" || true
  # the matmul tile alone with B from the L1 to memory (on the Xeon the GEMM ran at half of MLAS:
  # core or memory levels?), in the same file
  timeout "${PROBE_S:-40}" "$PY" benchmarks/mm_tile_probe.py --rounds 5 --out "$OUT/kernels.md" --append || true
  # where the second thread's time goes (on the 16-core Xeon ResNet-50 gained 1.18x from it, ONNX
  # Runtime 1.61x; DenseNet-121 1.07-1.24x: scaling.md): each team kernel's extra work and skew,
  # with the OpenMP threads free to move and then pinned one per core, in one file
  timeout "${TRACE_S:-50}" "$PY" benchmarks/thread_trace.py light:resnet50 light:densenet121 --rounds 11 \
    --title "other host" --out "$OUT/trace.md" >/dev/null 2>&1 || true
  OMP_PROC_BIND=close OMP_PLACES=cores timeout "${TRACE_S:-50}" "$PY" benchmarks/thread_trace.py light:resnet50 \
    light:densenet121 --rounds 11 --title "other host, pinned" --out "$OUT/trace.md" --append >/dev/null 2>&1 || true
  # what a line another core touched costs there (here a write into lines both threads had read
  # ran at a third of the speed of a write into the thread's own: results/omp.md), and the passes
  # of two DenseNet-121 growth kernels at 1 and 2 threads (here the Concat's copy and the conv
  # input's copy ran slower at 2 threads than at 1), in the same file
  timeout "${LINES_S:-20}" "$PY" benchmarks/line_share.py --out "$OUT/trace.md" --append >/dev/null 2>&1 || true
  timeout "${PASSES_S:-40}" "$PY" benchmarks/kernel_passes.py light:densenet121 3,31 --rounds 9 --out "$OUT/trace.md" \
    --append >/dev/null 2>&1 || true
  # ResNet-50's speed-up by kind of kernel, ours against ORT's (there it gained 1.18x against ORT's
  # 1.61x; here both runtimes' convs gain 1.9: results/scaling.md), in the same file
  timeout "${CLASSES_S:-45}" "$PY" benchmarks/zoo_profile.py light:resnet50 --classes 2 --rounds 9 \
    --out "$OUT/trace.md" --append >/dev/null 2>&1 || true
  # the beyond-the-L2 thresholds (SLAB_MIN 4 MiB, CONV_CBLOCK_MIN 2 MiB) both at 4, 2 and 1 MiB
  # (threshold_ab.py: for a host whose L3 is slow)
  timeout "${THRESH_S:-150}" "$PY" benchmarks/threshold_ab.py --rounds 5 --out "$OUT/thresholds.md" || true
  timeout "${EXPORTS_S:-180}" "$PY" benchmarks/transformers_speed.py --rounds 5 --out "$OUT/transformers.md" || true
  uptime >>"$OUT/host.txt"
  ;;
*)
  echo "usage: sh benchmarks/other_host.sh wheels DIR | run OUTDIR [DIR]" >&2
  exit 2
  ;;
esac
