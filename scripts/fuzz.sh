#!/usr/bin/env bash
# Fuzzes the ONNX importer with libFuzzer for SECONDS (default 600).
#
#   bash scripts/fuzz.sh [SECONDS]
#
# Installs the dependencies (clang-22 and its sanitizer runtimes included),
# builds fuzz/ImportFuzzer.cpp with -fsanitize=fuzzer,address,undefined into
# $RONDO_FUZZ_BUILD (default /tmp/rondo-fuzz-build), and runs it on a scratch
# copy of the seed corpus (test/Fuzz/corpus, the ONNX fixtures, the ONNX text
# tests and ONNX's backend node tests). Exits non-zero when the fuzzer finds a
# crash, a sanitizer report, a hang (-timeout) or runaway memory
# (-rss_limit_mb); the input is saved under $RONDO_FUZZ_ARTIFACTS (default
# $RONDO_FUZZ_BUILD/artifacts) and its path printed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
build=${RONDO_FUZZ_BUILD:-/tmp/rondo-fuzz-build}
artifacts=${RONDO_FUZZ_ARTIFACTS:-$build/artifacts}
jobs=${RONDO_JOBS:-2}

bash scripts/install-deps.sh

san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
# A build directory configured from another checkout would fuzz that
# checkout's importer: start it again for this one.
if [ -f "$build/CMakeCache.txt" ] &&
   ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$(pwd -P)" "$build/CMakeCache.txt"; then
  echo "fuzz: $build was configured from another checkout; configuring it for $(pwd -P)"
  rm -rf "$build"
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DCMAKE_C_FLAGS="$san -g -fno-omit-frame-pointer" \
    -DCMAKE_CXX_FLAGS="$san -g -fno-omit-frame-pointer" \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit \
    -DRONDO_BUILD_FUZZERS=ON
fi
start=$(date +%s)
nice ninja -C "$build" -j"$jobs" rondo-import-fuzzer
echo "fuzz: fuzzer built in $(($(date +%s) - start)) s"

# A scratch corpus: libFuzzer adds to its first directory, and the seed
# directories in the repository stay untouched.
corpus=$(mktemp -d /tmp/rondo-fuzz-corpus.XXXXXX)
trap 'rm -rf "$corpus"' EXIT
mkdir -p "$corpus/work" "$corpus/seeds" "$artifacts"
cp test/Fuzz/corpus/* "$corpus/seeds/" 2>/dev/null || true
for f in test/Import/*.onnxtxt; do cp "$f" "$corpus/seeds/import-$(basename "$f")"; done
# The tiny model fixtures (the graph-only 0.6B/1.7B exports are 5 MB each
# and take long to import; max_len truncates what is left anyway).
for f in test/data/models/*tiny*.onnx; do cp "$f" "$corpus/seeds/"; done
if [ -d /usr/share/libonnx-testdata/data/node ]; then
  for d in /usr/share/libonnx-testdata/data/node/*/; do
    [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$corpus/seeds/node-$(basename "$d").onnx"
  done
fi
# Hostile-but-valid models (lying headers, deep subgraphs), shallow versions.
/usr/bin/python3 test/Import/Inputs/make_hostile_models.py "$corpus/seeds" 3
echo "fuzz: $(ls "$corpus/seeds" | wc -l) seeds; fuzzing for $seconds s"

set +e
# As in scripts/sanitize.sh: LLVM's allocator headers poison and unpoison
# slabs when compiled with ASan, but the Debian LLVM/MLIR libraries that
# share those slabs are not instrumented, so which copy of an inline
# allocator function the linker keeps decides whether a write inside
# libMLIR is reported as use-after-poison (it became so at MLIRContext
# construction once the tg dialect defined an attribute with stored data).
# Manual poisoning is ignored; ASan still checks every real allocation.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allow_user_poisoning=0"
"$build/bin/rondo-import-fuzzer" "$corpus/work" "$corpus/seeds" \
  -dict=fuzz/onnx.dict -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$artifacts/" 2>&1 | tee "$corpus/log.txt" | grep --line-buffered -v '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)'
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
  echo "fuzz: FAILED (exit $status); the input is saved in $artifacts:"
  grep -E "^(artifact_prefix|Test unit written)" "$corpus/log.txt" || ls -t "$artifacts" | head -3
  echo "fuzz: reproduce with $build/bin/rondo-import-fuzzer <file>, or build/bin/rondo-translate --import-onnx <file> --batch 2 --seq-len 3"
  exit 1
fi
echo "fuzz: no crash in $seconds s"
