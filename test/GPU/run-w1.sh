#!/usr/bin/env bash
# W1 (bench/w1.py) with the N-worker plan on N GPUs beside PyTorch eager on
# one, plus the kernel tests. Expects gpu-pack.tar.xz (build-gpu/) or build-gpu.
# Usage: MACHINE=h200x4 bash test/GPU/run-w1.sh WORKERS GPUS
cd "$(dirname "$0")/../.."
[ -x build-gpu/w1.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
[ -n "$SKIP_TESTS" ] || (timeout 150 build-gpu/rondo-cuda-kernels-tests 2>&1 | grep -E "FAILED|PASSED|Failure|Expected|actual" | head -20)
timeout 330 python3 bench/w1.py --trainer build-gpu/${TRAINER:-w1}.trainer --workers "$1" --gpus "$2" --steps 6 --skip 2 \
  --machine "$MACHINE" --out $OUT/w1 2>&1 | tail -10
cp $OUT/w1/w1-rondo-trace.json $OUT/w1-trace.json; rm -f $OUT/w1/w1-ids.npy $OUT/w1/w1-rondo-trace.json
