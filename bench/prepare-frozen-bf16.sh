#!/usr/bin/env bash
# Stages the GPU check of frozen weights held in bf16 (issue 23's blocker;
# docs/Runtime.md, "Frozen weights held in bf16") in build-gpu/ and packs it
# as gpu-pack.tar.xz:
#
#   bash bench/prepare-frozen-bf16.sh [h100|h200]   # the cost model's device
#
#   deep-{bf16,fp32}-{streamed,device}.trainer
#       qwen3-deep-tiny, LoRA rank 4 on every linear, bf16 plans, one
#       worker, --frozen-storage=bf16 and =fp32, streamed and
#       device-resident (test/GPU/run-frozen-bf16.sh compares their losses)
#   moe-{bf16,fp32}-{streamed,device}.trainer
#       qwen3moe-dev-tiny the same way: the stacked expert matrices held in
#       bf16 are read by the bf16 grouped products
#   ids_<fixture>.npy   the fixtures' token ids
#   plans/              --explain of the bf16 plans
# On the GPU machine: bash test/GPU/run-frozen-bf16.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
begin_gpu_stage h100 "$@"
mkdir -p build-gpu/plans
for m in qwen3-deep-tiny:deep qwen3moe-dev-tiny:moe; do
  fixture=${m%%:*} name=${m##*:}
  for s in bf16 fp32; do
    for r in streamed device; do
      explain=()
      [ $s = bf16 ] && explain=(--explain=build-gpu/plans/$name-$r)
      compile $models/$fixture.onnx --batch 2 --seq-len 32 --microbatches 2 --workers 1 \
        --lora=rank=4,alpha=8 --frozen-storage=$s --residency=$r "${explain[@]}" \
        -o build-gpu/$name-$s-$r.trainer
    done
  done
  /usr/bin/python3 test/E2E/check_reference.py npy $models/$fixture.ref.onnx \
    build-gpu/ids_$fixture.npy
done
copy_gpu_libs build-gpu/deep-bf16-streamed.trainer
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
