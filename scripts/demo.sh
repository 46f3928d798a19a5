#!/usr/bin/env bash
# The main job: compile a bundled model into a trainer and train it on the
# CPU (host workers), printing the imported IR summary first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
model=test/data/models/qwen3-tiny.onnx
out=build/demo
mkdir -p "$out"
echo "== import and recognition (rondo-compile --emit=tg) =="
build/bin/rondo-compile "$model" --batch 2 --seq-len 32 --emit=tg --summary -o "$out/qwen3-tiny.tg.mlir"
head -c 2000 "$out/qwen3-tiny.tg.mlir" | cut -c1-160; echo "..."
echo "== the pipeline plan for 2 host workers (rondo-compile --explain) =="
build/bin/rondo-compile "$model" --batch 2 --seq-len 32 --workers 2 --emit=pipe --explain="$out/plan" -o "$out/plan.mlir"
echo "(plan, text and timeline SVG in $out/plan/)"
echo "== compile the trainer (rondo-compile -o trainer) =="
build/bin/rondo-compile "$model" --batch 2 --seq-len 32 -o "$out/trainer"
/usr/bin/python3 test/E2E/check_reference.py npy test/data/models/qwen3-tiny.ref.onnx "$out/tokens.npy"
echo "== train 20 steps on the CPU =="
"$out/trainer" --data "$out/tokens.npy" --steps 20 --lr 1e-3 --log-json "$out/log.jsonl"
