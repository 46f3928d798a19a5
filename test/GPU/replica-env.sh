# Sourced by run-x2.sh and run-x4.sh: unpacks gpu-pack.tar.xz once and sets
# up the loader path (NCCL from PyTorch's packages) and the torchrun-style
# variables the NCCL replica engine reads. NVLink multicast stays off.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -x build-gpu/r.trainer ] || xz -dc gpu-pack.tar.xz | tar xf -
export NCCL_NVLS_ENABLE=0
nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
# cuDNN (the bf16 attention opens libcudnn.so.9) comes with PyTorch's wheel.
cudnn=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/build-gpu/lib:/usr/local/cuda/lib64${cudnn:+:$cudnn}:$nccl:${LD_LIBRARY_PATH:-}
export MASTER_ADDR=127.0.0.1 WORLD_SIZE=2
B=build-gpu; res=$OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c
