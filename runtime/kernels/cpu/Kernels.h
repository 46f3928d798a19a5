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
/// A mutable integer tensor (the results of integer data movement, masks).
using MIView = View<int64_t>;
/// bf16 storage: each element is the upper 16 bits of an fp32 (bfloat16),
/// rounded to nearest even. GEMM operands on GPUs are stored this way
/// (kern-bf16-storage); every bf16 kernel computes in fp32.
using BView = View<uint16_t>;
using CBView = View<const uint16_t>;

//===----------------------------------------------------------------------===//
// Enumerations
//===----------------------------------------------------------------------===//

/// The enumerators as X-macro lists, so that the compiler's kernel table and
/// the interpreter read their names from here.
#define RONDO_BINARY_KINDS(X) X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Max) X(Min)
/// GeluTanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
/// GeluErf: 0.5 x (1 + erf(x / sqrt(2))).
// clang-format off
#define RONDO_UNARY_KINDS(X)                                                   \
  X(Neg) X(Exp) X(Log) X(Sqrt) X(Rsqrt) X(Reciprocal) X(Sigmoid) X(Tanh)       \
  X(Relu) X(Silu) X(GeluTanh) X(GeluErf) X(Abs) X(Sin) X(Cos)
// clang-format on
#define RONDO_ENUMERATOR(name) name,
enum class BinaryKind { RONDO_BINARY_KINDS(RONDO_ENUMERATOR) };
enum class UnaryKind { RONDO_UNARY_KINDS(RONDO_ENUMERATOR) };
#undef RONDO_ENUMERATOR

//===----------------------------------------------------------------------===//
// The kernels (KernelList.def: one list for this library, the CUDA library,
// the compiler's kernel table and the interpreter)
//===----------------------------------------------------------------------===//

#define RONDO_KERNEL(name, params) void name params;
#include "KernelList.def"

/// Defaults for hand-written callers (the list has none).
void matmul(CFView a, CFView b, FView out, bool transA, bool transB,
            bool accumulate = false);
void gatherRows(CFView table, IView ids, FView out, int *badId = nullptr);

/// The host's own forms of the losses, for callers that want the count of
/// non-ignored rows and an error result instead of a flag: return false on an
/// invalid label (*lossSum = 0, *count = 0).
bool crossEntropy(CFView logits, IView labels, int64_t ignoreIndex,
                  double *lossSum, int64_t *count);
bool linearCrossEntropy(CFView h, CFView w, bool transW, IView labels,
                        int64_t ignoreIndex, int64_t chunkRows, double *lossSum,
                        int64_t *count);

} // namespace rondo::cpu

#endif // RONDO_RUNTIME_KERNELS_CPU_KERNELS_H
