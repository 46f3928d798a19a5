//===- PartitionTest.cpp - Stage costs, greedy and exact partitioning -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "PlannerTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace rondo::planner;
using namespace rondo::planner::test;

namespace {

/// A random layer table of millisecond-scale layers and tens of MB, with a
/// link slow enough that uploads, hops and checkpoints matter. With `tight`
/// the budgets are drawn around the needs of a random plan, so that they
/// bind (and sometimes leave no plan at all).
PlanProblem randomProblem(std::mt19937 &rng, int minLayers, int maxLayers,
                          bool tight) {
  std::uniform_real_distribution<double> u(0, 1);
  auto in = [&](double lo, double hi) { return lo + (hi - lo) * u(rng); };
  PlanProblem p;
  int numLayers = std::uniform_int_distribution<int>(minLayers, maxLayers)(rng);
  p.workers = std::uniform_int_distribution<int>(1, 4)(rng);
  p.microbatches = std::uniform_int_distribution<int>(2, 6)(rng);
  // Sometimes ask for finer plans (RoundPipe's min_stages above N).
  if (u(rng) < 0.3)
    p.minJobs = std::uniform_int_distribution<int>(1, 10)(rng);
  p.linkBytesPerSecond = in(2e10, 2e11);
  p.peerBytesPerSecond = u(rng) < 0.5 ? 0.0 : in(2e10, 2e11);
  p.hostFixedBytes = in(0, 1e9);
  for (int l = 0; l < numLayers; ++l) {
    LayerCost lc = layer(in(0.2e-3, 3e-3), in(0.2e-3, 6e-3), in(1e6, 1e8));
    lc.gradBytes = u(rng) < 0.2 ? 0.0 : lc.paramBytes * in(0.5, 2);
    lc.inputBytes = l == 0 || u(rng) < 0.8 ? in(1e6, 5e7) : 0.0;
    lc.workspaceBytes = in(0, 3e7);
    lc.name = "layer" + std::to_string(l);
    p.layers.push_back(lc);
  }
  p.trainableParams.assign(numLayers, 1e6);
  if (tight) {
    Plan probe = randomPlan(numLayers, rng);
    double r = u(rng);
    if (r < 0.8)
      p.workerMemoryBytes = workerPeakBytes(p, probe) * in(0.8, 1.3);
    if (r > 0.4) {
      // Scale the checkpoint part only: the base is what every plan needs.
      double base = hostPeakBytes(p, makePlan({}, tailStage(0, numLayers), {}));
      double probeBytes = hostPeakBytes(p, probe);
      p.hostMemoryBytes = base + (probeBytes - base) * in(0.5, 1.2) + 1;
    }
  }
  return p;
}

double relativeDiff(double a, double b) {
  return std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), 1e-300});
}

} // namespace

//===----------------------------------------------------------------------===//
// Plans, names and validity
//===----------------------------------------------------------------------===//

TEST(PlanTest, JobsAndNames) {
  Plan p =
      makePlan({fwd(0, 1), fwd(1, 3)}, tailStage(3, 4), {bwd(2, 3), bwd(0, 2)});
  ASSERT_EQ(p.numJobs(), 5);
  std::vector<Stage> jobs = p.jobs();
  ASSERT_EQ(jobs.size(), 5u);
  EXPECT_EQ(jobs[0], fwd(0, 1));
  EXPECT_EQ(jobs[2], tailStage(3, 4));
  EXPECT_EQ(jobs[4], bwd(0, 2));
  EXPECT_EQ(stageName(p, 0), "F0");
  EXPECT_EQ(stageName(p, 1), "F1");
  EXPECT_EQ(stageName(p, 2), "T");
  EXPECT_EQ(stageName(p, 3), "B1");
  EXPECT_EQ(stageName(p, 4), "B2");
}

TEST(PlanTest, ValidityRules) {
  PlanProblem prob;
  for (int i = 0; i < 4; ++i)
    prob.layers.push_back(layer(1, 1));
  std::string why;
  EXPECT_TRUE(isValid(
      prob,
      makePlan({fwd(0, 1), fwd(1, 3)}, tailStage(3, 4), {bwd(2, 3), bwd(0, 2)}),
      &why))
      << why;
  EXPECT_TRUE(isValid(prob, makePlan({}, tailStage(0, 4), {}), &why)) << why;

  struct Bad {
    Plan plan;
    const char *what;
  } bad[] = {
      {makePlan({fwd(0, 1), fwd(2, 3)}, tailStage(3, 4), {bwd(0, 3)}),
       "forward gap"},
      {makePlan({fwd(0, 3)}, tailStage(3, 4), {bwd(0, 2), bwd(2, 3)}),
       "backward not deepest first"},
      {makePlan({fwd(0, 3)}, tailStage(3, 4), {bwd(1, 3)}),
       "backward leaves layer 0"},
      {makePlan({fwd(0, 4)}, tailStage(4, 4), {bwd(0, 4)}), "empty tail"},
      {makePlan({fwd(0, 2)}, tailStage(2, 3), {bwd(0, 2)}),
       "tail short of the last layer"},
      {makePlan({fwd(0, 2)}, tailStage(3, 4), {bwd(0, 3)}),
       "forward ends before the tail"},
      {makePlan({fwd(0, 0), fwd(0, 3)}, tailStage(3, 4), {bwd(0, 3)}),
       "empty forward stage"},
      {makePlan({bwd(0, 3)}, tailStage(3, 4), {bwd(0, 3)}), "wrong kind"},
      {makePlan({}, tailStage(1, 4), {}), "nothing covers layer 0"},
  };
  for (const Bad &b : bad) {
    why.clear();
    EXPECT_FALSE(isValid(prob, b.plan, &why)) << b.what;
    EXPECT_FALSE(why.empty()) << b.what;
  }
}

//===----------------------------------------------------------------------===//
// Stage costs on a tiny hand table
//===----------------------------------------------------------------------===//

namespace {
/// Three layers; link 10 B/s, M = 4, N = 2, hand-offs through the host.
///        fwd bwd params grads input workspace
///   l0    1   2   100    100   10     5
///   l1    2   3   200      0   20     7
///   l2    3   4   300    300   30    11
PlanProblem tinyProblem() {
  PlanProblem p;
  p.layers = {layer(1, 2, 100, 100, 10, 5), layer(2, 3, 200, 0, 20, 7),
              layer(3, 4, 300, 300, 30, 11)};
  p.workers = 2;
  p.microbatches = 4;
  p.linkBytesPerSecond = 10;
  p.peerBytesPerSecond = 0;
  p.hostFixedBytes = 1000;
  return p;
}
} // namespace

TEST(CostTest, HandTable) {
  PlanProblem p = tinyProblem();

  // F [0,2): compute 1+2; hop in(0)/link = 1; job max(4*3+1, 300/10) = 30;
  // activation 2*10 + 2*30 + max(5,7) = 87; no gradients.
  StageCost f = costStage(p, fwd(0, 2));
  EXPECT_DOUBLE_EQ(f.computeSeconds, 3);
  EXPECT_DOUBLE_EQ(f.hopSeconds, 1);
  EXPECT_DOUBLE_EQ(f.uploadSeconds, 30);
  EXPECT_DOUBLE_EQ(f.downloadSeconds, 0);
  EXPECT_DOUBLE_EQ(f.jobSeconds, 30);
  EXPECT_DOUBLE_EQ(f.paramBytes, 300);
  EXPECT_DOUBLE_EQ(f.gradBytes, 0);
  EXPECT_DOUBLE_EQ(f.activationBytes, 87);
  EXPECT_DOUBLE_EQ(f.memoryBytes, 387);

  // T [2,3): compute 3+4; hop 2*30/10 = 6 (D2H + H2D); job max(28+6, 30,
  // 30) = 34; activation 2*30 + 2*30 + 11 = 131.
  StageCost t = costStage(p, tailStage(2, 3));
  EXPECT_DOUBLE_EQ(t.computeSeconds, 7);
  EXPECT_DOUBLE_EQ(t.hopSeconds, 6);
  EXPECT_DOUBLE_EQ(t.uploadSeconds, 30);
  EXPECT_DOUBLE_EQ(t.downloadSeconds, 30);
  EXPECT_DOUBLE_EQ(t.jobSeconds, 34);
  EXPECT_DOUBLE_EQ(t.gradBytes, 300);
  EXPECT_DOUBLE_EQ(t.activationBytes, 131);
  EXPECT_DOUBLE_EQ(t.memoryBytes, 731);

  // B [1,2): compute 2+3; hop 2*30/10 + 20/10 = 8; job max(20+8, 20) = 28;
  // activation 20 + 2*30 + 2*20 + 7 = 127.
  StageCost b1 = costStage(p, bwd(1, 2));
  EXPECT_DOUBLE_EQ(b1.computeSeconds, 5);
  EXPECT_DOUBLE_EQ(b1.hopSeconds, 8);
  EXPECT_DOUBLE_EQ(b1.jobSeconds, 28);
  EXPECT_DOUBLE_EQ(b1.gradBytes, 0);
  EXPECT_DOUBLE_EQ(b1.activationBytes, 127);
  EXPECT_DOUBLE_EQ(b1.memoryBytes, 327);

  // B [0,1): compute 1+2; hop 2*20/10 + 10/10 = 5; job max(12+5, 10, 10) =
  // 17; activation 10 + 2*20 + 2*10 + 5 = 75.
  StageCost b2 = costStage(p, bwd(0, 1));
  EXPECT_DOUBLE_EQ(b2.computeSeconds, 3);
  EXPECT_DOUBLE_EQ(b2.hopSeconds, 5);
  EXPECT_DOUBLE_EQ(b2.uploadSeconds, 10);
  EXPECT_DOUBLE_EQ(b2.downloadSeconds, 10);
  EXPECT_DOUBLE_EQ(b2.jobSeconds, 17);
  EXPECT_DOUBLE_EQ(b2.activationBytes, 75);
  EXPECT_DOUBLE_EQ(b2.memoryBytes, 275);

  // The whole model as the tail: hop is the token upload in(0)/link.
  StageCost all = costStage(p, tailStage(0, 3));
  EXPECT_DOUBLE_EQ(all.hopSeconds, 1);
  EXPECT_DOUBLE_EQ(all.computeSeconds, 15);
  EXPECT_DOUBLE_EQ(all.activationBytes, 4 * 10 + 5 + 7 + 11);

  // Upload-bound job: a tiny M leaves the upload as the job time.
  PlanProblem one = p;
  one.microbatches = 1;
  EXPECT_DOUBLE_EQ(costStage(one, fwd(0, 2)).jobSeconds, 30);

  // Peer hand-offs: one copy at the peer bandwidth.
  PlanProblem peer = p;
  peer.peerBytesPerSecond = 20;
  EXPECT_DOUBLE_EQ(costStage(peer, fwd(1, 2)).hopSeconds, 1);
  EXPECT_DOUBLE_EQ(costStage(peer, tailStage(2, 3)).hopSeconds, 1.5);
  EXPECT_DOUBLE_EQ(costStage(peer, bwd(1, 2)).hopSeconds, 1.5 + 2);

  Plan plan = makePlan({fwd(0, 2)}, tailStage(2, 3), {bwd(1, 2), bwd(0, 1)});
  // Largest running stage (the tail, 731) + largest slot (300).
  EXPECT_DOUBLE_EQ(workerPeakBytes(p, plan), 1031);
  // The executor's arena: two slots of the largest stage's parameters
  // (2*300), the largest gradients (300), activation and gradient hand-offs
  // in and out for M=4 microbatches of the largest boundary (4*4*30), F0's
  // one checkpoint (layer 1, B1's input) for 4 microbatches (4*30), and the
  // tail's temporaries (11), the largest of any stage.
  EXPECT_DOUBLE_EQ(workerArenaBytes(p, plan), 600 + 300 + 480 + 120 + 11);
  // Fixed 1000 + checkpoint of B1's input for 4 microbatches (4*20; B2
  // starts at layer 0: free) + staging 2*N*max input = 2*2*30.
  EXPECT_DOUBLE_EQ(hostPeakBytes(p, plan), 1200);
  // max(K, N) * slowest / N = 4 * 34 / 2.
  EXPECT_DOUBLE_EQ(planObjective(p, plan), 68);
  // With more workers than jobs the objective is the slowest job.
  PlanProblem wide = p;
  wide.workers = 8;
  EXPECT_DOUBLE_EQ(planObjective(wide, plan), 34);

  std::string why;
  p.workerMemoryBytes = 1031;
  p.hostMemoryBytes = 1200;
  EXPECT_TRUE(fitsBudgets(p, plan, &why)) << why;
  p.workerMemoryBytes = 1030;
  EXPECT_FALSE(fitsBudgets(p, plan, &why));
  EXPECT_NE(why.find("1031"), std::string::npos) << why;
  EXPECT_NE(why.find("1030"), std::string::npos) << why;
  p.workerMemoryBytes = 0; // unlimited
  p.hostMemoryBytes = 1199;
  EXPECT_FALSE(fitsBudgets(p, plan, &why));
  EXPECT_NE(why.find("1200"), std::string::npos) << why;
  EXPECT_NE(why.find("1199"), std::string::npos) << why;
  p.hostMemoryBytes = 0;
  EXPECT_TRUE(fitsBudgets(p, plan, &why)) << why;
}

TEST(CostTest, LayersWithoutBackwardWork) {
  // Layer 0 frozen below every trainable parameter (LoRA's embedding): its
  // backward does nothing, so a backward stage of it alone is an empty
  // launch. Below layers with work it still costs its recompute, which
  // makes their input: B [0,2) costs what it did.
  PlanProblem p = tinyProblem();
  StageCost before = costStage(p, bwd(0, 2));
  p.layers[0].gradBytes = 0;
  p.layers[0].backwardSeconds = 0;
  p.layers[0].backwardWork = false;
  StageCost empty = costStage(p, bwd(0, 1));
  EXPECT_DOUBLE_EQ(empty.jobSeconds, 0);
  EXPECT_DOUBLE_EQ(empty.paramBytes, 0);
  EXPECT_DOUBLE_EQ(empty.memoryBytes, 0);
  StageCost both = costStage(p, bwd(0, 2));
  EXPECT_DOUBLE_EQ(both.paramBytes, before.paramBytes);
  EXPECT_DOUBLE_EQ(both.computeSeconds, before.computeSeconds - 2);
  EXPECT_DOUBLE_EQ(both.hopSeconds, before.hopSeconds);
}

TEST(CostTest, SharedParameterCountsOncePerStage) {
  // A tied embedding and LM head: layers 0 and 2 each count the 5-byte
  // weight (2 bytes of gradient). A stage holding both uploads it and
  // accumulates its gradient once; stages holding one of them are as before.
  PlanProblem p = tinyProblem();
  StageCost whole = costStage(p, tailStage(0, 3));
  StageCost top = costStage(p, tailStage(1, 3));
  StageCost bottom = costStage(p, bwd(0, 1));
  p.sharedParams.push_back({5, 2, {0, 2}});
  StageCost wholeShared = costStage(p, tailStage(0, 3));
  EXPECT_DOUBLE_EQ(wholeShared.paramBytes, whole.paramBytes - 5);
  EXPECT_DOUBLE_EQ(wholeShared.gradBytes, whole.gradBytes - 2);
  EXPECT_DOUBLE_EQ(wholeShared.memoryBytes, whole.memoryBytes - 7);
  EXPECT_DOUBLE_EQ(costStage(p, tailStage(1, 3)).paramBytes, top.paramBytes);
  EXPECT_DOUBLE_EQ(costStage(p, bwd(0, 1)).gradBytes, bottom.gradBytes);
}

TEST(CostTest, ResidentStateCountsWhatTheWorkerKeeps) {
  // Layers 0 and 2 resident; layer 0 trains 25 parameters (100 bytes of
  // gradient), layer 2 75 (300). Without residentBytes a layer keeps its
  // paramBytes; with it (fp32 masters beside bf16 copies), that instead.
  PlanProblem p = tinyProblem();
  p.resident = {true, false, true};
  p.trainableParams = {25, 0, 75};
  EXPECT_DOUBLE_EQ(residentBytes(p), (100 + 100 + 8 * 25) + (300 + 300 + 600));
  p.layers[0].residentBytes = 150;
  p.layers[2].residentBytes = 420;
  EXPECT_DOUBLE_EQ(residentBytes(p), (150 + 100 + 200) + (420 + 300 + 600));
  // A shared parameter resident in both layers is held once: the second
  // layer's count of it comes off, as what the worker keeps of it.
  p.sharedParams.push_back({5, 2, {0, 2}, 8});
  EXPECT_DOUBLE_EQ(residentBytes(p),
                   (150 + 100 + 200) + (420 + 300 + 600) + 2 * 2 - 8);
}

TEST(CostTest, HostStateFollowsResidencyAndSharedGradientParts) {
  // The tiny problem's layers carry 100, 0 and 300 bytes of gradient;
  // 1000 bytes of fixed host state count every gradient once.
  PlanProblem p = tinyProblem();
  p.hostFixedBytes = 1000;
  EXPECT_DOUBLE_EQ(hostStateBytes(p), 1000);
  // A resident layer's gradient is its worker's, not the host's.
  p.resident = {true, false, false};
  EXPECT_DOUBLE_EQ(hostStateBytes(p), 1000 - p.layers[0].gradBytes);
  // A streamed parameter of two layers (2 bytes of gradient, counted in
  // both layers' gradBytes): a part per layer in the host image and the
  // trainer's two sums of them, 3 x 2 bytes beyond the one gradient.
  p.resident.clear();
  p.sharedParams.push_back({5, 2, {0, 2}});
  EXPECT_DOUBLE_EQ(hostStateBytes(p), 1000 + 3 * 2);
  // Resident in both of its layers: none of its gradient on the host (the
  // two layers' gradBytes both counted it; it leaves the host once).
  p.resident = {true, false, true};
  EXPECT_DOUBLE_EQ(hostStateBytes(p), 1000 - (100 - 2) - (300 - 2) - 2);
  // hostPeakBytes builds on it.
  Plan tail = makePlan({}, tailStage(0, 3), {});
  PlanProblem streamed = p;
  streamed.resident.clear();
  EXPECT_DOUBLE_EQ(hostPeakBytes(streamed, tail) - hostPeakBytes(p, tail),
                   hostStateBytes(streamed) - hostStateBytes(p));
}

//===----------------------------------------------------------------------===//
// RoundPipe's greedy, by hand (research/roundpipe.md 2.2)
//===----------------------------------------------------------------------===//

TEST(GreedyTest, UniformLayers) {
  // Six layers, fwd 1, bwd 2: fwd_t = 1, bwd_t = 3, W = 3. Candidates in
  // [3, 3.3]: fwd sums 1+1+1 = 3 and every single bwd_t = 3, so C = 3.
  // Tail: layer 5 (3 <= 3); adding layer 4 gives 6 > 3, so b = 5.
  // Forward, walking down 4..0: {4,3,2} (1+1+1 = 3), then {1,0}; reversed
  // F0 = [0,2) (the under-full stage first), F1 = [2,5).
  // Backward, walking up 0..4 with bwd_t = 3: one layer per stage, emitted
  // deepest first: [4,5) [3,4) [2,3) [1,2) [0,1).
  PlanProblem p;
  for (int i = 0; i < 6; ++i)
    p.layers.push_back(layer(1, 2));
  p.workers = 2;
  Plan g = greedyRoundPipe(p, 0);
  Plan expect =
      makePlan({fwd(0, 2), fwd(2, 5)}, tailStage(5, 6),
               {bwd(4, 5), bwd(3, 4), bwd(2, 3), bwd(1, 2), bwd(0, 1)});
  EXPECT_EQ(g.jobs(), expect.jobs()) << show(g);
  EXPECT_TRUE(isValid(p, g, nullptr));
}

TEST(GreedyTest, CandidateChoiceAndMinStages) {
  // fwd = [1, 1, 2], bwd = [4.5, 4, 8]: fwd_t = [1, 1, 2], bwd_t =
  // [5.5, 5, 10], W = 10. Candidates in [10, 11]: fwd sums are at most 4;
  // bwd sums 5.5+5 = 10.5 and 10 (layer 2). Sorted: [10, 10.5].
  //   C = 10:   tail [2,3) (10; +5 > 10); forward [0,2) (1+1);
  //             backward walking up: {0} (5.5), 5.5+5 > 10 so {1}:
  //             B1 = [1,2), B2 = [0,1). 4 jobs.
  //   C = 10.5: tail [2,3); forward [0,2); backward {0,1} (10.5 <= 10.5):
  //             B1 = [0,2). 3 jobs.
  // N = 1: costs 4*10 = 40 and 3*10.5 = 31.5: C = 10.5 wins.
  // N = 4: costs max(4,4)*10 = 40 and max(3,4)*10.5 = 42: C = 10 wins.
  PlanProblem p;
  p.layers = {layer(1, 4.5), layer(1, 4), layer(2, 8)};
  p.workers = 1;
  Plan g1 = greedyRoundPipe(p, 0);
  EXPECT_EQ(g1.jobs(),
            makePlan({fwd(0, 2)}, tailStage(2, 3), {bwd(0, 2)}).jobs())
      << show(g1);
  p.workers = 4;
  Plan g4 = greedyRoundPipe(p, 0);
  EXPECT_EQ(
      g4.jobs(),
      makePlan({fwd(0, 2)}, tailStage(2, 3), {bwd(1, 2), bwd(0, 1)}).jobs())
      << show(g4);
}

TEST(GreedyTest, MemoryCap) {
  // Layers 0-3: fwd 1, bwd 1 (bwd_t 2); layer 4: fwd 4, bwd 4 (bwd_t 8).
  // Every layer: 10 parameter bytes, 10 gradient bytes (size 10, bwd_size
  // 20). W = 8; candidates in [8, 8.8]: 1+1+1+1+4 = 8 (fwd), 2+2+2+2 = 8
  // and 8 (bwd), so C = 8. Tail: [4,5) (8; +2 > 8).
  PlanProblem p;
  for (int i = 0; i < 4; ++i)
    p.layers.push_back(layer(1, 1, 10, 10));
  p.layers.push_back(layer(4, 4, 10, 10));
  p.workers = 2;

  // No limit: forward [0,4) (time 4), backward [0,4) (time 2*4 = 8).
  EXPECT_EQ(greedyRoundPipe(p, 0).jobs(),
            makePlan({fwd(0, 4)}, tailStage(4, 5), {bwd(0, 4)}).jobs());

  // Limit 60, per-stage cap 30: forward walking down packs {3,2,1} (30
  // bytes) then {0}: F0 = [0,1), F1 = [1,4). Backward: 20 + 20 > 30, so
  // one layer per stage, deepest first.
  Plan capped = greedyRoundPipe(p, 60);
  EXPECT_EQ(capped.jobs(),
            makePlan({fwd(0, 1), fwd(1, 4)}, tailStage(4, 5),
                     {bwd(3, 4), bwd(2, 3), bwd(1, 2), bwd(0, 1)})
                .jobs())
      << show(capped);

  // Limit 10: one layer's bwd_size 20 > 10/2, so the limit is raised to 40
  // (cap 20): forward {3,2} then {1,0}; backward one layer per stage.
  Plan raised = greedyRoundPipe(p, 10);
  EXPECT_EQ(raised.jobs(),
            makePlan({fwd(0, 2), fwd(2, 4)}, tailStage(4, 5),
                     {bwd(3, 4), bwd(2, 3), bwd(1, 2), bwd(0, 1)})
                .jobs())
      << show(raised);
}

//===----------------------------------------------------------------------===//
// The exact search
//===----------------------------------------------------------------------===//

TEST(ExactTest, MatchesBruteForce) {
  std::mt19937 rng(20260518);
  int feasible = 0, infeasible = 0, budgetChangedPlan = 0;
  for (int iter = 0; iter < 500; ++iter) {
    bool tight = iter % 3 != 0;
    PlanProblem p = randomProblem(rng, 2, 8, tight);
    std::optional<Plan> exact = exactSearch(p);
    std::optional<Plan> brute = bruteForce(p);
    ASSERT_EQ(exact.has_value(), brute.has_value()) << "iteration " << iter;
    if (!exact) {
      ++infeasible;
      continue;
    }
    ++feasible;
    std::string why;
    ASSERT_TRUE(fitsBudgets(p, *exact, &why)) << why << " " << show(*exact);
    double e = planObjective(p, *exact), b = planObjective(p, *brute);
    ASSERT_LE(relativeDiff(e, b), 1e-12)
        << "iteration " << iter << ": exact " << e << " " << show(*exact)
        << " vs brute force " << b << " " << show(*brute);
    // Ties prefer fewer jobs.
    EXPECT_EQ(exact->numJobs(), brute->numJobs()) << "iteration " << iter;

    PlanProblem free = p;
    free.workerMemoryBytes = free.hostMemoryBytes = 0;
    std::optional<Plan> unconstrained = exactSearch(free);
    ASSERT_TRUE(unconstrained.has_value());
    EXPECT_LE(planObjective(p, *unconstrained), e * (1 + 1e-12));
    if (planObjective(p, *unconstrained) < e * (1 - 1e-9))
      ++budgetChangedPlan;
  }
  // The budgets must actually bind in a good share of the cases.
  EXPECT_GT(feasible, 200);
  EXPECT_GT(infeasible, 20);
  EXPECT_GT(budgetChangedPlan, 20);
}

TEST(ExactTest, HostBudgetBinds) {
  // Only a tight host budget: the fewest backward stages with the smallest
  // job times may keep too many checkpoints, so the search has to prefer
  // other cut points or more stages. On odd iterations a slow link makes
  // uploads dominate the job times, so that the cut points with the fewest
  // checkpoint bytes are no longer the ones with the smallest hops.
  std::mt19937 rng(7);
  int checked = 0;
  for (int iter = 0; iter < 300; ++iter) {
    PlanProblem p = randomProblem(rng, 5, 8, false);
    if (iter % 2)
      p.linkBytesPerSecond /= 20;
    // Only the host budget, tight: between the smallest and the largest
    // checkpoint total of random plans.
    double base =
        hostPeakBytes(p, makePlan({}, tailStage(0, int(p.layers.size())), {}));
    double lo = 1e300, hi = 0;
    for (int k = 0; k < 20; ++k) {
      double h = hostPeakBytes(p, randomPlan(int(p.layers.size()), rng));
      lo = std::min(lo, h);
      hi = std::max(hi, h);
    }
    if (hi <= base)
      continue;
    p.hostMemoryBytes = lo + (hi - lo) * 0.3;
    std::optional<Plan> exact = exactSearch(p);
    std::optional<Plan> brute = bruteForce(p);
    ASSERT_EQ(exact.has_value(), brute.has_value());
    if (!exact)
      continue;
    ++checked;
    EXPECT_LE(hostPeakBytes(p, *exact), p.hostMemoryBytes);
    ASSERT_LE(relativeDiff(planObjective(p, *exact), planObjective(p, *brute)),
              1e-12)
        << show(*exact) << " vs " << show(*brute);
  }
  EXPECT_GT(checked, 100);
}

TEST(ExactTest, NeverWorseThanGreedy) {
  std::mt19937 rng(12345);
  int compared = 0, strictlyBetter = 0;
  for (int iter = 0; iter < 300; ++iter) {
    bool big = iter % 10 == 0;
    PlanProblem p = randomProblem(rng, 2, big ? 24 : 8, iter % 2 == 0);
    Plan greedy = greedyRoundPipe(p, p.workerMemoryBytes);
    EXPECT_TRUE(isValid(p, greedy, nullptr)) << show(greedy);
    std::optional<Plan> exact = exactSearch(p);
    if (!fitsBudgets(p, greedy, nullptr))
      continue;
    ASSERT_TRUE(exact.has_value()) << "the greedy plan fits but exact found "
                                      "nothing: "
                                   << show(greedy);
    ++compared;
    double e = planObjective(p, *exact), g = planObjective(p, greedy);
    EXPECT_LE(e, g * (1 + 1e-12)) << show(*exact) << " vs " << show(greedy);
    if (e < g * (1 - 1e-9))
      ++strictlyBetter;
  }
  EXPECT_GT(compared, 100);
  // RoundPipe's model ignores uploads and hops: the exact search should
  // often do better under Rondo's costs.
  EXPECT_GT(strictlyBetter, 10);
}

TEST(ExactTest, NoPlanFits) {
  PlanProblem p = tinyProblem();
  p.workerMemoryBytes = 100; // below any single layer's running memory
  EXPECT_FALSE(exactSearch(p).has_value());
  EXPECT_FALSE(bruteForce(p).has_value());
  p.workerMemoryBytes = 0;
  p.hostMemoryBytes = 1100; // below fixed + staging
  EXPECT_FALSE(exactSearch(p).has_value());
  EXPECT_FALSE(bruteForce(p).has_value());
}

TEST(ExactTest, FortyLayers) {
  // A transformer-like table: a heavy embedding prefix (parameters, no
  // compute), 38 uniform blocks with small jitter, and a heavy LM head.
  PlanProblem p;
  std::mt19937 rng(40);
  std::uniform_real_distribution<double> jitter(0.95, 1.05);
  LayerCost embed = layer(0.1e-3, 0.1e-3, 300e6, 300e6, 1e5, 0);
  embed.kind = LayerKind::Prefix;
  p.layers.push_back(embed);
  for (int i = 0; i < 38; ++i)
    p.layers.push_back(layer(4e-3 * jitter(rng), 8e-3 * jitter(rng), 100e6,
                             100e6, 16e6, 120e6));
  LayerCost head = layer(10e-3, 20e-3, 300e6, 300e6, 16e6, 600e6);
  head.kind = LayerKind::Tail;
  p.layers.push_back(head);
  p.workers = 4;
  p.microbatches = 5;
  p.linkBytesPerSecond = 12e9;
  p.workerMemoryBytes = 4e9;
  p.hostFixedBytes = 16e9;
  p.hostMemoryBytes = 20e9;

  auto t0 = std::chrono::steady_clock::now();
  std::optional<Plan> exact = exactSearch(p);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(exact.has_value());
  std::string why;
  EXPECT_TRUE(fitsBudgets(p, *exact, &why)) << why;
  Plan greedy = greedyRoundPipe(p, p.workerMemoryBytes);
  if (fitsBudgets(p, greedy, nullptr)) {
    EXPECT_LE(planObjective(p, *exact), planObjective(p, greedy) * (1 + 1e-12));
  }
  std::printf("exactSearch, L = 40: %.1f ms, %d jobs, objective %.4f s "
              "(greedy %.4f s)\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              exact->numJobs(), planObjective(p, *exact),
              planObjective(p, greedy));

  // Without budgets as well.
  p.workerMemoryBytes = p.hostMemoryBytes = 0;
  t0 = std::chrono::steady_clock::now();
  exact = exactSearch(p);
  t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(exact.has_value());
  std::printf("exactSearch, L = 40, no budgets: %.1f ms, %d jobs\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              exact->numJobs());
}

namespace {
/// `p`'s table costed at `from` tokens per microbatch, rescaled to one row
/// of `tokens` tokens: what maxSequenceLength promises to fit.
PlanProblem atSequence(PlanProblem p, double from, double tokens) {
  p.microbatches = 1;
  for (LayerCost &l : p.layers) {
    l.inputBytes *= tokens / from;
    l.workspaceBytes *= tokens / from;
    l.forwardSeconds *= tokens / from;
    l.backwardSeconds *= tokens / from;
  }
  return p;
}
bool finestFits(const PlanProblem &p) {
  Plan fine = finestPlan(int(p.layers.size()));
  return fitsBudgets(p, fine, nullptr) &&
         workerArenaBytes(p, fine) <= p.workerMemoryBytes;
}
} // namespace

TEST(MaxSequenceTest, LongestThatFitsTheFinestPlan) {
  PlanProblem p = tinyProblem();
  p.workerMemoryBytes = 0;
  p.hostMemoryBytes = 0;
  EXPECT_EQ(maxSequenceLength(p, 64, 16, 1 << 20), 1 << 20); // nothing bounds
  p.workerMemoryBytes = 5000;
  // The finest plan's arena at one row: 2 x 300 parameter slot + 300
  // gradients + hand-offs and temporaries that grow with the sequence.
  int64_t longest = maxSequenceLength(p, 64, 16, 1 << 20);
  ASSERT_GT(longest, 0);
  EXPECT_EQ(longest % 16, 0);
  EXPECT_TRUE(finestFits(atSequence(p, 64, double(longest))));
  EXPECT_FALSE(finestFits(atSequence(p, 64, double(longest + 16))));
  // Twice the budget for activations: about twice the sequence.
  PlanProblem wider = p;
  wider.workerMemoryBytes = 900 + 2 * (5000 - 900);
  int64_t twice = maxSequenceLength(wider, 64, 16, 1 << 20);
  EXPECT_NEAR(double(twice) / double(longest), 2.0, 0.05);
  // Host memory binds too: checkpoints of every layer input live there.
  PlanProblem host = p;
  host.hostMemoryBytes = host.hostFixedBytes + 100;
  EXPECT_LT(maxSequenceLength(host, 64, 16, 1 << 20), longest);
  // Weights alone over the budget: no sequence fits.
  p.workerMemoryBytes = 800;
  EXPECT_EQ(maxSequenceLength(p, 64, 16, 1 << 20), 0);
}
