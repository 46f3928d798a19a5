//===- Kernels.h - CPU reference kernels for every tg op -------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One function per `tg` op (forward) and per gradient rule (backward). The
// compiler's C++ emitter calls these 1:1, and the host backend runs them on
// worker threads. Everything is fp32, row-major and contiguous; token ids and
// labels are int64.
//
// Determinism contract: every output element is produced by exactly one
// thread in a fixed order, so results are bitwise identical whatever the
// number of OpenMP threads or runtime workers. Reductions never split their
// reduced dimension across threads.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CPU_KERNELS_H
#define RONDO_RUNTIME_KERNELS_CPU_KERNELS_H

#include <cstdint>
#include <initializer_list>

namespace rondo::cpu {

constexpr int kMaxRank = 8;

/// A static shape. Rank 0 is a scalar with one element.
struct Shape {
  int rank = 0;
  int64_t dims[kMaxRank] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> list);
  Shape(const int64_t *values, int rank);
  int64_t numel() const;
  int64_t operator[](int i) const { return dims[i]; }
  bool operator==(const Shape &other) const;
};

/// A view of a contiguous row-major tensor; it never owns its data.
template <typename T> struct View {
  T *data = nullptr;
  Shape shape;
};
using FView = View<float>;
using CFView = View<const float>;
using IView = View<const int64_t>;

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

enum class BinaryKind { Add, Sub, Mul, Div, Pow, Max, Min };
enum class UnaryKind {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Sigmoid,
  Tanh,
  Relu,
  Silu,
  GeluTanh, // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  GeluErf,  // 0.5 x (1 + erf(x / sqrt(2)))
  Abs,
  Sin,
  Cos,
};

/// out = a (op) b with NumPy broadcasting: a.shape and b.shape broadcast to
/// out.shape (ranks right-aligned).
void binary(BinaryKind kind, CFView a, CFView b, FView out);
/// Gradients of `binary`: fills dA and/or dB (either may have data == nullptr
/// to skip) already reduced (summed over broadcast dimensions, in sumToShape's
/// order) to a.shape / b.shape. Max/Min give a tie's gradient to a; Pow's
/// gradient w.r.t. b is 0 where a <= 0 (ln a undefined).
void binaryBackward(BinaryKind kind, CFView a, CFView b, CFView dOut, FView dA,
                    FView dB);

void unary(UnaryKind kind, CFView x, FView out);
/// dX = dOut * f'(x).
void unaryBackward(UnaryKind kind, CFView x, CFView dOut, FView dX);

/// out = x * scale (shapes equal).
void scale(CFView x, float scale, FView out);

/// out[i] = x[i] broadcast to out.shape (NumPy rules). Also the gradient of
/// sumToShape.
void broadcastTo(CFView x, FView out);
/// out = x summed over the dimensions where out (right-aligned, missing
/// leading dims treated as 1) has extent 1 and x does not. Used for
/// reduce_sum with keepdims and for gradients of broadcasting ops. The
/// reduction order over the reduced elements is ascending index order.
void sumToShape(CFView x, FView out);

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

/// out = x permuted: out.shape[i] = x.shape[perm[i]].
void transpose(CFView x, const int64_t *perm, FView out);
/// out = x[starts[d] : starts[d] + out.shape[d] * steps[d] : steps[d]] for
/// every dimension d (steps may be negative, starts already normalised).
void slice(CFView x, const int64_t *starts, const int64_t *steps, FView out);
/// Gradient of slice: dX = 0 everywhere, dOut scattered into the sliced
/// positions.
void sliceBackward(CFView dOut, const int64_t *starts, const int64_t *steps,
                   FView dX);
/// out = concat(inputs, axis); a negative axis counts from the end.
void concat(const CFView *inputs, int numInputs, int axis, FView out);

/// out[i..., :] = table[ids[i...], :]. table is [rows, width]; out is
/// ids.shape + [width]. Negative ids count from the end (ONNX Gather); an id
/// outside [-rows, rows) aborts with a message (there is no error channel).
void gatherRows(CFView table, IView ids, FView out);
/// dTable += scatter of dOut rows into ids. Accumulates in index order of
/// `ids` for each destination row, so it is deterministic.
void gatherRowsBackward(IView ids, CFView dOut, FView dTable);

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

/// Batched matmul with NumPy batch broadcasting: a is [..., M, K] (or
/// [..., K, M] when transA), b is [..., K, N] (or [..., N, K] when transB),
/// out is [..., M, N]. Batch dimensions broadcast like `binary`. When
/// `accumulate` is set, out += a·b instead of out = a·b. OpenBLAS sgemm per
/// batch entry. A rank-1 operand follows NumPy (a: [K] as [1, K], b: [K] as
/// [K, 1], that dimension dropped from out; its trans flag is ignored).
void matmul(CFView a, CFView b, FView out, bool transA, bool transB,
            bool accumulate = false);

//===----------------------------------------------------------------------===//
// Fused structures
//===----------------------------------------------------------------------===//

/// Softmax over the last axis.
void softmax(CFView x, FView out);
/// dX = y * (dY - sum(dY * y)) over the last axis, y the softmax output.
void softmaxBackward(CFView y, CFView dY, FView dX);

/// RMSNorm over the last axis: y = x * rsqrt(mean(x^2) + eps) * w.
/// w has shape [D] (D = last dim of x); w.data may be null for no weight.
void rmsNorm(CFView x, CFView w, float eps, FView y);
/// Gradients of rmsNorm; dW (if data non-null) is overwritten (not
/// accumulated), summed over rows in ascending row order. dX may also have
/// null data to skip it.
void rmsNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                     FView dW);

/// LayerNorm over the last axis: y = (x - mean) * rsqrt(var + eps) * w + b.
/// w/b may have null data.
void layerNorm(CFView x, CFView w, CFView b, float eps, FView y);
/// dX, dW, dB: any may have null data to skip it; dW/dB are overwritten, summed
/// over rows in ascending row order.
void layerNormBackward(CFView x, CFView w, float eps, CFView dY, FView dX,
                       FView dW, FView dB);

/// Rotary embedding, Hugging Face "rotate_half" convention:
///   y = x * cos + rotate_half(x) * sin,
///   rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2]).
/// x is [B, H, T, D]; cos and sin are [T, D].
void rotary(CFView x, CFView cos, CFView sin, FView y);
void rotaryBackward(CFView dY, CFView cos, CFView sin, FView dX);

/// Scaled dot-product attention with grouped-query heads:
///   q [B, Hq, T, D], k and v [B, Hkv, S, D] with Hq % Hkv == 0; query head h
///   uses kv head h / (Hq / Hkv). out [B, Hq, T, D]; lse [B, Hq, T] receives
///   the log-sum-exp of each score row (for the backward). When causal,
///   query i attends keys j <= i + (S - T). A query row with no key to attend
///   (causal with S < T) gets out = 0 and lse = -inf. lse may have null data.
void attention(CFView q, CFView k, CFView v, bool causal, float scale,
               FView out, FView lse);
/// dQ, dK, dV overwritten (any may have null data to skip it). dK/dV sum the
/// contributions of the query heads of a group in ascending head order.
void attentionBackward(CFView q, CFView k, CFView v, CFView out, CFView lse,
                       CFView dOut, bool causal, float scale, FView dQ,
                       FView dK, FView dV);

/// Chunked cross-entropy from hidden states and a projection, never holding
/// more than `chunkRows` rows of logits:
///   logits = h · W  (W is [D, V]; or [V, D] when transW),
///   lossSum = sum over rows r with labels[r] != ignoreIndex of
///             logsumexp(logits[r]) - logits[r, labels[r]],
///   *count = number of such rows.
/// h is [N, D], labels [N]. Labels outside [0, V) other than ignoreIndex are
/// an error (returns false, *lossSum = 0, *count = 0). chunkRows <= 0 means
/// all N rows in one chunk.
bool linearCrossEntropy(CFView h, CFView w, bool transW, IView labels,
                        int64_t ignoreIndex, int64_t chunkRows,
                        double *lossSum, int64_t *count);
/// Gradient of (gradScale * lossSum): dH overwritten, dW overwritten (either
/// may be null to skip). Recomputes logits chunk by chunk. Rows with invalid
/// labels are treated as ignored (zero gradient).
void linearCrossEntropyBackward(CFView h, CFView w, bool transW, IView labels,
                                int64_t ignoreIndex, int64_t chunkRows,
                                float gradScale, FView dH, FView dW);

/// The same loss on given logits [N, V]. The backward overwrites dLogits
/// (zero rows for ignored or invalid labels).
bool crossEntropy(CFView logits, IView labels, int64_t ignoreIndex,
                  double *lossSum, int64_t *count);
void crossEntropyBackward(CFView logits, IView labels, int64_t ignoreIndex,
                          float gradScale, FView dLogits);

//===----------------------------------------------------------------------===//
// Misc
//===----------------------------------------------------------------------===//

void fill(FView out, float value);
void copy(CFView x, FView out);
/// out += x (same shape).
void accumulate(CFView x, FView out);
/// Writes bf16 rounding of fp32 values (round to nearest even) back as fp32,
/// used to emulate bf16 storage on the host.
void roundToBf16(CFView x, FView out);

} // namespace rondo::cpu

#endif // RONDO_RUNTIME_KERNELS_CPU_KERNELS_H
