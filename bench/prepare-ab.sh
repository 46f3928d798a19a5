#!/usr/bin/env bash
# Stages the GPU checks of a change to the compiler's structure in build-gpu/
# and packs them as gpu-pack.tar.xz: the CUDA kernel tests, the fp32 fixture
# trainers of scripts/gpu-e2e.sh, and W1 compiled by this tree and by an
# earlier revision, so that one run measures both.
#
#   bash bench/prepare-ab.sh REV [h100|h200]   # REV: the revision to compare
#
# REV is built with CUDA in build-ab/REV (a git worktree). build-gpu/ then
# holds, besides gpu-e2e.sh's trainers,
#   w1.trainer       W1, the default one-worker plan for the device (this tree)
#   w1-old.trainer   the same compiled by REV
#   rondo-cuda-kernels-tests
# On the GPU machine: bash test/GPU/run-ab.sh tests; MACHINE=h100x1 bash
# test/GPU/run-ab.sh w1.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: $0 REV [h100|h200]}
device=${2:-h100}
old=build-ab/$rev
if [ ! -d "$old" ]; then
  git worktree add --detach "$old" "$rev"
fi
if [ ! -f "$old/build/build.ninja" ]; then
  cmake -S "$old" -B "$old/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit -DRONDO_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
fi
ninja -C "$old/build" -j"${RONDO_JOBS:-2}" rondo-compile rondo_runtime_cuda rondo_kernels_cuda
bash scripts/gpu-e2e.sh prepare
source scripts/gpu-pack.sh
ninja -C build -j"${RONDO_JOBS:-2}" rondo-cuda-kernels-tests
cp build/runtime/cudakerneltests/rondo-cuda-kernels-tests build-gpu/
compile $models/qwen3-1.7b.onnx --batch 16 --seq-len 4096 --workers 1 -o build-gpu/w1.trainer
"$old/build/bin/rondo-compile" $models/qwen3-1.7b.onnx --target=cuda --device="$device" \
  --batch 16 --seq-len 4096 --workers 1 -o build-gpu/w1-old.trainer
strip build-gpu/rondo-cuda-kernels-tests
copy_gpu_libs build-gpu/rondo-cuda-kernels-tests
pack_gpu
du -sh build-gpu gpu-pack.tar.xz
