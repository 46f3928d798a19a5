#!/bin/bash
# Runs on the GPU machine (device tool), from the repository root, with
# build-attn/gpu-attn.tar.xz carried (pack/new: the test binary of this tree,
# pack/base: the one before the wgmma kernels, pack/lib: the libraries the
# machine lacks): the attention tests, Rondo's bf16 attention timings on both
# paths (DISABLED_FlashTimingPaths, with the memory pool releasing and
# keeping freed memory), the base binary at W1's shape, PyTorch SDPA
# (bench/attention_sdpa.py) in the same run, and the whole CUDA kernel suite.
# Logs go to $OUT; bench/attention_table.py turns them into the table.
# REPEAT=n repeats the timings; COMPARE=0 skips base and PyTorch, FULL=0 the
# suite; SASS=1 prints where the wgmma waits and exponentials sit in the
# Hopper kernels.
set -u
tar xJf build-attn/gpu-attn.tar.xz -C /tmp
P=/tmp/pack
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
T=$P/new/rondo-cuda-kernels-tests
timeout 150 $T --gtest_filter='*Attention*' 2>&1 | tee $OUT/attn-tests.log | grep -E "FAILED|PASSED|tests ran|error" | head -30
for rep in $(seq ${REPEAT:-1}); do
  for pool in 0 1; do
    RONDO_BENCH_KEEP_POOL=$pool timeout 120 $T --gtest_also_run_disabled_tests --gtest_filter='*FlashTimingPaths' 2>&1 | tee -a $OUT/timing-new.log | grep "\[ flash \]"
  done
done
if [ "${SASS:-0}" = 1 ]; then # where the softmax's exponentials sit between the waits
  /usr/local/cuda/bin/cuobjdump -sass $T > /tmp/all.sass 2>&1
  for k in flashFwdSm90KernelILi128 flashDqSm90KernelILi128 flashDkvSm90KernelILi128; do
    awk -v k=$k '/Function : /{f=index($0,k)>0} f' /tmp/all.sass > /tmp/k.sass
    echo "$k: wgmma waits at lines $(grep -n WARPGROUP.DEPBAR /tmp/k.sass | cut -d: -f1 | tr '\n' ' '); ex2 from $(grep -n MUFU.EX2 /tmp/k.sass | head -1 | cut -d: -f1) to $(grep -n MUFU.EX2 /tmp/k.sass | tail -1 | cut -d: -f1)"
  done
fi
if [ "${COMPARE:-1}" = 1 ]; then
  for rep in $(seq ${REPEAT:-1}); do
    timeout 60 $P/base/rondo-cuda-kernels-tests --gtest_also_run_disabled_tests --gtest_filter='*FlashTimingW1' 2>&1 | tee -a $OUT/timing-base.log | grep "timing"
    PYTHONUNBUFFERED=1 timeout 120 python3 bench/attention_sdpa.py 2>&1 | tee -a $OUT/sdpa.jsonl
  done
fi
if [ "${FULL:-1}" = 1 ]; then
  timeout 200 $T > $OUT/all-tests.log 2>&1; tail -5 $OUT/all-tests.log; grep -E "^\[  FAILED" $OUT/all-tests.log | head
fi
