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
#   deep-bf16-{device,streamed}.trainer  qwen3-deep-tiny in bf16, both
#                        residencies (run-residency.sh compares their losses)
#   plans/               --explain of every plan here (predictions)
# With QWEN3_8B.onnx (test/GPU/run-residency.sh exports it with EXPORT8B=1):
#   lora8b.trainer          the Qwen3-8B shape, LoRA rank 16 on every linear,
#                           1 x 32768 tokens, the planner's own residency
#   lora8b-device.trainer   the same, forced device-resident
#   lora8b-stream24.trainer the same, forced to stream within a 24 GB worker
#                           budget (RoundPipe's consumer-GPU regime)
#
#   bash bench/prepare-residency.sh [h100|h200] [QWEN3_8B.onnx]
# With LLAMA=LLAMA3.2_1B.onnx and/or QWEN25=QWEN2.5_1.5B.onnx (graphs of
# scripts/export-hf-onnx.py --preset llama3.2-1b / qwen2.5-1.5b --graph-only,
# exported on the GPU machine): the other two dense shapes, as W1 (16 x 4096
# tokens, one worker, the planner's own residency):
#   llama3.2-1b.trainer   Llama-3.2-1B's shape
#   qwen2.5-1.5b.trainer  Qwen2.5-1.5B's shape
#   LLAMA=llama3.2-1b.onnx QWEN25=qwen2.5-1.5b.onnx bash bench/prepare-residency.sh h100
# On the GPU machine: MACHINE=h100x1 bash test/GPU/run-residency.sh (W1;
# SHAPE=llama3.2-1b or SHAPE=qwen2.5-1.5b for the others) and bash
# test/GPU/run-residency-lora.sh (the 8B LoRA runs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
begin_gpu_stage h100 "$@"
mkdir -p build-gpu/plans
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 \
  --explain=build-gpu/plans/auto -o build-gpu/w1.trainer
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 --residency=streamed \
  --explain=build-gpu/plans/streamed -o build-gpu/w1-streamed.trainer
# LOSS_CHUNKS="2048 4096": W1 with those --loss-chunk-rows too
# (w1-chunk<N>.trainer; run-residency.sh times each beside the planner's).
for n in ${LOSS_CHUNKS:-}; do
  compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 \
    --loss-chunk-rows $n -o build-gpu/w1-chunk$n.trainer
done
# LLAMA=..., QWEN25=...: the dense shapes bench/w1.py --shape llama3.2-1b
# and qwen2.5-1.5b measure, compiled as W1.
for shape in llama3.2-1b qwen2.5-1.5b; do
  if [ $shape = llama3.2-1b ]; then graph=${LLAMA:-}; else graph=${QWEN25:-}; fi
  [ -n "$graph" ] || continue
  compile "$graph" --batch 16 --seq-len 4096 --workers 1 \
    --explain=build-gpu/plans/$shape -o build-gpu/$shape.trainer
done
for m in qwen3-tiny qwen3-tiny-tied llama-tiny qwen3-deep-tiny; do
  compile $models/$m.onnx --batch 2 --seq-len 32 --microbatches 2 --workers 1 \
    --residency=device --precision=fp32 -o build-gpu/$m.trainer
  /usr/bin/python3 test/E2E/check_reference.py npy $models/$m.ref.onnx build-gpu/ids_$m.npy
done
# bf16 (the cuda default), device-resident (the products read the bf16
# weight copies the trainer keeps) and streamed (they round the uploaded
# weights): the same bits.
for r in device streamed; do
  compile $models/qwen3-deep-tiny.onnx --batch 2 --seq-len 32 --microbatches 2 --workers 1 \
    --residency=$r -o build-gpu/deep-bf16-$r.trainer
done
if [ -n "$graph8b" ]; then
  compile "$graph8b" --batch 1 --seq-len 32768 --workers 1 --lora=rank=16,alpha=32 \
    --explain=build-gpu/plans/lora8b -o build-gpu/lora8b.trainer
  compile "$graph8b" --batch 1 --seq-len 32768 --workers 1 --lora=rank=16,alpha=32 \
    --residency=device --explain=build-gpu/plans/lora8b-device -o build-gpu/lora8b-device.trainer
  compile "$graph8b" --batch 1 --seq-len 32768 --workers 1 --lora=rank=16,alpha=32 \
    --residency=streamed --worker-memory-gb 24 --explain=build-gpu/plans/lora8b-stream24 \
    -o build-gpu/lora8b-stream24.trainer
fi
# KERNEL_TESTS=1: the CUDA kernel tests too (run first by run-residency.sh).
if [ "${KERNEL_TESTS:-0}" = 1 ]; then
  ninja -C build -j"${RONDO_JOBS:-2}" rondo-cuda-kernels-tests
  cp build/runtime/cudakerneltests/rondo-cuda-kernels-tests build-gpu/
  strip build-gpu/rondo-cuda-kernels-tests
fi
copy_gpu_libs build-gpu/w1.trainer
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
