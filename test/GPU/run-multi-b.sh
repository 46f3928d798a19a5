#!/usr/bin/env bash
# On a 2-GPU machine: W1 with the 2-worker plan on 2 GPUs, and the
# Qwen3-8B-shaped graph (--init=random) on 2 GPUs.
cd "$(dirname "$0")/../.."
[ -d build-gpu ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
timeout 240 python3 bench/w1.py --trainer build-gpu/w1.trainer --workers 2 --gpus 0,1 --steps 5 --skip 2 \
  --machine "${MACHINE}x2" --out $OUT/w1b --skip-pytorch 2>&1 | tail -8
cp $OUT/w1b/w1-rondo-trace.json $OUT/w1-x2-trace.json; rm -f $OUT/w1b/w1-ids.npy $OUT/w1b/w1-rondo-trace.json
python3 -c "import numpy as np; np.save('build-gpu/q8ids.npy', np.random.default_rng(0).integers(0,151936,size=(64,4096)).astype(np.int64))"
( while sleep 1; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' ' '; echo; done ) > $OUT/q8b-gpumem.txt &
poll=$!
/usr/bin/time -v timeout 330 build-gpu/q8b.trainer --init=random --seed 1 --data build-gpu/q8ids.npy --steps 4 \
  --workers 2 --log-json $OUT/q8b.log --trace $OUT/q8b-trace.json > $OUT/q8b.out 2>&1
echo "q8b rc=$?"; kill $poll
grep -v "^\s" $OUT/q8b.out | tail -8; grep -E "Maximum resident|Elapsed" $OUT/q8b.out
sort -n -k1 $OUT/q8b-gpumem.txt | tail -1
