#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (lit +
# FileCheck, gtest suites, end-to-end training against PyTorch references).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ninja -C build check-rondo
