//===- NormRotary.cu - QK-norm, head transpose and rotary in one pass -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Qwen3's and OLMo-2's queries and keys go through rmsNorm over each head,
// a [B, T, H, D] -> [B, H, T, D] transpose and the rotary embedding before
// attention: three passes over the tensor, and three more backward. These
// kernels are the rmsNorm register-row kernels (NormRows.cuh) with the row
// stored transposed and rotated (forward) or loaded transposed and
// un-rotated (backward): a warp per (token, head) row holds its D / 4 float4
// chunks, and a chunk's rotary partner D / 2 further on is another lane's
// (a shuffle forward, a second load backward). The arithmetic is the
// separate kernels', in their order. Rows wider than 128 or not a multiple
// of 8, and unaligned pointers, run the three kernels instead.
//
// Heads without a norm (Llama's, Qwen2's) take the transpose and rotary
// alone in one pass, forward and backward (transposeRotary*).
//
//===----------------------------------------------------------------------===//

#include "NormRows.cuh"
#include "Profile.cuh"

#include <type_traits>

namespace rondo::cuda {

using namespace detail;

namespace {

constexpr int64_t kTransposeHeads[4] = {0, 2, 1, 3};

/// Where row r = (b, t, h) of [B, T, H, D] goes in [B, H, T, D], and its t.
/// In 32 bits where r fits (every real shape): a 64-bit division is a long
/// software sequence, and these kernels divide for every row.
struct HeadRows {
  int64_t T, H;
  __device__ int64_t transposed(int64_t r, int64_t &t) const {
    if (r <= int64_t(UINT32_MAX)) {
      uint32_t r32 = uint32_t(r), h32 = uint32_t(H), t32 = uint32_t(T);
      uint32_t h = r32 % h32, bt = r32 / h32;
      t = bt % t32;
      return (int64_t(bt / t32) * H + h) * T + t;
    }
    int64_t h = r % H, bt = r / H;
    t = bt % T;
    return (bt / T * H + h) * T + t;
  }
};

/// The lane holding the rotary partner (D / 2 further on, or back) of this
/// lane's chunk, in a warp whose first nq lanes hold a row.
__device__ inline int partnerLane(int lane, int64_t nq) {
  int64_t half = nq / 2;
  return lane < half ? lane + int(half) : (lane < nq ? lane - int(half) : lane);
}

/// Stores the normed row transposed and rotated (warp rows, one chunk per
/// lane); OutT __nv_bfloat16 for rmsNormRotaryToBf16 (the same fp32 values,
/// rounded as they are stored).
template <typename OutT> struct RotaryRowStore {
  OutT *y;
  const float *cosT, *sinT;
  HeadRows rows;
  template <int V, bool WarpRows>
  __device__ void operator()(int64_t r, int64_t width,
                             const RowGroup<WarpRows> &g,
                             const float4 (&o)[V]) const {
    if constexpr (V == 1 && WarpRows) {
      int64_t nq = width / 4;
      int lane = g.lane, partner = partnerLane(lane, nq);
      float4 a = o[0], p;
      p.x = __shfl_sync(0xffffffffu, a.x, partner);
      p.y = __shfl_sync(0xffffffffu, a.y, partner);
      p.z = __shfl_sync(0xffffffffu, a.z, partner);
      p.w = __shfl_sync(0xffffffffu, a.w, partner);
      if (lane >= nq)
        return;
      int64_t t, j = int64_t(lane) * 4;
      int64_t out = rows.transposed(r, t);
      float4 c = load4(cosT + t * width + j), s = load4(sinT + t * width + j);
      float4 v;
      // rotary's pair formulas, this lane's side of each pair.
      if (lane < nq / 2)
        v = make_float4(a.x * c.x - p.x * s.x, a.y * c.y - p.y * s.y,
                        a.z * c.z - p.z * s.z, a.w * c.w - p.w * s.w);
      else
        v = make_float4(a.x * c.x + p.x * s.x, a.y * c.y + p.y * s.y,
                        a.z * c.z + p.z * s.z, a.w * c.w + p.w * s.w);
      store4(y + out * width + j, v);
    } else {
      __trap(); // the host launches warp rows of one chunk per lane only
    }
  }
};

/// Loads row r's gradient from the transposed, rotated gradient: the
/// rotary backward of its [B, H, T, D] row (InT __nv_bfloat16 for
/// rmsNormRotaryBackwardBf16: the gradient widened as it is loaded).
template <typename InT> struct RotaryRowLoad {
  const InT *dy;
  const float *cosT, *sinT;
  HeadRows rows;
  template <int V, bool WarpRows>
  __device__ void operator()(int64_t r, int64_t width,
                             const RowGroup<WarpRows> &g,
                             float4 (&v)[V]) const {
    if constexpr (V == 1 && WarpRows) {
      int64_t nq = width / 4;
      int lane = g.lane;
      if (lane >= nq) {
        v[0] = make_float4(0.f, 0.f, 0.f, 0.f);
        return;
      }
      int64_t t, j = int64_t(lane) * 4, pj = int64_t(partnerLane(lane, nq)) * 4;
      int64_t in = rows.transposed(r, t);
      float4 a = load4(dy + in * width + j), p = load4(dy + in * width + pj);
      float4 c = load4(cosT + t * width + j), s = load4(sinT + t * width + pj);
      if (lane < nq / 2)
        v[0] = make_float4(a.x * c.x + p.x * s.x, a.y * c.y + p.y * s.y,
                           a.z * c.z + p.z * s.z, a.w * c.w + p.w * s.w);
      else
        v[0] = make_float4(a.x * c.x - p.x * s.x, a.y * c.y - p.y * s.y,
                           a.z * c.z - p.z * s.z, a.w * c.w - p.w * s.w);
    } else {
      __trap();
    }
  }
};

/// [B, T, H, D] and its transposed shape, checked against the call.
HeadRows headRows(const Shape &x, const Shape &transposed, const Shape &cos,
                  const char *name) {
  if (x.rank != 4 || transposed.rank != 4)
    contract(name, "needs [B, T, H, D] rows and their [B, H, T, D] transpose");
  for (int d = 0; d < 4; ++d)
    if (transposed.dims[d] != x.dims[kTransposeHeads[d]])
      contract(name, "[B, H, T, D] result does not transpose [B, T, H, D]");
  if (x.dims[3] % 2 != 0)
    contract(name, "head dimension %lld is odd", (long long)x.dims[3]);
  if (cos.rank != 2 || cos.dims[0] < x.dims[1] || cos.dims[1] != x.dims[3])
    contract(name, "rotary table is not [T, D]");
  return HeadRows{x.dims[1], x.dims[2]};
}

/// Whether the fused kernels take this head width and these pointers.
bool fusedRows(int64_t width, std::initializer_list<const void *> ptrs,
               RowConfig &rc) {
  return width % 8 == 0 && rowConfig(width, rc) && rc.warpRows && rc.v == 1 &&
         rowsAligned(ptrs);
}

} // namespace

namespace {

/// rmsNormRotary of x (fp32, or bf16 where its product stored it so) into y
/// (fp32, or bf16 rounded as it is stored).
template <typename XT, typename OutT>
void rmsNormRotaryImpl(const XT *xData, const Shape &xShape, CFView w,
                       float eps, CFView cos, CFView sin, OutT *y,
                       const Shape &yShape, const char *name) {
  HeadRows hr = headRows(xShape, yShape, cos.shape, name);
  int64_t rows, width;
  rowsOf(xShape, rows, width);
  if (rows == 0)
    return;
  RowConfig rc;
  bool fused = fusedRows(width, {xData, w.data, cos.data, sin.data, y}, rc);
  if constexpr (!std::is_same_v<XT, float>) {
    if (!fused) {
      // The general kernels read fp32: x widened first.
      WidenedBf16 wide(xData, rows * width, name);
      rmsNormRotaryImpl(wide.data(), xShape, w, eps, cos, sin, y, yShape, name);
      return;
    }
  } else if (!fused) {
    CFView x{xData, xShape};
    Temp normed(size_t(rows * width) * sizeof(float), name),
        moved(size_t(rows * width) * sizeof(float), name),
        rotated(std::is_same_v<OutT, float>
                    ? 0
                    : size_t(rows * width) * sizeof(float),
                name);
    FView n{normed.as<float>(), x.shape}, t{moved.as<float>(), yShape};
    ::rondo::cuda::rmsNorm(x, w, eps, n);
    ::rondo::cuda::transpose(CFView{n.data, n.shape}, kTransposeHeads, t);
    if constexpr (std::is_same_v<OutT, float>) {
      ::rondo::cuda::rotary(CFView{t.data, t.shape}, cos, sin,
                            FView{y, yShape});
    } else {
      FView r{rotated.as<float>(), yShape};
      ::rondo::cuda::rotary(CFView{t.data, t.shape}, cos, sin, r);
      roundToBf16Copy(r.data, y, rows * width, name);
    }
    rotated.release();
    normed.release();
    moved.release();
    return;
  }
  rmsNormVecKernel<1, true>
      <<<gridFor(rows, rc.threads / 32), rc.threads, 0, currentStream()>>>(
          RowLoadOf<XT>{xData}, w.data, eps,
          RotaryRowStore<OutT>{y, cos.data, sin.data, hr}, rows, width);
  checkLaunch(name);
}

} // namespace

void rmsNormRotary(CFView x, CFView w, float eps, CFView cos, CFView sin,
                   FView y) {
  ProfileScope profileScope("rmsNormRotary");
  rmsNormRotaryImpl(x.data, x.shape, w, eps, cos, sin, y.data, y.shape,
                    "rmsNormRotary");
}

void rmsNormRotaryToBf16(CFView x, CFView w, float eps, CFView cos, CFView sin,
                         BView y) {
  // The query and key heads attention reads in bf16 (kern-bf16-storage):
  // stored rounded, where attention used to round an fp32 copy of them.
  ProfileScope profileScope("rmsNormRotaryToBf16");
  rmsNormRotaryImpl(x.data, x.shape, w, eps, cos, sin, bf16Data(y), y.shape,
                    "rmsNormRotaryToBf16");
}

void rmsNormRotaryBf16ToBf16(CBView x, CFView w, float eps, CFView cos,
                             CFView sin, BView y) {
  // The query or key projection stored in bf16 by its product (kern-bf16-
  // storage), widened as it is loaded.
  ProfileScope profileScope("rmsNormRotaryToBf16");
  rmsNormRotaryImpl(bf16Data(x), x.shape, w, eps, cos, sin, bf16Data(y),
                    y.shape, "rmsNormRotaryBf16ToBf16");
}

namespace {

/// rmsNormRotaryBackward from dY [B, H, T, D] in fp32 or bf16.
/// dX as the kernels store it: fp32, or bf16 rounded as it is stored.
template <typename OutT> struct DxStoreOf { using type = PlainDxStore; };
template <> struct DxStoreOf<__nv_bfloat16> { using type = Bf16DxStore; };

/// rmsNormRotaryBackward from dY [B, H, T, D] in fp32 or bf16 (InT), dX
/// into fp32 or bf16 (OutT; null when skipped).
/// x in fp32, or in bf16 where its product stored it so (XT).
template <typename InT, typename OutT, typename XT = float>
void rmsNormRotaryBackwardImpl(const XT *xData, const Shape &xShape, CFView w,
                               float eps, CFView cos, CFView sin,
                               const InT *dYData, const Shape &dYShape,
                               OutT *dXData, FView dW, const char *name) {
  HeadRows hr = headRows(xShape, dYShape, cos.shape, name);
  int64_t rows, width;
  rowsOf(xShape, rows, width);
  RowConfig rc;
  bool fused =
      rows > 0 && (dXData || dW.data) &&
      fusedRows(width, {xData, w.data, cos.data, sin.data, dYData, dXData}, rc);
  if constexpr (!std::is_same_v<XT, float>) {
    if (!fused) {
      // The general kernels read fp32: x widened first.
      WidenedBf16 wide(xData, rows * width, name);
      rmsNormRotaryBackwardImpl(wide.data(), xShape, w, eps, cos, sin, dYData,
                                dYShape, dXData, dW, name);
      return;
    }
  } else if (!fused) {
    CFView x{xData, xShape};
    if constexpr (!std::is_same_v<OutT, float>) {
      // fp32 dX from the fp32-result path, rounded as it is stored.
      Temp gx(dXData ? size_t(rows * width) * sizeof(float) : 0, name);
      rmsNormRotaryBackwardImpl(x.data, x.shape, w, eps, cos, sin, dYData,
                                dYShape, dXData ? gx.as<float>() : nullptr, dW,
                                name);
      if (dXData)
        roundToBf16Copy(gx.as<float>(), dXData, rows * width, name);
      gx.release();
      return;
    }
    FView dX{reinterpret_cast<float *>(dXData), x.shape};
    Temp rotated(size_t(rows * width) * sizeof(float), name),
        normed(size_t(rows * width) * sizeof(float), name),
        wide(std::is_same_v<InT, float> ? 0
                                        : size_t(rows * width) * sizeof(float),
             name);
    const float *dy;
    if constexpr (std::is_same_v<InT, float>) {
      dy = dYData;
    } else {
      widenBf16Into(dYData, wide.as<float>(), rows * width, name);
      dy = wide.as<float>();
    }
    CFView dY{dy, dYShape};
    FView r{rotated.as<float>(), dY.shape}, n{normed.as<float>(), x.shape};
    if (rows > 0) {
      ::rondo::cuda::rotaryBackward(dY, cos, sin, r);
      ::rondo::cuda::transpose(CFView{r.data, r.shape}, kTransposeHeads, n);
    }
    ::rondo::cuda::rmsNormBackward(x, w, eps, CFView{n.data, n.shape}, dX, dW);
    wide.release();
    rotated.release();
    normed.release();
    return;
  }
  int64_t tileRows = normTileRows(rows, 8);
  int64_t tiles = (rows + tileRows - 1) / tileRows;
  bool staged = dW.data && tiles > 1;
  Temp partial(staged ? size_t(tiles * width) * sizeof(double) : 0, name);
  double *part = staged ? partial.as<double>() : nullptr;
  float *direct = dW.data && !staged ? dW.data : nullptr;
  rmsNormBwdVecKernel<1, true>
      <<<unsigned(tiles), rc.threads, 0, currentStream()>>>(
          xData, w.data, eps,
          RotaryRowLoad<InT>{dYData, cos.data, sin.data, hr},
          typename DxStoreOf<OutT>::type{dXData}, rows, width, tileRows, part,
          direct);
  checkLaunch(name);
  if (staged)
    finishColumnTiles(part, tiles, width, dW.data, name);
  partial.release();
}

} // namespace

void rmsNormRotaryBackward(CFView x, CFView w, float eps, CFView cos,
                           CFView sin, CFView dY, FView dX, FView dW) {
  ProfileScope profileScope("rmsNormRotaryBackward");
  rmsNormRotaryBackwardImpl(x.data, x.shape, w, eps, cos, sin, dY.data,
                            dY.shape, dX.data, dW, "rmsNormRotaryBackward");
}

void rmsNormRotaryBackwardToBf16(CFView x, CFView w, float eps, CFView cos,
                                 CFView sin, CFView dY, BView dX, FView dW) {
  // dX read only by the projections' products (kern-bf16-storage).
  ProfileScope profileScope("rmsNormRotaryBackward");
  rmsNormRotaryBackwardImpl(x.data, x.shape, w, eps, cos, sin, dY.data,
                            dY.shape, bf16Data(dX), dW,
                            "rmsNormRotaryBackwardToBf16");
}

void rmsNormRotaryBackwardBf16ToBf16(CFView x, CFView w, float eps, CFView cos,
                                     CFView sin, CBView dY, BView dX,
                                     FView dW) {
  ProfileScope profileScope("rmsNormRotaryBackward");
  rmsNormRotaryBackwardImpl(x.data, x.shape, w, eps, cos, sin, bf16Data(dY),
                            dY.shape, bf16Data(dX), dW,
                            "rmsNormRotaryBackwardBf16ToBf16");
}

void rmsNormRotaryBf16BackwardBf16ToBf16(CBView x, CFView w, float eps,
                                         CFView cos, CFView sin, CBView dY,
                                         BView dX, FView dW) {
  // The projection's result as its product stored it, in bf16 (the forward
  // read it so too: rmsNormRotaryBf16ToBf16).
  ProfileScope profileScope("rmsNormRotaryBackward");
  rmsNormRotaryBackwardImpl(bf16Data(x), x.shape, w, eps, cos, sin,
                            bf16Data(dY), dY.shape, bf16Data(dX), dW,
                            "rmsNormRotaryBf16BackwardBf16ToBf16");
}

void rmsNormRotaryBackwardBf16(CFView x, CFView w, float eps, CFView cos,
                               CFView sin, CBView dY, FView dX, FView dW) {
  // Attention's query and key gradients as cuDNN stores them (kern-bf16-
  // storage): the same values rmsNormRotaryBackward read widened.
  ProfileScope profileScope("rmsNormRotaryBackward");
  rmsNormRotaryBackwardImpl(x.data, x.shape, w, eps, cos, sin, bf16Data(dY),
                            dY.shape, dX.data, dW, "rmsNormRotaryBackwardBf16");
}

//===----------------------------------------------------------------------===//
// Heads without a norm (Llama, Qwen2): head transpose and rotary
//===----------------------------------------------------------------------===//

namespace {

/// One thread per four pairs (j..j+3, j+D/2..j+D/2+3) of one row: forward
/// reads row r of x [B, T, H, D] and writes its transposed row of y
/// [B, H, T, D]; backward reads the transposed row of dY and writes row r
/// of dX. The arithmetic is rotaryVecKernel's (rotateFourPairs), so the fused
/// kernel gives the bits of transpose then rotary, and of rotaryBackward then
/// transpose. D % 8 == 0 and every pointer 16-byte aligned.
template <bool Backward, typename InT, typename OutT>
__global__ void transposeRotaryVecKernel(const InT *in, const float *cosT,
                                         const float *sinT, OutT *out,
                                         int64_t rows, int64_t D, HeadRows hr) {
  int64_t h = D / 2, hv = h / 4;
  RONDO_GRID_STRIDE(v, rows * hv) {
    int64_t r, q, t;
    divMod(v, hv, r, q);
    int64_t moved = hr.transposed(r, t);
    int64_t from = Backward ? moved : r, to = Backward ? r : moved;
    rotateFourPairs(in + from * D, cosT + t * D, sinT + t * D, out + to * D,
                    q * 4, h, Backward);
  }
}

/// The same, one thread per pair, for any even D and any alignment.
template <bool Backward, typename InT, typename OutT>
__global__ void
transposeRotaryPairKernel(const InT *in, const float *cosT, const float *sinT,
                          OutT *out, int64_t rows, int64_t D, HeadRows hr) {
  int64_t h = D / 2;
  RONDO_GRID_STRIDE(v, rows * h) {
    int64_t r, j, t;
    divMod(v, h, r, j);
    int64_t moved = hr.transposed(r, t);
    int64_t from = Backward ? moved : r, to = Backward ? r : moved;
    const InT *xr = in + from * D;
    const float *c = cosT + t * D, *s = sinT + t * D;
    float ya, yb;
    rotatePair(loadIn(xr + j), loadIn(xr + j + h), c[j], c[j + h], s[j],
               s[j + h], Backward, ya, yb);
    storeOut(out + to * D + j, ya);
    storeOut(out + to * D + j + h, yb);
  }
}

/// transposeRotary (forward: x [B, T, H, D] to y [B, H, T, D]) or its
/// backward (dY [B, H, T, D] to dX [B, T, H, D]), each side fp32 or bf16.
template <bool Backward, typename InT, typename OutT>
void transposeRotaryImpl(const InT *in, const Shape &inShape, CFView cos,
                         CFView sin, OutT *out, const Shape &outShape,
                         const char *name) {
  const Shape &rowsShape = Backward ? outShape : inShape;
  HeadRows hr =
      headRows(rowsShape, Backward ? inShape : outShape, cos.shape, name);
  int64_t D = rowsShape.dims[3],
          rows = rowsShape.numel() / std::max<int64_t>(D, 1);
  if (rows == 0 || D == 0)
    return;
  if (D % 8 == 0 && rowsAligned({in, cos.data, sin.data, out})) {
    transposeRotaryVecKernel<Backward>
        <<<gridFor(rows * (D / 8)), kThreads, 0, currentStream()>>>(
            in, cos.data, sin.data, out, rows, D, hr);
  } else {
    transposeRotaryPairKernel<Backward>
        <<<gridFor(rows * (D / 2)), kThreads, 0, currentStream()>>>(
            in, cos.data, sin.data, out, rows, D, hr);
  }
  checkLaunch(name);
}

} // namespace

void transposeRotary(CFView x, CFView cos, CFView sin, FView y) {
  ProfileScope profileScope("transposeRotary");
  transposeRotaryImpl<false>(x.data, x.shape, cos, sin, y.data, y.shape,
                             "transposeRotary");
}

void transposeRotaryToBf16(CFView x, CFView cos, CFView sin, BView y) {
  // The heads attention reads in bf16 (kern-bf16-storage), rounded as they
  // are stored.
  ProfileScope profileScope("transposeRotary");
  transposeRotaryImpl<false>(x.data, x.shape, cos, sin, bf16Data(y), y.shape,
                             "transposeRotaryToBf16");
}

void transposeRotaryBf16ToBf16(CBView x, CFView cos, CFView sin, BView y) {
  // The projection as its product stored it, widened as it is loaded.
  ProfileScope profileScope("transposeRotary");
  transposeRotaryImpl<false>(bf16Data(x), x.shape, cos, sin, bf16Data(y),
                             y.shape, "transposeRotaryBf16ToBf16");
}

void transposeRotaryBackward(CFView dY, CFView cos, CFView sin, FView dX) {
  ProfileScope profileScope("transposeRotaryBackward");
  transposeRotaryImpl<true>(dY.data, dY.shape, cos, sin, dX.data, dX.shape,
                            "transposeRotaryBackward");
}

void transposeRotaryBackwardBf16(CBView dY, CFView cos, CFView sin, FView dX) {
  // Attention's query and key gradients as it stores them in bf16.
  ProfileScope profileScope("transposeRotaryBackward");
  transposeRotaryImpl<true>(bf16Data(dY), dY.shape, cos, sin, dX.data, dX.shape,
                            "transposeRotaryBackwardBf16");
}

void transposeRotaryBackwardToBf16(CFView dY, CFView cos, CFView sin,
                                   BView dX) {
  // dX read only by the projections' products (kern-bf16-storage).
  ProfileScope profileScope("transposeRotaryBackward");
  transposeRotaryImpl<true>(dY.data, dY.shape, cos, sin, bf16Data(dX), dX.shape,
                            "transposeRotaryBackwardToBf16");
}

void transposeRotaryBackwardBf16ToBf16(CBView dY, CFView cos, CFView sin,
                                       BView dX) {
  ProfileScope profileScope("transposeRotaryBackward");
  transposeRotaryImpl<true>(bf16Data(dY), dY.shape, cos, sin, bf16Data(dX),
                            dX.shape, "transposeRotaryBackwardBf16ToBf16");
}

} // namespace rondo::cuda
