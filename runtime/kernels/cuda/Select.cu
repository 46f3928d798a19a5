//===- Select.cu - select and isNan ---------------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The NaN guard the exporter writes around attention (`where(isnan(x), 0, x)`)
// when attention recognition does not absorb it: one thread per output
// element, each operand read through its own broadcast walk.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "Profile.cuh"

namespace rondo::cuda {

using namespace detail;

namespace {
__global__ void selectKernel(const int64_t *cond, const float *a,
                             const float *b, float *out, int64_t n, Strided sc,
                             Strided sa, Strided sb) {
  RONDO_GRID_STRIDE(i, n) {
    out[i] = cond[stridedOffset(sc, i)] ? a[stridedOffset(sa, i)]
                                        : b[stridedOffset(sb, i)];
  }
}

__global__ void isNanKernel(const float *x, int64_t *out, int64_t n) {
  RONDO_GRID_STRIDE(i, n) { out[i] = isnan(x[i]) ? 1 : 0; }
}

/// The walk of an input broadcast to `out` (NumPy rules): strides 0 along
/// the broadcast dimensions.
Strided broadcastWalk(const Shape &in, const Shape &out, const char *name) {
  int64_t strides[kMaxRank] = {};
  kernels::broadcastStrides(in, out, strides,
                            [name](auto... args) { contract(name, args...); });
  return makeStrided(out, strides, 0);
}
} // namespace

void select(IView cond, CFView a, CFView b, FView out) {
  ProfileScope profileScope("select");
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  selectKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
      cond.data, a.data, b.data, out.data, n,
      broadcastWalk(cond.shape, out.shape, "select"),
      broadcastWalk(a.shape, out.shape, "select"),
      broadcastWalk(b.shape, out.shape, "select"));
  checkLaunch("select");
}

void isNan(CFView x, MIView out) {
  ProfileScope profileScope("isNan");
  int64_t n = out.shape.numel();
  if (n == 0)
    return;
  isNanKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(x.data, out.data,
                                                            n);
  checkLaunch("isNan");
}

} // namespace rondo::cuda
