#!/usr/bin/env bash
# The main job: compile a bundled model into a trainer and train it on the
# CPU (host workers), printing the imported IR summary first; where the
# machine has NVIDIA GPUs and CUDA, the same model is then planned for its
# GPUs (every layout of replicas x pipeline workers, rondo-compile --gpus)
# and trained on the layout the planner chose.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
model=test/data/models/qwen3-tiny.onnx
out=build/demo
mkdir -p "$out"
echo "== import and recognition (rondo-compile --emit=tg) =="
build/bin/rondo-compile "$model" --batch 2 --seq-len 32 --emit=tg --summary -o "$out/qwen3-tiny.tg.mlir"
head -c 2000 "$out/qwen3-tiny.tg.mlir" | cut -c1-160; echo "..."
echo "== measure this machine for the planner (rondo-calibrate-host) =="
build/bin/rondo-calibrate-host -o "$out/host.json"
echo "== the pipeline plans for 1, 2 and 4 host workers (rondo-compile --explain) =="
model=test/data/models/qwen3-deep-tiny.onnx
shape=(--batch 8 --seq-len 32 --microbatches 4 --workers 1,2,4 --device="$out/host.json")
build/bin/rondo-compile "$model" "${shape[@]}" --emit=pipe --explain="$out/plan" -o "$out/plan.mlir"
echo "(plans, text and timeline SVGs in $out/plan/)"
echo "== the executor's program: buffers, copies, events (rondo-compile --emit=exec) =="
build/bin/rondo-compile "$model" "${shape[@]}" --emit=exec -o "$out/exec.mlir"
grep -c 'exec\.' "$out/exec.mlir" | xargs echo "exec ops in $out/exec.mlir:"
echo "== compile the trainer (rondo-compile -o trainer) =="
build/bin/rondo-compile "$model" "${shape[@]}" -o "$out/trainer"
# Token rows that follow a rule (arithmetic progressions modulo the
# vocabulary), so that the loss visibly falls within a few dozen steps.
/usr/bin/python3 - "$out/tokens.npy" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(0)
starts = rng.integers(0, 512, size=(256, 1))
strides = rng.integers(1, 8, size=(256, 1))
np.save(sys.argv[1], ((starts + strides * np.arange(32)) % 512).astype(np.int64))
PY
# As many workers as the machine has cores, of the compiled 1, 2 and 4:
# more workers than cores only take turns on them.
cores=$(nproc)
workers=$(( cores >= 4 ? 4 : (cores >= 2 ? 2 : 1) ))
echo "== train 40 steps on $workers host workers ($cores cores) =="
"$out/trainer" --data "$out/tokens.npy" --steps 40 --workers "$workers" --lr 3e-3 \
  --log-json "$out/log.jsonl" --trace "$out/trace.json"
echo "== predicted vs measured stage-jobs (scripts/plan-vs-trace.py) =="
/usr/bin/python3 scripts/plan-vs-trace.py "$out/trace.json"
echo "(Chrome trace in $out/trace.json: open it in chrome://tracing or ui.perfetto.dev)"

# GPUs: build the CUDA backend, plan for up to 4 of them and train on the
# chosen layout (the trainer starts its replicas itself).
if command -v nvidia-smi > /dev/null && [ -x /usr/local/cuda/bin/nvcc ] &&
   ngpu=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU') && [ "$ngpu" -gt 0 ]; then
  echo "== $ngpu GPU(s): build the CUDA backend =="
  cmake build -DRONDO_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
    -DCMAKE_CUDA_ARCHITECTURES=native > /dev/null
  ninja -C build -j"${RONDO_JOBS:-2}"
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
    *H200*) device=h200 ;;
    *) device=h100 ;;
  esac
  gpus=$(( ngpu >= 4 ? 4 : (ngpu >= 2 ? 2 : 1) ))
  echo "== the layouts for $gpus GPU(s) (rondo-compile --gpus $gpus --explain) =="
  build/bin/rondo-compile "$model" --batch 8 --seq-len 32 --microbatches 4 --gpus "$gpus" \
    --target=cuda --device="$device" --explain="$out/gpu-plan" -o "$out/gpu-trainer" |
    sed -n '/== Layouts/,/^Chosen/p'
  echo "== train 40 steps on the chosen layout =="
  "$out/gpu-trainer" --data "$out/tokens.npy" --steps 40 --gpus "$(seq -s, 0 $((gpus - 1)))" \
    --lr 3e-3 --log-json "$out/gpu-log.jsonl"
fi
