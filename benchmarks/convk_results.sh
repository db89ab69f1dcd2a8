#!/bin/sh
# The conv-kernel work of issue 15 ("convk"), before (another checkout's tree, $1) and after (this
# tree), into benchmarks/results/convk.md:
#  1. per kernel, paired in one process (benchmarks/conv_ab.py: both trees' instrumented libraries
#     in alternating rounds, fastest CPU time per kernel) on ResNet-50, VGG-19 and DenseNet-121;
#  2. ResNet-50's conv shapes against ONNX Runtime (MLAS), each tree's gemm_speed.py kernels
#     section (ORT in the same run: the ours/ORT column is paired, across trees it is not);
#  3. the three models' whole plans against ONNX Runtime at 1 thread, each tree's zoo section.
# 1-thread rows: the calling thread's CPU time (the machine is shared). A few minutes.
#   sh benchmarks/convk_results.sh /path/to/before/tree [python]
set -e
BEFORE=${1:?the tree to compare with}
PY=${2:-python}
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT="$HERE/benchmarks/results/convk.md"
MODELS=light:resnet50,light:vgg19,light:densenet121
KERNELS=conv:3x224x224x64x7x2x1,conv:64x56x56x64x3x1x1,conv:64x56x56x256x1x1x1,conv:256x56x56x64x1x1x1,conv:128x28x28x128x3x1x1,conv:256x14x14x256x3x1x1,conv:1024x14x14x256x1x1x1,conv:512x7x7x512x3x1x1,conv:512x28x28x512x3x1x1,conv:3x224x224x64x3x1x1
{
  echo "# convk: conv kernels before ($(git -C "$BEFORE" rev-parse --short HEAD 2>/dev/null || echo "$BEFORE")) and after ($(git -C "$HERE" rev-parse --short HEAD)), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Written by benchmarks/convk_results.sh. Load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "## Per kernel, paired (conv_ab.py)"
  for m in light:resnet50 light:vgg19 light:densenet121; do
    rounds=$([ "$m" = light:vgg19 ] && echo 4 || echo 8)
    echo
    (cd "$HERE" && PYTHONPATH="$HERE" "$PY" benchmarks/conv_ab.py "$m" --before "$BEFORE" --rounds "$rounds" --top 25)
  done
  echo
} > "$OUT"
for what in kernels zoo; do
  for tree in "$BEFORE" "$HERE"; do
    label=$([ "$tree" = "$HERE" ] && echo after || echo before)
    (cd "$tree" && PYTHONPATH="$tree" "$PY" "$tree/benchmarks/gemm_speed.py" --section "$what" \
       --cases "$([ $what = zoo ] && echo $MODELS || echo $KERNELS)" --threads 1 --clock cpu --rounds 5 \
       --out "$OUT" --append --title "convk ($what, $label)")
  done
done
