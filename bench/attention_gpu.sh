#!/bin/bash
# Runs on the GPU machine (device tool), from the repository root, with
# build-attn/gpu-attn.tar.xz carried: the CUDA kernel tests (attention first),
# Rondo's bf16 attention timings on both paths (new binary) and at W1's shape
# (the base binary, before this change), and PyTorch SDPA in the same run.
# Logs go to $OUT.
set -u
tar xJf build-attn/gpu-attn.tar.xz -C /tmp
P=/tmp/pack
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
T=$P/new/rondo-cuda-kernels-tests
timeout 150 $T --gtest_filter='*Attention*' 2>&1 | tee $OUT/attn-tests.log | grep -E "FAILED|PASSED|tests ran|error" | head -30
timeout 120 $T --gtest_also_run_disabled_tests --gtest_filter='*FlashTimingPaths' 2>&1 | tee $OUT/timing-new.log | grep "\[ flash \]"
timeout 60 $P/base/rondo-cuda-kernels-tests --gtest_also_run_disabled_tests --gtest_filter='*FlashTimingW1' 2>&1 | tee $OUT/timing-base.log | grep "timing"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/attention_sdpa.py 2>&1 | tee $OUT/sdpa.jsonl
if [ "${FULL:-1}" = 1 ]; then
  timeout 200 $T 2>&1 > $OUT/all-tests.log; tail -5 $OUT/all-tests.log; grep -E "^\[  FAILED" $OUT/all-tests.log | head
fi
