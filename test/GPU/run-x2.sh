#!/usr/bin/env bash
# On a 2-GPU H200 machine (bench/prepare-gpu.sh h200 staged build-gpu/):
#  1. replicas over NCCL with the optimizer sharded (the default), started as
#     torchrun would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; these
#     machines have no mpirun): qwen3-deep-tiny fp32, 2 replicas x batch 2
#     against 1 process x batch 4, weights compared every step; the same
#     unsharded; then a replica killed mid-run and the job resumed from its
#     last checkpoint.
#  2. W1 (bench/w1.py): 1 GPU, 1 replica x 2 GPUs, 2 replicas x 1 GPU with
#     the optimizer sharded and not.
# Writes everything under $OUT.
source "$(dirname "$0")/replica-env.sh"
pair() { # PORT LOG-PREFIX ARGS...: rank 1 in the background, rank 0 waited for
  local port=$1 log=$2; shift 2
  MASTER_PORT=$port RANK=1 timeout 120 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 1 "$@" > $res/$log.rank1.out 2>&1 &
  MASTER_PORT=$port RANK=0 timeout 120 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 0 "$@" --log-json $res/$log.jsonl > $res/$log.rank0.out 2>&1
  echo "$log: rank 0 rc=$?"; wait $!; echo "$log: rank 1 rc=$?"
}
if [ -z "$SKIP_REPLICAS" ]; then
python3 -c "import numpy as np; np.save('$B/d.npy', np.random.default_rng(3).integers(0, 512, size=(60, 16)).astype(np.int64))"
echo "== 1. replicas over NCCL: deep-tiny fp32, 2 x batch 2 against 1 x batch 4"
$B/g4.trainer --gpus 0 --data $B/d.npy --steps 10 --quiet --log-json $res/g4.jsonl; echo "single rc=$?"
pair 29511 r2-sharded --data $B/d.npy --steps 10 --replica-check-every 1
head -2 $res/r2-sharded.rank0.out
python3 test/E2E/replicas.py close $res/r2-sharded.jsonl $res/g4.jsonl 1e-5
pair 29512 r2-allreduce --data $B/d.npy --steps 10 --replica-check-every 1 --shard-optimizer=off
python3 test/E2E/replicas.py close $res/r2-allreduce.jsonl $res/g4.jsonl 1e-5
echo "== 1b. a replica killed, then resumed"
rm -rf $B/ck
MASTER_PORT=29513 RANK=1 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 1 --data $B/d.npy --steps 100000 \
  --checkpoint-dir $B/ck --save-every 50 > $res/kill.rank1.out 2>&1 &
victim=$!
MASTER_PORT=29513 RANK=0 RONDO_REPLICA_TIMEOUT=30 timeout 100 $B/r.trainer --replicas 2 --replica-engine=nccl --gpus 0 \
  --data $B/d.npy --steps 100000 --checkpoint-dir $B/ck --save-every 50 --quiet > $res/kill.rank0.out 2>&1 &
survivor=$!
sleep 10; kill -9 $victim; t0=$(date +%s.%N); wait $survivor; rc=$?; t1=$(date +%s.%N)
echo "replica 1 killed; replica 0 exited with $rc after $(python3 -c "print(round($t1 - $t0, 1))") s:"; tail -2 $res/kill.rank0.out
last=$(ls $B/ck | sed -n 's/step-\([0-9]*\).ckpt/\1/p' | sort -n | tail -1)
echo "last checkpoint: step $last"
pair 29514 resumed --data $B/d.npy --steps $((last + 20)) --checkpoint-dir $B/ck --resume
grep -h "resuming from" $res/resumed.rank0.out
python3 -c "
import json; l=[json.loads(x) for x in open('$res/resumed.jsonl')]
print('resumed run: steps %d-%d, loss %.4f -> %.4f' % (l[0]['step'] + 1, l[-1]['step'] + 1, l[0]['loss'], l[-1]['loss']))"
fi
echo "== 2. W1"
python3 bench/w1.py --trainer $B/w1.trainer --steps ${STEPS:-8} --skip 3 --machine h200x2 --out $res/w1 --timeout 200 \
  ${PYTORCH:---skip-pytorch} \
  ${CONFIGS:---config 1x1=1:0 --config 1x2=2:0,1 --config 2x1-sharded=1:0,1:2:$B/w1-b8w1.trainer \
  --config 2x1-allreduce=1:0,1:2:$B/w1-b8w1.trainer::--shard-optimizer=off} 2>&1 | grep -v "^W[0-9]"
grep -H "GPU [0-9] memory\|optimizer sharded\|summed over" $res/w1/*.r0.log | sed "s|.*/w1-rondo-||"
rm -f $res/w1/w1-ids.npy; (cd $res && tar czf w1.tgz w1 && rm -rf w1)
