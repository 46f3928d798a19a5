#!/usr/bin/env bash
# Installs every Debian 12 package the build and the tests use. A no-op when
# they are all present (no apt-get call, no root needed then).
set -euo pipefail

packages=(
  cmake ninja-build ccache g++
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libonnx-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libopenblas-dev
  libonnx-testdata python3-onnx python3-numpy
  libopenmpi-dev openmpi-bin # trainer --replicas on the host backend (test/E2E/replicas.test)
  clang-22 libclang-rt-22-dev libomp-22-dev # scripts/fuzz.sh: libFuzzer, sanitizers, OpenMP for clang
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
