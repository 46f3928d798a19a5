#!/bin/bash
# Runs on the GPU machine (device tool): Rondo's bf16 attention on cuDNN's
# fused SDPA and on Rondo's own kernels, and PyTorch SDPA (flash and cuDNN
# backends) beside them, in one run. Needs the pack bench/attention_pack.sh
# makes (PACK, default build-cudnn/gpu-cudnn.tar.xz, carried: pack/new the
# test binary of this tree, pack/lib the libraries the machine lacks,
# pack/bench these scripts):
#   tar xJf build-cudnn/gpu-cudnn.tar.xz -C /tmp && bash /tmp/pack/bench/attention_gpu.sh
# Steps (STEPS, default "cudnn timing sdpa attn"):
#   cudnn   the cuDNN attention tests (*Cudnn*), with cuDNN's error log
#   timing  DISABLED_FlashTimingPaths (memory pool kept; RONDO_BENCH_PATHS)
#   sdpa    bench/attention_sdpa.py (PyTorch SDPA flash, cuDNN, cuDNN with
#           deterministic algorithms)
#   attn    every attention test of the binary
#   full    the whole CUDA kernel suite
#   fe      PyTorch's cudnn-frontend log of its SDPA graphs (small shape)
#   nsys    kernel times (Nsight Systems, where installed) of Rondo on cuDNN
#           and of PyTorch SDPA on cuDNN at W1's shape
# Logs go to $OUT; bench/attention_table.py turns them into the table.
set -u
P=/tmp/pack
[ -x $P/new/rondo-cuda-kernels-tests ] || tar xJf ${PACK:-build-cudnn/gpu-cudnn.tar.xz} -C /tmp
# cuDNN is only inside PyTorch's wheel on these machines (nvidia-cudnn-cu13):
# the attention opens libcudnn.so.9 from the loader path.
CUDNN_LIB=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64${CUDNN_LIB:+:$CUDNN_LIB}:${LD_LIBRARY_PATH:-}
echo "cuDNN lib: ${CUDNN_LIB:-none}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/gpu.txt 2>&1
T=$P/new/rondo-cuda-kernels-tests
for step in ${STEPS:-cudnn timing sdpa attn}; do
  case $step in
  cudnn)
    CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$OUT/cudnn-dbg.log timeout ${CUDNN_TIMEOUT:-120} \
      $T --gtest_filter='*Cudnn*' > $OUT/cudnn-tests.log 2>&1
    echo "cudnn tests rc=$?"
    grep -E "^rondo:|FAILED|PASSED|SKIPPED|tests ran|\[ bf16 \]" $OUT/cudnn-tests.log | head -60 ;;
  timing)
    RONDO_BENCH_KEEP_POOL=1 timeout ${TIMING_TIMEOUT:-120} $T --gtest_also_run_disabled_tests \
      --gtest_filter='*FlashTimingPaths' > $OUT/timing.log 2>&1
    echo "timing rc=$?"
    grep -E "\[ flash \]|^rondo:" $OUT/timing.log ;;
  sdpa)
    PYTHONUNBUFFERED=1 timeout ${SDPA_TIMEOUT:-90} python3 $P/bench/attention_sdpa.py > $OUT/sdpa.jsonl 2>&1
    echo "sdpa rc=$?"
    cat $OUT/sdpa.jsonl ;;
  attn)
    timeout ${ATTN_TIMEOUT:-150} $T --gtest_filter='*Attention*' > $OUT/attn-tests.log 2>&1
    echo "attention tests rc=$?"
    grep -E "FAILED|PASSED|tests ran" $OUT/attn-tests.log | head -30 ;;
  full)
    timeout ${FULL_TIMEOUT:-200} $T > $OUT/all-tests.log 2>&1
    echo "suite rc=$?"
    tail -5 $OUT/all-tests.log; grep -E "^\[  FAILED" $OUT/all-tests.log | head ;;
  nsys)
    NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
    if [ -z "$NSYS" ]; then echo "nsys: not installed"; continue; fi
    RONDO_BENCH_KEEP_POOL=1 RONDO_BENCH_PATHS=cudnn RONDO_BENCH_W1_ONLY=1 timeout 90 $NSYS profile -o /tmp/rondo -f true \
      $T --gtest_also_run_disabled_tests --gtest_filter='*FlashTimingPaths' > /dev/null 2>&1
    $NSYS stats -q --report cuda_gpu_kern_sum /tmp/rondo.nsys-rep > $OUT/nsys-rondo.txt 2>&1
    timeout 90 $NSYS profile -o /tmp/torch -f true python3 - > /dev/null 2>&1 <<'EOF'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q = torch.randn(2, 16, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k = torch.randn(2, 8, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
v = torch.randn(2, 8, 4096, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
g = torch.randn_like(q)
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(20):
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).backward(g)
torch.cuda.synchronize()
EOF
    $NSYS stats -q --report cuda_gpu_kern_sum /tmp/torch.nsys-rep > $OUT/nsys-torch.txt 2>&1
    head -12 $OUT/nsys-rondo.txt; head -12 $OUT/nsys-torch.txt ;;
  fe)
    CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=$OUT/fe.log timeout 60 python3 - <<'EOF'
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.use_deterministic_algorithms(True)
q = torch.randn(1, 4, 256, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k = torch.randn(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
v = torch.randn(1, 2, 256, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
torch.cuda.synchronize()
print("fe log written")
EOF
    ;;
  esac
done
