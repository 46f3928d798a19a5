#!/usr/bin/env bash
# Stages the multi-GPU layout comparison (issue 25) in build-gpu/ and packs it
# as gpu-pack.tar.xz. W1 at one global batch of 16 x 4096 tokens, on 1, 2 and
# 4 GPUs of one machine:
#
#   bash bench/prepare-layouts.sh [h100|h200]     # the cost model's device
#
#   w1-g1.trainer  1 GPU                 (the planner's residency)
#   w1-g2.trainer  2 GPUs: the planner's layout (--gpus 2) and the others
#   w1-g4.trainer  4 GPUs: the planner's layout (--gpus 4) and the others
#   plans/         --explain of each (every layout weighed, predicted tok/s)
#   rdev.trainer / gdev.trainer  qwen3-deep-tiny fp32 with device-resident
#                  state, 2 replicas x batch 2 / 1 process x batch 4 (the
#                  NCCL path on GPU memory against one process)
# With QWEN3_8B.onnx (the Qwen3-8B shape's graph: scripts/export-hf-onnx.py
# --preset qwen3-8b --graph-only) as the second argument, also
#   q8-g2.trainer / q8-g4.trainer  full fine-tune of the Qwen3-8B shape,
#                  8 x 4096 tokens per step, on 2 / 4 GPUs of a machine with
#                  512 GB of host memory (its training state does not fit
#                  one GPU)
# On the GPU machine: bash test/GPU/run-layouts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
begin_gpu_stage h100 "$@"
mkdir -p build-gpu/plans
for g in 1 2 4; do
  compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --gpus $g \
    --explain=build-gpu/plans/g$g -o build-gpu/w1-g$g.trainer
done
compile $models/qwen3-deep-tiny.onnx --batch 4 --seq-len 16 --microbatches 4 --gpus 2 \
  --layouts=2x1 --precision=fp32 --residency=device -o build-gpu/rdev.trainer
compile $models/qwen3-deep-tiny.onnx --batch 4 --seq-len 16 --microbatches 4 --workers 1 \
  --precision=fp32 --residency=device -o build-gpu/gdev.trainer
if [ -n "$graph8b" ]; then
  for g in 2 4; do
    compile "$graph8b" --batch 8 --seq-len 4096 --gpus $g --host-memory-gb 480 \
      --explain=build-gpu/plans/q8-g$g -o build-gpu/q8-g$g.trainer
  done
fi
copy_gpu_libs build-gpu/w1-g1.trainer
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
