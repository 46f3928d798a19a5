#!/usr/bin/env bash
# Stages the one-GPU W1 trainers of the optimizer-mode comparison
# (docs/Performance.md, "one-step-stale updates") in build-gpu/ and packs
# them as gpu-pack.tar.xz:
#
#   bash bench/prepare-stale.sh [h100|h200]     # the cost model's device
#
#   w1.trainer     W1, the default one-worker plan for the device
#   w1-m8.trainer  W1, one stage with 8 microbatches of 2 rows, forced (the
#                  H100's default plan since the tied embedding counts once;
#                  on the H200 the default is 4 x 4 rows)
# On the GPU machine: MACHINE=h100x1 bash test/GPU/run-w1-stale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
begin_gpu_stage h100 "$@"
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 -o build-gpu/w1.trainer
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 --microbatches 8 \
  --stages=tail:30 --worker-memory-gb 76 -o build-gpu/w1-m8.trainer
copy_gpu_libs build-gpu/w1.trainer
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
