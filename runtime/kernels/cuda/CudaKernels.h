//===- CudaKernels.h - CUDA twins of the CPU kernels ------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA kernel library: one function per function of the CPU library
// (runtime/kernels/cpu/Kernels.h), with the same names, the same view types
// and the same semantics, fp32 throughout. The pointers inside every view are
// DEVICE pointers of the current device; shapes and other arguments live on
// the host.
//
// Execution: every function only enqueues work on the calling thread's
// current stream (setCurrentStream; the legacy default stream until set) and
// returns. No function synchronises the device or the stream, and none reads
// device data on the host. Temporaries come from the stream-ordered allocator
// (cudaMallocAsync / cudaFreeAsync on the current stream). cuBLAS handles and
// their workspaces are created lazily, one per (thread, device), and bound to
// the current stream at each call.
//
// Errors: every CUDA and cuBLAS call is checked; a failure, a launch error or
// a contract violation (shapes that do not fit) throws std::runtime_error
// naming the call, the kernel and the device. Errors of earlier asynchronous
// work may surface at any later call.
//
// Determinism: results are bitwise reproducible run to run and depend only on
// the inputs (and the GPU model). There are no floating-point atomics; every
// reduction has a fixed order or tree that depends only on the shapes. Row
// statistics are carried in double as on the CPU. matmul uses cuBLAS sgemm
// with TF32 disabled and a fixed workspace. Results match the CPU library to
// about 1e-6 relative (max-abs normalised), not bitwise.
//
// Differences from the CPU library:
//  - crossEntropy / linearCrossEntropy cannot return to the host: the loss sum
//    over non-ignored rows is written to the device float *lossSum (0 when a
//    label is invalid, as on the CPU), and *badLabel (device int, may be null)
//    is set to 1 when some label is neither ignoreIndex nor in [0, V). The
//    flag is only ever set, never cleared: the caller zeroes it, and may let
//    several calls share one flag. The count of non-ignored rows is a function
//    of the labels only and is left to the caller.
//  - gatherRows cannot abort on an out-of-range id: the output row of such an
//    id is filled with NaN and, when `badId` is non-null, *badId (device int)
//    is set to 1. gatherRowsBackward skips out-of-range ids.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
#define RONDO_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H

#include "AdamWTypes.h"
#include "Kernels.h"

#include <cstdint>

// The runtime's own declaration (driver_types.h), repeated so that this
// header does not need the CUDA include directory.
typedef struct CUstream_st *cudaStream_t;

namespace rondo::cuda {

using cpu::BinaryKind;
using cpu::BView;
using cpu::CBView;
using cpu::CFView;
using cpu::FView;
using cpu::IView;
using cpu::kMaxRank;
using cpu::MIView;
using cpu::Shape;
using cpu::UnaryKind;
using cpu::View;

//===----------------------------------------------------------------------===//
// Execution context
//===----------------------------------------------------------------------===//

/// Sets the stream on which this thread's subsequent kernels are enqueued
/// (nullptr: the legacy default stream). The stream must belong to the
/// device that is current (cudaSetDevice) when the kernels are called.
void setCurrentStream(cudaStream_t stream);
/// This thread's current stream.
cudaStream_t currentStream();

/// RAII: makes `stream` current for the scope, restoring the previous one.
class StreamGuard {
public:
  explicit StreamGuard(cudaStream_t stream) : previous_(currentStream()) {
    setCurrentStream(stream);
  }
  ~StreamGuard() { setCurrentStream(previous_); }
  StreamGuard(const StreamGuard &) = delete;
  StreamGuard &operator=(const StreamGuard &) = delete;

private:
  cudaStream_t previous_;
};

/// How the matrix products (matmul, attention, linear cross-entropy, the
/// experts' products) compute.
/// Storage is fp32 either way.
///  - Fp32: fp32 inputs and accumulation (cuBLAS sgemm, TF32 off); matches the
///    CPU library to about 1e-6.
///  - Bf16: inputs rounded to bf16 (round to nearest even) on their way into
///    the tensor cores, fp32 accumulation; matches the CPU library to about
///    1e-2. Still deterministic run to run.
enum class Precision { Fp32, Bf16 };
/// Process-wide; set it before any kernel is enqueued (not synchronised with
/// work in flight).
void setPrecision(Precision precision);
Precision precision();

/// Which implementation ran an attention or attentionBackward call: the fp32
/// kernels (Attention.cu), Rondo's bf16 kernels (FlashAttention.cu) or
/// cuDNN's fused attention (CudnnAttention.cu). The bf16 path takes cuDNN
/// on compute capability 9.0 where libcudnn.so.9 loads and accepts the case
/// (head dimension 64 or 128, no sinks, causal only with S >= T), and
/// Rondo's kernels otherwise; RONDO_ATTENTION=flash keeps Rondo's kernels.
enum class AttentionImpl { None, Fp32, Flash, Cudnn };
/// The implementation of the calling thread's last attention call (tests
/// check which path a case took).
AttentionImpl lastAttentionImpl();
/// Null when cuDNN's attention can run on the current device; otherwise
/// why not (library missing, older than 9.0, not compute capability 9.0).
/// Loads the library on first use.
const char *cudnnAttentionUnavailable();

/// The device sort behind the experts' bf16 products (tests compare it with
/// a host stable counting sort): offsets [experts + 1], perm [n] (positions
/// below offsets[experts] written: the rows of each expert in ascending
/// order) and *bad (rows whose id is outside [0, experts)), all device int32.
void expertSortForTesting(const int64_t *ids, int64_t n, int64_t experts,
                          int32_t *offsets, int32_t *perm, int32_t *bad);

/// Destroys the calling thread's cuBLAS handles and workspaces (all devices).
/// Optional: they are also released when the thread exits. The caller must
/// make sure no enqueued work still uses them (e.g. synchronise first).
void releaseThreadResources();

//===----------------------------------------------------------------------===//
// The kernels: runtime/kernels/cpu/KernelList.def, documented there
//===----------------------------------------------------------------------===//

#define RONDO_KERNEL(name, params) void name params;
#include "KernelList.def"

/// Defaults for hand-written callers (the list has none).
void matmul(CFView a, CFView b, FView out, bool transA, bool transB,
            bool accumulate = false);
void gatherRows(CFView table, IView ids, FView out, int *badId = nullptr);

//===----------------------------------------------------------------------===//
// Optimizer math on device-resident state (Optimizer.cu)
//===----------------------------------------------------------------------===//
//
// The host optimizer's functions (runtime/src/AdamW.cpp, rondo::rt) for
// optimizer state and gradients that live on the GPU; the CUDA DeviceOps
// calls them. They take the host optimizer's descriptions (AdamWTypes.h,
// beside the CPU kernels' header, so that this library does not depend on the
// runtime's headers). Pointers are device pointers of the current device; the
// arrays of descriptors are host arrays.
//
// Unlike the kernels above, gradNormPartials and allFinite return results to
// the host: they synchronise the current stream before returning.

using rondo::AdamWConfig;
using rondo::AdamWTensor;

/// rt::adamwUpdate bit for bit: one AdamW step (number `step` >= 1) of every
/// tensor, fused into one kernel launch for up to 512 tensors.
void adamwUpdate(const AdamWTensor *tensors, size_t count,
                 const AdamWConfig &hyper, double lr, int64_t step);

/// n floats at data, in device memory.
struct FloatSpan {
  const float *data = nullptr;
  int64_t n = 0;
};

/// gradNormPartials of every span in one launch and one synchronisation:
/// span k's partials follow span k - 1's in the HOST array (ceil(n_k /
/// blockElems) each), with exactly the bits gradNormPartials gives it.
void gradNormPartialsMany(const FloatSpan *spans, size_t count,
                          int64_t blockElems, double *partials);

/// The index of the first span holding a NaN or an infinity, or -1, in one
/// launch and one synchronisation.
int firstNonFiniteSpan(const FloatSpan *spans, size_t count);

/// The squares of data[0, n) summed in double per block of `blockElems`
/// elements, into the HOST array partials[ceil(n / blockElems)]. The order
/// of the additions within a block differs from rt::gradNormPartials (a
/// fixed tree over the block's threads), so the partials agree with the
/// host's to about 1e-15 relative, not bitwise; they depend only on the data,
/// n and blockElems (not on the alignment of `data`) and are the same run to
/// run. Synchronises the current stream.
void gradNormPartials(const float *data, int64_t n, int64_t blockElems,
                      double *partials);

/// Whether no element of data[0, n) is NaN or infinite. Synchronises the
/// current stream.
bool allFinite(const float *data, int64_t n);

/// data[i] = data[i] * factor (gradient clipping; scale, in place).
void scaleInPlace(float *data, int64_t n, float factor);

/// sum[i] = parts[0][i] + parts[1][i] + ... + parts[count - 1][i], added in
/// that order in fp32 (as the host's sequential sum). `parts` is a host array
/// of device pointers; `sum` may be parts[0]. Nothing happens for
/// count <= 0.
void sumParts(float *sum, const float *const *parts, int32_t count, int64_t n);

} // namespace rondo::cuda

#endif // RONDO_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
