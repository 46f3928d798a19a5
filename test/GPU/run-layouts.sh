#!/usr/bin/env bash
# On a 2- or 4-GPU machine, what bench/prepare-layouts.sh staged (issue 25):
#  PHASE=check (1.-2.), PHASE=w1 (3.), PHASE=torch (4.); all by default.
#  1. Device-resident state over NCCL: qwen3-deep-tiny fp32, the trainer's
#     own launch of 2 replicas x batch 2 (gradients reduce-scattered and
#     weights all-gathered in GPU memory), sharded and not, against one
#     process x batch 4, weights compared every step.
#  2. A replica killed (SIGKILL) in that job: the other stops, naming it.
#  3. W1 at a global batch of 16 x 4096 tokens: every compiled layout of 1,
#     2 and 4 GPUs (bench/w1.py), the planner's choice marked by the plans.
#  4. PyTorch on the same GPUs: the compiled module on 1 GPU, DDP (compiled
#     module) on 2 and 4.
#  PHASE=8b2, PHASE=8b4: the Qwen3-8B shape (staged with the 8B graph), the
#     layout the planner chose for 2 / 4 GPUs beside PyTorch FSDP2 with CPU
#     offload on the same GPUs (Q8TORCH=--skip-pytorch for Rondo alone).
# Writes under $OUT.
cd "$(dirname "$0")/../.."
[ -x build-gpu/rdev.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0
nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:$nccl:${LD_LIBRARY_PATH:-}
B=build-gpu; res=$OUT
ngpu=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c
phase=${PHASE:-all}
if [ $phase = all ] || [ $phase = check ]; then
python3 -c "import numpy as np; np.save('$B/d.npy', np.random.default_rng(3).integers(0, 512, size=(60, 16)).astype(np.int64))"
echo "== 1. device-resident replicas over NCCL: deep-tiny fp32, 2 x batch 2 against 1 x batch 4"
timeout 120 $B/gdev.trainer --gpus 0 --data $B/d.npy --steps 10 --quiet --log-json $res/gdev.jsonl; echo "one process rc=$?"
timeout 120 $B/rdev.trainer --gpus 0,1 --data $B/d.npy --steps 10 --replica-check-every 1 \
  --log-json $res/rdev.jsonl > $res/rdev.out 2>&1; echo "2 replicas rc=$?"; head -4 $res/rdev.out
python3 test/E2E/replicas.py close $res/rdev.jsonl $res/gdev.jsonl 1e-5
timeout 120 $B/rdev.trainer --gpus 0,1 --data $B/d.npy --steps 10 --replica-check-every 1 --shard-optimizer=off \
  --log-json $res/rdev-off.jsonl > $res/rdev-off.out 2>&1; echo "2 replicas unsharded rc=$?"
python3 test/E2E/replicas.py close $res/rdev-off.jsonl $res/gdev.jsonl 1e-5
echo "== 2. a replica killed"
RONDO_REPLICA_TIMEOUT=30 timeout 100 $B/rdev.trainer --gpus 0,1 --data $B/d.npy --steps 100000 --quiet \
  > $res/kill.out 2>&1 &
parent=$!
# $parent is timeout; its child the trainer that launched the replicas.
sleep 12; launcher=$(pgrep -P $parent); victim=$(pgrep -P $launcher | tail -1)
kill -9 $victim; t0=$(date +%s.%N)
wait $parent; rc=$?; t1=$(date +%s.%N)
echo "replica pid $victim killed; the job exited with $rc after $(python3 -c "print(round($t1 - $t0, 1))") s:"; tail -2 $res/kill.out
fi
if [ $phase = all ] || [ $phase = check ] || [ $phase = resume ]; then
[ -f $B/d.npy ] || python3 -c "import numpy as np; np.save('$B/d.npy', np.random.default_rng(3).integers(0, 512, size=(60, 16)).astype(np.int64))"
echo "== 2b. killed after a checkpoint, resumed: the same losses as an uninterrupted run"
timeout 300 python3 test/E2E/replicas.py kill-resume self $B/rdev.trainer $B/d.npy /tmp/kr --gpus 0,1
fi
if [ $phase = all ] || [ $phase = w1 ]; then
echo "== 3. W1 layouts"
for g in 1 2 4; do cat $B/plans/g$g/layouts.txt 2>/dev/null; done
configs=(--config "1x1=1:0:1:$B/w1-g1.trainer")
if [ $ngpu -ge 2 ]; then
  configs+=(--config "2x1=1:0,1:2:$B/w1-g2.trainer" --config "1x2=2:0,1:1:$B/w1-g2.trainer")
fi
if [ $ngpu -ge 4 ]; then
  configs+=(--config "4x1=1:0,1,2,3:4:$B/w1-g4.trainer" --config "2x2=2:0,1,2,3:2:$B/w1-g4.trainer"
            --config "1x4=4:0,1,2,3:1:$B/w1-g4.trainer")
fi
# EXTRA: more --config NAME=... entries (e.g. the unsharded optimizer).
[ -n "${ONLY:-}" ] && configs=()
configs+=(${EXTRA:-})
timeout 580 python3 bench/w1.py --steps ${STEPS:-8} --skip 3 --machine ${MACHINE:-h100x$ngpu} --out $res/w1 \
  --timeout 150 --skip-pytorch "${configs[@]}" 2>&1 | grep -v "^W[0-9]" | tail -30
grep -H "GPU [0-9] memory" $res/w1/*.r0.log | sed "s|.*/w1-rondo-||"
fi
if [ $phase = all ] || [ $phase = torch ]; then
echo "== 4. PyTorch"
lists=(--pytorch-gpus 0)
[ $ngpu -ge 2 ] && lists+=(--pytorch-gpus 0,1)
[ $ngpu -ge 4 ] && lists+=(--pytorch-gpus 0,1,2,3)
timeout 580 python3 bench/w1.py --pytorch ${TORCH:-module-compile,ddp-compile} "${lists[@]}" \
  --steps ${STEPS:-8} --skip 3 --timeout 200 --machine ${MACHINE:-h100x$ngpu} --out $res/torch 2>&1 | grep -v "^W[0-9]" | tail -30
fi
if [ $phase = 8b2 ] || [ $phase = 8b4 ]; then
g=${phase#8b}
echo "== 5. the Qwen3-8B shape, full fine-tune, 8 x 4096 tokens per step, on $g GPUs"
cat $B/plans/q8-g$g/layouts.txt 2>/dev/null
gpus=$(seq -s, 0 $((g - 1)))
if [ $g = 2 ]; then cfg="2x1=1:$gpus:2:$B/q8-g2.trainer"; else cfg="1x4=4:$gpus:1:$B/q8-g4.trainer"; fi
timeout 590 python3 bench/w1.py --shape qwen3-8b --steps ${STEPS:-4} --skip 2 --timeout 420 \
  --machine ${MACHINE:-h100x$ngpu} --out $res/q8-x$g --config "$cfg" \
  ${Q8TORCH:---pytorch fsdp2-offload --pytorch-gpus $gpus} 2>&1 | grep -v "^W[0-9]" | tail -20
fi
rm -f $res/*/w1-ids.npy
