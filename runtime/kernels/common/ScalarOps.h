//===- ScalarOps.h - Formulas shared by the CPU and CUDA kernels -*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The per-element formulas and the shape rules that kernels/cpu and
// kernels/cuda both use, written once so that the two libraries cannot drift.
// The element functions are RONDO_HOST_DEVICE: plain inline functions in the
// CPU library, __host__ __device__ ones under nvcc. Both libraries compile
// them without FMA contraction (-ffp-contract=off, --fmad=false), so the
// arithmetic rounds the same on either side; the expression order here is
// part of that contract. The transcendental functions are the C library's
// float ones on the host and CUDA's on the device (they may differ by an ulp).
//
// The shape rules are host-only. They report a violated contract through
// `fail(format, args...)`, which each library maps to its own error path
// (the CPU aborts, CUDA throws), and return right after calling it.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_COMMON_SCALAROPS_H
#define RONDO_RUNTIME_KERNELS_COMMON_SCALAROPS_H

#include "Kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define RONDO_HOST_DEVICE __host__ __device__
#else
#define RONDO_HOST_DEVICE
#endif

namespace rondo::kernels {

using cpu::BinaryKind;
using cpu::kMaxRank;
using cpu::Shape;
using cpu::UnaryKind;

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

// NaN propagates from either side; a tie picks `a`.
RONDO_HOST_DEVICE inline bool pickMax(float a, float b) {
  return a != a || a >= b;
}
RONDO_HOST_DEVICE inline bool pickMin(float a, float b) {
  return a != a || a <= b;
}

RONDO_HOST_DEVICE inline float binaryFwd(BinaryKind k, float a, float b) {
  switch (k) {
  case BinaryKind::Add:
    return a + b;
  case BinaryKind::Sub:
    return a - b;
  case BinaryKind::Mul:
    return a * b;
  case BinaryKind::Div:
    return a / b;
  case BinaryKind::Pow:
    return powf(a, b);
  case BinaryKind::Max:
    return pickMax(a, b) ? a : b;
  case BinaryKind::Min:
    return pickMin(a, b) ? a : b;
  }
  return 0.0f;
}

/// Gradient of one element: writes the gradients w.r.t. a and b. Pow's
/// exponent gradient a^b ln(a) is 0 where a <= 0 (ln has no real value
/// there), so a constant exponent over non-positive bases yields no NaN.
RONDO_HOST_DEVICE inline void binaryGrad(BinaryKind k, float a, float b,
                                         float g, float &ga, float &gb) {
  switch (k) {
  case BinaryKind::Add:
    ga = g;
    gb = g;
    break;
  case BinaryKind::Sub:
    ga = g;
    gb = -g;
    break;
  case BinaryKind::Mul:
    ga = g * b;
    gb = g * a;
    break;
  case BinaryKind::Div:
    ga = g / b;
    gb = -g * a / (b * b);
    break;
  case BinaryKind::Pow:
    ga = b == 0.0f ? 0.0f : g * b * powf(a, b - 1.0f);
    gb = a > 0.0f ? g * powf(a, b) * logf(a) : 0.0f;
    break;
  case BinaryKind::Max: {
    bool toA = pickMax(a, b);
    ga = toA ? g : 0.0f;
    gb = toA ? 0.0f : g;
    break;
  }
  case BinaryKind::Min: {
    bool toA = pickMin(a, b);
    ga = toA ? g : 0.0f;
    gb = toA ? 0.0f : g;
    break;
  }
  }
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

constexpr float kSqrt2OverPi = 0.7978845608028654f; // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f; // 1 / sqrt(2 pi)

RONDO_HOST_DEVICE inline float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

RONDO_HOST_DEVICE inline float unaryFwd(UnaryKind k, float x) {
  switch (k) {
  case UnaryKind::Neg:
    return -x;
  case UnaryKind::Exp:
    return expf(x);
  case UnaryKind::Log:
    return logf(x);
  case UnaryKind::Sqrt:
    return sqrtf(x);
  case UnaryKind::Rsqrt:
    return 1.0f / sqrtf(x);
  case UnaryKind::Reciprocal:
    return 1.0f / x;
  case UnaryKind::Sigmoid:
    return sigmoid(x);
  case UnaryKind::Tanh:
    return tanhf(x);
  case UnaryKind::Relu:
    return x > 0.0f ? x : 0.0f;
  case UnaryKind::Silu:
    return x * sigmoid(x);
  case UnaryKind::GeluTanh:
    return 0.5f * x *
           (1.0f + tanhf(kSqrt2OverPi * (x + kGeluKappa * x * x * x)));
  case UnaryKind::GeluErf:
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  case UnaryKind::Abs:
    return fabsf(x);
  case UnaryKind::Sin:
    return sinf(x);
  case UnaryKind::Cos:
    return cosf(x);
  }
  return 0.0f;
}

/// dOut * f'(x).
RONDO_HOST_DEVICE inline float unaryBwd(UnaryKind k, float x, float g) {
  switch (k) {
  case UnaryKind::Neg:
    return -g;
  case UnaryKind::Exp:
    return g * expf(x);
  case UnaryKind::Log:
    return g / x;
  case UnaryKind::Sqrt:
    return g * 0.5f / sqrtf(x);
  case UnaryKind::Rsqrt: {
    float r = 1.0f / sqrtf(x);
    return g * -0.5f * r / x;
  }
  case UnaryKind::Reciprocal:
    return -g / (x * x);
  case UnaryKind::Sigmoid: {
    float s = sigmoid(x);
    return g * s * (1.0f - s);
  }
  case UnaryKind::Tanh: {
    float t = tanhf(x);
    return g * (1.0f - t * t);
  }
  case UnaryKind::Relu:
    return x > 0.0f ? g : 0.0f;
  case UnaryKind::Silu: {
    float s = sigmoid(x);
    return g * s * (1.0f + x * (1.0f - s));
  }
  case UnaryKind::GeluTanh: {
    // PyTorch's GeluBackward for approximate='tanh'.
    float xSq = x * x;
    float inner = kSqrt2OverPi * (x + kGeluKappa * xSq * x);
    float t = tanhf(inner);
    float left = 0.5f * x;
    float right = 1.0f + t;
    float leftDerivative = 0.5f * right;
    float rightDerivative =
        left * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluKappa * xSq);
    return g * (leftDerivative + rightDerivative);
  }
  case UnaryKind::GeluErf: {
    float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return g * (cdf + x * pdf);
  }
  case UnaryKind::Abs:
    return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f);
  case UnaryKind::Sin:
    return g * cosf(x);
  case UnaryKind::Cos:
    return -g * sinf(x);
  }
  return 0.0f;
}

//===----------------------------------------------------------------------===//
// Gated activation (tg.gated_act): the unary and binary formulas composed,
// so the fused kernels round exactly as the composition of kernels did
//===----------------------------------------------------------------------===//

/// act(gate) * up.
RONDO_HOST_DEVICE inline float gatedFwd(UnaryKind k, float gate, float up) {
  return binaryFwd(BinaryKind::Mul, unaryFwd(k, gate), up);
}
/// d gate = act'(gate) * (dy * up).
RONDO_HOST_DEVICE inline float gatedBwdGate(UnaryKind k, float gate, float up,
                                            float dy) {
  return unaryBwd(k, gate, binaryFwd(BinaryKind::Mul, dy, up));
}
/// d up = dy * act(gate).
RONDO_HOST_DEVICE inline float gatedBwdUp(UnaryKind k, float gate, float dy) {
  return binaryFwd(BinaryKind::Mul, dy, unaryFwd(k, gate));
}
/// Both: gatedBwdGate and gatedBwdUp, the same bits, with SiLU's sigmoid
/// computed once (a memory-bound kernel's arithmetic halved; the two calls
/// each evaluate it, and a runtime kind keeps the compiler from sharing it).
RONDO_HOST_DEVICE inline void gatedBwdBoth(UnaryKind k, float gate, float up,
                                           float dy, float &dGate, float &dUp) {
  if (k == UnaryKind::Silu) {
    float s = sigmoid(gate);
    float g = binaryFwd(BinaryKind::Mul, dy, up);
    dGate = g * s * (1.0f + gate * (1.0f - s));     // unaryBwd's Silu
    dUp = binaryFwd(BinaryKind::Mul, dy, gate * s); // unaryFwd's Silu
    return;
  }
  dGate = gatedBwdGate(k, gate, up, dy);
  dUp = gatedBwdUp(k, gate, dy);
}

//===----------------------------------------------------------------------===//
// bf16 storage (host only: the device rounds with cuda_bf16.h's _rn
// conversions, which give the same bits)
//===----------------------------------------------------------------------===//

/// The bf16 bits of f, rounded to nearest even; a NaN stays a quiet NaN.
inline uint16_t floatToBf16Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((bits >> 16) | 0x40u);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/// The float whose upper 16 bits are h (exact).
inline float bf16BitsToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

//===----------------------------------------------------------------------===//
// Shape rules (host only)
//===----------------------------------------------------------------------===//

/// Row-major strides of `shape`.
inline void contiguousStrides(const Shape &shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape.dims[i];
  }
}

/// Element strides of `in` read as a broadcast operand of `out`: 0 along the
/// dimensions it is broadcast in (NumPy rules, aligned at the innermost).
template <typename Fail>
void broadcastStrides(const Shape &in, const Shape &out, int64_t *strides,
                      Fail &&fail) {
  if (in.rank > out.rank) {
    fail("cannot broadcast rank %d to rank %d", in.rank, out.rank);
    return;
  }
  int64_t inStrides[kMaxRank];
  contiguousStrides(in, inStrides);
  int shift = out.rank - in.rank;
  for (int d = 0; d < out.rank; ++d) {
    int64_t extent = d >= shift ? in.dims[d - shift] : 1;
    if (extent == out.dims[d] && extent != 1) {
      strides[d] = inStrides[d - shift];
    } else if (extent == 1) {
      strides[d] = 0;
    } else {
      fail("cannot broadcast extent %lld to %lld (dim %d)", (long long)extent,
           (long long)out.dims[d], d);
      return;
    }
  }
}

/// The sizes of matmul(a, b) -> out: a [.., M, K] (or [K], read as [1, K])
/// times b [.., K, N] (or [K], read as [K, 1]), and the batch dimensions of
/// each (all but the matrix ones). A vector operand is never transposed: its
/// flag is cleared.
struct MatmulSizes {
  int64_t M = 0, K = 0, N = 0;
  Shape outBatch, aBatch, bBatch;
};
template <typename Fail>
MatmulSizes matmulSizes(const Shape &as, const Shape &bs, const Shape &os,
                        bool &transA, bool &transB, Fail &&fail) {
  MatmulSizes s;
  int ra = as.rank, rb = bs.rank;
  if (ra < 1 || rb < 1) {
    fail("operands must have rank >= 1");
    return s;
  }
  int64_t Kb;
  if (ra == 1) {
    s.M = 1;
    s.K = as.dims[0];
    transA = false;
  } else {
    s.M = transA ? as.dims[ra - 1] : as.dims[ra - 2];
    s.K = transA ? as.dims[ra - 2] : as.dims[ra - 1];
  }
  if (rb == 1) {
    s.N = 1;
    Kb = bs.dims[0];
    transB = false;
  } else {
    Kb = transB ? bs.dims[rb - 1] : bs.dims[rb - 2];
    s.N = transB ? bs.dims[rb - 2] : bs.dims[rb - 1];
  }
  if (s.K != Kb) {
    fail("contraction sizes differ (%lld vs %lld)", (long long)s.K,
         (long long)Kb);
    return s;
  }
  int matDims = (ra > 1 ? 1 : 0) + (rb > 1 ? 1 : 0);
  if (os.rank < matDims) {
    fail("output rank %d too small", os.rank);
    return s;
  }
  if ((ra > 1 && rb > 1 &&
       (os.dims[os.rank - 2] != s.M || os.dims[os.rank - 1] != s.N)) ||
      (ra > 1 && rb == 1 && os.dims[os.rank - 1] != s.M) ||
      (ra == 1 && rb > 1 && os.dims[os.rank - 1] != s.N)) {
    fail("output shape does not match operands");
    return s;
  }
  s.outBatch = Shape(os.dims, os.rank - matDims);
  s.aBatch = Shape(as.dims, ra > 2 ? ra - 2 : 0);
  s.bBatch = Shape(bs.dims, rb > 2 ? rb - 2 : 0);
  return s;
}

/// The sizes of expertMatmul(x, w, ids) -> out: x [N, K], w [E, K, M]
/// ([E, M, K] when transW), ids [N], out [N, M]; also expertMatmulWeightGrad
/// (x, dY = out, ids) -> dW = w.
struct ExpertSizes {
  int64_t N = 0, K = 0, M = 0, E = 0;
};
template <typename Fail>
ExpertSizes expertSizes(const Shape &x, const Shape &w, const Shape &ids,
                        const Shape &out, bool transW, Fail &&fail) {
  ExpertSizes s;
  if (x.rank != 2 || w.rank != 3 || out.rank != 2 || ids.numel() != x.dims[0]) {
    fail("expects x [N, K], w [E, K, M] (or [E, M, K]), ids [N], out [N, M]");
    return s;
  }
  s.N = x.dims[0];
  s.K = x.dims[1];
  s.E = w.dims[0];
  s.M = transW ? w.dims[1] : w.dims[2];
  if ((transW ? w.dims[2] : w.dims[1]) != s.K || out.dims[0] != s.N ||
      out.dims[1] != s.M) {
    fail("shapes do not match: x [%lld, %lld], w [%lld, %lld, %lld], out "
         "[%lld, %lld]",
         (long long)x.dims[0], (long long)x.dims[1], (long long)w.dims[0],
         (long long)w.dims[1], (long long)w.dims[2], (long long)out.dims[0],
         (long long)out.dims[1]);
    return s;
  }
  return s;
}

/// The sizes of topK(x) -> values, indices: rows of x's last dimension D,
/// k the last dimension of values (= indices), 1 <= k <= D.
struct TopKSizes {
  int64_t rows = 0, D = 0, k = 0;
};
template <typename Fail>
TopKSizes topKSizes(const Shape &x, const Shape &values, const Shape &indices,
                    Fail &&fail) {
  TopKSizes s;
  if (x.rank < 1 || values.rank != x.rank || !(values == indices)) {
    fail("values and indices must have x's rank and one shape");
    return s;
  }
  s.D = x.dims[x.rank - 1];
  s.k = values.dims[x.rank - 1];
  for (int d = 0; d + 1 < x.rank; ++d)
    if (values.dims[d] != x.dims[d]) {
      fail("values differ from x in dimension %d", d);
      return s;
    }
  if (s.k < 1 || s.k > s.D) {
    fail("k = %lld must be in [1, %lld]", (long long)s.k, (long long)s.D);
    return s;
  }
  s.rows = s.D ? x.numel() / s.D : 0;
  return s;
}

/// The strides by which transpose(x, perm) -> a rank `rank` output reads x
/// (contiguous), by output dimension.
inline void transposeStrides(const Shape &x, const int64_t *perm, int rank,
                             int64_t *strides) {
  int64_t xStrides[kMaxRank];
  contiguousStrides(x, xStrides);
  for (int i = 0; i < rank; ++i)
    strides[i] = xStrides[perm[i]];
}

/// Where slice(x, starts, steps) reads x (contiguous): writes the stride of
/// each dimension and returns the offset of the first element.
inline int64_t sliceStrides(const Shape &x, const int64_t *starts,
                            const int64_t *steps, int64_t *strides) {
  int64_t xStrides[kMaxRank];
  contiguousStrides(x, xStrides);
  int64_t base = 0;
  for (int d = 0; d < x.rank; ++d) {
    base += starts[d] * xStrides[d];
    strides[d] = steps[d] * xStrides[d];
  }
  return base;
}

/// concat's output along `axis`: `outer` rows of `outRow` elements, each row
/// the inputs' chunks of (their extent along the axis) * `inner` in turn.
/// Empty (outer 0) after a failure.
struct ConcatRows {
  int64_t outer = 0, inner = 1, outRow = 0;
};
template <typename Fail>
ConcatRows concatRows(const Shape &out, int &axis, Fail &&fail) {
  ConcatRows r;
  int rank = out.rank;
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank) {
    fail("axis %d out of range for rank %d", axis, rank);
    return r;
  }
  r.outer = 1;
  for (int d = 0; d < axis; ++d)
    r.outer *= out.dims[d];
  for (int d = axis + 1; d < rank; ++d)
    r.inner *= out.dims[d];
  r.outRow = out.dims[axis] * r.inner;
  return r;
}

/// sumToShape's iteration plan for a contiguous x summed to shape `os`: each
/// non-unit dimension of x is kept (as in `os`) or reduced (1 in `os`), and
/// adjacent dimensions of one class merge into one run (contiguous, as x is).
/// Fills `kept` and `reduced` (the libraries' odometers: rank, dims[],
/// strides[], starting empty) with those runs and their strides in x.
/// Returns whether the innermost run is a kept one.
template <typename Odometer, typename Fail>
bool splitSumDims(const Shape &xs, const Shape &os, Odometer &kept,
                  Odometer &reduced, Fail &&fail) {
  int64_t xStrides[kMaxRank];
  contiguousStrides(xs, xStrides);
  int shift = xs.rank - os.rank;
  int lastClass = -1; // 0 kept, 1 reduced
  for (int d = 0; d < xs.rank; ++d) {
    int64_t o = d >= shift ? os.dims[d - shift] : 1;
    int64_t e = xs.dims[d];
    if (e == 1) {
      if (o != 1) {
        fail("cannot reduce extent 1 to %lld", (long long)o);
        return false;
      }
      continue;
    }
    int cls;
    if (o == e) {
      cls = 0;
    } else if (o == 1) {
      cls = 1;
    } else {
      fail("cannot reduce extent %lld to %lld", (long long)e, (long long)o);
      return false;
    }
    Odometer &od = cls == 0 ? kept : reduced;
    if (cls == lastClass) {
      od.dims[od.rank - 1] *= e;
      od.strides[od.rank - 1] = xStrides[d];
    } else {
      od.dims[od.rank] = e;
      od.strides[od.rank] = xStrides[d];
      ++od.rank;
    }
    lastClass = cls;
  }
  return lastClass == 0;
}

} // namespace rondo::kernels

#endif // RONDO_RUNTIME_KERNELS_COMMON_SCALAROPS_H
