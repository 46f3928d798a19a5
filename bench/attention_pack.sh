#!/bin/bash
# Packs what bench/attention_gpu.sh runs on the GPU machine: the CUDA kernel
# test binary of BUILD (default build), the host libraries the machine lacks
# (OpenBLAS and its runtime) and the bench scripts, into DEST (default
# build-cudnn/gpu-cudnn.tar.xz under the checkout the device tool sends,
# ROOT, default this tree's root). The device tool sends the session's own
# checkout, so a helper working in another worktree sets ROOT to it.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$here/build}
ROOT=${ROOT:-$here}
DEST=${DEST:-$ROOT/build-cudnn/gpu-cudnn.tar.xz}
tmp=$(mktemp -d)
mkdir -p $tmp/pack/new $tmp/pack/lib $tmp/pack/bench "$(dirname "$DEST")"
cp $BUILD/runtime/cudakerneltests/rondo-cuda-kernels-tests $tmp/pack/new/
strip $tmp/pack/new/rondo-cuda-kernels-tests
for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libgomp.so.1; do
  cp -L /lib/x86_64-linux-gnu/$lib $tmp/pack/lib/
done
cp $here/bench/attention_gpu.sh $here/bench/attention_sdpa.py $tmp/pack/bench/
tar cJf "$DEST" -C $tmp pack
rm -rf $tmp
ls -la "$DEST"
