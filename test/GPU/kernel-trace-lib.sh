# Sourced by the GPU run scripts: builds bench/kernel_trace.cpp (CUPTI) into
# $res/libkernel_trace.so and sets $trace_env, the environment that times a
# process's kernels with it (the last KERNEL_TRACE_LAST_MS of its GPU work,
# into $res/trace-<pid>.txt); and trace_label, which names each trace file
# by its process (trace-rondo-<pid>.txt for a trainer's, whose kernels are
# Rondo's, trace-torch-<pid>.txt for PyTorch's).
cuda=/usr/local/cuda
cupti=
for d in $cuda/extras/CUPTI/lib64 $cuda/lib64; do
  [ -e $d/libcupti.so ] && { cupti=$d; break; }
done
g++ -O2 -std=c++17 -shared -fPIC bench/kernel_trace.cpp -I$cuda/include \
  -I$cuda/extras/CUPTI/include -L$cupti -lcupti -Wl,-rpath,$cupti \
  -o $res/libkernel_trace.so || echo "kernel_trace: no build (CUPTI at '$cupti')"
trace_env=(CUDA_INJECTION64_PATH=$res/libkernel_trace.so
           KERNEL_TRACE_OUT=$res/trace-%p.txt
           KERNEL_TRACE_LAST_MS=${KERNEL_TRACE_LAST_MS:-4000})
trace_label() {
  for t in $res/trace-[0-9]*.txt; do
    [ -e "$t" ] || continue
    grep -q "_ZN5rondo" $t && kind=rondo || kind=torch
    [ $(wc -l < $t) -gt 20 ] && mv $t $res/trace-$kind-$(basename $t .txt | cut -d- -f2).txt
  done
}
