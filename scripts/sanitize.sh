#!/usr/bin/env bash
# The sanitizer suite (long; not part of CI's 90 minutes):
#  1. AddressSanitizer + UndefinedBehaviorSanitizer build of everything in
#     build-asan/, including generated trainers; a deliberate use-after-free
#     must be reported (proof that the flags are really on); then the whole
#     test suite (lit + gtest) must pass clean.
#  2. ThreadSanitizer build of the runtime alone (build-tsan/): its tests,
#     which run the host backend's worker, copy and optimizer threads. The
#     kernels' OpenMP teams are limited to one thread there: libgomp is not
#     instrumented and TSan cannot see its barriers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs="${RONDO_JOBS:-2}"

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DRONDO_TRAINER_FLAGS="$san" -DRONDO_SANITIZER_CANARY=ON
fi
ninja -C build-asan -j"$jobs"

echo "== the canary: a deliberate use-after-free must be caught =="
if build-asan/bin/rondo-sanitizer-canary 2> build-asan/canary.log; then
  echo "error: the use-after-free canary ran clean: sanitizers are not active" >&2
  exit 1
fi
grep -q "heap-use-after-free" build-asan/canary.log
echo "caught: $(grep -m1 'ERROR: AddressSanitizer' build-asan/canary.log)"

echo "== the whole test suite under ASan + UBSan =="
# LLVM's and MLIR's (uninstrumented) libraries keep singletons alive at exit.
# LLVM's allocator headers poison and unpoison slabs when compiled with ASan,
# but the Debian libraries that share those slabs are not: manual poisoning
# would be reported as use-after-poison inside libLLVM, so it is ignored.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:allow_user_poisoning=0"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
ninja -C build-asan -j"$jobs" check-rondo

echo "== the runtime under ThreadSanitizer =="
if [ ! -f build-tsan/build.ninja ]; then
  cmake -S runtime -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="-fsanitize=thread" -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread"
fi
ninja -C build-tsan -j"$jobs"
# The runtime's threads: the pipelined executor, the trainer, checkpoints.
# The kernel and AdamW suites are OpenMP alone, which TSan cannot follow
# (and slows a hundredfold); ASan+UBSan cover them above.
OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1:suppressions=$PWD/scripts/tsan.supp" \
  ctest --test-dir build-tsan --output-on-failure -j"$jobs" \
    -R '^(PipelineTest|TrainerTest|Checkpoint|DataTest|OnnxWeights)'
echo "sanitizer suite: clean"
