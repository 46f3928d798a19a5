//===- CudaKernelsCudnnAttentionTest.cpp - bf16 attention on cuDNN --------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The Precision::Bf16 attention on cuDNN's fused SDPA (CudnnAttention.cu),
// with RONDO_ATTENTION=cudnn: against the fp32 CPU kernels at small shapes
// (each run twice, bit for bit), against Rondo's own bf16 kernels at W1's
// shape, the backward's bitwise repeatability (and each gradient alone equal
// to all three together), which cases cuDNN takes and which fall back to
// Rondo's kernels. Every test skips itself where cuDNN's attention cannot
// run (no libcudnn.so.9 on the loader path, not compute capability 9.0).
//
//===----------------------------------------------------------------------===//

#include "CudaKernelsTestUtil.h"

namespace cuda_test {

namespace {

#define SKIP_WITHOUT_CUDNN()                                                   \
  do {                                                                         \
    if (const char *why = cu::cudnnAttentionUnavailable())                     \
      GTEST_SKIP() << "cuDNN attention unavailable: " << why;                  \
  } while (0)

void expectImpl(cu::AttentionImpl got, cu::AttentionImpl want,
                const AttnCase &c, const char *direction) {
  EXPECT_EQ(implName(got), std::string(implName(want)))
      << attnName(c) << " " << direction;
}

} // namespace

// Causal and not, MHA and GQA (groups 2, 4 and W1's 2 at 16 query heads),
// D = 64 and 128, sequence lengths off the tiles: all on cuDNN.
TEST_F(CudaKernels, AttentionBf16Cudnn) {
  SKIP_WITHOUT_CUDNN();
  AttentionSwitch cudnn("cudnn");
  const std::vector<AttnCase> cases = {
      {1, 2, 2, 77, 77, 64, true},     {2, 2, 2, 200, 200, 128, true},
      {1, 8, 2, 257, 257, 128, true},  {1, 8, 2, 200, 200, 128, false},
      {2, 4, 4, 77, 77, 64, false},    {1, 16, 8, 512, 512, 128, true},
      {1, 2, 1, 333, 333, 128, false},
  };
  std::vector<AttnImpls> impls = checkAttentionBf16Cases("cudnn", cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    expectImpl(impls[i].fwd, cu::AttentionImpl::Cudnn, cases[i], "forward");
    expectImpl(impls[i].bwd, cu::AttentionImpl::Cudnn, cases[i], "backward");
  }
}

// S != T (causal bottom-right, and not causal), sliding windows and a single
// query and key: cuDNN
// where it accepts the graph, Rondo's kernels where it refuses; right
// either way.
TEST_F(CudaKernels, AttentionBf16CudnnMasks) {
  SKIP_WITHOUT_CUDNN();
  AttentionSwitch cudnn("cudnn");
  const std::vector<AttnCase> cases = {
      {1, 8, 2, 50, 130, 128, true},       {1, 8, 2, 50, 130, 64, false},
      {1, 2, 2, 128, 192, 64, false},      {1, 4, 2, 300, 300, 64, true, 8},
      {1, 4, 2, 300, 300, 128, true, 100}, {1, 8, 2, 200, 330, 64, true, 70},
      {1, 4, 1, 1, 1, 64, true},
  };
  checkAttentionBf16Cases("cudnn", cases);
}

// Cases outside cuDNN's graphs run Rondo's kernels: causal with S < T (rows
// without a key), D = 256; and RONDO_ATTENTION=flash keeps them everywhere.
TEST_F(CudaKernels, AttentionBf16CudnnFallback) {
  SKIP_WITHOUT_CUDNN();
  {
    AttentionSwitch cudnn("cudnn");
    const std::vector<AttnCase> cases = {{1, 4, 2, 130, 50, 64, true},
                                         {1, 4, 1, 300, 300, 256, true}};
    std::vector<AttnImpls> impls = checkAttentionBf16Cases("cudnn", cases);
    for (size_t i = 0; i < cases.size(); ++i) {
      expectImpl(impls[i].fwd, cu::AttentionImpl::Flash, cases[i], "forward");
      expectImpl(impls[i].bwd, cu::AttentionImpl::Flash, cases[i], "backward");
    }
  }
  AttentionSwitch flash("flash");
  const std::vector<AttnCase> cases = {{1, 8, 2, 257, 257, 128, true}};
  std::vector<AttnImpls> impls = checkAttentionBf16Cases("flash", cases);
  expectImpl(impls[0].fwd, cu::AttentionImpl::Flash, cases[0], "forward");
  expectImpl(impls[0].bwd, cu::AttentionImpl::Flash, cases[0], "backward");
}

// A plan whose workspace exceeds RONDO_CUDNN_WORKSPACE_MB runs Rondo's
// kernels instead (the deterministic backward's dP workspace grows with T^2):
// at 1 MiB the backward of a 700-token GQA case (21 MiB) falls back while its
// forward (no workspace) stays on cuDNN, and the results stay right.
TEST_F(CudaKernels, AttentionBf16CudnnWorkspaceLimit) {
  SKIP_WITHOUT_CUDNN();
  AttentionSwitch cudnn("cudnn");
  setenv("RONDO_CUDNN_WORKSPACE_MB", "1", 1);
  const std::vector<AttnCase> cases = {{2, 8, 2, 700, 700, 128, true}};
  std::vector<AttnImpls> impls = checkAttentionBf16Cases("cudnn", cases);
  unsetenv("RONDO_CUDNN_WORKSPACE_MB");
  expectImpl(impls[0].fwd, cu::AttentionImpl::Cudnn, cases[0], "forward");
  expectImpl(impls[0].bwd, cu::AttentionImpl::Flash, cases[0], "backward");
}

// The deterministic backward: the chain twice bit for bit, and each gradient
// computed alone bit-equal to all three (checkAttentionBf16Deterministic),
// at GQA shapes over many key tiles at D = 128 and 64.
TEST_F(CudaKernels, AttentionBf16CudnnDeterministic) {
  SKIP_WITHOUT_CUDNN();
  AttentionSwitch cudnn("cudnn");
  for (const AttnCase &c : {AttnCase{2, 8, 2, 700, 700, 128, true},
                            AttnCase{1, 16, 8, 1024, 1024, 64, true}}) {
    checkAttentionBf16Deterministic(c);
    EXPECT_EQ(std::string(implName(cu::lastAttentionImpl())), "cudnn")
        << attnName(c);
  }
}

// W1's attention (Qwen3-1.7B: B 2, 16 query heads, 8 kv heads, T 4096, D
// 128, causal): cuDNN against Rondo's own kernels, each the forward and the
// backward on its own forward's out and lse; cuDNN's twice, bit for bit.
// (The CPU reference would take minutes at this size.)
TEST_F(CudaKernels, AttentionBf16CudnnW1) {
  SKIP_WITHOUT_CUDNN();
  PrecisionGuard guard(cu::Precision::Bf16);
  const AttnCase c{2, 16, 8, 4096, 4096, 128, true};
  Shape qs{c.B, c.Hq, c.T, c.D}, ks{c.B, c.Hkv, c.S, c.D}, ls{c.B, c.Hq, c.T};
  Tensor q = uniform(qs, -2.0f, 2.0f), k = uniform(ks, -2.0f, 2.0f);
  Tensor v = uniform(ks), g = uniform(qs);
  const float scale = 1.0f / std::sqrt(float(c.D));
  Dev dQ(q), dK(k), dV(v), dG(g);
  auto chain = [&](const std::vector<FView> &o) {
    cu::attention(dQ.cv(), dK.cv(), dV.cv(), true, 0, scale, o[0], o[1]);
    cu::attentionBackward(dQ.cv(), dK.cv(), dV.cv(),
                          CFView{o[0].data, o[0].shape},
                          CFView{o[1].data, o[1].shape}, dG.cv(), true, 0,
                          scale, o[2], o[3], o[4]);
  };
  const std::vector<OutSpec> outs = {
      {qs, {}}, {ls, {}}, {qs, {}}, {ks, {}}, {ks, {}}};
  std::vector<std::vector<float>> own, viaCudnn;
  {
    AttentionSwitch flash("flash");
    own = runTwice(outs, chain, "attention bf16 flash W1");
    EXPECT_EQ(std::string(implName(cu::lastAttentionImpl())), "flash");
  }
  {
    AttentionSwitch cudnn("cudnn");
    viaCudnn = runTwice(outs, chain, "attention bf16 cudnn W1");
    EXPECT_EQ(std::string(implName(cu::lastAttentionImpl())), "cudnn");
  }
  const char *names[] = {"out", "lse", "dQ", "dK", "dV"};
  std::string line;
  for (int i = 0; i < 5; ++i) {
    double e = normErr(viaCudnn[size_t(i)], own[size_t(i)]);
    EXPECT_LE(e, kBf16Tol) << "W1 cudnn vs flash " << names[i];
    char buf[48];
    std::snprintf(buf, sizeof(buf), " %s %.2e", names[i], e);
    line += buf;
  }
  std::printf("[ bf16 ] attention W1 cudnn vs flash:%s\n", line.c_str());
}

} // namespace cuda_test
