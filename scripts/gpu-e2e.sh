#!/usr/bin/env bash
# The end-to-end checks of the executor on GPUs (--target=cuda, fp32).
#
#   bash scripts/gpu-e2e.sh prepare   # here: build with CUDA, compile the
#                                     # trainers and stage them in build-gpu/
#   (on the GPU machine, from the repository root, with build-gpu carried)
#   bash test/GPU/run-on-gpu.sh       # writes $OUT/results.tar.gz
#   bash scripts/gpu-e2e.sh check RESULTS.tar.gz   # here: compare with PyTorch
#
# The GPU machines have CUDA but no MLIR, so trainers are compiled here and
# carried with the few shared libraries they need that CUDA does not ship.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-pack.sh
case "${1:-}" in
prepare)
  bash scripts/install-deps.sh
  if [ ! -f build/build.ninja ]; then bash scripts/build.sh; fi
  cmake build -DRONDO_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
  begin_gpu_stage
  for m in qwen3-tiny qwen3-tiny-tied llama-tiny qwen3-deep-tiny; do
    build/bin/rondo-compile $models/$m.onnx --batch 2 --seq-len 32 --microbatches 2 \
      --workers 1,2,4 --target=cuda --precision=fp32 -o build-gpu/$m.trainer
    /usr/bin/python3 test/E2E/check_reference.py npy $models/$m.ref.onnx build-gpu/ids_$m.npy
  done
  build/bin/rondo-compile $models/qwen3-deep-tiny.onnx --batch 10 --seq-len 16 \
    --microbatches 5 --workers 1,2,3,4 --target=cuda --precision=fp32 -o build-gpu/deep10.trainer
  /usr/bin/python3 -c "import numpy as np; np.save('build-gpu/rand.npy', np.random.default_rng(7).integers(0, 512, size=(200, 16)).astype(np.int64))"
  copy_gpu_libs build-gpu/qwen3-tiny.trainer
  du -sh build-gpu
  ;;
check)
  out=$(mktemp -d)
  tar xzf "$2" -C "$out"
  cat "$out/gpu.txt"
  for m in qwen3-tiny qwen3-tiny-tied llama-tiny qwen3-deep-tiny; do
    for w in 1 2 4; do
      echo "$m, $w workers: $(/usr/bin/python3 test/E2E/check_reference.py losses "$out/$m.w$w.log" $models/$m.ref.json); $(/usr/bin/python3 test/E2E/check_reference.py grads "$out/$m.w$w.grads.onnx" $models/$m.ref.onnx)"
    done
  done
  /usr/bin/python3 test/E2E/same_losses.py "$out"/deep10.w{1,2,3,4}.log "$out/deep10.w4o.log"
  /usr/bin/python3 scripts/plan-vs-trace.py "$out/deep10.trace.json"
  ;;
*)
  echo "usage: $0 prepare | check RESULTS.tar.gz" >&2
  exit 2
  ;;
esac
