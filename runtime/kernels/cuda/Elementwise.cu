//===- Elementwise.cu - Elementwise, broadcast and reduce kernels ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Grid-stride loops over the output. Broadcasting uses the merged iteration
// space of Internal.cuh; equal shapes take a flat path. The formulas are the
// CPU's, evaluated in the same order; the library is compiled without FMA
// contraction, so the arithmetic ops round exactly as on the CPU (the
// transcendental functions may differ by an ulp).
//
// binaryBackward materialises the full-size gradient of a broadcast operand
// in a temporary and calls sumToShape, as the CPU does. sumToShape sums in
// double: each output element's reduced range is cut into parts whose number
// depends only on the shapes, every part is summed in ascending order by one
// thread, and the parts are summed in ascending order by a second kernel.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <cstring>

namespace rondo::cuda {

using namespace detail;

namespace {

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

__device__ inline bool pickMax(float a, float b) { return a != a || a >= b; }
__device__ inline bool pickMin(float a, float b) { return a != a || a <= b; }

__device__ inline float binaryFwd(BinaryKind k, float a, float b) {
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

__device__ inline void binaryGrad(BinaryKind k, float a, float b, float g,
                                  float &ga, float &gb) {
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

__global__ void binaryFlatKernel(BinaryKind k, const float *a, const float *b,
                                 float *out, int64_t n) {
  RONDO_GRID_STRIDE(i, n) { out[i] = binaryFwd(k, a[i], b[i]); }
}

__global__ void binaryBcastKernel(BinaryKind k, const float *a,
                                  const float *b, float *out, int64_t n,
                                  Bcast s) {
  RONDO_GRID_STRIDE(i, n) {
    out[i] = binaryFwd(k, a[bcastOffset(s, 0, i)], b[bcastOffset(s, 1, i)]);
  }
}

__global__ void binaryGradKernel(BinaryKind k, const float *a, const float *b,
                                 const float *g, float *ga, float *gb,
                                 int64_t n, Bcast s) {
  RONDO_GRID_STRIDE(i, n) {
    float da, db;
    binaryGrad(k, a[bcastOffset(s, 0, i)], b[bcastOffset(s, 1, i)], g[i], da,
               db);
    if (ga)
      ga[i] = da;
    if (gb)
      gb[i] = db;
  }
}

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluKappa = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__device__ inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ inline float unaryFwd(UnaryKind k, float x) {
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
    return sigmoidf(x);
  case UnaryKind::Tanh:
    return tanhf(x);
  case UnaryKind::Relu:
    return x > 0.0f ? x : 0.0f;
  case UnaryKind::Silu:
    return x * sigmoidf(x);
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

__device__ inline float unaryBwd(UnaryKind k, float x, float g) {
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
    float s = sigmoidf(x);
    return g * s * (1.0f - s);
  }
  case UnaryKind::Tanh: {
    float t = tanhf(x);
    return g * (1.0f - t * t);
  }
  case UnaryKind::Relu:
    return x > 0.0f ? g : 0.0f;
  case UnaryKind::Silu: {
    float s = sigmoidf(x);
    return g * s * (1.0f + x * (1.0f - s));
  }
  case UnaryKind::GeluTanh: {
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

__global__ void unaryKernel(UnaryKind k, const float *x, float *out,
                            int64_t n) {
  RONDO_GRID_STRIDE(i, n) { out[i] = unaryFwd(k, x[i]); }
}

__global__ void unaryBwdKernel(UnaryKind k, const float *x, const float *g,
                               float *dx, int64_t n) {
  RONDO_GRID_STRIDE(i, n) { dx[i] = unaryBwd(k, x[i], g[i]); }
}

__global__ void scaleKernel(const float *x, float s, float *out, int64_t n) {
  RONDO_GRID_STRIDE(i, n) { out[i] = x[i] * s; }
}

__global__ void broadcastKernel(const float *x, float *out, int64_t n,
                                Bcast s) {
  RONDO_GRID_STRIDE(i, n) { out[i] = x[bcastOffset(s, 0, i)]; }
}

__global__ void accumulateKernel(const float *x, float *out, int64_t n) {
  RONDO_GRID_STRIDE(i, n) { out[i] += x[i]; }
}

__global__ void roundToBf16Kernel(const float *x, float *out, int64_t n) {
  RONDO_GRID_STRIDE(i, n) {
    uint32_t bits = __float_as_uint(x[i]);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      bits = (bits | 0x00400000u) & 0xffff0000u;
    } else {
      bits += 0x7fffu + ((bits >> 16) & 1u);
      bits &= 0xffff0000u;
    }
    out[i] = __uint_as_float(bits);
  }
}

//===----------------------------------------------------------------------===//
// sumToShape
//===----------------------------------------------------------------------===//

/// Kept and reduced dimensions of x (merged), as index -> offset maps.
struct Odo {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

__device__ inline int64_t odoOffset(const Odo &o, int64_t r) {
  int64_t off = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d < o.rank) {
      off += (r % o.dims[d]) * o.strides[d];
      r /= o.dims[d];
    }
  }
  return off;
}

/// partial[p * O + o] = sum of x over reduced indices [p * per, (p+1) * per)
/// (ascending) at kept index o. With parts == 1 writes the float result to
/// out directly.
__global__ void sumPartialKernel(const float *x, Odo kept, Odo reduced,
                                 int64_t O, int64_t R, int64_t per,
                                 int64_t parts, double *partial, float *out) {
  RONDO_GRID_STRIDE(i, O * parts) {
    int64_t o = i % O, p = i / O;
    int64_t base = odoOffset(kept, o);
    int64_t r0 = p * per, r1 = r0 + per < R ? r0 + per : R;
    // Walk the reduced odometer incrementally from r0.
    int64_t idx[kMaxRank];
    int64_t off = 0;
    {
      int64_t r = r0;
#pragma unroll
      for (int d = kMaxRank - 1; d >= 0; --d) {
        if (d < reduced.rank) {
          idx[d] = r % reduced.dims[d];
          r /= reduced.dims[d];
          off += idx[d] * reduced.strides[d];
        } else {
          idx[d] = 0;
        }
      }
    }
    double acc = 0.0;
    for (int64_t r = r0; r < r1; ++r) {
      acc += x[base + off];
#pragma unroll
      for (int d = kMaxRank - 1; d >= 0; --d) {
        if (d < reduced.rank) {
          off += reduced.strides[d];
          if (++idx[d] < reduced.dims[d])
            break;
          off -= reduced.strides[d] * reduced.dims[d];
          idx[d] = 0;
        }
      }
    }
    if (parts == 1)
      out[o] = float(acc);
    else
      partial[p * O + o] = acc;
  }
}

__global__ void sumFinalKernel(const double *partial, int64_t O,
                               int64_t parts, float *out) {
  RONDO_GRID_STRIDE(o, O) {
    double acc = 0.0;
    for (int64_t p = 0; p < parts; ++p)
      acc += partial[p * O + o];
    out[o] = float(acc);
  }
}

} // namespace

void binary(BinaryKind kind, CFView a, CFView b, FView out) {
  ProfileScope profileScope("binary");
  const char *name = "binary";
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  cudaStream_t st = currentStream();
  if (a.shape == out.shape && b.shape == out.shape) {
    binaryFlatKernel<<<gridFor(n), kThreads, 0, st>>>(kind, a.data, b.data,
                                                      out.data, n);
  } else {
    Shape ins[2] = {a.shape, b.shape};
    Bcast s = makeBcast(out.shape, ins, 2, name);
    binaryBcastKernel<<<gridFor(n), kThreads, 0, st>>>(kind, a.data, b.data,
                                                       out.data, n, s);
  }
  checkLaunch(name);
}

void binaryBackward(BinaryKind kind, CFView a, CFView b, CFView dOut, FView dA,
                    FView dB) {
  ProfileScope profileScope("binaryBackward");
  const char *name = "binaryBackward";
  int64_t n = dOut.shape.numel();
  bool wantA = dA.data != nullptr, wantB = dB.data != nullptr;
  bool fullA = a.shape.numel() == n, fullB = b.shape.numel() == n;
  if (n == 0) {
    if (wantA)
      fillDevice(dA.data, dA.shape.numel(), 0.0f, name);
    if (wantB)
      fillDevice(dB.data, dB.shape.numel(), 0.0f, name);
    return;
  }
  size_t bytes = size_t(n) * sizeof(float);
  Temp tmpA(wantA && !fullA ? bytes : 0, name);
  Temp tmpB(wantB && !fullB ? bytes : 0, name);
  float *ga = wantA ? (fullA ? dA.data : tmpA.as<float>()) : nullptr;
  float *gb = wantB ? (fullB ? dB.data : tmpB.as<float>()) : nullptr;
  Shape ins[2] = {a.shape, b.shape};
  Bcast s = makeBcast(dOut.shape, ins, 2, name);
  binaryGradKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      kind, a.data, b.data, dOut.data, ga, gb, n, s);
  checkLaunch(name);
  if (wantA && !fullA)
    ::rondo::cuda::sumToShape(CFView{tmpA.as<float>(), dOut.shape}, dA);
  if (wantB && !fullB)
    ::rondo::cuda::sumToShape(CFView{tmpB.as<float>(), dOut.shape}, dB);
  tmpA.release();
  tmpB.release();
}

void unary(UnaryKind kind, CFView x, FView out) {
  ProfileScope profileScope("unary");
  int64_t n = x.shape.numel();
  if (n == 0)
    return;
  unaryKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(kind, x.data,
                                                            out.data, n);
  checkLaunch("unary");
}

void unaryBackward(UnaryKind kind, CFView x, CFView dOut, FView dX) {
  ProfileScope profileScope("unaryBackward");
  int64_t n = x.shape.numel();
  if (n == 0)
    return;
  unaryBwdKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      kind, x.data, dOut.data, dX.data, n);
  checkLaunch("unaryBackward");
}

void scale(CFView x, float s, FView out) {
  ProfileScope profileScope("scale");
  int64_t n = x.shape.numel();
  if (n == 0)
    return;
  scaleKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x.data, s,
                                                            out.data, n);
  checkLaunch("scale");
}

void broadcastTo(CFView x, FView out) {
  ProfileScope profileScope("broadcastTo");
  const char *name = "broadcastTo";
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  Bcast s = makeBcast(out.shape, &x.shape, 1, name);
  broadcastKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x.data,
                                                                out.data, n, s);
  checkLaunch(name);
}

void sumToShape(CFView x, FView out) {
  ProfileScope profileScope("sumToShape");
  const char *name = "sumToShape";
  const Shape &xs = x.shape;
  int rank = xs.rank;
  if (out.shape.rank > rank)
    contract(name, "output rank %d exceeds input rank %d", out.shape.rank,
             rank);
  int64_t O = out.shape.numel();
  if (O == 0)
    return;
  if (xs.numel() == 0) {
    fillDevice(out.data, O, 0.0f, name);
    return;
  }
  int64_t xStrides[kMaxRank];
  contiguousStrides(xs, xStrides);
  int shift = rank - out.shape.rank;
  Odo kept, reduced;
  int lastClass = -1;
  for (int d = 0; d < rank; ++d) {
    int64_t o = d >= shift ? out.shape.dims[d - shift] : 1;
    int64_t e = xs.dims[d];
    if (e == 1) {
      if (o != 1)
        contract(name, "cannot reduce extent 1 to %lld", (long long)o);
      continue;
    }
    int cls;
    if (o == e)
      cls = 0;
    else if (o == 1)
      cls = 1;
    else
      contract(name, "cannot reduce extent %lld to %lld", (long long)e,
               (long long)o);
    Odo &od = cls == 0 ? kept : reduced;
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
  cudaStream_t st = currentStream();
  if (reduced.rank == 0) {
    RONDO_CHECK(cudaMemcpyAsync(out.data, x.data, size_t(O) * sizeof(float),
                                cudaMemcpyDeviceToDevice, st),
                name);
    return;
  }
  int64_t R = 1;
  for (int d = 0; d < reduced.rank; ++d)
    R *= reduced.dims[d];
  // Parts: enough threads to fill the GPU when there are few outputs, each
  // part at least 256 elements long. A function of (O, R) only.
  int64_t parts = 1;
  if (O < 16384 && R > 512) {
    parts = (16384 + O - 1) / O;
    int64_t maxParts = (R + 255) / 256;
    if (parts > maxParts)
      parts = maxParts;
  }
  int64_t per = (R + parts - 1) / parts;
  parts = (R + per - 1) / per;
  Temp partial(parts > 1 ? size_t(parts * O) * sizeof(double) : 0, name);
  sumPartialKernel<<<gridFor(O * parts), kThreads, 0, st>>>(
      x.data, kept, reduced, O, R, per, parts, partial.as<double>(), out.data);
  checkLaunch(name);
  if (parts > 1) {
    sumFinalKernel<<<gridFor(O), kThreads, 0, st>>>(partial.as<double>(), O,
                                                    parts, out.data);
    checkLaunch(name);
  }
  partial.release();
}

void fill(FView out, float value) {
  ProfileScope profileScope("fill");
  fillDevice(out.data, out.shape.numel(), value, "fill");
}

void copy(CFView x, FView out) {
  ProfileScope profileScope("copy");
  int64_t n = out.shape.numel();
  if (n == 0 || x.data == out.data)
    return;
  RONDO_CHECK(cudaMemcpyAsync(out.data, x.data, size_t(n) * sizeof(float),
                              cudaMemcpyDeviceToDevice, currentStream()),
              "copy");
}

void accumulate(CFView x, FView out) {
  ProfileScope profileScope("accumulate");
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  accumulateKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x.data,
                                                                 out.data, n);
  checkLaunch("accumulate");
}

void roundToBf16(CFView x, FView out) {
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  roundToBf16Kernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      x.data, out.data, n);
  checkLaunch("roundToBf16");
}

} // namespace rondo::cuda
