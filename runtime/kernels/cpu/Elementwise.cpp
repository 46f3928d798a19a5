//===- Elementwise.cpp - Elementwise, broadcast and reduce kernels --------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Each op is a small functor instantiated into a loop template, so the switch
// on the op kind happens once per call and the inner loops stay simple enough
// to vectorise. Inner loops are specialised on the operands' innermost
// strides (1 or 0) because that is where broadcasting costs or keeps
// vectorisation.
//
// binaryBackward materialises the full-size gradient of a broadcast operand
// and then calls sumToShape, so the summation order of a broadcast gradient
// is by construction exactly that of sumToShape (ascending index order).
// sumToShape accumulates in double.
//
// Pow's exponent gradient a^b ln(a) is defined as 0 where a <= 0 (ln has no
// real value there; PyTorch also returns 0 for a == 0, b >= 0), which keeps a
// constant exponent with non-positive bases from producing NaNs. Max/Min send
// the gradient of a tie to `a`.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace rondo::cpu {

using detail::BroadcastSpace;
using detail::parallelBlocks;

namespace {

constexpr int64_t kBlock = 4096;

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

/// The formula of kind K (ScalarOps.h) as a functor: the switch on the kind
/// resolves at compile time and the loops below stay vectorisable.
template <BinaryKind K> struct BinaryOp {
  static float apply(float a, float b) { return kernels::binaryFwd(K, a, b); }
};

template <typename Op>
void binaryLoop(const float *a, int64_t sa, const float *b, int64_t sb,
                float *out, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i)
      out[i] = Op::apply(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    float bv = b[0];
    for (int64_t i = 0; i < n; ++i)
      out[i] = Op::apply(a[i], bv);
  } else if (sa == 0 && sb == 1) {
    float av = a[0];
    for (int64_t i = 0; i < n; ++i)
      out[i] = Op::apply(av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      out[i] = Op::apply(a[i * sa], b[i * sb]);
  }
}

/// Runs fn(offsets, n) over every inner row of `space`, where offsets[op] is
/// the element offset of operand op at the row start and n the row length.
/// Long single rows are split into fixed blocks.
template <typename Fn> void forEachRow(const BroadcastSpace &space, Fn &&fn) {
  int64_t inner = space.inner();
  int64_t rows = space.rows();
  if (inner == 0 || rows == 0)
    return;
  if (rows == 1) {
    parallelBlocks(inner, kBlock, 1, [&](int64_t lo, int64_t hi) {
      int64_t offsets[BroadcastSpace::kMaxOperands];
      for (int op = 0; op < space.numOperands; ++op)
        offsets[op] = lo * space.innerStride(op);
      fn(offsets, hi - lo);
    });
    return;
  }
  int64_t rowsPerBlock = std::max<int64_t>(1, kBlock / inner);
  parallelBlocks(rows, rowsPerBlock, inner, [&](int64_t lo, int64_t hi) {
    int64_t offsets[BroadcastSpace::kMaxOperands];
    for (int64_t r = lo; r < hi; ++r) {
      space.rowOffsets(r, offsets);
      fn(offsets, inner);
    }
  });
}

template <typename Op> void runBinary(CFView a, CFView b, FView out) {
  Shape inputs[2] = {a.shape, b.shape};
  BroadcastSpace space(out.shape, inputs, 2);
  int64_t sa = space.innerStride(1), sb = space.innerStride(2);
  forEachRow(space, [&](const int64_t *off, int64_t n) {
    binaryLoop<Op>(a.data + off[1], sa, b.data + off[2], sb, out.data + off[0],
                   n);
  });
}

template <BinaryKind K>
void runBinaryBackward(CFView a, CFView b, CFView dOut, FView dA, FView dB) {
  int64_t n = dOut.shape.numel();
  bool wantA = dA.data != nullptr, wantB = dB.data != nullptr;
  // Operands that were not broadcast get their gradient written directly.
  bool fullA = a.shape.numel() == n, fullB = b.shape.numel() == n;
  std::vector<float> tmpA, tmpB;
  float *ga = nullptr, *gb = nullptr;
  if (wantA) {
    if (!fullA)
      tmpA.resize(size_t(n));
    ga = fullA ? dA.data : tmpA.data();
  }
  if (wantB) {
    if (!fullB)
      tmpB.resize(size_t(n));
    gb = fullB ? dB.data : tmpB.data();
  }
  if (n > 0) {
    Shape inputs[2] = {a.shape, b.shape};
    BroadcastSpace space(dOut.shape, inputs, 2);
    int64_t sa = space.innerStride(1), sb = space.innerStride(2);
    forEachRow(space, [&](const int64_t *off, int64_t len) {
      const float *pa = a.data + off[1];
      const float *pb = b.data + off[2];
      const float *pg = dOut.data + off[0];
      for (int64_t i = 0; i < len; ++i) {
        float da, db;
        kernels::binaryGrad(K, pa[i * sa], pb[i * sb], pg[i], da, db);
        if (ga)
          ga[off[0] + i] = da;
        if (gb)
          gb[off[0] + i] = db;
      }
    });
  }
  if (wantA && !fullA)
    sumToShape(CFView{tmpA.data(), dOut.shape}, dA);
  if (wantB && !fullB)
    sumToShape(CFView{tmpB.data(), dOut.shape}, dB);
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

template <UnaryKind K> void runUnary(const float *x, float *out, int64_t n) {
  parallelBlocks(n, kBlock, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out[i] = kernels::unaryFwd(K, x[i]);
  });
}

template <UnaryKind K>
void runUnaryBackward(const float *x, const float *g, float *dx, int64_t n) {
  parallelBlocks(n, kBlock, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      dx[i] = kernels::unaryBwd(K, x[i], g[i]);
  });
}

/// Calls fn(std::integral_constant<UnaryKind, kind>) for a runtime kind.
template <typename Fn> void dispatchUnary(UnaryKind kind, Fn &&fn) {
#define RONDO_UNARY_CASE(K)                                                    \
  case UnaryKind::K:                                                           \
    fn(std::integral_constant<UnaryKind, UnaryKind::K>());                     \
    return;
  switch (kind) {
    RONDO_UNARY_CASE(Neg)
    RONDO_UNARY_CASE(Exp)
    RONDO_UNARY_CASE(Log)
    RONDO_UNARY_CASE(Sqrt)
    RONDO_UNARY_CASE(Rsqrt)
    RONDO_UNARY_CASE(Reciprocal)
    RONDO_UNARY_CASE(Sigmoid)
    RONDO_UNARY_CASE(Tanh)
    RONDO_UNARY_CASE(Relu)
    RONDO_UNARY_CASE(Silu)
    RONDO_UNARY_CASE(GeluTanh)
    RONDO_UNARY_CASE(GeluErf)
    RONDO_UNARY_CASE(Abs)
    RONDO_UNARY_CASE(Sin)
    RONDO_UNARY_CASE(Cos)
  }
#undef RONDO_UNARY_CASE
  detail::fatal("unknown unary kind %d", int(kind));
}

//===----------------------------------------------------------------------===//
// sumToShape
//===----------------------------------------------------------------------===//

/// Iterates a set of dimensions in lexicographic (ascending index) order,
/// tracking the element offset.
struct Odometer {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int64_t idx[kMaxRank] = {};
  int64_t offset = 0;

  void reset() {
    for (int d = 0; d < rank; ++d)
      idx[d] = 0;
    offset = 0;
  }
  /// Advances to the next index; returns false after the last one.
  bool next() {
    for (int d = rank - 1; d >= 0; --d) {
      offset += strides[d];
      if (++idx[d] < dims[d])
        return true;
      offset -= strides[d] * dims[d];
      idx[d] = 0;
    }
    return false;
  }
};

} // namespace

void binary(BinaryKind kind, CFView a, CFView b, FView out) {
  if (out.shape.numel() == 0)
    return;
  switch (kind) {
  case BinaryKind::Add:
    return runBinary<BinaryOp<BinaryKind::Add>>(a, b, out);
  case BinaryKind::Sub:
    return runBinary<BinaryOp<BinaryKind::Sub>>(a, b, out);
  case BinaryKind::Mul:
    return runBinary<BinaryOp<BinaryKind::Mul>>(a, b, out);
  case BinaryKind::Div:
    return runBinary<BinaryOp<BinaryKind::Div>>(a, b, out);
  case BinaryKind::Pow:
    return runBinary<BinaryOp<BinaryKind::Pow>>(a, b, out);
  case BinaryKind::Max:
    return runBinary<BinaryOp<BinaryKind::Max>>(a, b, out);
  case BinaryKind::Min:
    return runBinary<BinaryOp<BinaryKind::Min>>(a, b, out);
  }
  detail::fatal("unknown binary kind %d", int(kind));
}

void binaryBackward(BinaryKind kind, CFView a, CFView b, CFView dOut, FView dA,
                    FView dB) {
  switch (kind) {
  case BinaryKind::Add:
    return runBinaryBackward<BinaryKind::Add>(a, b, dOut, dA, dB);
  case BinaryKind::Sub:
    return runBinaryBackward<BinaryKind::Sub>(a, b, dOut, dA, dB);
  case BinaryKind::Mul:
    return runBinaryBackward<BinaryKind::Mul>(a, b, dOut, dA, dB);
  case BinaryKind::Div:
    return runBinaryBackward<BinaryKind::Div>(a, b, dOut, dA, dB);
  case BinaryKind::Pow:
    return runBinaryBackward<BinaryKind::Pow>(a, b, dOut, dA, dB);
  case BinaryKind::Max:
    return runBinaryBackward<BinaryKind::Max>(a, b, dOut, dA, dB);
  case BinaryKind::Min:
    return runBinaryBackward<BinaryKind::Min>(a, b, dOut, dA, dB);
  }
  detail::fatal("unknown binary kind %d", int(kind));
}

void unary(UnaryKind kind, CFView x, FView out) {
  int64_t n = x.shape.numel();
  dispatchUnary(
      kind, [&](auto k) { runUnary<decltype(k)::value>(x.data, out.data, n); });
}

void unaryBackward(UnaryKind kind, CFView x, CFView dOut, FView dX) {
  int64_t n = x.shape.numel();
  dispatchUnary(kind, [&](auto k) {
    runUnaryBackward<decltype(k)::value>(x.data, dOut.data, dX.data, n);
  });
}

void gatedAct(UnaryKind kind, CFView gate, CFView up, FView out) {
  if (!(gate.shape == up.shape) || !(gate.shape == out.shape))
    detail::contract("gatedAct", "gate, up and out must have one shape");
  int64_t n = out.shape.numel();
  dispatchUnary(kind, [&](auto k) {
    parallelBlocks(n, kBlock, 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        out.data[i] =
            kernels::gatedFwd(decltype(k)::value, gate.data[i], up.data[i]);
    });
  });
}

void gatedActBackward(UnaryKind kind, CFView gate, CFView up, CFView dOut,
                      FView dGate, FView dUp) {
  if (!(gate.shape == up.shape) || !(gate.shape == dOut.shape))
    detail::contract("gatedActBackward",
                     "gate, up and dOut must have one shape");
  int64_t n = dOut.shape.numel();
  dispatchUnary(kind, [&](auto k) {
    constexpr UnaryKind K = decltype(k)::value;
    parallelBlocks(n, kBlock, 8, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        if (dGate.data)
          dGate.data[i] =
              kernels::gatedBwdGate(K, gate.data[i], up.data[i], dOut.data[i]);
        if (dUp.data)
          dUp.data[i] = kernels::gatedBwdUp(K, gate.data[i], dOut.data[i]);
      }
    });
  });
}

void scale(CFView x, float s, FView out) {
  parallelBlocks(x.shape.numel(), kBlock, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out.data[i] = x.data[i] * s;
  });
}

void broadcastTo(CFView x, FView out) {
  if (out.shape.numel() == 0)
    return;
  BroadcastSpace space(out.shape, &x.shape, 1);
  int64_t sx = space.innerStride(1);
  forEachRow(space, [&](const int64_t *off, int64_t n) {
    const float *src = x.data + off[1];
    float *dst = out.data + off[0];
    if (sx == 1) {
      std::memcpy(dst, src, size_t(n) * sizeof(float));
    } else if (sx == 0) {
      float v = src[0];
      for (int64_t i = 0; i < n; ++i)
        dst[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i)
        dst[i] = src[i * sx];
    }
  });
}

void select(IView cond, CFView a, CFView b, FView out) {
  if (out.shape.numel() == 0)
    return;
  Shape inputs[3] = {cond.shape, a.shape, b.shape};
  BroadcastSpace space(out.shape, inputs, 3);
  int64_t sc = space.innerStride(1), sa = space.innerStride(2),
          sb = space.innerStride(3);
  forEachRow(space, [&](const int64_t *off, int64_t n) {
    const int64_t *pc = cond.data + off[1];
    const float *pa = a.data + off[2], *pb = b.data + off[3];
    float *po = out.data + off[0];
    for (int64_t i = 0; i < n; ++i)
      po[i] = pc[i * sc] ? pa[i * sa] : pb[i * sb];
  });
}

void clamp(CFView x, float lo, float hi, FView out) {
  parallelBlocks(out.shape.numel(), kBlock, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float v = x.data[i];
      out.data[i] = v < lo ? lo : (v > hi ? hi : v);
    }
  });
}

void clampBackward(CFView x, CFView dOut, float lo, float hi, FView dX) {
  parallelBlocks(dX.shape.numel(), kBlock, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float v = x.data[i];
      dX.data[i] = v >= lo && v <= hi ? dOut.data[i] : 0.0f;
    }
  });
}

void isNan(CFView x, MIView out) {
  int64_t n = out.shape.numel();
  parallelBlocks(n, kBlock, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out.data[i] = std::isnan(x.data[i]) ? 1 : 0;
  });
}

void sumToShape(CFView x, FView out) {
  const Shape &xs = x.shape;
  int rank = xs.rank;
  if (out.shape.rank > rank)
    detail::fatal("sumToShape: output rank %d exceeds input rank %d",
                  out.shape.rank, rank);
  int64_t outNumel = out.shape.numel();
  if (outNumel == 0)
    return;
  if (xs.numel() == 0) {
    std::fill(out.data, out.data + outNumel, 0.0f);
    return;
  }
  Odometer kept, reduced;
  bool innermostKept =
      kernels::splitSumDims(xs, out.shape, kept, reduced, [](auto... args) {
        detail::contract("sumToShape", args...);
      });
  if (reduced.rank == 0) {
    std::memcpy(out.data, x.data, size_t(outNumel) * sizeof(float));
    return;
  }
  int64_t reducedCount = 1;
  for (int d = 0; d < reduced.rank; ++d)
    reducedCount *= reduced.dims[d];

  if (innermostKept) {
    // The innermost dimension is kept: accumulate whole contiguous stretches
    // of it at once, visiting the reduced indices in ascending order.
    int64_t width = kept.dims[kept.rank - 1];
    int64_t numRows = outNumel / width;
    constexpr int64_t kCols = 256;
    int64_t colBlocks = (width + kCols - 1) / kCols;
    detail::parallelFor(numRows * colBlocks,
                        reducedCount * std::min(width, kCols),
                        [&](int64_t task) {
                          int64_t row = task / colBlocks;
                          int64_t c0 = (task % colBlocks) * kCols;
                          int64_t nc = std::min(kCols, width - c0);
                          // x offset of the row start from the outer kept
                          // dimensions.
                          int64_t base = 0, r = row;
                          for (int d = kept.rank - 2; d >= 0; --d) {
                            base += (r % kept.dims[d]) * kept.strides[d];
                            r /= kept.dims[d];
                          }
                          base += c0;
                          double acc[kCols];
                          for (int64_t c = 0; c < nc; ++c)
                            acc[c] = 0.0;
                          Odometer it = reduced;
                          it.reset();
                          do {
                            const float *src = x.data + base + it.offset;
                            for (int64_t c = 0; c < nc; ++c)
                              acc[c] += src[c];
                          } while (it.next());
                          float *dst = out.data + row * width + c0;
                          for (int64_t c = 0; c < nc; ++c)
                            dst[c] = float(acc[c]);
                        });
    return;
  }

  // The innermost dimension is reduced (and contiguous): each output element
  // sums contiguous runs, runs in ascending order.
  int64_t run = reduced.dims[reduced.rank - 1];
  Odometer outerReduced = reduced;
  --outerReduced.rank;
  detail::parallelBlocks(outNumel, std::max<int64_t>(1, kBlock / reducedCount),
                         reducedCount, [&](int64_t lo, int64_t hi) {
                           for (int64_t o = lo; o < hi; ++o) {
                             int64_t base = 0, r = o;
                             for (int d = kept.rank - 1; d >= 0; --d) {
                               base += (r % kept.dims[d]) * kept.strides[d];
                               r /= kept.dims[d];
                             }
                             double acc = 0.0;
                             Odometer it = outerReduced;
                             it.reset();
                             do {
                               const float *src = x.data + base + it.offset;
                               for (int64_t i = 0; i < run; ++i)
                                 acc += src[i];
                             } while (it.next());
                             out.data[o] = float(acc);
                           }
                         });
}

//===----------------------------------------------------------------------===//
// Misc
//===----------------------------------------------------------------------===//

void fill(FView out, float value) {
  parallelBlocks(out.shape.numel(), 1 << 16, 1, [&](int64_t lo, int64_t hi) {
    std::fill(out.data + lo, out.data + hi, value);
  });
}

void copy(CFView x, FView out) {
  parallelBlocks(out.shape.numel(), 1 << 16, 1, [&](int64_t lo, int64_t hi) {
    std::memcpy(out.data + lo, x.data + lo, size_t(hi - lo) * sizeof(float));
  });
}

void accumulate(CFView x, FView out) {
  parallelBlocks(out.shape.numel(), kBlock, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out.data[i] += x.data[i];
  });
}

void roundToBf16(CFView x, FView out) {
  parallelBlocks(out.shape.numel(), kBlock, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      out.data[i] =
          kernels::bf16BitsToFloat(kernels::floatToBf16Bits(x.data[i]));
  });
}

} // namespace rondo::cpu
