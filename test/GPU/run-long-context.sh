#!/usr/bin/env bash
# On one GPU: Hugging Face interop of --export-safetensors, PyTorch's longest
# trainable Qwen3-1.7B sequence, and LoRA of the Qwen3-8B shape at 32K tokens.
# Expects gpu-pack.tar.xz from bench/prepare-long-context.sh.
cd "$(dirname "$0")/../.."
[ -d build-gpu ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 test/GPU/hf-interop.py build-gpu/interop/trained build-gpu/interop/ids.npy \
  build-gpu/interop/log.jsonl 2>&1 | grep -v Warning | tail -3
timeout 540 python3 bench/long_context.py --machine "${MACHINE:-h100x1}" --out $OUT \
  --torch-preset qwen3-1.7b \
  --rondo "lora8b-r16=build-gpu/lora8b.trainer:32768:${STEPS:-3}:${PREDICTED:-85504}" 2>&1 | tail -40
