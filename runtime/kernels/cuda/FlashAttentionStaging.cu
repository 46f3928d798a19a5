//===- FlashAttentionStaging.cu - bf16 copies the attention kernels read --===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The staging of FlashAttention.cu's header comment: q, k, v (and dO) rounded
// to bf16 (nearest even) into stream-ordered temporaries with their rows
// padded to kPad, and for the wgmma kernels also transposed ([mats, D,
// rowsPad]) from the same read.
//
//===----------------------------------------------------------------------===//

#include "FlashAttention.cuh"

namespace rondo::cuda::detail::flash {

namespace {

/// dst [mats, rowsPad, D] bf16 = src [mats, rows, D] rounded to nearest even,
/// zero rows from `rows` on. One thread per 8 elements (16 bytes out).
__global__ void toBf16PaddedKernel(const float *src, bf16 *dst, int64_t mats,
                                   int rows, int rowsPad, int D) {
  const int chunks = D / 8;
  const int64_t n = mats * rowsPad * chunks;
  const bool aligned = (reinterpret_cast<uintptr_t>(src) & 15) == 0;
  RONDO_GRID_STRIDE(idx, n) {
    const int c = int(idx % chunks);
    const int64_t mr = idx / chunks;
    const int r = int(mr % rowsPad);
    const int64_t m = mr / rowsPad;
    float x[8];
    if (r < rows) {
      const float *s = src + (m * rows + r) * D + c * 8;
      if (aligned) {
        float4 lo = *reinterpret_cast<const float4 *>(s);
        float4 hi = *reinterpret_cast<const float4 *>(s + 4);
        x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w;
        x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[e] = s[e];
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[e] = 0.0f;
    }
    uint4 out;
    out.x = packBf16(x[0], x[1]);
    out.y = packBf16(x[2], x[3]);
    out.z = packBf16(x[4], x[5]);
    out.w = packBf16(x[6], x[7]);
    *reinterpret_cast<uint4 *>(dst + idx * 8) = out;
  }
}

/// dst [mats, rowsPad, D] and dstT [mats, D, rowsPad] (bf16, nearest even)
/// from src [mats, rows, D], zero rows from `rows` on: the plain and the
/// transposed copy the wgmma kernels read, from one read of src. One block
/// per 64 rows x 64 columns through a shared tile, so that both copies are
/// written in whole 16-byte chunks. rowsPad and D are multiples of 64.
__global__ void __launch_bounds__(256)
    toBf16PaddedBothKernel(const float *src, bf16 *dst, bf16 *dstT, int rows,
                           int rowsPad, int D) {
  __shared__ float tile[64][65];
  const int rowBlocks = rowsPad / 64;
  const int64_t m = blockIdx.x / unsigned(rowBlocks);
  const int r0 = int(blockIdx.x % unsigned(rowBlocks)) * 64;
  const int c0 = int(blockIdx.y) * 64;
  const int tid = int(threadIdx.x);
  const bool aligned = (reinterpret_cast<uintptr_t>(src) & 15) == 0;
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    const int idx = it * 256 + tid;
    const int r = idx / 16, c = (idx % 16) * 4;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r0 + r < rows) {
      const float *s = src + (m * rows + r0 + r) * D + c0 + c;
      if (aligned)
        x = *reinterpret_cast<const float4 *>(s);
      else
        x = make_float4(s[0], s[1], s[2], s[3]);
    }
    tile[r][c] = x.x;
    tile[r][c + 1] = x.y;
    tile[r][c + 2] = x.z;
    tile[r][c + 3] = x.w;
  }
  __syncthreads();
#pragma unroll
  for (int it = 0; it < 2; ++it) {
    const int idx = it * 256 + tid;
    const int a = idx / 8, b = (idx % 8) * 8;
    // Plain: row a, columns b .. b + 7.
    uint4 out;
    out.x = packBf16(tile[a][b], tile[a][b + 1]);
    out.y = packBf16(tile[a][b + 2], tile[a][b + 3]);
    out.z = packBf16(tile[a][b + 4], tile[a][b + 5]);
    out.w = packBf16(tile[a][b + 6], tile[a][b + 7]);
    *reinterpret_cast<uint4 *>(dst + (m * rowsPad + r0 + a) * D + c0 + b) = out;
    // Transposed: column a, rows b .. b + 7.
    out.x = packBf16(tile[b][a], tile[b + 1][a]);
    out.y = packBf16(tile[b + 2][a], tile[b + 3][a]);
    out.z = packBf16(tile[b + 4][a], tile[b + 5][a]);
    out.w = packBf16(tile[b + 6][a], tile[b + 7][a]);
    *reinterpret_cast<uint4 *>(dstT + (m * D + c0 + a) * rowsPad + r0 + b) =
        out;
  }
}

} // namespace

Bf16Copy::Bf16Copy(const float *src, int64_t mats, int64_t rows, int64_t D,
                   const char *name, bool transposed)
    : temp(size_t(mats * padTo(rows) * D) * sizeof(bf16) * (transposed ? 2 : 1),
           name),
      elems(size_t(mats * padTo(rows) * D)), transposed(transposed) {
  if (transposed) {
    const int64_t blocks = mats * (padTo(rows) / 64);
    if (blocks > int64_t(0x7fffffff))
      contract(name, "too many rows for the bf16 conversion");
    dim3 grid(unsigned(blocks), unsigned(D / 64));
    toBf16PaddedBothKernel<<<grid, 256, 0, currentStream()>>>(
        src, temp.as<bf16>(), temp.as<bf16>() + elems, int(rows),
        int(padTo(rows)), int(D));
  } else {
    const int64_t n = mats * padTo(rows) * (D / 8);
    toBf16PaddedKernel<<<gridFor(n), kThreads, 0, currentStream()>>>(
        src, temp.as<bf16>(), mats, int(rows), int(padTo(rows)), int(D));
  }
  checkLaunch(name);
}

} // namespace rondo::cuda::detail::flash
