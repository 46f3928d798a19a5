#!/usr/bin/env bash
# On a 2-GPU machine: trainer --replicas over NCCL, started as torchrun would
# (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no mpirun there).
#  1. qwen3-deep-tiny, fp32: 2 replicas x batch 2 against 1 process x batch 4.
#  2. W1: 2 replicas x 1 GPU (batch 8 each) against 1 replica x 2 GPUs.
#  3. A replica killed: the other stops with a message within the deadline.
cd "$(dirname "$0")/../.."
[ -x build-gpu/r.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0
nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64:$nccl:${LD_LIBRARY_PATH:-}
export MASTER_ADDR=127.0.0.1 WORLD_SIZE=2
res=$OUT; B=build-gpu
python3 -c "import numpy as np; np.save('$B/d.npy', np.random.default_rng(3).integers(0, 512, size=(60, 16)).astype(np.int64)); np.save('$B/w1.npy', np.random.default_rng(0).integers(0, 151936, size=(96, 4096)).astype(np.int64))"
echo "== 1. correctness (fp32, deep-tiny)"
MASTER_PORT=29511 RANK=1 timeout 120 $B/r.trainer --replicas 2 --gpus 1 --data $B/d.npy --steps 10 > $res/r2.rank1.out 2>&1 &
MASTER_PORT=29511 RANK=0 timeout 120 $B/r.trainer --replicas 2 --gpus 0 --data $B/d.npy --steps 10 \
  --replica-check-every 2 --log-json $res/r2.jsonl > $res/r2.rank0.out 2>&1; echo "rank 0 rc=$?"; wait; echo "rank 1 rc=$?"
head -1 $res/r2.rank0.out
$B/g4.trainer --gpus 0 --data $B/d.npy --steps 10 --quiet --log-json $res/g4.jsonl; echo "single rc=$?"
python3 test/E2E/replicas.py close $res/r2.jsonl $res/g4.jsonl 1e-5
echo "== 2. W1: 1 replica x 2 GPUs, then 2 replicas x 1 GPU"
timeout 200 $B/w1.trainer --init=random --seed 1 --data $B/w1.npy --steps 5 --workers 2 --gpus 0,1 \
  --log-json $res/w1-1x2.jsonl > $res/w1-1x2.out 2>&1; echo "1x2 rc=$?"; tail -1 $res/w1-1x2.out
MASTER_PORT=29512 RANK=1 timeout 200 $B/w1h.trainer --replicas 2 --gpus 1 --init=random --seed 1 --data $B/w1.npy --steps 5 > $res/w1-2x1.rank1.out 2>&1 &
MASTER_PORT=29512 RANK=0 timeout 200 $B/w1h.trainer --replicas 2 --gpus 0 --init=random --seed 1 --data $B/w1.npy --steps 5 \
  --log-json $res/w1-2x1.jsonl > $res/w1-2x1.out 2>&1; echo "2x1 rank 0 rc=$?"; wait; tail -1 $res/w1-2x1.out; head -1 $res/w1-2x1.out
python3 - "$res" <<'PY'
import json, sys
res = sys.argv[1]
for name in ("w1-1x2", "w1-2x1"):
    try:
        steps = [json.loads(l) for l in open("%s/%s.jsonl" % (res, name)) if l.strip()]
    except OSError:
        print(name, "no log"); continue
    steady = [s for s in steps if s["step"] >= 2]
    tok = sum(s["tokens"] for s in steady) / sum(s["seconds"] for s in steady)
    print("%s: %.0f tok/s over steps 3-%d; losses %s" % (name, tok, len(steps), [round(s["loss"], 5) for s in steps]))
PY
echo "== 3. a replica killed"
MASTER_PORT=29513 RANK=1 $B/r.trainer --replicas 2 --gpus 1 --data $B/d.npy --steps 100000 > $res/kill.rank1.out 2>&1 &
victim=$!
MASTER_PORT=29513 RANK=0 RONDO_REPLICA_TIMEOUT=30 timeout 200 $B/r.trainer --replicas 2 --gpus 0 --data $B/d.npy --steps 100000 --quiet > $res/kill.rank0.out 2>&1 &
survivor=$!
sleep 8; kill -9 $victim; t0=$(date +%s.%N); wait $survivor; rc=$?; t1=$(date +%s.%N)
echo "replica 1 killed; replica 0 exited with $rc after $(python3 -c "print(round($t1 - $t0, 1))") s:"; tail -2 $res/kill.rank0.out
