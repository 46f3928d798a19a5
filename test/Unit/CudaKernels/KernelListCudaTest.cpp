//===- KernelListCudaTest.cpp - The CUDA library against the list --------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Every kernel of KernelList.def exists in the CUDA library (taking each
// address makes a missing one a link error of this test), and the kernels
// the kernel-call layer added match their CPU twins exactly: they move or
// select values, so there is no rounding to tolerate.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

#include <limits>

namespace {

/// A device copy of host data, copied back by `host()`.
template <class T> struct Dev {
  T *p = nullptr;
  size_t n;
  explicit Dev(const std::vector<T> &h) : n(h.size()) {
    cudaMalloc(&p, n * sizeof(T) + 1);
    cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  explicit Dev(size_t count) : n(count) { cudaMalloc(&p, n * sizeof(T) + 1); }
  ~Dev() { cudaFree(p); }
  std::vector<T> host() const {
    cudaDeviceSynchronize();
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

TEST(KernelListCuda, EveryListedKernelIsDefined) {
  using namespace rondo::cuda;
  std::vector<const void *> kernels = {
#define RONDO_KERNEL(NAME, PARAMS)                                             \
  reinterpret_cast<const void *>(static_cast<void(*) PARAMS>(&cu::NAME)),
#include "KernelList.def"
  };
  for (const void *k : kernels)
    EXPECT_NE(k, nullptr);
}

TEST(KernelListCuda, NewKernelsMatchTheCpuBitwise) {
  if (!cuda_test::gpuAvailable())
    GTEST_SKIP() << "no GPU";
  Shape s{2, 3, 4};
  std::vector<int64_t> x(24);
  for (int k = 0; k < 24; ++k)
    x[k] = 1000 - 7 * k;
  Dev<int64_t> dx(x);

  const int64_t perm[] = {2, 0, 1};
  std::vector<int64_t> want(24);
  cpu::transposeInts({x.data(), s}, perm, {want.data(), Shape{4, 2, 3}});
  Dev<int64_t> dt(24);
  cu::transposeInts({dx.p, s}, perm, {dt.p, Shape{4, 2, 3}});
  EXPECT_EQ(dt.host(), want);

  const int64_t starts[] = {1, 2, 3}, steps[] = {1, -1, -2};
  want.assign(4, 0);
  cpu::sliceInts({x.data(), s}, starts, steps, {want.data(), Shape{1, 2, 2}});
  Dev<int64_t> ds(4);
  cu::sliceInts({dx.p, s}, starts, steps, {ds.p, Shape{1, 2, 2}});
  EXPECT_EQ(ds.host(), want);

  want.assign(48, 0);
  cpu::broadcastInts({x.data(), s}, {want.data(), Shape{2, 2, 3, 4}});
  Dev<int64_t> db(48);
  cu::broadcastInts({dx.p, s}, {db.p, Shape{2, 2, 3, 4}});
  EXPECT_EQ(db.host(), want);

  IView parts[] = {{x.data(), Shape{2, 3, 1}}, {x.data() + 6, Shape{2, 3, 3}}};
  IView dparts[] = {{dx.p, Shape{2, 3, 1}}, {dx.p + 6, Shape{2, 3, 3}}};
  want.assign(24, 0);
  cpu::concatInts(parts, 2, 2, {want.data(), s});
  Dev<int64_t> dc(24);
  cu::concatInts(dparts, 2, 2, {dc.p, s});
  EXPECT_EQ(dc.host(), want);

  std::vector<int64_t> cond = {1, 0, 0, 1};
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {-1, -2};
  std::vector<float> sel(8);
  cpu::select({cond.data(), Shape{4}}, {a.data(), Shape{2, 4}},
              {b.data(), Shape{2, 1}}, {sel.data(), Shape{2, 4}});
  Dev<int64_t> dcond(cond);
  Dev<float> da(a), dbb(b), dsel(8);
  cu::select({dcond.p, Shape{4}}, {da.p, Shape{2, 4}}, {dbb.p, Shape{2, 1}},
             {dsel.p, Shape{2, 4}});
  EXPECT_EQ(dsel.host(), sel);

  float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, std::nanf(""), inf, -inf, -0.0f};
  std::vector<int64_t> nan(5);
  cpu::isNan({v.data(), Shape{5}}, {nan.data(), Shape{5}});
  Dev<float> dv(v);
  Dev<int64_t> dn(5);
  cu::isNan({dv.p, Shape{5}}, {dn.p, Shape{5}});
  EXPECT_EQ(dn.host(), nan);

  std::vector<float> c = {-9.0f, -7.0f, -1.5f, 7.0f, 8.0f, inf, std::nanf("")};
  std::vector<float> cdy = {1, 2, 3, 4, 5, 6, 7}, cy(7), cdx(7);
  cpu::clamp({c.data(), Shape{7}}, -7.0f, 7.0f, {cy.data(), Shape{7}});
  cpu::clampBackward({c.data(), Shape{7}}, {cdy.data(), Shape{7}}, -7.0f, 7.0f,
                     {cdx.data(), Shape{7}});
  Dev<float> dcl(c), dcdy(cdy), dcy(7), dcdx(7);
  cu::clamp({dcl.p, Shape{7}}, -7.0f, 7.0f, {dcy.p, Shape{7}});
  cu::clampBackward({dcl.p, Shape{7}}, {dcdy.p, Shape{7}}, -7.0f, 7.0f,
                    {dcdx.p, Shape{7}});
  std::vector<float> gy = dcy.host();
  EXPECT_EQ(0, std::memcmp(gy.data(), cy.data(), cy.size() * 4));
  EXPECT_EQ(dcdx.host(), cdx);

  std::vector<float> mask(2 * 3 * 5);
  cpu::causalMask({mask.data(), Shape{2, 3, 5}}, 0);
  Dev<float> dm(mask.size());
  cu::causalMask({dm.p, Shape{2, 3, 5}}, 0);
  std::vector<float> got = dm.host();
  EXPECT_EQ(0, std::memcmp(got.data(), mask.data(), mask.size() * 4));
}

} // namespace
