#!/usr/bin/env bash
# Runs on the GPU machine what bench/prepare-families.sh staged: the CUDA
# kernel tests when staged, then each trainer beside PyTorch eager (the
# Hugging Face model of the same shape, its own grouped-GEMM experts) in
# bench/families.py, everything into $OUT/families.tar.xz.
# Usage: MACHINE=h100x1 bash test/GPU/run-families.sh
source "$(dirname "$0")/gpu-env.sh" build-gpu/plans
cp -r build-gpu/plans $res/
if [ -x build-gpu/gemma3-1b.trainer ]; then
  timeout ${GEMMA_TIMEOUT:-400} python3 bench/families.py --preset gemma3-1b --seq 4096 --rows 8 \
    --torch-rows ${TORCH_ROWS:-1} --steps ${STEPS:-4} --skip 1 --machine "${MACHINE:-h100x1}" \
    --out $res --rondo rondo=build-gpu/gemma3-1b.trainer 2>&1 | tail -16
fi
if [ -x build-gpu/moe4l.trainer ]; then
  timeout ${MOE_TIMEOUT:-400} python3 bench/families.py --preset qwen3-30b-a3b --layers 4 \
    --seq 4096 --rows 8 --torch-rows ${TORCH_ROWS:-1} --steps ${STEPS:-4} --skip 1 \
    --machine "${MACHINE:-h100x1}" --out $res --rondo rondo=build-gpu/moe4l.trainer 2>&1 | tail -16
fi
# GPT-OSS-20B's shape with LoRA: Rondo at 4K and 16K tokens, PEFT with
# gradient checkpointing at the same lengths (its eager attention, the only
# one with sinks, materialises the scores).
for k in 4 16; do
  if [ -x build-gpu/gptoss-lora${k}k.trainer ]; then
    timeout ${GPTOSS_TIMEOUT:-420} python3 bench/families.py --preset gpt-oss-20b \
      --seq $((k * 1024)) --rows 1 --steps ${STEPS:-4} --skip 1 --torch lora-ckpt \
      --machine "${MACHINE:-h100x1}" --out $res --rondo rondo=build-gpu/gptoss-lora${k}k.trainer \
      2>&1 | tail -14
  fi
done
# The whole Qwen3-30B-A3B shape with LoRA at 4K and 16K tokens (its frozen
# base in bf16 in host memory), PEFT with gradient checkpointing at the
# same lengths.
for k in 4 16; do
  if [ -x build-gpu/moelora${k}k.trainer ]; then
    timeout ${MOELORA_TIMEOUT:-480} python3 bench/families.py --preset qwen3-30b-a3b \
      --seq $((k * 1024)) --rows 1 --steps ${STEPS:-4} --skip 1 --torch lora-ckpt \
      --machine "${MACHINE:-h100x1}" --out $res --rondo rondo=build-gpu/moelora${k}k.trainer \
      2>&1 | tail -14
  fi
done
tar cf - -C $res --exclude=ids.npy . | xz > $OUT/families.tar.xz
