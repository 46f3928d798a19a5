//===- Matmul.cpp - Batched matrix multiplication -------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One cblas_sgemm per batch entry, with broadcast batch dimensions walked at
// stride 0. When b is shared by every batch entry and a is neither broadcast
// nor transposed (the x·W of every linear layer), the batch folds into M and
// the whole product is one large sgemm, which is what OpenBLAS is fast at.
// The fold depends only on the shapes, so it never changes results between
// runs or thread counts. OpenBLAS does not split the K reduction across its
// threads, so each output element is still reduced by one thread.
//
// Rank-1 operands follow NumPy: a vector a is a row [1, K] whose M dimension
// is dropped from the output, a vector b is a column [K, 1] whose N dimension
// is dropped; transA/transB are ignored for them.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cblas.h>

namespace rondo::cpu {

void matmul(CFView a, CFView b, FView out, bool transA, bool transB,
            bool accumulate) {
  auto [M, K, N, outBatch, aBatch, bBatch] = kernels::matmulSizes(
      a.shape, b.shape, out.shape, transA, transB,
      [](auto... args) { detail::contract("matmul", args...); });
  int64_t batch = outBatch.numel();
  if (batch == 0 || M == 0 || N == 0)
    return;
  if (K == 0) {
    if (!accumulate)
      std::fill(out.data, out.data + batch * M * N, 0.0f);
    return;
  }

  float beta = accumulate ? 1.0f : 0.0f;
  int lda = int(transA ? M : K);
  int ldb = int(transB ? K : N);
  int ldc = int(N);
  CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;

  if (bBatch.numel() == 1 && aBatch.numel() == batch && !transA) {
    cblas_sgemm(CblasRowMajor, ta, tb, int(batch * M), int(N), int(K), 1.0f,
                a.data, lda, b.data, ldb, beta, out.data, ldc);
    return;
  }

  Shape inputs[2] = {aBatch, bBatch};
  detail::BroadcastSpace space(outBatch, inputs, 2);
  int64_t aMat = M * K, bMat = K * N, cMat = M * N;
  int64_t inner = space.inner();
  int64_t offsets[detail::BroadcastSpace::kMaxOperands];
  for (int64_t r = 0, rows = space.rows(); r < rows; ++r) {
    space.rowOffsets(r, offsets);
    for (int64_t i = 0; i < inner; ++i) {
      const float *pa = a.data + (offsets[1] + i * space.innerStride(1)) * aMat;
      const float *pb = b.data + (offsets[2] + i * space.innerStride(2)) * bMat;
      float *pc = out.data + (offsets[0] + i * space.innerStride(0)) * cMat;
      cblas_sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), 1.0f, pa, lda,
                  pb, ldb, beta, pc, ldc);
    }
  }
}

} // namespace rondo::cpu
