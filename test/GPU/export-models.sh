#!/usr/bin/env bash
# On a GPU machine (it has PyTorch and transformers; no GPU is used): the
# models that cannot be made here, packed as $OUT/exported.tar.
#   qwen3-hf-tiny{,-tied}.onnx(.data) + hf-tiny{,-tied}/  fp32 weights and the
#       same model as Hugging Face saves it (the --export-safetensors reference)
#   qwen3-8b.onnx  the Qwen3-8B shape, graph only (LoRA at 32K tokens)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=$(mktemp -d)
for m in qwen3-hf-tiny qwen3-hf-tiny-tied; do
  python3 scripts/export-hf-onnx.py --config test/GPU/configs/$m.json --dtype fp32 --seed 7 \
    --save-hf $dir/${m#qwen3-} -o $dir/$m.onnx
done
[ "${1:-}" = --tiny-only ] || python3 scripts/export-hf-onnx.py --preset qwen3-8b --graph-only -o $dir/qwen3-8b.onnx
ls -la $dir $dir/*/
tar cf "${OUT:-.}/exported.tar" -C $dir .
