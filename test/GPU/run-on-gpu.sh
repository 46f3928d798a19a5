#!/usr/bin/env bash
# Runs on the GPU machine (scripts/gpu-e2e.sh): the --target=cuda trainers
# staged in build-gpu/ against the fixtures; results to $OUT/results.tar.gz.
cd "$(dirname "$0")/../../build-gpu"
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
res=$PWD/results; mkdir -p "$res"
nvidia-smi -L > "$res/gpu.txt" 2>&1
for m in qwen3-tiny qwen3-tiny-tied llama-tiny qwen3-deep-tiny; do
  for w in 1 2 4; do
    /usr/bin/time -f "%e s" ./$m.trainer --weights ../test/data/models/$m.onnx \
      --data ids_$m.npy --steps 6 --lr 1e-3 --weight-decay 0.01 --workers $w \
      --dump-gradients "$res/$m.w$w.grads.onnx" --log-json "$res/$m.w$w.log" \
      --quiet > "$res/$m.w$w.out" 2>&1
    echo "$m w$w rc=$?" >> "$res/status.txt"
  done
done
for w in 1 2 3 4; do
  ./deep10.trainer --weights ../test/data/models/qwen3-deep-tiny.onnx --data rand.npy \
    --steps 20 --workers $w --optimizer-mode=sync --quiet --log-json "$res/deep10.w$w.log" \
    > "$res/deep10.w$w.out" 2>&1
  echo "deep10 w$w rc=$?" >> "$res/status.txt"
done
./deep10.trainer --weights ../test/data/models/qwen3-deep-tiny.onnx --data rand.npy \
  --steps 20 --workers 4 --optimizer-mode=overlap --quiet --log-json "$res/deep10.w4o.log" \
  --trace "$res/deep10.trace.json" > "$res/deep10.w4o.out" 2>&1
echo "deep10 w4 overlap rc=$?" >> "$res/status.txt"
tar czf "$OUT/results.tar.gz" -C "$res" .
cat "$res/status.txt"; tail -n 3 "$res"/*.out | head -80
