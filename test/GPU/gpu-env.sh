# Sourced by the one-GPU run scripts (run-residency.sh, run-families.sh) with
# the path of a file the pack holds: unpacks gpu-pack.tar.xz once, sets the
# loader path, names the card, makes the results folder $res and runs the
# CUDA kernel tests into it when the pack has them.
#   source "$(dirname "$0")/gpu-env.sh" build-gpu/w1.trainer
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -e "$1" ] || xz -dc gpu-pack.tar.xz | tar xf -
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
res=$(mktemp -d)
if [ -x build-gpu/rondo-cuda-kernels-tests ]; then
  timeout 300 build-gpu/rondo-cuda-kernels-tests > $res/cuda-kernels-tests.log 2>&1
  echo "cuda kernel tests rc=$?"; grep -E "PASSED|FAILED|worst" $res/cuda-kernels-tests.log | head -20
  # KERNEL_TIMING=FILTER: the disabled timing tests matching FILTER too
  # (e.g. '*LmHeadTiming*'), into kernel-timing.log.
  if [ -n "${KERNEL_TIMING:-}" ]; then
    timeout 300 build-gpu/rondo-cuda-kernels-tests --gtest_also_run_disabled_tests \
      --gtest_filter="$KERNEL_TIMING" > $res/kernel-timing.log 2>&1
    grep -E "timing|FAILED" $res/kernel-timing.log
  fi
fi
