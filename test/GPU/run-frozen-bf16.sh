#!/usr/bin/env bash
# Runs on one GPU what bench/prepare-frozen-bf16.sh staged, everything into
# $OUT/frozen-bf16.tar.xz (the device tool returns few files): for the
# dense (qwen3-deep-tiny) and the mixture-of-experts (qwen3moe-dev-tiny)
# fixture, LoRA trainers whose frozen bases are held in bf16 and in fp32
# (--frozen-storage), streamed and device-resident, 20 steps with clipping:
# all four must give bitwise-identical losses (test/E2E/same_losses.py),
# since every product rounds the frozen weights to the same bf16 bits. Then
# a bf16 streamed run checkpointed at step 10 and resumed to 20 must end
# with the straight run's losses.
# Usage: bash test/GPU/run-frozen-bf16.sh
source "$(dirname "$0")/gpu-env.sh" build-gpu/deep-bf16-streamed.trainer
status=0
for m in qwen3-deep-tiny:deep qwen3moe-dev-tiny:moe; do
  fixture=${m%%:*} name=${m##*:}
  run() { timeout 90 build-gpu/$name-$1.trainer --weights test/data/models/$fixture.onnx \
    --data build-gpu/ids_$fixture.npy --lr 1e-3 --clip-grad-norm 0.5 "${@:2}"; }
  logs=()
  for v in bf16-streamed fp32-streamed bf16-device fp32-device; do
    run $v --steps 20 --log-json $res/$name-$v.log > $res/$name-$v.out 2>&1
    echo "$name $v rc=$? $(grep -c 'held in bf16' $res/$name-$v.out) bf16 line(s)"
    logs+=($res/$name-$v.log)
  done
  # Only the bf16 trainers say they hold frozen weights in bf16; their
  # arenas (parameter slots, resident state) are the smaller ones.
  grep -h "held in bf16" $res/$name-bf16-streamed.out
  for v in bf16-streamed fp32-streamed bf16-device fp32-device; do
    echo "$name $v: $(grep -h 'GPU 0 memory' $res/$name-$v.out)"
  done
  python3 test/E2E/same_losses.py "${logs[@]}" && echo "$name: same losses" || status=1
  # Frozen weights are not checkpointed: a resumed bf16 run rounds them
  # again from the ONNX file and continues bitwise.
  run bf16-streamed --steps 10 --save-every 10 --checkpoint-dir $res/$name-ckpt \
    --log-json $res/$name-resumed.log > $res/$name-first10.out 2>&1
  run bf16-streamed --steps 20 --resume --checkpoint-dir $res/$name-ckpt \
    --log-json $res/$name-resumed.log > $res/$name-resumed.out 2>&1
  echo "$name resume rc=$?"
  python3 test/E2E/same_losses.py $res/$name-bf16-streamed.log $res/$name-resumed.log \
    && echo "$name: resumed run has the same losses" || status=1
done
tar cf - -C $res . | xz -T4 > $OUT/frozen-bf16.tar.xz
exit $status
