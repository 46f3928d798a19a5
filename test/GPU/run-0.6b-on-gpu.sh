#!/usr/bin/env bash
# Runs on the GPU machine: the qwen3-0.6b CUDA trainer staged in build-gpu/ by
#   build/bin/rondo-compile test/data/models/qwen3-0.6b.onnx --batch 8 --seq-len 1024 \
#     --microbatches 4 --workers 1,2,4 --target=cuda --precision=fp32 -o build-gpu/q06.trainer
# with random tokens in build-gpu/tok06.npy; results to $OUT/res06.tar.gz.
cd "$(dirname "$0")/../../build-gpu"
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
res=$PWD/res06; mkdir -p $res
for w in 1 2 4; do
  timeout 150 ./q06.trainer --init=random --seed 1 --data tok06.npy --steps 4 --workers $w \
    --log-json $res/q06.w$w.log > $res/q06.w$w.out 2>&1
  echo "w$w rc=$?"; tail -n 3 $res/q06.w$w.out
done
tar czf $OUT/res06.tar.gz -C $res .
