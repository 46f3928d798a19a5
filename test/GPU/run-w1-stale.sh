#!/usr/bin/env bash
# W1 on one GPU with --optimizer-mode=overlap and stale, for the default plan
# and M = 8 x 2 rows, PyTorch eager beside them (bench/w1.py). Expects
# gpu-pack.tar.xz from bench/prepare-stale.sh (or build-gpu/).
# Usage: MACHINE=h100x1 bash test/GPU/run-w1-stale.sh
cd "$(dirname "$0")/../.."
[ -x build-gpu/w1-m8.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
cfg() { echo "$1=1:0:1:build-gpu/$2.trainer:10:--optimizer-mode=$3"; }
timeout 560 python3 bench/w1.py --trainer build-gpu/w1.trainer --workers 1 --steps 10 --skip 2 \
  --machine "${MACHINE:-h100x1}" --out $OUT/w1 --timeout 120 \
  --config "$(cfg m8-stale w1-m8 stale)" --config "$(cfg m8-overlap w1-m8 overlap)" \
  --config "$(cfg overlap w1 overlap)" --config "$(cfg stale w1 stale)" 2>&1 | tail -12
rm -f $OUT/w1/w1-ids.npy
(cd $OUT/w1 && tar cf - *.log *.jsonl *trace.json | xz > ../logs.tar.xz && rm -f *.log *.jsonl *trace.json)
