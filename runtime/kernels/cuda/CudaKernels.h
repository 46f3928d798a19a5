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

#include "Kernels.h"

#include <cstdint>

// The runtime's own declaration (driver_types.h), repeated so that this
// header does not need the CUDA include directory.
typedef struct CUstream_st *cudaStream_t;

namespace rondo::cuda {

using cpu::BinaryKind;
using cpu::CFView;
using cpu::FView;
using cpu::IView;
using cpu::kMaxRank;
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

/// How the matrix products (matmul, attention, linear cross-entropy) compute.
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

/// Destroys the calling thread's cuBLAS handles and workspaces (all devices).
/// Optional: they are also released when the thread exits. The caller must
/// make sure no enqueued work still uses them (e.g. synchronise first).
void releaseThreadResources();

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

void binary(BinaryKind kind, CFView a, CFView b, FView out);
void binaryBackward(BinaryKind kind, CFView a, CFView b, CFView dOut, FView dA,
                    FView dB);
void unary(UnaryKind kind, CFView x, FView out);
void unaryBackward(UnaryKind kind, CFView x, CFView dOut, FView dX);
void scale(CFView x, float scale, FView out);
void broadcastTo(CFView x, FView out);
void sumToShape(CFView x, FView out);

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

void transpose(CFView x, const int64_t *perm, FView out);
void slice(CFView x, const int64_t *starts, const int64_t *steps, FView out);
void sliceBackward(CFView dOut, const int64_t *starts, const int64_t *steps,
                   FView dX);
/// `inputs` is a host array of views (of device data).
void concat(const CFView *inputs, int numInputs, int axis, FView out);
/// See the header comment for out-of-range ids (`badId`: device int or null).
void gatherRows(CFView table, IView ids, FView out, int *badId = nullptr);
/// dTable += scatter of dOut rows; each destination row accumulates its ids in
/// index order (in double, from the existing value), via a stable sort.
void gatherRowsBackward(IView ids, CFView dOut, FView dTable);

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

/// As the CPU matmul; cuBLAS sgemm (TF32 off), one strided-batched call per
/// broadcast batch row, or one folded sgemm for x·W.
void matmul(CFView a, CFView b, FView out, bool transA, bool transB,
            bool accumulate = false);

//===----------------------------------------------------------------------===//
// Fused structures
//===----------------------------------------------------------------------===//

void softmax(CFView x, FView out);
void softmaxBackward(CFView y, CFView dY, FView dX);
void rmsNorm(CFView x, CFView w, float eps, FView y);
void rmsNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                     FView dW);
void layerNorm(CFView x, CFView w, CFView b, float eps, FView y);
void layerNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                       FView dW, FView dB);
void rotary(CFView x, CFView cos, CFView sin, FView y);
void rotaryBackward(CFView dY, CFView cos, CFView sin, FView dX);
void attention(CFView q, CFView k, CFView v, bool causal, float scale,
               FView out, FView lse);
void attentionBackward(CFView q, CFView k, CFView v, CFView out, CFView lse,
                       CFView dOut, bool causal, float scale, FView dQ,
                       FView dK, FView dV);

/// Losses: see the header comment. lossSum: device float (overwritten);
/// badLabel: device int or null (set to 1 on an invalid label, never cleared).
void linearCrossEntropy(CFView h, CFView w, bool transW, IView labels,
                        int64_t ignoreIndex, int64_t chunkRows,
                        float *lossSum, int *badLabel);
void linearCrossEntropyBackward(CFView h, CFView w, bool transW, IView labels,
                                int64_t ignoreIndex, int64_t chunkRows,
                                float gradScale, FView dH, FView dW);
void crossEntropy(CFView logits, IView labels, int64_t ignoreIndex,
                  float *lossSum, int *badLabel);
void crossEntropyBackward(CFView logits, IView labels, int64_t ignoreIndex,
                          float gradScale, FView dLogits);

//===----------------------------------------------------------------------===//
// Misc
//===----------------------------------------------------------------------===//

void fill(FView out, float value);
void copy(CFView x, FView out);
void accumulate(CFView x, FView out);
void roundToBf16(CFView x, FView out);

} // namespace rondo::cuda

#endif // RONDO_RUNTIME_KERNELS_CUDA_CUDAKERNELS_H
