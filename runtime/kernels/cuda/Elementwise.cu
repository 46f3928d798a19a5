//===- Elementwise.cu - Elementwise, broadcast and reduce kernels ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Grid-stride loops over the output. Broadcasting uses the merged iteration
// space of Internal.cuh; equal shapes take a flat path. The per-element
// formulas are the CPU's own (common/ScalarOps.h); the library is compiled
// without FMA contraction, so the arithmetic ops round exactly as on the CPU
// (the transcendental functions may differ by an ulp).
//
// Fast paths (bitwise identical to the general ones: the same per-element
// formula on the same operands) for the memory-bound common cases, each
// guarded by exact conditions and falling back to the general kernels:
//  - Flat maps (same-shape binary, unary, unaryBackward, scale, accumulate,
//    roundToBf16): 128-bit loads/stores when every pointer is 16-byte aligned;
//    a scalar tail of n % 4 elements.
//  - Broadcasts whose merged space has rank <= 2, [rows, cols] with each
//    operand full, a row vector [cols], a column [rows, 1] or a scalar
//    (binary, binaryGrad, broadcastTo): float4 along the columns when
//    cols % 4 == 0 (or rows == 1, with a scalar tail), the pointers of the
//    operands read as float4 are aligned and their row strides are multiples
//    of 4; otherwise a scalar kernel over the same [rows, cols] space, which
//    costs one 32-bit division per element instead of the merged-odometer
//    64-bit divisions.
//
// binaryBackward materialises the full-size gradient of a broadcast operand
// in a temporary and calls sumToShape (SumToShape.cu), as the CPU does.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

#include <type_traits>

#include <cstring>

namespace rondo::cuda {

using namespace detail;

namespace {

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

using kernels::binaryFwd;
using kernels::binaryGrad;

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

using kernels::unaryBwd;
using kernels::unaryFwd;
using kernels::gatedBwdBoth;
using kernels::gatedBwdGate;
using kernels::gatedBwdUp;
using kernels::gatedFwd;

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
// Fast paths
//===----------------------------------------------------------------------===//

/// A merged broadcast space of rank <= 2 as [rows, cols]: operand `op` at
/// p + r * sr[op] + c * sc[op], with sc[op] in {0, 1}; the output contiguous.
struct Mat2 {
  int64_t rows = 1, cols = 1;
  int64_t sr[2] = {0, 0}, sc[2] = {0, 0};
};

bool asMat2(const Bcast &s, int numInputs, Mat2 &m) {
  if (s.rank > 2)
    return false;
  if (s.rank >= 1) {
    m.cols = s.dims[s.rank - 1];
    m.rows = s.rank == 2 ? s.dims[0] : 1;
  }
  for (int op = 0; op < numInputs; ++op) {
    m.sc[op] = s.rank >= 1 ? s.strides[op][s.rank - 1] : 0;
    m.sr[op] = s.rank == 2 ? s.strides[op][0] : 0;
    if (m.sc[op] != 0 && m.sc[op] != 1)
      return false;
  }
  return true;
}

/// Whether [rows, cols] may be walked by float4 along the columns: cols % 4
/// == 0 (or a single row, the rest done by a scalar tail), and every operand
/// read as float4 (sc == 1) aligned with a row stride a multiple of 4.
bool mat2Vectorisable(const Mat2 &m, const float *const *ops, int numInputs) {
  if (m.cols % 4 != 0 && m.rows != 1)
    return false;
  for (int op = 0; op < numInputs; ++op)
    if (m.sc[op] == 1 && (!aligned16(ops[op]) || m.sr[op] % 4 != 0))
      return false;
  return true;
}

__device__ inline float4 loadMat4(const float *p, int64_t r, int64_t c,
                                  int64_t sr, int64_t sc) {
  if (sc)
    return load4(p + r * sr + c);
  float v = p[r * sr];
  return make_float4(v, v, v, v);
}

__device__ inline float loadMat(const float *p, int64_t r, int64_t c,
                                int64_t sr, int64_t sc) {
  return p[r * sr + c * sc];
}

/// Position of float4 number v of a [rows, cols] space (cols / 4 per row).
__device__ inline void mat4Pos(const Mat2 &m, int64_t v, int64_t &r,
                               int64_t &c) {
  if (m.rows == 1) {
    r = 0;
    c = v * 4;
    return;
  }
  int64_t q;
  divMod(v, m.cols / 4, r, q);
  c = q * 4;
}

/// Number of float4 items of a vectorisable [rows, cols] space and the scalar
/// tail after them (only with a single row).
inline void mat4Count(const Mat2 &m, int64_t &nv, int64_t &tail) {
  nv = m.rows * (m.cols / 4);
  tail = m.rows == 1 ? m.cols % 4 : 0;
}

__device__ inline int64_t globalThread() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// The two operands' float4 at float4 item v of [rows, cols].
__device__ inline void loadOperands4(const Mat2 &m, int64_t v, const float *a,
                                     const float *b, float4 &x, float4 &y) {
  int64_t r, c;
  mat4Pos(m, v, r, c);
  x = loadMat4(a, r, c, m.sr[0], m.sc[0]);
  y = loadMat4(b, r, c, m.sr[1], m.sc[1]);
}

__global__ void binaryVecKernel(BinaryKind k, const float *a, const float *b,
                                float *out, Mat2 m, int64_t nv,
                                int64_t tail) {
  RONDO_GRID_STRIDE(v, nv) {
    float4 x, y, o;
    loadOperands4(m, v, a, b, x, y);
    o.x = binaryFwd(k, x.x, y.x);
    o.y = binaryFwd(k, x.y, y.y);
    o.z = binaryFwd(k, x.z, y.z);
    o.w = binaryFwd(k, x.w, y.w);
    store4(out + v * 4, o);
  }
  int64_t t = globalThread();
  if (t < tail) {
    int64_t c = nv * 4 + t;
    out[c] = binaryFwd(k, loadMat(a, 0, c, 0, m.sc[0]),
                       loadMat(b, 0, c, 0, m.sc[1]));
  }
}

__global__ void binaryMatKernel(BinaryKind k, const float *a, const float *b,
                                float *out, Mat2 m) {
  RONDO_GRID_STRIDE(i, m.rows * m.cols) {
    int64_t r, c;
    divMod(i, m.cols, r, c);
    out[i] = binaryFwd(k, loadMat(a, r, c, m.sr[0], m.sc[0]),
                       loadMat(b, r, c, m.sr[1], m.sc[1]));
  }
}

__device__ inline void gradStore4(float *p, int64_t v, float4 d) {
  if (p)
    store4(p + v * 4, d);
}

__global__ void binaryGradVecKernel(BinaryKind k, const float *a,
                                    const float *b, const float *g, float *ga,
                                    float *gb, Mat2 m, int64_t nv,
                                    int64_t tail) {
  RONDO_GRID_STRIDE(v, nv) {
    float4 x, y;
    loadOperands4(m, v, a, b, x, y);
    float4 gv = load4(g + v * 4);
    float4 da, db;
    binaryGrad(k, x.x, y.x, gv.x, da.x, db.x);
    binaryGrad(k, x.y, y.y, gv.y, da.y, db.y);
    binaryGrad(k, x.z, y.z, gv.z, da.z, db.z);
    binaryGrad(k, x.w, y.w, gv.w, da.w, db.w);
    gradStore4(ga, v, da);
    gradStore4(gb, v, db);
  }
  int64_t t = globalThread();
  if (t < tail) {
    int64_t c = nv * 4 + t;
    float da, db;
    binaryGrad(k, loadMat(a, 0, c, 0, m.sc[0]), loadMat(b, 0, c, 0, m.sc[1]),
               g[c], da, db);
    if (ga)
      ga[c] = da;
    if (gb)
      gb[c] = db;
  }
}

__global__ void binaryGradMatKernel(BinaryKind k, const float *a,
                                    const float *b, const float *g, float *ga,
                                    float *gb, Mat2 m) {
  RONDO_GRID_STRIDE(i, m.rows * m.cols) {
    int64_t r, c;
    divMod(i, m.cols, r, c);
    float da, db;
    binaryGrad(k, loadMat(a, r, c, m.sr[0], m.sc[0]),
               loadMat(b, r, c, m.sr[1], m.sc[1]), g[i], da, db);
    if (ga)
      ga[i] = da;
    if (gb)
      gb[i] = db;
  }
}

__global__ void broadcastVecKernel(const float *x, float *out, Mat2 m,
                                   int64_t nv, int64_t tail) {
  RONDO_GRID_STRIDE(v, nv) {
    int64_t r, c;
    mat4Pos(m, v, r, c);
    store4(out + v * 4, loadMat4(x, r, c, m.sr[0], m.sc[0]));
  }
  int64_t t = globalThread();
  if (t < tail) {
    int64_t c = nv * 4 + t;
    out[c] = loadMat(x, 0, c, 0, m.sc[0]);
  }
}

// Per-element maps of the flat kernels: the general kernels' formulas.
struct UnaryMap {
  UnaryKind k;
  __device__ float operator()(float x, float) const { return unaryFwd(k, x); }
};
struct UnaryBwdMap {
  UnaryKind k;
  __device__ float operator()(float x, float g) const {
    return unaryBwd(k, x, g);
  }
};
struct GatedMap {
  UnaryKind k;
  __device__ float operator()(float gate, float up) const {
    return gatedFwd(k, gate, up);
  }
};
struct BinaryMap {
  BinaryKind k;
  __device__ float operator()(float a, float b) const {
    return binaryFwd(k, a, b);
  }
};
struct ScaleMap {
  float s;
  __device__ float operator()(float x, float) const { return x * s; }
};
/// accumulate: out[i] += x[i] with a = out[i], b = x[i].
struct AddMap {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Bf16Map {
  __device__ float operator()(float x, float) const {
    uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      bits = (bits | 0x00400000u) & 0xffff0000u;
    } else {
      bits += 0x7fffu + ((bits >> 16) & 1u);
      bits &= 0xffff0000u;
    }
    return __uint_as_float(bits);
  }
};

/// out[i] = f(a[i], b[i]) (b == a when the map takes one operand, HasB
/// false), float4 over n / 4 items, then a scalar tail. Every pointer 16-byte
/// aligned (checked by the caller). out may alias a or b: each element is
/// read and written by one thread.
template <bool HasB, typename Map, typename OutT = float, typename InT = float>
__global__ void mapVecKernel(Map f, const InT *a, const InT *b, OutT *out,
                             int64_t n) {
  int64_t nv = n / 4;
  RONDO_GRID_STRIDE(v, nv) {
    float4 x = load4(a + v * 4);
    float4 y = HasB ? load4(b + v * 4) : x;
    float4 o;
    o.x = f(x.x, y.x);
    o.y = f(x.y, y.y);
    o.z = f(x.z, y.z);
    o.w = f(x.w, y.w);
    store4(out + v * 4, o);
  }
  int64_t i = nv * 4 + globalThread();
  if (i < n)
    storeOut(out + i, f(loadIn(a + i), loadIn(HasB ? b + i : a + i)));
}

/// Launches mapVecKernel when every pointer is aligned; false otherwise (the
/// caller then runs its general kernel).
template <bool HasB, typename Map, typename OutT = float, typename InT = float>
bool mapVec(Map f, const InT *a,
            const typename std::enable_if<true, InT>::type *b, OutT *out,
            int64_t n, const char *name) { // b deduced from a (may be null)
  if (!aligned16(a) || !aligned16(out) || (HasB && !aligned16(b)))
    return false;
  mapVecKernel<HasB, Map, OutT, InT>
      <<<gridFor(n / 4 > 0 ? n / 4 : 1), kThreads, 0, currentStream()>>>(
          f, a, b, out, n);
  checkLaunch(name);
  return true;
}

/// out[i] = a[i] + b[i] with b stored in bf16 (addBf16), float4 over n / 4
/// items, then a scalar tail; every pointer 16-byte aligned.
__global__ void addBf16Kernel(const float *a, const __nv_bfloat16 *b,
                              float *out, int64_t n) {
  int64_t nv = n / 4;
  RONDO_GRID_STRIDE(v, nv) {
    float4 x = load4(a + v * 4), y = load4(b + v * 4);
    store4(out + v * 4, make_float4(__fadd_rn(x.x, y.x), __fadd_rn(x.y, y.y),
                                    __fadd_rn(x.z, y.z), __fadd_rn(x.w, y.w)));
  }
  int64_t i = nv * 4 + globalThread();
  if (i < n)
    out[i] = __fadd_rn(a[i], __bfloat162float(b[i]));
}

} // namespace

void addBf16(CFView a, CBView b, FView out) {
  ProfileScope profileScope("addBf16");
  const char *name = "addBf16";
  int64_t n = out.shape.numel();
  if (a.shape.numel() != n || b.shape.numel() != n)
    contract(name, "a, b and out differ in size (the add does not broadcast)");
  if (n == 0)
    return;
  if (aligned16(a.data) && aligned16(b.data) && aligned16(out.data)) {
    addBf16Kernel<<<gridFor(n / 4 > 0 ? n / 4 : 1), kThreads, 0,
                    currentStream()>>>(a.data, bf16Data(b), out.data, n);
    checkLaunch(name);
    return;
  }
  WidenedBf16 wide(b.data, n, name);
  ::rondo::cuda::binary(BinaryKind::Add, CFView{a.data, out.shape},
                        CFView{wide.data(), out.shape}, out);
}

void binary(BinaryKind kind, CFView a, CFView b, FView out) {
  ProfileScope profileScope("binary");
  const char *name = "binary";
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  cudaStream_t st = currentStream();
  if (a.shape == out.shape && b.shape == out.shape) {
    if (mapVec<true>(BinaryMap{kind}, a.data, b.data, out.data, n, name))
      return;
    binaryFlatKernel<<<gridFor(n), kThreads, 0, st>>>(kind, a.data, b.data,
                                                      out.data, n);
    checkLaunch(name);
    return;
  }
  Shape ins[2] = {a.shape, b.shape};
  Bcast s = makeBcast(out.shape, ins, 2, name);
  Mat2 m;
  if (asMat2(s, 2, m)) {
    const float *ops[2] = {a.data, b.data};
    if (aligned16(out.data) && mat2Vectorisable(m, ops, 2)) {
      int64_t nv, tail;
      mat4Count(m, nv, tail);
      binaryVecKernel<<<gridFor(nv > 0 ? nv : 1), kThreads, 0, st>>>(
          kind, a.data, b.data, out.data, m, nv, tail);
    } else {
      binaryMatKernel<<<gridFor(n), kThreads, 0, st>>>(kind, a.data, b.data,
                                                       out.data, m);
    }
  } else {
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
  cudaStream_t st = currentStream();
  Mat2 m;
  if (asMat2(s, 2, m)) {
    const float *ops[2] = {a.data, b.data};
    if (aligned16(dOut.data) && aligned16(ga) && aligned16(gb) &&
        mat2Vectorisable(m, ops, 2)) {
      int64_t nv, tail;
      mat4Count(m, nv, tail);
      binaryGradVecKernel<<<gridFor(nv > 0 ? nv : 1), kThreads, 0, st>>>(
          kind, a.data, b.data, dOut.data, ga, gb, m, nv, tail);
    } else {
      binaryGradMatKernel<<<gridFor(n), kThreads, 0, st>>>(
          kind, a.data, b.data, dOut.data, ga, gb, m);
    }
  } else {
    binaryGradKernel<<<gridFor(n), kThreads, 0, st>>>(
        kind, a.data, b.data, dOut.data, ga, gb, n, s);
  }
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
  if (mapVec<false>(UnaryMap{kind}, x.data, nullptr, out.data, n, "unary"))
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
  if (mapVec<true>(UnaryBwdMap{kind}, x.data, dOut.data, dX.data, n,
                   "unaryBackward"))
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
  if (mapVec<false>(ScaleMap{s}, x.data, nullptr, out.data, n, "scale"))
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
  Mat2 m;
  if (asMat2(s, 1, m) && aligned16(out.data) &&
      mat2Vectorisable(m, &x.data, 1)) {
    int64_t nv, tail;
    mat4Count(m, nv, tail);
    broadcastVecKernel<<<gridFor(nv > 0 ? nv : 1), kThreads, 0,
                         currentStream()>>>(x.data, out.data, m, nv, tail);
    checkLaunch(name);
    return;
  }
  broadcastKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x.data,
                                                                out.data, n, s);
  checkLaunch(name);
}

namespace {
__global__ void clampKernel(const float *x, float lo, float hi, float *out,
                            int64_t n) {
  RONDO_GRID_STRIDE(i, n) {
    float v = x[i];
    out[i] = v < lo ? lo : (v > hi ? hi : v);
  }
}

__global__ void clampBackwardKernel(const float *x, const float *dOut, float lo,
                                    float hi, float *dX, int64_t n) {
  RONDO_GRID_STRIDE(i, n) {
    float v = x[i];
    dX[i] = v >= lo && v <= hi ? dOut[i] : 0.0f;
  }
}
} // namespace

void clamp(CFView x, float lo, float hi, FView out) {
  ProfileScope profileScope("clamp");
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  clampKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x.data, lo, hi,
                                                            out.data, n);
  checkLaunch("clamp");
}

void clampBackward(CFView x, CFView dOut, float lo, float hi, FView dX) {
  ProfileScope profileScope("clampBackward");
  int64_t n = dX.shape.numel();
  if (n == 0)
    return;
  clampBackwardKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      x.data, dOut.data, lo, hi, dX.data, n);
  checkLaunch("clampBackward");
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
  if (mapVec<true>(AddMap{}, out.data, x.data, out.data, n, "accumulate"))
    return;
  accumulateKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x.data,
                                                                 out.data, n);
  checkLaunch("accumulate");
}

void roundToBf16(CFView x, FView out) {
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  if (mapVec<false>(Bf16Map{}, x.data, nullptr, out.data, n, "roundToBf16"))
    return;
  roundToBf16Kernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      x.data, out.data, n);
  checkLaunch("roundToBf16");
}

//===----------------------------------------------------------------------===//
// bf16 results (kern-bf16-storage)
//===----------------------------------------------------------------------===//

namespace {

__global__ void toBf16Kernel(const float *x, __nv_bfloat16 *out, int64_t n) {
  int64_t nv = n / 4;
  RONDO_GRID_STRIDE(v, nv) { store4(out + v * 4, load4(x + v * 4)); }
  int64_t i = nv * 4 + globalThread();
  if (i < n)
    storeOut(out + i, x[i]);
}

/// The general case of a bf16 result: the fp32 kernel into a temporary,
/// then rounded (the same bits; the fast paths skip the temporary).
template <typename Compute>
void viaFp32(BView out, const char *name, Compute &&compute) {
  int64_t n = out.shape.numel();
  Temp tmp(size_t(n) * sizeof(float), name);
  compute(FView{tmp.as<float>(), out.shape});
  cuda::toBf16(CFView{tmp.as<float>(), out.shape}, out);
  tmp.release();
}

} // namespace

void toBf16(CFView x, BView out) {
  ProfileScope profileScope("toBf16");
  int64_t n = out.shape.numel();
  if (x.shape.numel() != n)
    contract("toBf16", "input and output sizes differ");
  if (n == 0)
    return;
  if (aligned16(x.data) && aligned16(out.data)) {
    toBf16Kernel<<<gridFor(n / 4 > 0 ? n / 4 : 1), kThreads, 0,
                   currentStream()>>>(x.data, bf16Data(out), n);
    checkLaunch("toBf16");
    return;
  }
  roundToBf16Copy(x.data, out.data, n, "toBf16");
}

void binaryToBf16(BinaryKind kind, CFView a, CFView b, BView out) {
  ProfileScope profileScope("binaryToBf16");
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  if (a.shape == out.shape && b.shape == out.shape &&
      mapVec<true>(BinaryMap{kind}, a.data, b.data, bf16Data(out), n,
                   "binaryToBf16"))
    return;
  viaFp32(out, "binaryToBf16",
          [&](FView t) { cuda::binary(kind, a, b, t); });
}

void unaryBackwardToBf16(UnaryKind kind, CFView x, CFView dOut, BView dX) {
  ProfileScope profileScope("unaryBackwardToBf16");
  int64_t n = x.shape.numel();
  if (n == 0)
    return;
  if (mapVec<true>(UnaryBwdMap{kind}, x.data, dOut.data, bf16Data(dX), n,
                   "unaryBackwardToBf16"))
    return;
  viaFp32(dX, "unaryBackwardToBf16",
          [&](FView t) { cuda::unaryBackward(kind, x, dOut, t); });
}

//===----------------------------------------------------------------------===//
// Gated activation (tg.gated_act and its gradient)
//===----------------------------------------------------------------------===//

namespace {

template <typename OutT>
__device__ inline void gatedBwdOne(UnaryKind k, float g, float u, float d,
                                   OutT *dGate, OutT *dUp, int64_t i) {
  if (dGate)
    storeOut(dGate + i, gatedBwdGate(k, g, u, d));
  if (dUp)
    storeOut(dUp + i, gatedBwdUp(k, g, d));
}

/// Both gradients in one pass: float4 over n / 4 items when Vec (every
/// pointer 16-byte aligned), then a scalar tail; null outputs are skipped.
template <bool Vec, typename OutT, typename InT>
__global__ void gatedBwdKernel(UnaryKind k, const InT *gate, const InT *up,
                               const InT *dOut, OutT *dGate, OutT *dUp,
                               int64_t n) {
  int64_t nv = Vec ? n / 4 : 0;
  if (Vec) {
    RONDO_GRID_STRIDE(v, nv) {
      float4 g = load4(gate + v * 4), u = load4(up + v * 4),
             d = load4(dOut + v * 4);
      if (dGate)
        store4(dGate + v * 4, make_float4(gatedBwdGate(k, g.x, u.x, d.x),
                                          gatedBwdGate(k, g.y, u.y, d.y),
                                          gatedBwdGate(k, g.z, u.z, d.z),
                                          gatedBwdGate(k, g.w, u.w, d.w)));
      if (dUp)
        store4(dUp + v * 4, make_float4(gatedBwdUp(k, g.x, d.x),
                                        gatedBwdUp(k, g.y, d.y),
                                        gatedBwdUp(k, g.z, d.z),
                                        gatedBwdUp(k, g.w, d.w)));
    }
    int64_t i = nv * 4 + globalThread();
    if (i < n)
      gatedBwdOne(k, loadIn(gate + i), loadIn(up + i), loadIn(dOut + i), dGate,
                  dUp, i);
    return;
  }
  RONDO_GRID_STRIDE(i, n) {
    gatedBwdOne(k, loadIn(gate + i), loadIn(up + i), loadIn(dOut + i), dGate,
                dUp, i);
  }
}

/// gatedBwdKernel for bf16 operands and results, eight elements a thread
/// (16-byte loads and stores: the five bf16 streams of W1's MLP gradient ran
/// at 1.7 TB/s four at a time), then a scalar tail; the same arithmetic per
/// element, SiLU's sigmoid once for both gradients (gatedBwdBoth: W1's
/// 285 us a call became 170).
__global__ void gatedBwdBf16x8Kernel(UnaryKind k, const __nv_bfloat16 *gate,
                                     const __nv_bfloat16 *up,
                                     const __nv_bfloat16 *dOut,
                                     __nv_bfloat16 *dGate, __nv_bfloat16 *dUp,
                                     int64_t n) {
  int64_t nv = n / 8;
  RONDO_GRID_STRIDE(v, nv) {
    uint4 gw = reinterpret_cast<const uint4 *>(gate)[v],
          uw = reinterpret_cast<const uint4 *>(up)[v],
          dw = reinterpret_cast<const uint4 *>(dOut)[v];
    const __nv_bfloat16 *g = reinterpret_cast<const __nv_bfloat16 *>(&gw),
                        *u = reinterpret_cast<const __nv_bfloat16 *>(&uw),
                        *d = reinterpret_cast<const __nv_bfloat16 *>(&dw);
    uint4 gOut, uOut;
    __nv_bfloat16 *go = reinterpret_cast<__nv_bfloat16 *>(&gOut),
                  *uo = reinterpret_cast<__nv_bfloat16 *>(&uOut);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float gf = __bfloat162float(g[e]), uf = __bfloat162float(u[e]),
            df = __bfloat162float(d[e]), dg, du;
      gatedBwdBoth(k, gf, uf, df, dg, du);
      go[e] = __float2bfloat16_rn(dg);
      uo[e] = __float2bfloat16_rn(du);
    }
    if (dGate)
      reinterpret_cast<uint4 *>(dGate)[v] = gOut;
    if (dUp)
      reinterpret_cast<uint4 *>(dUp)[v] = uOut;
  }
  int64_t i = nv * 8 + globalThread();
  if (i < n)
    gatedBwdOne(k, loadIn(gate + i), loadIn(up + i), loadIn(dOut + i), dGate,
                dUp, i);
}

template <typename OutT, typename InT>
__global__ void gatedScalarKernel(GatedMap f, const InT *gate, const InT *up,
                                  OutT *out, int64_t n) {
  RONDO_GRID_STRIDE(i, n) {
    storeOut(out + i, f(loadIn(gate + i), loadIn(up + i)));
  }
}

void checkGatedShapes(const Shape &gate, const Shape &up, const Shape &other,
                      const char *name) {
  if (!(gate == up) || !(gate == other))
    contract(name, "operands and results must have one shape");
}

/// gate, up (and dOut) point to float, or to __nv_bfloat16 for the bf16
/// activation kernels.
template <typename OutT, typename InT>
void gatedActImpl(UnaryKind kind, const InT *gate, const InT *up, OutT *out,
                  const Shape &gateShape, const Shape &upShape,
                  const Shape &outShape, const char *name) {
  checkGatedShapes(gateShape, upShape, outShape, name);
  int64_t n = outShape.numel();
  if (n == 0)
    return;
  if (mapVec<true>(GatedMap{kind}, gate, up, out, n, name))
    return;
  // Misaligned: the same map, one element per thread.
  gatedScalarKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      GatedMap{kind}, gate, up, out, n);
  checkLaunch(name);
}

template <typename OutT, typename InT>
void gatedActBackwardImpl(UnaryKind kind, const InT *gate, const InT *up,
                          const InT *dOut, const Shape &gateShape,
                          const Shape &upShape, const Shape &dOutShape,
                          OutT *dGate, OutT *dUp, const char *name) {
  checkGatedShapes(gateShape, upShape, dOutShape, name);
  int64_t n = dOutShape.numel();
  if (n == 0 || (!dGate && !dUp))
    return;
  cudaStream_t st = currentStream();
  if constexpr (std::is_same_v<InT, __nv_bfloat16> &&
                std::is_same_v<OutT, __nv_bfloat16>) {
    if (aligned16(gate) && aligned16(up) && aligned16(dOut) &&
        aligned16(dGate) && aligned16(dUp)) {
      gatedBwdBf16x8Kernel<<<gridFor(n / 8 > 0 ? n / 8 : 1), kThreads, 0, st>>>(
          kind, gate, up, dOut, dGate, dUp, n);
      checkLaunch(name);
      return;
    }
  }
  if (aligned16(gate) && aligned16(up) && aligned16(dOut) && aligned16(dGate) &&
      aligned16(dUp))
    gatedBwdKernel<true, OutT, InT>
        <<<gridFor(n / 4 > 0 ? n / 4 : 1), kThreads, 0, st>>>(
            kind, gate, up, dOut, dGate, dUp, n);
  else
    gatedBwdKernel<false, OutT, InT>
        <<<gridFor(n), kThreads, 0, st>>>(kind, gate, up, dOut, dGate, dUp, n);
  checkLaunch(name);
}

} // namespace

void gatedAct(UnaryKind kind, CFView gate, CFView up, FView out) {
  ProfileScope profileScope("gatedAct");
  gatedActImpl(kind, gate.data, up.data, out.data, gate.shape, up.shape,
               out.shape, "gatedAct");
}

void gatedActToBf16(UnaryKind kind, CFView gate, CFView up, BView out) {
  ProfileScope profileScope("gatedActToBf16");
  gatedActImpl(kind, gate.data, up.data, bf16Data(out), gate.shape, up.shape,
               out.shape, "gatedActToBf16");
}

void gatedActBf16(UnaryKind kind, CBView gate, CBView up, BView out) {
  ProfileScope profileScope("gatedActBf16");
  gatedActImpl(kind, bf16Data(gate), bf16Data(up), bf16Data(out), gate.shape,
               up.shape, out.shape, "gatedActBf16");
}

void gatedActBackward(UnaryKind kind, CFView gate, CFView up, CFView dOut,
                      FView dGate, FView dUp) {
  ProfileScope profileScope("gatedActBackward");
  gatedActBackwardImpl(kind, gate.data, up.data, dOut.data, gate.shape,
                       up.shape, dOut.shape, dGate.data, dUp.data,
                       "gatedActBackward");
}

void gatedActBackwardToBf16(UnaryKind kind, CFView gate, CFView up,
                            CFView dOut, BView dGate, BView dUp) {
  ProfileScope profileScope("gatedActBackwardToBf16");
  gatedActBackwardImpl(kind, gate.data, up.data, dOut.data, gate.shape,
                       up.shape, dOut.shape, bf16Data(dGate), bf16Data(dUp),
                       "gatedActBackwardToBf16");
}

void gatedActBackwardBf16(UnaryKind kind, CBView gate, CBView up, CBView dOut,
                          BView dGate, BView dUp) {
  ProfileScope profileScope("gatedActBackwardBf16");
  gatedActBackwardImpl(kind, bf16Data(gate), bf16Data(up), bf16Data(dOut),
                       gate.shape, up.shape, dOut.shape, bf16Data(dGate),
                       bf16Data(dUp), "gatedActBackwardBf16");
}

} // namespace rondo::cuda
