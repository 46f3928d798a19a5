#!/usr/bin/env bash
# Runs on one GPU what bench/prepare-residency.sh packed with the 8B graph:
# LoRA (rank 16, every linear) of the Qwen3-8B shape at 32K tokens, the
# planner's residency, forced device-resident and streamed within 24 GB, beside PyTorch + PEFT with
# gradient checkpointing at 8K and 16K tokens (bench/long_context.py), all
# into $OUT/lora.tar.xz.
cd "$(dirname "$0")/../.."
[ -x build-gpu/lora8b.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
export PYTHONUNBUFFERED=1
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
res=$(mktemp -d)
timeout "${LIMIT:-560}" python3 bench/long_context.py --machine "${MACHINE:-h100x1}" --out $res \
  --rondo "lora8b-planner=build-gpu/lora8b.trainer:32768:${STEPS:-3}" \
  --rondo "lora8b-device=build-gpu/lora8b-device.trainer:32768:${STEPS:-3}" \
  --rondo "lora8b-stream24=build-gpu/lora8b-stream24.trainer:32768:${STEPS:-3}" \
  --torch-lora "qwen3-8b:8192:16:32" --torch-lora "qwen3-8b:16384:16:32" \
  --torch-lora-checkpointing-only 2>&1 | tail -20
tar cf - -C $res . | xz -T4 > $OUT/lora.tar.xz
