#!/usr/bin/env bash
# Stages the residency comparison (issue 22; docs/CostModel.md,
# "Residency") in build-gpu/ and packs it as gpu-pack.tar.xz:
#
#   bash bench/prepare-residency.sh [h100|h200]     # the cost model's device
#
#   w1.trainer           W1, one worker, the planner's own residency
#   w1-streamed.trainer  W1, one worker, --residency=streamed
#   <fixture>.trainer    the four tiny fixtures in fp32, one worker,
#                        --residency=device, with their token ids
#   plans/               --explain of both W1 plans (predictions)
# On the GPU machine: MACHINE=h100x1 bash test/GPU/run-residency.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
device=${1:-h100}
models=test/data/models
begin_gpu_stage
mkdir -p build-gpu/plans
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 \
  --explain=build-gpu/plans/auto -o build-gpu/w1.trainer
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 --residency=streamed \
  --explain=build-gpu/plans/streamed -o build-gpu/w1-streamed.trainer
for m in qwen3-tiny qwen3-tiny-tied llama-tiny qwen3-deep-tiny; do
  compile $models/$m.onnx --batch 2 --seq-len 32 --microbatches 2 --workers 1 \
    --residency=device --precision=fp32 -o build-gpu/$m.trainer
  /usr/bin/python3 test/E2E/check_reference.py npy $models/$m.ref.onnx build-gpu/ids_$m.npy
done
copy_gpu_libs build-gpu/w1.trainer
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
