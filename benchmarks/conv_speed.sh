#!/bin/sh
# The conv kernels and the models they dominate, before (another checkout's tree, $1) and after
# (this tree), each run a gemm_speed.py section appended to benchmarks/results/conv.md: the plans
# of ResNet-50, Inception v2 and DenseNet-121 (optimal, unfused and ONNX Runtime interleaved), then
# ResNet-50's conv shapes against ORT (MLAS), each tree with its own gemm_speed.py (it puts its
# tree first on sys.path). 1-thread rows: the calling thread's CPU time (the
# machine is shared); 2-thread rows: wall time.
#   sh benchmarks/conv_speed.sh /work/main [python]
set -e
BEFORE=${1:?the tree to compare with}
PY=${2:-python}
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT="$HERE/benchmarks/results/conv.md"
MODELS=light:resnet50,light:inception_v2,light:densenet121
KERNELS=conv:3x224x224x64x7x2x1,conv:64x56x56x64x3x1x1,conv:64x56x56x256x1x1x1,conv:128x28x28x128x3x1x1,conv:256x28x28x256x3x2x1,conv:256x56x56x512x1x2x1,conv:256x14x14x256x3x1x1,conv:1024x14x14x256x1x1x1,conv:512x7x7x512x3x1x1
for what in zoo kernels; do
  for tree in "$BEFORE" "$HERE"; do
    label=$([ "$tree" = "$HERE" ] && echo "after: $(git -C "$HERE" rev-parse --short HEAD)" || echo "before: $(git -C "$tree" rev-parse --short HEAD)")
    (cd "$tree" && PYTHONPATH="$tree" "$PY" "$tree/benchmarks/gemm_speed.py" --section "$what" \
       --cases "$([ $what = zoo ] && echo $MODELS || echo $KERNELS)" --threads 1,2 --clock cpu \
       --out "$OUT" --append --title "conv ($what), $label")
  done
done
