#!/usr/bin/env bash
# Stages the benchmark trainers for a GPU machine in build-gpu/ and packs them
# as gpu-pack.tar.xz (scripts/gpu-pack.sh). The GPU machines have CUDA and
# PyTorch but no MLIR: trainers are compiled here.
#
#   bash bench/prepare-gpu.sh [h100|h200]     # the cost model's device
#
# build-gpu/ then holds
#   w1.trainer      W1, batch 16, plans for 1, 2 and 4 workers
#   w1-b8.trainer   W1, batch 8 per replica, 2-worker plan (2 replicas x 2 GPUs)
#   w1-b8w1.trainer W1, batch 8 per replica, 1-worker plan (2 replicas x 1 GPU)
#   w1-b4.trainer   W1, batch 4 per replica, 1-worker plan (4 replicas x 1 GPU)
# (replica plans cost replicas sharing one host, as on the test machines)
#   w1-lean.trainer W1, 1 worker within a 16 GB device budget
#   r.trainer / g4.trainer  qwen3-deep-tiny fp32, batch 2 per replica / 4 in one
#                           process (replica correctness)
#   lib/            the shared libraries the trainers need that CUDA lacks
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
begin_gpu_stage h200 "$@"
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1,2,4 -o build-gpu/w1.trainer
compile $models/qwen3-1.7b.onnx --batch 8 --seq-len 4096 --workers 2 --replicas 2 \
  --replicas-per-host 2 -o build-gpu/w1-b8.trainer
compile $models/qwen3-1.7b.onnx --batch 8 --seq-len 4096 --workers 1 --replicas 2 \
  --replicas-per-host 2 -o build-gpu/w1-b8w1.trainer
compile $models/qwen3-1.7b.onnx --batch 4 --seq-len 4096 --workers 1 --replicas 4 \
  --replicas-per-host 4 -o build-gpu/w1-b4.trainer
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 --worker-memory-gb 16 \
  -o build-gpu/w1-lean.trainer
compile $models/qwen3-deep-tiny.onnx --batch 2 --seq-len 16 --microbatches 2 --workers 1 \
  --precision=fp32 --replicas 2 -o build-gpu/r.trainer
compile $models/qwen3-deep-tiny.onnx --batch 4 --seq-len 16 --microbatches 4 --workers 1 \
  --precision=fp32 -o build-gpu/g4.trainer
copy_gpu_libs build-gpu/w1.trainer
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
