#!/usr/bin/env bash
# Runs on the GPU machine, on what bench/prepare-residency.sh staged: W1's
# kernels for Rondo and for the compiled PyTorch module, timed the same way
# (bench/kernel_trace.cpp: CUPTI's activity records, the last
# KERNEL_TRACE_LAST_MS of each process's GPU work), with the GPU's clocks
# and power sampled every 200 ms beside them (smi.csv, phases.txt); then
# the trainer alone on the CUDA toolkit's cuBLAS and on PyTorch's wheel's,
# alternated. Everything into $OUT/kernel-trace.tar.xz.
# Usage: MACHINE=h100x1 bash test/GPU/run-kernel-trace.sh
source "$(dirname "$0")/gpu-env.sh" build-gpu/w1.trainer
source "$(dirname "$0")/kernel-trace-lib.sh"
phase() { echo "$(date +%s.%N) $*" >> $res/phases.txt; }
fields=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$fields --format=csv,noheader -lms 200 > $res/smi.csv 2>&1 &
smi=$!
phase start
STEPS=${STEPS:-8}
env "${trace_env[@]}" \
  timeout 420 python3 bench/w1.py --workers 1 --steps $STEPS --skip 2 \
  --machine "${MACHINE:-h100x1}" --out $res/w1 --timeout 240 \
  --pytorch "${PYTORCH:-module-compile}" \
  --config "planner=1:0:1:build-gpu/w1.trainer:$STEPS" 2>&1 | tail -8
phase w1.py done
trace_label
mv $res/w1/w1-ids.npy /tmp/w1-ids.npy
# The same trainer on the toolkit's cuBLAS and on PyTorch's wheel's.
site=$(python3 -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))")
wheel=$(dirname "$(find $site/nvidia -name 'libcublas.so.13' | head -1)")
for lib in $cuda/lib64 $wheel; do
  python3 -c "
import ctypes, sys
l = ctypes.CDLL(sys.argv[1] + '/libcublas.so.13')
v = [ctypes.c_int() for _ in range(3)]
for i in range(3): l.cublasGetProperty(i, ctypes.byref(v[i]))
print(sys.argv[1], 'cuBLAS %d.%d.%d' % tuple(x.value for x in v))" $lib
done | tee $res/cublas-versions.txt
for round in 1 2; do
  for lib in toolkit wheel; do
    extra=; [ $lib = wheel ] && extra=$wheel:
    phase trainer $lib $round
    LD_LIBRARY_PATH=$extra$LD_LIBRARY_PATH timeout 120 build-gpu/w1.trainer --init=random \
      --seed 1 --steps 6 --lr 1e-4 --data /tmp/w1-ids.npy > $res/trainer-$lib-$round.txt 2>&1
    echo "$lib $round rc=$? $(grep -E '^step ' $res/trainer-$lib-$round.txt | grep -oE '[0-9]+ tok/s' | tr '\n' ' ')"
  done
done
phase end
kill $smi
tar cf - -C $res . | xz -T4 > $OUT/kernel-trace.tar.xz
