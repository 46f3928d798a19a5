#!/usr/bin/env bash
# Stages test/GPU/run-long-context.sh's inputs in build-gpu/ and packs them
# as gpu-pack.tar.xz (the trainers are compiled here: the GPU machines have
# no MLIR). Needs a build with -DRONDO_ENABLE_CUDA=ON (bench/prepare-gpu.sh).
#   build-gpu/long17.trainer   Qwen3-1.7B, full fine-tune, one worker, one row
#                              of the longest sequence the plan holds
#                              (build-gpu/long17.seq), rotary tables computed
#                              at start-up
#   build-gpu/lora8b.trainer   with QWEN3_8B.onnx: the Qwen3-8B shape, LoRA
#                              rank 16 on every linear, 1 x 32768 tokens
#   build-gpu/interop/         with QWEN3_8B.onnx: qwen3-hf-tiny trained 5
#                              steps on the CPU and written with
#                              --export-safetensors
#
#   bash bench/prepare-long-context.sh [h100|h200] [QWEN3_8B.onnx]
#
# The 8B graph (7 MB, graph only) is not in the repository: make it on a GPU
# machine with test/GPU/export-models.sh (exported.tar holds qwen3-8b.onnx).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
begin_gpu_stage h100 "$@"
compile1() { compile --workers 1 "$@"; }
# The plan's longest sequence for one worker, then a trainer at exactly it.
longest=$(compile1 $models/qwen3-1.7b.onnx --batch 1 --seq-len 65536 --explain --emit=pipe \
  -o /dev/null | sed -n 's/.*longest sequence these budgets hold: \([0-9]*\) tokens.*/\1/p')
echo "Qwen3-1.7B, one $device worker: the plan's longest sequence is $longest tokens"
echo "$longest" > build-gpu/long17.seq
compile1 $models/qwen3-1.7b.onnx --batch 1 --seq-len "$longest" --explain -o build-gpu/long17.trainer |
  grep -E "per worker|host:|longest|overlapped"
if [ -n "$graph8b" ]; then
  compile1 "$graph8b" --batch 1 --seq-len 32768 --lora=rank=16,alpha=32 --explain \
    -o build-gpu/lora8b.trainer | grep -E "per worker|host:|longest|overlapped"
  mkdir -p build-gpu/interop && cd build-gpu/interop
  /usr/bin/python3 -c "import numpy as np; np.save('ids.npy', np.random.default_rng(3).integers(0, 512, size=(2, 32)).astype(np.int64))"
  ../../build/bin/rondo-compile ../../$models/qwen3-hf-tiny.onnx --batch 2 --seq-len 32 \
    --microbatches 2 --workers 1 -o tiny.trainer
  ./tiny.trainer --data ids.npy --steps 5 --lr 1e-2 --eval-data ids.npy --eval-every 5 \
    --log-json log.jsonl --export-safetensors trained --hf-config ../../test/data/hf/hf-tiny/config.json
  rm tiny.trainer
  cd ../..
fi
copy_gpu_libs build-gpu/long17.trainer
pack_gpu
du -sh build-gpu/*.trainer gpu-pack.tar.xz
