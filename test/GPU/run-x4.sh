#!/usr/bin/env bash
# On a 4-GPU H200 machine (bench/prepare-gpu.sh h200 staged build-gpu/):
#  1. replicas over NCCL, started as torchrun would (RANK, WORLD_SIZE,
#     MASTER_ADDR, MASTER_PORT; these machines have no mpirun):
#     qwen3-deep-tiny fp32, 2 replicas x batch 2 against 1 process x batch 4,
#     with the weights compared every step; then a replica killed.
#  2. W1 (bench/w1.py): 1 GPU for 20 steps, PyTorch eager on 1 GPU, then
#     1 replica x 2 and x 4 GPUs, 2 replicas x 2 GPUs, 4 replicas x 1 GPU,
#     and the 16 GB memory-lean plan on 1 GPU.
# Writes everything under $OUT.
source "$(dirname "$0")/replica-env.sh"
if [ -z "$SKIP_REPLICAS" ]; then
python3 -c "import numpy as np; np.save('$B/d.npy', np.random.default_rng(3).integers(0, 512, size=(60, 16)).astype(np.int64))"
echo "== 1. replicas over NCCL: deep-tiny fp32, 2 x batch 2 against 1 x batch 4"
MASTER_PORT=29511 RANK=1 RONDO_REPLICA_DEBUG=1 timeout 120 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 1 \
  --data $B/d.npy --steps 10 --replica-check-every 1 > $res/r2.rank1.out 2>&1 &
MASTER_PORT=29511 RANK=0 RONDO_REPLICA_DEBUG=1 timeout 120 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 0 \
  --data $B/d.npy --steps 10 --replica-check-every 1 --log-json $res/r2.jsonl > $res/r2.rank0.out 2>&1
echo "rank 0 rc=$?"; wait; echo "rank 1 rc=$?"
grep -v "gradient sum" $res/r2.rank0.out | head -3; grep -v "gradient sum" $res/r2.rank1.out | tail -3
diff <(grep "gradient sum" $res/r2.rank0.out | sed 's/.*: gradient sum //;s/ ->.*//') \
     <(grep "gradient sum" $res/r2.rank1.out | sed 's/.*: gradient sum //;s/ ->.*//') > /dev/null && echo "same sums called in the same order"
diff <(grep "gradient sum" $res/r2.rank0.out | sed 's/.*-> //') <(grep "gradient sum" $res/r2.rank1.out | sed 's/.*-> //') | head -6
$B/g4.trainer --gpus 2 --data $B/d.npy --steps 10 --quiet --log-json $res/g4.jsonl; echo "single rc=$?"
python3 test/E2E/replicas.py close $res/r2.jsonl $res/g4.jsonl 1e-5
echo "== 1b. a replica killed"
MASTER_PORT=29513 RANK=1 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 1 --data $B/d.npy --steps 100000 > $res/kill.rank1.out 2>&1 &
victim=$!
MASTER_PORT=29513 RANK=0 RONDO_REPLICA_TIMEOUT=30 timeout 100 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 0 \
  --data $B/d.npy --steps 100000 --quiet > $res/kill.rank0.out 2>&1 &
survivor=$!
sleep 10; kill -9 $victim; t0=$(date +%s.%N); wait $survivor; rc=$?; t1=$(date +%s.%N)
echo "replica 1 killed; replica 0 exited with $rc after $(python3 -c "print(round($t1 - $t0, 1))") s:"; tail -2 $res/kill.rank0.out
fi
echo "== 2. W1"
python3 bench/w1.py --trainer $B/w1.trainer --steps ${STEPS:-8} --skip 3 --machine h200x4 --out $res/w1 --timeout 200 \
  ${CONFIGS:---config 1x1=1:0:::20 --config 2x2=2:0,1,2,3:2:$B/w1-b8.trainer --config 4x1=1:0,1,2,3:4:$B/w1-b4.trainer \
  --config 1x2=2:0,1 --config 1x4=4:0,1,2,3 --config lean=1:0:1:$B/w1-lean.trainer:6} 2>&1 | grep -v "^W[0-9]"
grep -H "GPU [0-9] memory" $res/w1/*.r0.log | sed "s|.*/w1-rondo-||"
rm -f $res/w1/w1-ids.npy; (cd $res && tar czf w1.tgz w1 && rm -rf w1)
