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
  const Shape &as = a.shape, &bs = b.shape, &os = out.shape;
  int ra = as.rank, rb = bs.rank;
  if (ra < 1 || rb < 1)
    detail::fatal("matmul: operands must have rank >= 1");
  int64_t M, K, N, Kb;
  if (ra == 1) {
    M = 1;
    K = as.dims[0];
    transA = false;
  } else {
    M = transA ? as.dims[ra - 1] : as.dims[ra - 2];
    K = transA ? as.dims[ra - 2] : as.dims[ra - 1];
  }
  if (rb == 1) {
    N = 1;
    Kb = bs.dims[0];
    transB = false;
  } else {
    Kb = transB ? bs.dims[rb - 1] : bs.dims[rb - 2];
    N = transB ? bs.dims[rb - 2] : bs.dims[rb - 1];
  }
  if (K != Kb)
    detail::fatal("matmul: contraction sizes differ (%lld vs %lld)",
                  (long long)K, (long long)Kb);
  int matDims = (ra > 1 ? 1 : 0) + (rb > 1 ? 1 : 0);
  if (os.rank < matDims)
    detail::fatal("matmul: output rank %d too small", os.rank);
  if ((ra > 1 && rb > 1 &&
       (os.dims[os.rank - 2] != M || os.dims[os.rank - 1] != N)) ||
      (ra > 1 && rb == 1 && os.dims[os.rank - 1] != M) ||
      (ra == 1 && rb > 1 && os.dims[os.rank - 1] != N))
    detail::fatal("matmul: output shape does not match operands");
  Shape outBatch(os.dims, os.rank - matDims);
  Shape aBatch(as.dims, ra > 2 ? ra - 2 : 0);
  Shape bBatch(bs.dims, rb > 2 ? rb - 2 : 0);
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
