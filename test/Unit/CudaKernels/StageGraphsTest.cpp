//===- StageGraphsTest.cpp - Stage functions replayed as CUDA graphs ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// StageGraphs (runtime/src/exec/CudaStageGraphs.h) runs a stage function
// eagerly once, records it as a graph the second time and replays the graph
// after that. A replay must write what an eager run writes, bit for bit,
// including through the stream-ordered temporaries the kernels allocate
// (bf16 products round their operands into temporaries), and a function
// whose launch sequence cannot be recorded must still run, eagerly.
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

#include "exec/CudaStageGraphs.h"

#include <cstring>

namespace {

using namespace cuda_test;

constexpr int64_t kRows = 64, kInner = 96, kCols = 80;

/// io = {a [kRows, kInner], b [kInner, kCols], out [kRows, kCols]}: out =
/// lossScale * (a . b), a bf16 product whose rounded operands are
/// temporaries.
void productStage(void *const *io, float lossScale) {
  auto *a = static_cast<const float *>(io[0]);
  auto *b = static_cast<const float *>(io[1]);
  auto *out = static_cast<float *>(io[2]);
  cu::matmul(CFView{a, Shape{kRows, kInner}}, CFView{b, Shape{kInner, kCols}},
             FView{out, Shape{kRows, kCols}}, false, false);
  cu::scaleInPlace(out, kRows * kCols, lossScale);
}

/// productStage's product at [8192, 4096] x [4096, 64]: its operands'
/// bf16 copies (64.5 MB of temporaries) pass the graphs' allowance beyond
/// a plan's prediction.
constexpr int64_t kBigRows = 8192, kBigInner = 4096, kBigCols = 64;
void bigProductStage(void *const *io, float lossScale) {
  auto *a = static_cast<const float *>(io[0]);
  auto *b = static_cast<const float *>(io[1]);
  auto *out = static_cast<float *>(io[2]);
  cu::matmul(CFView{a, Shape{kBigRows, kBigInner}},
             CFView{b, Shape{kBigInner, kBigCols}},
             FView{out, Shape{kBigRows, kBigCols}}, false, false);
  cu::scaleInPlace(out, kBigRows * kBigCols, lossScale);
}

/// A stage whose launch sequence cannot be recorded: it waits for the
/// device in the middle (as no stage function may).
void synchronisingStage(void *const *io, float lossScale) {
  auto *out = static_cast<float *>(io[0]);
  cu::scaleInPlace(out, 16, lossScale);
  if (cudaDeviceSynchronize() != cudaSuccess)
    throw std::runtime_error("cudaDeviceSynchronize in a stage");
}

std::vector<float> download(const float *p, int64_t n) {
  std::vector<float> h(static_cast<size_t>(n));
  ck(cudaMemcpy(h.data(), p, size_t(n) * sizeof(float), cudaMemcpyDeviceToHost),
     "download");
  return h;
}

class CudaStageGraphs : public ::testing::Test {
protected:
  void SetUp() override {
    if (!gpuAvailable())
      GTEST_SKIP() << "no CUDA device";
    if (!rondo::rt::StageGraphs::enabled())
      GTEST_SKIP() << "RONDO_CUDA_GRAPHS=0 or RONDO_PROFILE_KERNELS is set";
    rondo::cpu::test::seededRng(20261127);
    ck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    cu::setCurrentStream(stream);
    cu::setPrecision(cu::Precision::Bf16);
  }
  void TearDown() override {
    cu::setPrecision(cu::Precision::Fp32);
    if (stream) {
      cu::setCurrentStream(nullptr);
      cudaStreamDestroy(stream);
    }
  }
  cudaStream_t stream = nullptr;
};

TEST_F(CudaStageGraphs, ReplayWritesWhatEagerRunsWrite) {
  Dev a(uniform(Shape{kRows, kInner})), b(uniform(Shape{kInner, kCols}));
  Dev out(uniform(Shape{kRows, kCols}));
  void *io[] = {a.p, b.p, out.p};
  rondo::rt::StageGraphs graphs;
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 4; ++run) {
    ck(cudaMemset(out.p, 0xff, kRows * kCols * sizeof(float)), "poison");
    graphs.run(&productStage, io, 3, 0.5f, stream, 0);
    results.push_back(download(out.p, kRows * kCols));
  }
  // Run 0 is eager, run 1 records and replays, runs 2 and 3 replay.
  for (int run = 1; run < 4; ++run)
    EXPECT_EQ(0, std::memcmp(results[0].data(), results[size_t(run)].data(),
                             results[0].size() * sizeof(float)))
        << "run " << run;
  std::string summary = rondo::rt::StageGraphs::summary();
  EXPECT_NE(summary.find("replayed from"), std::string::npos) << summary;

  // Another loss scale is another launch sequence: eager first, then its
  // own graph, each with its own result.
  for (int run = 0; run < 2; ++run) {
    graphs.run(&productStage, io, 3, 2.0f, stream, 0);
    std::vector<float> scaled = download(out.p, kRows * kCols);
    for (size_t i = 0; i < scaled.size(); ++i)
      ASSERT_EQ(scaled[i], results[0][i] * 4.0f) << i << " run " << run;
  }
}

TEST_F(CudaStageGraphs, UnrecordableStagesRunEagerly) {
  Dev out(uniform(Shape{16}));
  std::vector<float> start = download(out.p, 16);
  void *io[] = {out.p};
  rondo::rt::StageGraphs graphs;
  for (int run = 0; run < 3; ++run)
    graphs.run(&synchronisingStage, io, 1, 2.0f, stream, 0);
  std::vector<float> end = download(out.p, 16);
  for (size_t i = 0; i < end.size(); ++i)
    EXPECT_EQ(end[i], start[i] * 8.0f) << i;
  EXPECT_NE(rondo::rt::StageGraphs::summary().find("could not be recorded"),
            std::string::npos)
      << rondo::rt::StageGraphs::summary();
}

// A plan whose predicted memory leaves no room beside the arena and the
// temporaries for a graph's pool (limitGraphPools, from the program's
// predictedWorkerBytes) beyond the small allowance: its stage functions
// stay eager, with the same results, and the summary says why.
TEST_F(CudaStageGraphs, GraphPoolsStayWithinThePlannedMemory) {
  Dev a(uniform(Shape{kBigRows, kBigInner})),
      b(uniform(Shape{kBigInner, kBigCols}));
  Dev out(uniform(Shape{kBigRows, kBigCols}));
  void *io[] = {a.p, b.p, out.p};
  rondo::rt::StageGraphs::limitGraphPools(0, 0.0);
  rondo::rt::StageGraphs graphs;
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 3; ++run) {
    graphs.run(&bigProductStage, io, 3, 3.0f, stream, 0);
    results.push_back(download(out.p, kBigRows * kBigCols));
  }
  rondo::rt::StageGraphs::limitGraphPools(0, 1e30);
  for (int run = 1; run < 3; ++run)
    EXPECT_EQ(0, std::memcmp(results[0].data(), results[size_t(run)].data(),
                             results[0].size() * sizeof(float)))
        << "run " << run;
  EXPECT_NE(rondo::rt::StageGraphs::summary().find(
                "kept eager: their graphs' memory exceeds the plan's"),
            std::string::npos)
      << rondo::rt::StageGraphs::summary();
}

} // namespace
