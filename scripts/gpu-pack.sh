# Sourced by the scripts that stage trainers for a GPU machine (the GPU
# machines have CUDA and PyTorch but no MLIR, ONNX, protobuf, OpenMP or
# Open MPI): run from the repository root.

# The fixtures the trainers are compiled from.
models=test/data/models

# begin_gpu_stage [DEFAULT_DEVICE [DEVICE [QWEN3_8B.onnx]]]: takes a staging
# script's own arguments after its default device, setting $device (the cost
# model's) and $graph8b (the Qwen3-8B shape's graph, or empty); then builds
# the compiler and the CUDA runtime the trainers link, and empties build-gpu/
# (keeping build-gpu/lib).
begin_gpu_stage() {
  device=${2:-${1:-}}
  graph8b=${3:-}
  ninja -C build -j"${RONDO_JOBS:-2}" rondo-compile rondo_runtime_cuda rondo_kernels_cuda
  rm -rf build-gpu && mkdir -p build-gpu/lib
}

# rondo-compile for a GPU trainer with the cost model of $device.
compile() { build/bin/rondo-compile --target=cuda --device="$device" "$@"; }

# Copies every library TRAINER needs that the GPU machines lack (ONNX,
# protobuf, OpenMP, and Open MPI with its dependencies: trainers link it
# for --replicas) into build-gpu/lib.
copy_gpu_libs() {
  for l in $(ldd "$1" | awk '{print $3}' |
             grep -E 'onnx|protobuf|gomp|libz|mpi|open-rte|open-pal|hwloc|event|udev|openblas|gfortran|quadmath'); do
    cp -L "$l" build-gpu/lib/
  done
}

# Strips the trainers and packs build-gpu as gpu-pack.tar.xz (the device
# tool carries at most 64 MiB).
pack_gpu() {
  strip build-gpu/*.trainer
  tar cf - build-gpu | xz -T2 -9 > gpu-pack.tar.xz
}
