#!/usr/bin/env bash
# On a 2-GPU machine: the fp32 end-to-end checks (1, 2 and 4 workers over the
# GPUs) and W1 on one GPU beside PyTorch. Expects gpu-pack.tar.xz (build-gpu/).
cd "$(dirname "$0")/../.."
[ -d build-gpu ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 bash test/GPU/run-on-gpu.sh 2>&1 | head -30
timeout 300 python3 bench/w1.py --trainer build-gpu/w1.trainer --workers 1 --gpus 0 --steps 5 --skip 2 \
  --machine "${MACHINE}x1" --out $OUT/w1a 2>&1 | tail -10
cp $OUT/w1a/w1-rondo-trace.json $OUT/w1-x1-trace.json; rm -f $OUT/w1a/w1-ids.npy $OUT/w1a/w1-rondo-trace.json
