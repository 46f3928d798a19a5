#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
[ -x build-gpu/r.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64:$nccl:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,ENV NCCL_DEBUG_FILE=$OUT/nccl.%p.log B=build-gpu
ls $nccl; python3 -c "import numpy as np; np.save('build-gpu/d.npy', np.random.default_rng(3).integers(0, 512, size=(60, 16)).astype(np.int64))"
MASTER_PORT=29521 RANK=1 timeout 60 $B/r.trainer --replicas 2 --gpus 1 --data $B/d.npy --steps 3 > $OUT/d1.out 2>&1 &
MASTER_PORT=29521 RANK=0 timeout 60 $B/r.trainer --replicas 2 --gpus 0 --data $B/d.npy --steps 3 > $OUT/d0.out 2>&1; wait
cat $OUT/d0.out | head -30; ldd $B/r.trainer | grep nccl
grep -h -i -E "warn|invalid|error" $OUT/nccl.*.log | head -20; tail -5 $OUT/nccl.*.log | head -30
