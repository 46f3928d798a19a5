#!/usr/bin/env bash
# Stages the families comparison (issue 23: sliding-window attention,
# mixtures of experts) in build-gpu/ and packs it as gpu-pack.tar.xz:
#
#   bash bench/prepare-families.sh [h100|h200] GEMMA3_1B.onnx [QWEN3_30B_A3B_4L.onnx [GPT_OSS_20B.onnx [QWEN3_30B_A3B.onnx]]]
# (an empty argument skips that model)
#
# The graphs come from the GPU machine (this one has no PyTorch):
#   python3 scripts/export-hf-onnx.py --preset gemma3-1b --graph-only -o gemma3-1b.onnx
#   python3 scripts/export-hf-onnx.py --preset qwen3-30b-a3b --layers 4 --graph-only \
#     -o qwen3-30b-a3b-4l.onnx
#   python3 scripts/export-hf-onnx.py --preset gpt-oss-20b --graph-only -o gpt-oss-20b.onnx
#   python3 scripts/export-hf-onnx.py --preset qwen3-30b-a3b --graph-only -o qwen3-30b-a3b.onnx
#
#   gemma3-1b.trainer  Gemma-3-1B's shape (head dimension 256, a 512-token
#                      window on five layers of six), 8 x 4096 tokens, full
#                      fine-tune, the planner's own plan
#   moe4l.trainer      Qwen3-30B-A3B's shape cut to 4 layers (128 experts,
#                      top 8; 3.1B parameters, state that fits the host),
#                      8 x 4096 tokens, full fine-tune
#   gptoss-lora{4k,16k}.trainer  GPT-OSS-20B's shape, LoRA rank 16 / alpha 32
#                      on every attention projection and every expert's
#                      stacked projections, 1 x 4096 and 1 x 16384 tokens,
#                      the planner's own residency (the fp32 frozen base,
#                      84 GB, in host memory)
#   moelora{4k,16k}.trainer  the whole Qwen3-30B-A3B shape (48 layers,
#                      30.5B parameters), LoRA rank 16 / alpha 32 on every
#                      attention projection and every expert's stacked
#                      projections, 1 x 4096 and 1 x 16384 tokens, the
#                      planner's own residency (the frozen base in bf16 in
#                      host memory)
#   plans/             --explain of each (predictions)
# On the GPU machine: MACHINE=h100x1 bash test/GPU/run-families.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
device=${1:-h100}
gemma=${2:-}
moe=${3:-}
gptoss=${4:-}
moefull=${5:-}
ninja -C build -j"${RONDO_JOBS:-2}" rondo-compile rondo_runtime_cuda rondo_kernels_cuda
rm -rf build-gpu && mkdir -p build-gpu/lib build-gpu/plans
if [ -n "$gemma" ]; then
  compile "$gemma" --batch 8 --seq-len 4096 --workers 1 --explain=build-gpu/plans/gemma3-1b \
    -o build-gpu/gemma3-1b.trainer
fi
if [ -n "$moe" ]; then
  compile "$moe" --batch 8 --seq-len 4096 --workers 1 --explain=build-gpu/plans/moe4l \
    -o build-gpu/moe4l.trainer
fi
if [ -n "$gptoss" ]; then
  for s in 4096 16384; do
    compile "$gptoss" --batch 1 --seq-len $s --workers 1 --lora=rank=16,alpha=32 \
      --explain=build-gpu/plans/gptoss-lora$((s / 1024))k -o build-gpu/gptoss-lora$((s / 1024))k.trainer
  done
fi
if [ -n "$moefull" ]; then
  for s in 4096 16384; do
    compile "$moefull" --batch 1 --seq-len $s --workers 1 --lora=rank=16,alpha=32 \
      --explain=build-gpu/plans/moelora$((s / 1024))k -o build-gpu/moelora$((s / 1024))k.trainer
  done
fi
# KERNEL_TESTS=1: the CUDA kernel tests too (run first by run-families.sh).
if [ "${KERNEL_TESTS:-0}" = 1 ]; then
  ninja -C build -j"${RONDO_JOBS:-2}" rondo-cuda-kernels-tests
  cp build/runtime/cudakerneltests/rondo-cuda-kernels-tests build-gpu/
  strip build-gpu/rondo-cuda-kernels-tests
fi
copy_gpu_libs "$(ls build-gpu/*.trainer | head -1)"
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
