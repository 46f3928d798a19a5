#!/usr/bin/env bash
# Runs on the GPU machine what bench/prepare-residency.sh staged:
#   1. the four tiny fixtures in fp32 with device-resident state (gradients
#      and losses to $OUT/fixtures, checked here with check_reference.py);
#   2. W1 with the planner's residency and streamed, each beside PyTorch
#      eager, Hugging Face + torch.compile and a compiled plain module, in
#      one bench/w1.py run ($OUT/w1);
#   3. the GPU kernel time of the planner's W1 plan (RONDO_PROFILE_KERNELS).
# Usage: MACHINE=h100x1 bash test/GPU/run-residency.sh
cd "$(dirname "$0")/../.."
[ -x build-gpu/w1.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/fixtures
for m in qwen3-tiny qwen3-tiny-tied llama-tiny qwen3-deep-tiny; do
  for mode in sync overlap; do
    timeout 60 build-gpu/$m.trainer --weights test/data/models/$m.onnx --data build-gpu/ids_$m.npy \
      --steps 6 --lr 1e-3 --weight-decay 0.01 --optimizer-mode=$mode --quiet \
      --dump-gradients $OUT/fixtures/$m.$mode.grads.onnx --log-json $OUT/fixtures/$m.$mode.log \
      > $OUT/fixtures/$m.$mode.out 2>&1
    echo "$m $mode rc=$?"
  done
done
cfg() { echo "$1=1:0:1:build-gpu/$2.trainer:${STEPS:-6}"; }
timeout 520 python3 bench/w1.py --workers 1 --steps ${STEPS:-6} --skip 2 \
  --machine "${MACHINE:-h100x1}" --out $OUT/w1 --timeout 170 \
  --config "$(cfg planner w1)" --config "$(cfg streamed w1-streamed)" 2>&1 | tail -16
mv $OUT/w1/w1-ids.npy /tmp/w1-ids.npy
RONDO_PROFILE_KERNELS=1 timeout 90 build-gpu/w1.trainer --init=random --seed 1 --steps 4 \
  --lr 1e-4 --data /tmp/w1-ids.npy > $OUT/w1-profile.txt 2>&1
echo "profile rc=$?"; tail -5 $OUT/w1-profile.txt
(cd $OUT/w1 && tar cf - *.log *.jsonl *trace.json 2>/dev/null | xz > ../logs.tar.xz && rm -f *.log *.jsonl *trace.json)
