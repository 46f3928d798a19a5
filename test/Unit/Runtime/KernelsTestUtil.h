//===- KernelsTestUtil.h - Helpers of the CPU kernel tests -------*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Tensors, seeded random inputs, NumPy broadcasting and the finite-difference
// gradient check shared by KernelsTest.cpp and KernelsStructuresTest.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_RUNTIME_KERNELSTESTUTIL_H
#define RONDO_TEST_UNIT_RUNTIME_KERNELSTESTUTIL_H

#include "../Common/KernelTestTensor.h"
#include "Kernels.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace rondo::cpu::test {

//===----------------------------------------------------------------------===//
// Test helpers
//===----------------------------------------------------------------------===//

struct Ids {
  Shape shape;
  std::vector<int64_t> data;
  IView v() const { return IView{data.data(), shape}; }
};

inline std::mt19937 &rng() { return seededRng(12345); }

inline Tensor uniform(Shape s, float lo = -1.0f, float hi = 1.0f) {
  return uniformFrom(rng(), s, lo, hi);
}

/// Uniform in [lo, hi] with |x| >= gap (values near 0 are pushed out).
inline Tensor uniformAwayFromZero(Shape s, float lo, float hi, float gap) {
  Tensor t = uniform(s, lo, hi);
  for (float &x : t.data)
    if (std::fabs(x) < gap)
      x = x < 0 ? x - gap : x + gap;
  return t;
}

inline std::vector<int64_t> unravel(int64_t index, const Shape &s) {
  std::vector<int64_t> idx(size_t(s.rank));
  for (int d = s.rank - 1; d >= 0; --d) {
    idx[size_t(d)] = index % s.dims[d];
    index /= s.dims[d];
  }
  return idx;
}

/// Linear index into `in` of the element that broadcasts to out[outIdx].
inline int64_t broadcastIndex(const Shape &in, const Shape &out,
                              const std::vector<int64_t> &outIdx) {
  int shift = out.rank - in.rank;
  int64_t lin = 0;
  for (int d = 0; d < in.rank; ++d) {
    int64_t i = in.dims[d] == 1 ? 0 : outIdx[size_t(d + shift)];
    lin = lin * in.dims[d] + i;
  }
  return lin;
}

inline Shape broadcastShapes(const Shape &a, const Shape &b) {
  Shape out;
  out.rank = std::max(a.rank, b.rank);
  for (int d = 0; d < out.rank; ++d) {
    int da = d - (out.rank - a.rank), db = d - (out.rank - b.rank);
    int64_t ea = da >= 0 ? a.dims[da] : 1, eb = db >= 0 ? b.dims[db] : 1;
    out.dims[d] = ea == 1 ? eb : ea;
  }
  return out;
}

inline double maxAbs(const std::vector<float> &v) {
  double m = 0.0;
  for (float x : v)
    m = std::max(m, double(std::fabs(x)));
  return m;
}

inline double dotObjective(const Tensor &dOut, const Tensor &out) {
  double s = 0.0;
  for (int64_t i = 0; i < out.size(); ++i)
    s += double(dOut[i]) * out[i];
  return s;
}

/// Compares the analytic gradient `grad` of `objective` w.r.t. `x` with
/// central differences, to rtol * max|grad| (plus a tiny absolute slack).
/// When `samples` > 0 only that many evenly spread elements are checked.
/// The many forward evaluations run on one thread: they are tiny, so on a
/// busy machine thread start-up would dominate, and threaded results equal
/// single-threaded ones bitwise (see KernelDeterminism).
inline void checkGradient(const std::string &what, Tensor &x,
                          const std::vector<float> &grad,
                          const std::function<double()> &objective,
                          float eps = 1e-2f, double rtol = 2e-3,
                          int64_t samples = 0) {
  ASSERT_EQ(int64_t(grad.size()), x.size()) << what;
  double tol = rtol * maxAbs(grad) + 1e-6;
  int failures = 0;
  int64_t count = samples > 0 ? std::min(samples, x.size()) : x.size();
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  for (int64_t s = 0; s < count; ++s) {
    int64_t i = s * x.size() / count;
    float saved = x[i];
    float plus = saved + eps, minus = saved - eps;
    x[i] = plus;
    double fPlus = objective();
    x[i] = minus;
    double fMinus = objective();
    x[i] = saved;
    double numeric = (fPlus - fMinus) / (double(plus) - double(minus));
    if (std::fabs(numeric - grad[size_t(i)]) > tol && failures++ < 5)
      ADD_FAILURE() << what << ": element " << i << " analytic "
                    << grad[size_t(i)] << " numeric " << numeric << " (tol "
                    << tol << ")";
  }
  omp_set_num_threads(threads);
  EXPECT_EQ(failures, 0) << what;
}

inline void expectNear(const std::string &what, const std::vector<float> &got,
                       const std::vector<double> &want, double rtol = 1e-5,
                       double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = atol + rtol * std::fabs(want[i]);
    bool ok = std::fabs(double(got[i]) - want[i]) <= tol ||
              (std::isinf(want[i]) && double(got[i]) == want[i]);
    if (!ok && failures++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << got[i]
                    << " want " << want[i];
  }
  EXPECT_EQ(failures, 0) << what;
}

inline bool bitwiseEqual(const std::vector<float> &a,
                         const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
} // namespace rondo::cpu::test

#endif // RONDO_TEST_UNIT_RUNTIME_KERNELSTESTUTIL_H
