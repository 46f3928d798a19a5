#!/usr/bin/env bash
# Runs on the GPU machine what bench/prepare-residency.sh staged, everything
# into $OUT/residency.tar.xz (the device tool returns few files):
#   0. with EXPORT8B=1: the Qwen3-8B shape's graph for the LoRA runs
#      (scripts/export-hf-onnx.py --graph-only), as $OUT/qwen3-8b.onnx;
#   1. the four tiny fixtures in fp32 with device-resident state: sync with
#      --dump-gradients, overlap (checked here with check_reference.py);
#   1b. qwen3-deep-tiny in bf16, device-resident and streamed: the same
#      losses over 20 steps (test/E2E/same_losses.py);
#   1c. the same device-resident trainer with and without CUDA graphs: the
#      same losses over 300 steps, and tok/s both ways;
#   2. W1 with the planner's residency and streamed, beside PyTorch eager,
#      Hugging Face + torch.compile and a compiled plain module, in one
#      bench/w1.py run;
#   3. the GPU kernel time of the planner's W1 plan (RONDO_PROFILE_KERNELS).
# PROFILE_TORCH=1 adds torch.profiler's kernel categories to the PyTorch
# rows; STREAMED=0, PYTORCH=LIST and FIXTURES="" shorten the run;
# KERNEL_TRACE=1 times every process of step 2 with bench/kernel_trace.cpp
# (trace-rondo-*.txt, trace-torch-*.txt) in place of step 3's profile.
# Usage: MACHINE=h100x1 bash test/GPU/run-residency.sh
#
# SHAPE=llama3.2-1b or SHAPE=qwen2.5-1.5b (bench/w1.py --shape; default w1):
# steps 2 and 3 for that shape, with the planner's trainer
# TRAINER=build-gpu/<shape>.trainer (bench/prepare-residency.sh LLAMA=...
# QWEN25=...), its files named after the shape (bench/w1.py's prefix; the
# profile $SHAPE-profile.txt) and everything into
# $OUT/residency-<shape>.tar.xz. W1's extras are off for it: the fixtures
# (steps 1-1c; FIXTURES="..." still runs step 1's), the streamed
# configuration (STREAMED=1 adds build-gpu/<shape>-streamed.trainer, which
# prepare-residency.sh does not stage) and the --loss-chunk-rows trainers.
#   SHAPE=llama3.2-1b MACHINE=h100x1 bash test/GPU/run-residency.sh
SHAPE=${SHAPE:-w1}
TRAINER=${TRAINER:-build-gpu/$SHAPE.trainer}
if [ "$SHAPE" = w1 ]; then
  fixtures="qwen3-tiny qwen3-tiny-tied llama-tiny qwen3-deep-tiny"
  pack=residency.tar.xz
else
  fixtures=
  pack=residency-$SHAPE.tar.xz
fi
source "$(dirname "$0")/gpu-env.sh" $TRAINER
if [ "${EXPORT8B:-0}" = 1 ]; then
  timeout 150 python3 scripts/export-hf-onnx.py --preset qwen3-8b --graph-only \
    -o $OUT/qwen3-8b.onnx 2>&1 | tail -2
fi
mkdir -p $res/fixtures
for m in ${FIXTURES-$fixtures}; do
  run() { timeout 60 build-gpu/$m.trainer --weights test/data/models/$m.onnx \
    --data build-gpu/ids_$m.npy --steps 6 --lr 1e-3 --weight-decay 0.01 --quiet "$@"; }
  run --optimizer-mode=sync --dump-gradients $res/fixtures/$m.sync.grads.onnx \
    --log-json $res/fixtures/$m.sync.log > $res/fixtures/$m.sync.out 2>&1
  echo "$m sync rc=$?"
  run --optimizer-mode=overlap --log-json $res/fixtures/$m.overlap.log \
    > $res/fixtures/$m.overlap.out 2>&1
  echo "$m overlap rc=$?"
done
# bf16: the resident plan's bf16 weight copies against the streamed plan's
# per-microbatch rounding, 20 steps with clipping: the same bits.
if [ "$SHAPE" = w1 ] && [ -x build-gpu/deep-bf16-device.trainer ]; then
  for r in device streamed; do
    timeout 60 build-gpu/deep-bf16-$r.trainer --weights test/data/models/qwen3-deep-tiny.onnx \
      --data build-gpu/ids_qwen3-deep-tiny.npy --steps 20 --lr 1e-3 --clip-grad-norm 0.5 \
      --quiet --log-json $res/fixtures/deep-bf16-$r.log > $res/fixtures/deep-bf16-$r.out 2>&1
    echo "deep-bf16 $r rc=$?"
  done
  python3 test/E2E/same_losses.py $res/fixtures/deep-bf16-device.log \
    $res/fixtures/deep-bf16-streamed.log
  # 1c. Stage functions replayed as CUDA graphs (the default) and launched
  # kernel by kernel (RONDO_CUDA_GRAPHS=0): the same losses, and the speed
  # of a small microbatch (2 x 32 tokens) either way, alternated.
  for g in 1 0 1 0; do
    RONDO_CUDA_GRAPHS=$g timeout 90 build-gpu/deep-bf16-device.trainer \
      --weights test/data/models/qwen3-deep-tiny.onnx --data build-gpu/ids_qwen3-deep-tiny.npy \
      --steps 300 --lr 1e-3 --clip-grad-norm 0.5 --log-json $res/fixtures/graphs$g.log \
      > $res/fixtures/graphs$g.out 2>&1
    echo "graphs=$g rc=$? $(grep -E ' steps in |CUDA graphs' $res/fixtures/graphs$g.out | tr '\n' ' ')"
  done
  python3 test/E2E/same_losses.py $res/fixtures/graphs1.log $res/fixtures/graphs0.log
fi
cfg() { echo "$1=1:0:1:$2:${STEPS:-6}"; }
configs=(--config "$(cfg planner $TRAINER)")
[ "${STREAMED:-$([ "$SHAPE" = w1 ] && echo 1 || echo 0)}" = 1 ] &&
  configs+=(--config "$(cfg streamed build-gpu/$SHAPE-streamed.trainer)")
trace_env=()
[ "${KERNEL_TRACE:-0}" = 1 ] && source "$(dirname "$0")/kernel-trace-lib.sh"
# The JSON, logs and token file under $res/$SHAPE, named $SHAPE-* (w1.py's
# prefix is the shape's name).
env "${trace_env[@]}" timeout 420 python3 bench/w1.py --shape $SHAPE --workers 1 \
  --steps ${STEPS:-6} --skip 2 --machine "${MACHINE:-h100x1}" --out $res/$SHAPE --timeout 240 \
  --pytorch "${PYTORCH:-eager,hf-compile,module-compile}" ${PROFILE_TORCH:+--profile-torch} \
  "${configs[@]}" 2>&1 | tail -16
mv $res/$SHAPE/$SHAPE-ids.npy /tmp/$SHAPE-ids.npy
# W1 at other --loss-chunk-rows (bench/prepare-residency.sh LOSS_CHUNKS), 6
# steps each, the planner's trainer between them.
for t in build-gpu/w1-chunk*.trainer; do
  [ "$SHAPE" = w1 ] && [ -x "$t" ] || continue
  for x in $t build-gpu/w1.trainer; do
    log=$res/$(basename $x .trainer)-$(basename $t .trainer).txt
    timeout 120 $x --init=random --seed 1 --steps 6 --lr 1e-4 --data /tmp/w1-ids.npy > $log 2>&1
    echo "$(basename $x) rc=$? $(grep -E '^step ' $log | grep -oE '[0-9]+ tok/s' | tr '\n' ' ')"
  done
done
if [ "${KERNEL_TRACE:-0}" = 1 ]; then
  trace_label
  tar cf - -C $res . | xz -T4 > $OUT/$pack
  exit 0
fi
RONDO_PROFILE_KERNELS=1 timeout 90 $TRAINER --init=random --seed 1 --steps 4 \
  --lr 1e-4 --data /tmp/$SHAPE-ids.npy > $res/$SHAPE-profile.txt 2>&1
echo "profile rc=$?"; grep -E "GPU time per kernel|steps in" $res/$SHAPE-profile.txt
tar cf - -C $res . | xz -T4 > $OUT/$pack
