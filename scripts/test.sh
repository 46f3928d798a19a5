#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (lit +
# FileCheck, gtest suites, end-to-end training against PyTorch references,
# the kill -9 resume loop with 5 kills), then fuzzes the ONNX importer for
# 60 s (bash scripts/fuzz.sh SECONDS runs it longer).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ninja -C build check-rondo
bash scripts/fuzz.sh 60
