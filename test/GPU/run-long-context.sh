#!/usr/bin/env bash
# On one GPU, for what bench/prepare-long-context.sh packed: PyTorch's longest
# trainable Qwen3-1.7B sequence (TORCH_BRACKET=LO:HI, from an earlier search,
# is checked and bisected; empty searches from 8K), Rondo's 1.7B at the
# plan's longest sequence, LoRA of the Qwen3-8B shape at 32K tokens, and
# Hugging Face interop of --export-safetensors.
cd "$(dirname "$0")/../.."
[ -d build-gpu ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ -d build-gpu/interop ]; then
  python3 test/GPU/hf-interop.py build-gpu/interop/trained build-gpu/interop/ids.npy \
    build-gpu/interop/log.jsonl 2>&1 | grep -v Warning | tail -3
fi
runs=()
[ -f build-gpu/long17.trainer ] && [ "${RUN17:-1}" = 1 ] &&
  runs+=(--rondo "long17-max=build-gpu/long17.trainer:$(cat build-gpu/long17.seq):${STEPS17:-2}:$(cat build-gpu/long17.seq)")
[ -f build-gpu/lora8b.trainer ] &&
  runs+=(--rondo "lora8b-r16=build-gpu/lora8b.trainer:32768:${STEPS:-3}:${PREDICTED:-85504}"
         --torch-lora "${TORCH_LORA:-qwen3-8b:32768:16:32}")
timeout "${LIMIT:-570}" python3 bench/long_context.py --machine "${MACHINE:-h100x1}" --out $OUT \
  --torch-preset qwen3-1.7b --torch-bracket "${TORCH_BRACKET-12288:13312}" "${runs[@]}" 2>&1 | tail -40
