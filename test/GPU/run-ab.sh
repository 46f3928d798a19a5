#!/usr/bin/env bash
# Runs on the GPU machine what bench/prepare-ab.sh staged.
#   bash test/GPU/run-ab.sh tests   # CUDA kernel tests, fp32 fixtures
#                                   # (results.tar.gz for gpu-e2e.sh check)
#   MACHINE=h100x1 bash test/GPU/run-ab.sh w1   # W1: this tree's trainer and
#       the earlier revision's, interleaved (new, old, new, old), beside
#       PyTorch eager, in one bench/w1.py run
cd "$(dirname "$0")/../.."
[ -x build-gpu/w1.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "${1:-}" in
tests)
  set -o pipefail
  timeout 240 build-gpu/rondo-cuda-kernels-tests 2>&1 | tee $OUT/cuda-kernels-tests.log |
    grep -E "FAILED|PASSED|SKIPPED|Failure|Expected|actual|worst" | head -30
  bash test/GPU/run-on-gpu.sh
  ;;
w1)
  cfg() { echo "$1=1:0:1:build-gpu/$2.trainer:8"; }
  timeout 570 python3 bench/w1.py --trainer build-gpu/w1.trainer --workers 1 --steps 8 --skip 2 \
    --machine "${MACHINE:-h100x1}" --out $OUT/w1 --timeout 150 \
    --config "$(cfg new w1)" --config "$(cfg old w1-old)" \
    --config "$(cfg new2 w1)" --config "$(cfg old2 w1-old)" 2>&1 | tail -14
  rm -f $OUT/w1/w1-ids.npy
  (cd $OUT/w1 && tar cf - *.log *.jsonl *trace.json 2>/dev/null | xz > ../logs.tar.xz && rm -f *.log *.jsonl *trace.json)
  ;;
*)
  echo "usage: $0 tests | w1" >&2
  exit 2
  ;;
esac
