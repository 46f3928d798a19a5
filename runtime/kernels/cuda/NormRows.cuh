//===- NormRows.cuh - Rows held in registers, for norm kernels -*- CUDA -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The register-row machinery of Norms.cu's fast paths (its header comment
// gives the design), shared with NormRotary.cu: a row per warp or per block,
// float4 chunks in registers, the fixed-order tile sums of a weight
// gradient. The rmsNorm kernels take how their result row is stored and how
// their gradient row is loaded as parameters, so a fused kernel changes only
// where rows come from and go to, never the arithmetic.
//
// The backward kernels are bound by memory latency more than by bandwidth:
// what storing a row's dX reads (the residual gradient of AddDxStore) is
// loaded with the row, through the store's `prepare`, not after its two
// reductions. (The same for the rotary tables of the query/key forward made
// it 8% slower on W1, and several rows per warp at once, 1.7x slower: the
// registers cost more occupancy than the loads in flight gained.)
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_KERNELS_CUDA_NORMROWS_CUH
#define RONDO_RUNTIME_KERNELS_CUDA_NORMROWS_CUH

#include "Internal.cuh"

#include <initializer_list>
#include <type_traits>

namespace rondo::cuda::detail {

//===----------------------------------------------------------------------===//
// Fast paths: rows in registers
//===----------------------------------------------------------------------===//

/// Widest row of the register-row kernels (4 float4 per thread, 512 threads).
constexpr int64_t kMaxVecWidth = 8192;

/// A row is handled by a group: a warp (WarpRows, blocks of 256 threads, rows
/// of width <= 512) or the whole block. Thread `lane` of the group owns the
/// float4 chunks q = lane + k * groupSize, k < V, q < width / 4.
template <bool WarpRows> struct RowGroup {
  int size, lane, index, count; // threads, thread in group, group in block,
                                // groups per block
  __device__ RowGroup() {
    if (WarpRows) {
      size = 32;
      lane = threadIdx.x & 31;
      index = threadIdx.x >> 5;
      count = blockDim.x >> 5;
    } else {
      size = blockDim.x;
      lane = threadIdx.x;
      index = 0;
      count = 1;
    }
  }
};

template <bool WarpRows>
__device__ inline double groupSum(double v, double *scratch) {
  if (WarpRows)
    return warpSum(v);
  return blockSum(v, scratch);
}

/// Loads the owned chunks of a row (zeros past the end), fp32 or bf16
/// widened.
template <int V, typename T>
__device__ inline void loadRow(const T *row, int64_t nq, int lane, int size,
                               float4 (&v)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    int64_t q = lane + int64_t(k) * size;
    v[k] = q < nq ? load4(row + q * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

__device__ inline double sumSquares4(float4 v) {
  double s = double(v.x) * v.x;
  s += double(v.y) * v.y;
  s += double(v.z) * v.z;
  s += double(v.w) * v.w;
  return s;
}

/// Stores row r of a result where it came from: y[r * width + ...].
template <typename OutT> struct PlainRowStore {
  OutT *y;
  template <int V, bool WarpRows>
  __device__ void operator()(int64_t r, int64_t width,
                             const RowGroup<WarpRows> &g,
                             const float4 (&o)[V]) const {
    int64_t nq = width / 4;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * g.size;
      if (q < nq)
        store4(y + r * width + q * 4, o[k]);
    }
  }
};

/// Loads the gradient of row r from where the row is: dy[r * width + ...],
/// in fp32 or, where its products stored it so, in bf16 (widened).
template <typename T> struct RowLoadOf {
  const T *dy;
  template <int V, bool WarpRows>
  __device__ void operator()(int64_t r, int64_t width,
                             const RowGroup<WarpRows> &g,
                             float4 (&v)[V]) const {
    loadRow<V>(dy + r * width, width / 4, g.lane, g.size, v);
  }
};
using PlainRowLoad = RowLoadOf<float>;

/// Loads row r of a + b (binary Add's sums), storing the sums to `sum` as
/// it goes: the residual add in front of a norm (addRmsNorm).
/// b in fp32, or in bf16 where its product stored it so (addRmsNormBf16).
template <typename BT = float> struct AddRowLoad {
  const float *a;
  const BT *b;
  float *sum;
  template <int V, bool WarpRows>
  __device__ void operator()(int64_t r, int64_t width,
                             const RowGroup<WarpRows> &g,
                             float4 (&v)[V]) const {
    int64_t nq = width / 4;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * g.size;
      if (q >= nq) {
        v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        continue;
      }
      int64_t at = r * width + q * 4;
      float4 x = load4(a + at), y = load4(b + at);
      v[k] = make_float4(__fadd_rn(x.x, y.x), __fadd_rn(x.y, y.y),
                         __fadd_rn(x.z, y.z), __fadd_rn(x.w, y.w));
      store4(sum + at, v[k]);
    }
  }
};

/// Where the norm backward's dX goes: dx[r * width + ...] (none when null).
/// A dX store's `prepare` loads, with the row, what storing row r will read
/// (one float4 per chunk); this one reads nothing.
struct PlainDxStore {
  float *dx;
  __device__ bool wanted() const { return dx != nullptr; }
  template <int V, bool WarpRows>
  __device__ void prepare(int64_t, int64_t, const RowGroup<WarpRows> &,
                          float4 (&)[V]) const {}
  __device__ void operator()(int64_t at, float4 o, float4) const {
    store4(dx + at, o);
  }
};

/// dX rounded to bf16 as it is stored (rmsNormRotaryBackwardToBf16).
struct Bf16DxStore {
  __nv_bfloat16 *dx;
  __device__ bool wanted() const { return dx != nullptr; }
  template <int V, bool WarpRows>
  __device__ void prepare(int64_t, int64_t, const RowGroup<WarpRows> &,
                          float4 (&)[V]) const {}
  __device__ void operator()(int64_t at, float4 o, float4) const {
    store4(dx + at, o);
  }
};

/// dX added to the residual gradient as it is stored (binary Add's sums),
/// and the sums rounded to bf16 too when `copy` is set
/// (rmsNormBackwardAdd, rmsNormBackwardAddWithBf16).
struct AddDxStore {
  const float *residual;
  float *sum;
  __nv_bfloat16 *copy;
  __device__ bool wanted() const { return true; }
  /// The residual gradient of row r, loaded beside the row itself.
  template <int V, bool WarpRows>
  __device__ void prepare(int64_t r, int64_t width, const RowGroup<WarpRows> &g,
                          float4 (&pre)[V]) const {
    loadRow<V>(residual + r * width, width / 4, g.lane, g.size, pre);
  }
  __device__ void operator()(int64_t at, float4 o, float4 r) const {
    float4 s = make_float4(__fadd_rn(r.x, o.x), __fadd_rn(r.y, o.y),
                           __fadd_rn(r.z, o.z), __fadd_rn(r.w, o.w));
    store4(sum + at, s);
    if (copy)
      store4(copy + at, s);
  }
};

/// rmsNorm of each row (read by `load`), handed to `store` (chunks past the
/// row are zero).
template <int V, bool WarpRows, typename Load, typename Store>
__global__ void __launch_bounds__(512)
    rmsNormVecKernel(Load load, const float *w, float eps, Store store,
                     int64_t rows, int64_t width) {
  __shared__ double scratch[32];
  RowGroup<WarpRows> g;
  int64_t nq = width / 4;
  int64_t step = int64_t(gridDim.x) * g.count;
  for (int64_t r = int64_t(blockIdx.x) * g.count + g.index; r < rows;
       r += step) {
    float4 xv[V];
    load(r, width, g, xv);
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < V; ++k)
      ss += sumSquares4(xv[k]);
    ss = groupSum<WarpRows>(ss, scratch);
    float inv = float(1.0 / sqrt(ss / double(width) + double(eps)));
    float4 o[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * g.size;
      float4 xk = xv[k];
      if (q >= nq) {
        o[k] = make_float4(0.f, 0.f, 0.f, 0.f);
      } else if (w) {
        float4 wk = load4(w + q * 4);
        o[k] = make_float4(xk.x * inv * wk.x, xk.y * inv * wk.y,
                           xk.z * inv * wk.z, xk.w * inv * wk.w);
      } else {
        o[k] = make_float4(xk.x * inv, xk.y * inv, xk.z * inv, xk.w * inv);
      }
    }
    store(r, width, g, o);
  }
}

/// Rows per tile of the fused backward kernels: about 512 tiles (a few blocks
/// per SM; the per-tile partials stay a few percent of the traffic), at
/// least minRows (a warp-row block has 8 warps) and at most 256 rows.
/// Depends on the shape only.
inline int64_t normTileRows(int64_t rows, int64_t minRows) {
  int64_t t = (rows + 511) / 512;
  if (t < minRows)
    t = minRows;
  if (t > 256)
    t = 256;
  return t;
}

/// Writes a block's per-column tile sums: acc[k][i] is column 4 q + i of the
/// calling thread's chunk q = lane + k * groupSize. With warp rows the 8 warps'
/// sums (interleaved rows of the tile) are added in warp order through shared
/// memory. Output: partial[blockIdx.x * width + c] (double) when partial, else
/// direct[c] (float, the single-tile case). Called by every thread.
template <int V, bool WarpRows>
__device__ inline void writeTileSums(const double (&acc)[V][4],
                                     const RowGroup<WarpRows> &g, int64_t width,
                                     double *partial, float *direct) {
  int64_t nq = width / 4;
  if constexpr (WarpRows) {
    __shared__ double sums[8][32 * 4 * V];
    __syncthreads(); // a previous call may still be reading sums
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * 32;
      if (q < nq) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          sums[g.index][q * 4 + i] = acc[k][i];
      }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      double t = sums[0][c];
      for (int i = 1; i < g.count; ++i)
        t += sums[i][c];
      if (partial)
        partial[int64_t(blockIdx.x) * width + c] = t;
      else
        direct[c] = float(t);
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      int64_t q = g.lane + int64_t(k) * g.size;
      if (q >= nq)
        continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (partial)
          partial[int64_t(blockIdx.x) * width + q * 4 + i] = acc[k][i];
        else
          direct[q * 4 + i] = float(acc[k][i]);
      }
    }
  }
}

/// Fused rmsNorm backward over one tile of rows per block: dX (if dx) and,
/// if partial (or direct, with a single tile), the dW column sums of the
/// tile: partial[blockIdx.x * width + c] (double) or direct[c] (float).
template <int V, bool WarpRows, typename Load, typename DxStore,
          typename XT = float>
__global__ void __launch_bounds__(512)
    rmsNormBwdVecKernel(const XT *x, const float *w, float eps, Load dy,
                        DxStore dx, int64_t rows, int64_t width,
                        int64_t tileRows, double *partial, float *direct) {
  __shared__ double scratch[32];
  RowGroup<WarpRows> g;
  int64_t nq = width / 4;
  bool wantW = partial || direct;
  int64_t r0 = int64_t(blockIdx.x) * tileRows;
  int64_t r1 = r0 + tileRows < rows ? r0 + tileRows : rows;
  double acc[V][4];
#pragma unroll
  for (int k = 0; k < V; ++k)
    acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0;
  float4 wv[V];
  if (w && dx.wanted())
    loadRow<V>(w, nq, g.lane, g.size, wv);
  for (int64_t r = r0 + g.index; r < r1; r += g.count) {
    float4 xv[V], gv[V], pre[V];
    loadRow<V>(x + r * width, nq, g.lane, g.size, xv);
    dy(r, width, g, gv);
    if (dx.wanted())
      dx.prepare(r, width, g, pre);
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < V; ++k)
      ss += sumSquares4(xv[k]);
    ss = groupSum<WarpRows>(ss, scratch);
    double rinv = 1.0 / sqrt(ss / double(width) + double(eps));
    float inv = float(rinv);
    if (dx.wanted()) {
      double dot = 0.0;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float4 a = gv[k], b = xv[k];
        if (w) {
          a = make_float4(a.x * wv[k].x, a.y * wv[k].y, a.z * wv[k].z,
                          a.w * wv[k].w);
        }
        dot += double(a.x) * b.x;
        dot += double(a.y) * b.y;
        dot += double(a.z) * b.z;
        dot += double(a.w) * b.w;
      }
      dot = groupSum<WarpRows>(dot, scratch);
      float ac = float(rinv);
      float bcoef = float(rinv * rinv * rinv * dot / double(width));
#pragma unroll
      for (int k = 0; k < V; ++k) {
        int64_t q = g.lane + int64_t(k) * g.size;
        if (q >= nq)
          continue;
        float4 gk = gv[k], xk = xv[k], o;
        if (w) {
          float4 wk = wv[k];
          o = make_float4(ac * (gk.x * wk.x) - bcoef * xk.x,
                          ac * (gk.y * wk.y) - bcoef * xk.y,
                          ac * (gk.z * wk.z) - bcoef * xk.z,
                          ac * (gk.w * wk.w) - bcoef * xk.w);
        } else {
          o = make_float4(ac * gk.x - bcoef * xk.x, ac * gk.y - bcoef * xk.y,
                          ac * gk.z - bcoef * xk.z, ac * gk.w - bcoef * xk.w);
        }
        dx(r * width + q * 4, o, pre[k]);
      }
    }
    if (wantW) {
      double di = double(inv);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        acc[k][0] += double(gv[k].x) * xv[k].x * di;
        acc[k][1] += double(gv[k].y) * xv[k].y * di;
        acc[k][2] += double(gv[k].z) * xv[k].z * di;
        acc[k][3] += double(gv[k].w) * xv[k].w * di;
      }
    }
  }
  if (wantW)
    writeTileSums<V, WarpRows>(acc, g, width, partial, direct);
}

/// The register-row configuration of a row width: float4 chunks per thread
/// (1, 2 or 4), a warp or a block per row, threads per block. False when the
/// width does not qualify (width % 4 != 0, or wider than kMaxVecWidth).
struct RowConfig {
  int v = 1;
  bool warpRows = false;
  int threads = 256;
};

inline bool rowConfig(int64_t width, RowConfig &c) {
  if (width <= 0 || width % 4 != 0 || width > kMaxVecWidth)
    return false;
  int64_t nq = width / 4;
  if (nq <= 128) {
    // 256 threads = 8 warps (writeTileSums' shared sums assume 8).
    c.warpRows = true;
    c.threads = 256;
    c.v = nq <= 32 ? 1 : (nq <= 64 ? 2 : 4);
    return true;
  }
  // A block per row: one chunk per thread up to 512 threads (V = 1 keeps the
  // backward kernels near 50 registers; V = 2 / 4 take about 94 / 128).
  c.warpRows = false;
  c.threads = nq <= 256 ? 256 : 512;
  c.v = nq <= 512 ? 1 : (nq <= 1024 ? 2 : 4);
  return true;
}

/// Calls launch(V, WarpRows) with compile-time constants for a config.
template <typename Launch>
void dispatchRows(const RowConfig &c, Launch &&launch) {
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Four = std::integral_constant<int, 4>;
  if (c.warpRows) {
    if (c.v == 1)
      launch(One{}, std::true_type{});
    else if (c.v == 2)
      launch(Two{}, std::true_type{});
    else
      launch(Four{}, std::true_type{});
  } else {
    if (c.v == 1)
      launch(One{}, std::false_type{});
    else if (c.v == 2)
      launch(Two{}, std::false_type{});
    else
      launch(Four{}, std::false_type{});
  }
}

/// Whether the fast row kernels may touch these pointers as float4.
inline bool rowsAligned(std::initializer_list<const void *> ptrs) {
  for (const void *p : ptrs)
    if (!aligned16(p))
      return false;
  return true;
}

__device__ inline void rotatePair(float a, float b, float ca, float cb,
                                  float sa, float sb, bool backward, float &ya,
                                  float &yb) {
  // a = x[j], b = x[j + D/2]: the general kernel's two formulas.
  if (!backward) {
    ya = a * ca - b * sa;
    yb = b * cb + a * sb;
  } else {
    ya = a * ca + b * sb;
    yb = b * cb - a * sa;
  }
}

/// Four pairs (j..j+3, j+h..j+h+3) of the row `x` (fp32 or bf16, widened)
/// rotated with the tables `c` and `s` of its position, stored into `y`'s row
/// (fp32, or bf16 rounded as it is stored): the vectorised rotary and its
/// head-transposing forms. x, c, s and y 16-byte aligned rows, j % 4 == 0.
template <typename InT, typename OutT>
__device__ inline void rotateFourPairs(const InT *x, const float *c,
                                       const float *s, OutT *y, int64_t j,
                                       int64_t h, bool backward) {
  float4 a = load4(x + j), b = load4(x + j + h);
  float4 ca = load4(c + j), cb = load4(c + j + h);
  float4 sa = load4(s + j), sb = load4(s + j + h);
  float4 ya, yb;
  rotatePair(a.x, b.x, ca.x, cb.x, sa.x, sb.x, backward, ya.x, yb.x);
  rotatePair(a.y, b.y, ca.y, cb.y, sa.y, sb.y, backward, ya.y, yb.y);
  rotatePair(a.z, b.z, ca.z, cb.z, sa.z, sb.z, backward, ya.z, yb.z);
  rotatePair(a.w, b.w, ca.w, cb.w, sa.w, sb.w, backward, ya.w, yb.w);
  store4(y + j, ya);
  store4(y + j + h, yb);
}

} // namespace rondo::cuda::detail

#endif // RONDO_RUNTIME_KERNELS_CUDA_NORMROWS_CUH
