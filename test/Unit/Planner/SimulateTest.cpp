//===- SimulateTest.cpp - Timeline replay and the Gantt chart -------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "PlannerTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

using namespace rondo::planner;
using namespace rondo::planner::test;
using Lane = TimelineEvent::Lane;

namespace {

std::vector<double> computeStarts(const SimResult &r, int step, int job) {
  std::vector<double> out;
  for (const TimelineEvent &ev : r.timeline)
    if (ev.lane == Lane::Compute && ev.step == step && ev.job == job)
      out.push_back(ev.start);
  return out;
}

/// Random tables as in PartitionTest, smaller budgets do not matter here.
PlanProblem randomProblem(std::mt19937 &rng) {
  std::uniform_real_distribution<double> u(0, 1);
  auto in = [&](double lo, double hi) { return lo + (hi - lo) * u(rng); };
  PlanProblem p;
  int numLayers = std::uniform_int_distribution<int>(2, 10)(rng);
  p.workers = std::uniform_int_distribution<int>(1, 4)(rng);
  p.microbatches = std::uniform_int_distribution<int>(1, 6)(rng);
  p.linkBytesPerSecond = in(2e10, 2e11);
  p.peerBytesPerSecond = u(rng) < 0.5 ? 0.0 : in(2e10, 2e11);
  for (int l = 0; l < numLayers; ++l) {
    LayerCost lc = layer(in(0.2e-3, 3e-3), in(0.2e-3, 6e-3), in(1e6, 1e8));
    lc.gradBytes = u(rng) < 0.2 ? 0.0 : lc.paramBytes * in(0.5, 2);
    lc.inputBytes = in(0, 5e7);
    p.layers.push_back(lc);
  }
  if (u(rng) < 0.7)
    p.trainableParams.assign(numLayers, in(1e6, 2e8));
  p.optimizerParamsPerSecond = in(1e9, 1e10);
  return p;
}

} // namespace

TEST(SimulateTest, OneWorkerChainWithHop) {
  // Two layers, fwd 1 and bwd 1 each, no parameters (free uploads), M = 2.
  // Plan F0 [0,1) (compute 1), T [1,2) (compute 2), B1 [0,1) (compute 2).
  // in(1) = 1 at link 1 through the host: the tail's hop is 2*1/1 = 2.
  //   F0: m0 [0,1], m1 [1,2]
  //   T:  m0 >= max(2, 1+2) = 3: [3,5]; m1 >= max(5, 2+2): [5,7]
  //   B1: hop 2*in(1) + in(0) = 2: m0 >= max(7, 5+2): [7,9];
  //       m1 >= max(9, 7+2): [9,11]
  // Step 1 repeats from 11: 11 s per step, compute 2+4+4 = 10 s, bubble
  // 1 - 10/11.
  PlanProblem p;
  p.layers = {layer(1, 1, 0, 0, 0), layer(1, 1, 0, 0, 1)};
  p.workers = 1;
  p.microbatches = 2;
  p.linkBytesPerSecond = 1;
  Plan plan = makePlan({fwd(0, 1)}, tailStage(1, 2), {bwd(0, 1)});
  ASSERT_DOUBLE_EQ(costStage(p, plan.tail).hopSeconds, 2);

  SimResult r = simulate(p, plan, {/*steps=*/3, 0, OptimizerMode::Stale});
  EXPECT_EQ(computeStarts(r, 0, 0), (std::vector<double>{0, 1}));
  EXPECT_EQ(computeStarts(r, 0, 1), (std::vector<double>{3, 5}));
  EXPECT_EQ(computeStarts(r, 0, 2), (std::vector<double>{7, 9}));
  EXPECT_EQ(computeStarts(r, 1, 0), (std::vector<double>{11, 12}));
  EXPECT_DOUBLE_EQ(r.stepSeconds, 11);
  EXPECT_DOUBLE_EQ(r.computeSecondsPerStep, 10);
  EXPECT_DOUBLE_EQ(r.bubbleFraction, 1 - 10.0 / 11.0);

  // Without the hop one worker is busy all the time.
  p.layers[1].inputBytes = 0;
  SimResult noHop = simulate(p, plan, {3, 0, OptimizerMode::Stale});
  EXPECT_DOUBLE_EQ(noHop.stepSeconds, 10);
  EXPECT_DOUBLE_EQ(noHop.bubbleFraction, 0);

  // One step only: the end of step 0.
  EXPECT_DOUBLE_EQ(simulate(p, plan, {1, 0, OptimizerMode::Stale}).stepSeconds,
                   10);
}

TEST(SimulateTest, OneWorkerUploadBound) {
  // Same shape, M = 1, 3 parameter bytes per layer at link 1: every upload
  // takes 3 s, computes are 1, 2, 2. Two parameter slots:
  //   up F0 [0,3]  F0 [3,4]
  //   up T  [3,6]  T  [6,8]
  //   up B1 [6,9]  (F0, two before, ended at 4)  B1 [9,11]
  // The trainer issues step 1 once step 0's ops have ended (its barrier),
  // so its first upload is not prefetched behind B1:
  //   up F0 [11,14]  F0 [14,15]
  //   up T  [14,17]  T  [17,19]
  //   up B1 [17,20]  B1 [20,22]
  // Steady state: 11 s per step, the sum of the upload-bound job times and
  // the last job's compute.
  PlanProblem p;
  p.layers = {layer(1, 1, 3), layer(1, 1, 3)};
  p.workers = 1;
  p.microbatches = 1;
  p.linkBytesPerSecond = 1;
  Plan plan = makePlan({fwd(0, 1)}, tailStage(1, 2), {bwd(0, 1)});
  SimResult r = simulate(p, plan, {3, 0, OptimizerMode::Stale});
  std::vector<std::pair<double, double>> uploads;
  for (const TimelineEvent &ev : r.timeline)
    if (ev.lane == Lane::Upload && ev.step < 2)
      uploads.emplace_back(ev.start, ev.end);
  EXPECT_EQ(uploads,
            (std::vector<std::pair<double, double>>{
                {0, 3}, {3, 6}, {6, 9}, {11, 14}, {14, 17}, {17, 20}}));
  EXPECT_EQ(computeStarts(r, 0, 2), (std::vector<double>{9}));
  EXPECT_EQ(computeStarts(r, 1, 2), (std::vector<double>{20}));
  EXPECT_DOUBLE_EQ(r.stepSeconds, 11);
  double jobSum = 0;
  for (const Stage &st : plan.jobs())
    jobSum += costStage(p, st).jobSeconds;
  EXPECT_DOUBLE_EQ(r.stepSeconds, jobSum + 2);
  EXPECT_DOUBLE_EQ(r.bubbleFraction, 1 - 5.0 / 11.0);
}

namespace {
/// Four equal jobs of 2 s per microbatch on two workers, M = 3 = N + 1:
/// F0 [0,2) (two layers, fwd 1), T [2,3) (fwd 1 + bwd 1), B1 [1,2),
/// B2 [0,1) (recompute 1 + backward 1). No transfers.
PlanProblem balancedProblem() {
  PlanProblem p;
  p.layers = {layer(1, 1), layer(1, 1), layer(1, 1)};
  p.workers = 2;
  p.microbatches = 3;
  return p;
}
Plan balancedPlan() {
  return makePlan({fwd(0, 2)}, tailStage(2, 3), {bwd(1, 2), bwd(0, 1)});
}
} // namespace

TEST(SimulateTest, TwoWorkersBalancedDrainOnlyBetweenSteps) {
  // Step 0: F0 w0 [0,6]; T w1 from 2: [2,8]; B1 w0 from 6: [6,12];
  // B2 w1 from 8: [8,14]. Within the step the workers never wait after the
  // fill; step 1 is issued once step 0's ops have ended (14), so F0 w0 runs
  // [14,20] ... B2 w1 ends at 28: 14 s per step, 4 jobs * 6 s / 2 workers
  // and the pipeline's fill (2 s).
  PlanProblem p = balancedProblem();
  Plan plan = balancedPlan();
  SimResult r = simulate(p, plan, {4, 0, OptimizerMode::Stale});
  EXPECT_EQ(computeStarts(r, 0, 1), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(computeStarts(r, 0, 3), (std::vector<double>{8, 10, 12}));
  EXPECT_EQ(computeStarts(r, 1, 0), (std::vector<double>{14, 16, 18}));
  EXPECT_DOUBLE_EQ(r.stepSeconds, 14);
  EXPECT_DOUBLE_EQ(r.computeSecondsPerStep, 24);
  EXPECT_NEAR(r.bubbleFraction, 1 - 24.0 / 28.0, 1e-12);

  // Round-robin placement: job n of step s on (c0 + s*K + n) mod N.
  SimResult shifted = simulate(p, plan, {2, 1, OptimizerMode::Stale});
  for (const TimelineEvent &ev : shifted.timeline) {
    if (ev.lane == Lane::Compute) {
      EXPECT_EQ(ev.worker, (1 + ev.step * 4 + ev.job) % 2);
    }
  }
  EXPECT_DOUBLE_EQ(shifted.stepSeconds, 14);
}

TEST(SimulateTest, SharedCoresBoundTheStep) {
  // The balanced plan keeps two workers busy: 24 s of compute in a 12 s
  // step. On one shared core the workers take turns: 24 s. On two, the
  // replay's 12 s already spreads the work. Four workers' worth of jobs on
  // two cores is the 4-worker case of a 2-core host.
  PlanProblem p = balancedProblem();
  Plan plan = balancedPlan();
  SimResult own = simulate(p, plan, {4, 0, OptimizerMode::Stale});
  p.sharedCores = 2;
  SimResult two = simulate(p, plan, {4, 0, OptimizerMode::Stale});
  EXPECT_DOUBLE_EQ(two.stepSeconds, own.stepSeconds);
  p.sharedCores = 1;
  SimResult one = simulate(p, plan, {4, 0, OptimizerMode::Stale});
  EXPECT_DOUBLE_EQ(one.stepSeconds, 24);
  EXPECT_DOUBLE_EQ(one.computeSecondsPerStep, 24);
  EXPECT_NEAR(one.bubbleFraction, 0.5, 1e-12);
}

TEST(SimulateTest, OptimizerModes) {
  // The balanced case with 1e9 parameters per layer at 1e9/s: 1 s of
  // optimizer per layer. Step 0: T ends at 8, B1 at 12, B2 at 14.
  //   overlap: per stage as its gradients land: layer 2 [8, 9], layer 1
  //     [12, 13], layer 0 [14, 15]. F0 of step 1 needs layers 0 and 1 of
  //     step 0, so it starts at 15 and every step takes 15 s (14 s of
  //     pipeline plus the last stage's update).
  //   sync: one task after the last gradient, [14, 17]: 17 s per step.
  //   stale: step 1 runs on the initial weights, issued when step 0 ends
  //     (14 s a step: the pipeline); update 0 waits for step 1's last
  //     upload (at 14, step 1's issue) and ends at 17, long before step
  //     2's first upload (28) needs it.
  PlanProblem p = balancedProblem();
  p.trainableParams = {1e9, 1e9, 1e9};
  p.optimizerParamsPerSecond = 1e9;
  Plan plan = balancedPlan();
  SimResult overlap = simulate(p, plan, {4, 0, OptimizerMode::Overlap});
  SimResult sync = simulate(p, plan, {4, 0, OptimizerMode::Sync});
  SimResult stale = simulate(p, plan, {5, 0, OptimizerMode::Stale});
  EXPECT_DOUBLE_EQ(overlap.stepSeconds, 15);
  EXPECT_DOUBLE_EQ(sync.stepSeconds, 17);
  EXPECT_DOUBLE_EQ(stale.stepSeconds, 14);
  int overlapTasks = 0;
  for (const TimelineEvent &ev : overlap.timeline)
    if (ev.lane == Lane::Optimizer) {
      ++overlapTasks;
      EXPECT_EQ(ev.worker, -1);
      EXPECT_DOUBLE_EQ(ev.end - ev.start, 1);
    }
  EXPECT_EQ(overlapTasks, 4 * 3);
  std::vector<std::pair<double, double>> syncTasks, staleTasks;
  for (const TimelineEvent &ev : sync.timeline)
    if (ev.lane == Lane::Optimizer)
      syncTasks.emplace_back(ev.start, ev.end);
  for (const TimelineEvent &ev : stale.timeline)
    if (ev.lane == Lane::Optimizer && ev.step == 0)
      staleTasks.emplace_back(ev.start, ev.end);
  ASSERT_EQ(syncTasks.size(), 4u);
  EXPECT_EQ(syncTasks[0], (std::pair<double, double>{14, 17}));
  EXPECT_EQ(staleTasks, (std::vector<std::pair<double, double>>{{14, 17}}));
  // No upload of step s starts before the update it runs on: step s-1's
  // (overlap: of its layers; sync: all), step s-2's when stale.
  for (const TimelineEvent &ev : overlap.timeline)
    if (ev.lane == Lane::Upload && ev.step > 0 && ev.job == 0) {
      EXPECT_DOUBLE_EQ(ev.start, 15.0 * ev.step);
    }
  for (const TimelineEvent &ev : sync.timeline)
    if (ev.lane == Lane::Upload && ev.step > 0 && ev.job == 0) {
      EXPECT_DOUBLE_EQ(ev.start, 17.0 * ev.step);
    }

  // A slow optimizer bounds every mode: 3 layers of 10 s each on one host
  // lane.
  p.optimizerParamsPerSecond = 1e8;
  EXPECT_NEAR(simulate(p, plan, {8, 0, OptimizerMode::Stale}).stepSeconds, 30,
              1e-9);
  EXPECT_GE(simulate(p, plan, {8, 0, OptimizerMode::Overlap}).stepSeconds,
            30 - 1e-9);
}

TEST(SimulateTest, RandomPlansInvariants) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    PlanProblem p = randomProblem(rng);
    Plan plan = randomPlan(int(p.layers.size()), rng);
    SimOptions opts;
    opts.steps = std::uniform_int_distribution<int>(1, 6)(rng);
    opts.firstWorker = std::uniform_int_distribution<int>(0, 5)(rng);
    opts.optimizer = OptimizerMode(iter % 3);
    SimResult r = simulate(p, plan, opts);
    int numJobs = plan.numJobs();

    // The bubble formula and the compute sum.
    double compute = 0;
    for (const Stage &st : plan.jobs())
      compute += p.microbatches * costStage(p, st).computeSeconds;
    EXPECT_DOUBLE_EQ(r.computeSecondsPerStep, compute);
    if (r.stepSeconds > 0)
      EXPECT_NEAR(r.bubbleFraction,
                  std::max(0.0, 1 - compute / (p.workers * r.stepSeconds)),
                  1e-12); // rounding noise below 1e-12 reads as 0
    else
      EXPECT_EQ(r.bubbleFraction, 0);
    EXPECT_GE(r.bubbleFraction, 0);
    EXPECT_LT(r.bubbleFraction, 1);

    // Event counts.
    int computes = 0, uploads = 0, downloads = 0, optimizers = 0;
    int withGrads = 0;
    for (const Stage &st : plan.jobs())
      withGrads += costStage(p, st).gradBytes > 0;
    for (const TimelineEvent &ev : r.timeline) {
      computes += ev.lane == Lane::Compute;
      uploads += ev.lane == Lane::Upload;
      downloads += ev.lane == Lane::Download;
      optimizers += ev.lane == Lane::Optimizer;
      EXPECT_LE(ev.start, ev.end);
      EXPECT_GE(ev.start, 0);
    }
    EXPECT_EQ(computes, opts.steps * numJobs * p.microbatches);
    EXPECT_EQ(uploads, opts.steps * numJobs);
    EXPECT_EQ(downloads, opts.steps * withGrads);
    int withTask = 0;
    for (const Stage &st : plan.jobs()) {
      double params = 0;
      for (int l = st.first; l < st.end; ++l)
        params += l < int(p.trainableParams.size()) ? p.trainableParams[l] : 0;
      withTask += st.kind != StageKind::Forward &&
                  (params > 0 || costStage(p, st).gradBytes > 0);
    }
    // One task per stage (overlap) or per step.
    EXPECT_EQ(optimizers, opts.steps * (opts.optimizer == OptimizerMode::Overlap
                                            ? withTask
                                            : std::min(withTask, 1)));

    // No two intervals of one lane of one worker overlap.
    std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> lanes;
    for (const TimelineEvent &ev : r.timeline)
      lanes[{ev.worker, int(ev.lane)}].emplace_back(ev.start, ev.end);
    for (auto &[key, intervals] : lanes) {
      std::sort(intervals.begin(), intervals.end());
      for (size_t i = 1; i < intervals.size(); ++i)
        ASSERT_GE(intervals[i].first, intervals[i - 1].second - 1e-12)
            << "worker " << key.first << " lane " << key.second;
    }

    // Dependencies: microbatch m of job n > 0 after microbatch m of job
    // n-1 plus the hop; compute after its upload.
    std::map<std::tuple<int, int, int>, TimelineEvent> mb;
    std::map<std::pair<int, int>, double> uploadEnd;
    for (const TimelineEvent &ev : r.timeline) {
      if (ev.lane == Lane::Compute)
        mb[{ev.step, ev.job, ev.microbatch}] = ev;
      if (ev.lane == Lane::Upload)
        uploadEnd[{ev.step, ev.job}] = ev.end;
    }
    std::vector<Stage> jobs = plan.jobs();
    for (auto &[key, ev] : mb) {
      auto [s, n, m] = key;
      double uploaded = uploadEnd[std::make_pair(s, n)];
      EXPECT_GE(ev.start, uploaded);
      if (n > 0) {
        double ready = mb[std::make_tuple(s, n - 1, m)].end +
                       costStage(p, jobs[n]).hopSeconds;
        EXPECT_GE(ev.start, ready - 1e-12);
      }
    }

    // A step is issued once the previous step's worker ops have ended.
    std::map<int, double> lastWorkerOp, firstOp;
    for (const TimelineEvent &ev : r.timeline) {
      if (ev.worker >= 0)
        lastWorkerOp[ev.step] = std::max(lastWorkerOp[ev.step], ev.end);
      if (ev.lane != Lane::Optimizer && !firstOp.count(ev.step))
        firstOp[ev.step] = ev.start;
      if (ev.lane != Lane::Optimizer)
        firstOp[ev.step] = std::min(firstOp[ev.step], ev.start);
    }
    for (auto &[s, first] : firstOp)
      if (s > 0 && lastWorkerOp.count(s - 1))
        EXPECT_GE(first, lastWorkerOp[s - 1] - 1e-12) << "iteration " << iter;

    // Steady state (steps chosen by the simulator): work is conserved, so a
    // step can never be shorter than its compute spread over N workers,
    // even when consecutive steps overlap (fewer jobs than workers).
    SimOptions steady = opts;
    steady.steps = 0;
    SimResult st = simulate(p, plan, steady);
    EXPECT_GE(st.stepSeconds * p.workers, compute * (1 - 1e-9))
        << "iteration " << iter;

    // Sync mode is never faster than the overlapped optimizer.
    SimOptions sync = opts, overlap = opts;
    sync.optimizer = OptimizerMode::Sync;
    overlap.optimizer = OptimizerMode::Overlap;
    EXPECT_GE(simulate(p, plan, sync).stepSeconds,
              simulate(p, plan, overlap).stepSeconds * (1 - 1e-12))
        << "iteration " << iter;
  }
}

TEST(SimulateTest, GradientSlotWaitsForItsDownload) {
  // One worker, M = 1, 3 gradient bytes a layer at link 1 (downloads of 3
  // s), no parameters: F0 [0,1), T [1,2), B1 [0,1). F0 [0,1], T [1,3], its
  // download [3,6]; B1 computes into the worker's one gradient buffer, so
  // it starts when T's download has read it: [6,8], download [8,11].
  PlanProblem p;
  p.layers = {layer(1, 1, 0, 3), layer(1, 1, 0, 3)};
  p.workers = 1;
  p.microbatches = 1;
  p.linkBytesPerSecond = 1;
  Plan plan = makePlan({fwd(0, 1)}, tailStage(1, 2), {bwd(0, 1)});
  SimResult r = simulate(p, plan, {2, 0, OptimizerMode::Stale});
  EXPECT_EQ(computeStarts(r, 0, 1), (std::vector<double>{1}));
  EXPECT_EQ(computeStarts(r, 0, 2), (std::vector<double>{6}));
  EXPECT_EQ(computeStarts(r, 1, 0), (std::vector<double>{11}));
  EXPECT_DOUBLE_EQ(r.stepSeconds, 11);
}

namespace {
/// One worker, one stage: compute 2 s, a 1 s gradient download, 1e9
/// trainable parameters whose host AdamW takes 1 s alone and streams
/// kOptimizerHostBytesPerParam bytes each (32 GB/s), on a host of 32 GB/s.
PlanProblem hostBoundProblem() {
  PlanProblem p;
  p.layers = {layer(1, 1, 0, 10)};
  p.workers = 1;
  p.microbatches = 1;
  p.linkBytesPerSecond = 10;
  p.trainableParams = {1e9};
  p.optimizerParamsPerSecond = 1e9;
  p.hostMemoryBytesPerSecond = kOptimizerHostBytesPerParam * 1e9;
  return p;
}
} // namespace

TEST(SimulateTest, HostMemoryIsSharedWithTheEndOfStepPass) {
  // Compute [0,2], download [2,3]. The AdamW task and the trainer's pass
  // over the gradients (4 GB for the logged norm: 0.125 s alone at the
  // host's bandwidth) both start at 3 and each would fill the host's
  // memory alone, so both run at half speed: the pass ends at 3.25, the
  // task does the rest of its 1 s alone and ends at 4.125, and the next
  // step's upload waits for it. Without a host bandwidth the pass is free
  // and the task takes its 1 s.
  PlanProblem p = hostBoundProblem();
  Plan plan = makePlan({}, tailStage(0, 1), {});
  SimResult r = simulate(p, plan, {4, 0, OptimizerMode::Overlap});
  EXPECT_NEAR(r.stepSeconds, 4.125, 1e-3);
  EXPECT_NEAR(r.optimizerSecondsPerStep, 1.125, 1e-3);
  EXPECT_DOUBLE_EQ(r.optimizerAloneSecondsPerStep, 1);
  EXPECT_NEAR(r.stepEndPassSecondsPerStep, 0.25, 1e-3);
  for (const TimelineEvent &ev : r.timeline)
    if (ev.lane == Lane::Trainer && ev.step == 0) {
      EXPECT_DOUBLE_EQ(ev.start, 3);
      EXPECT_NEAR(ev.end, 3.25, 1e-3);
    }

  p.hostMemoryBytesPerSecond = 0;
  SimResult alone = simulate(p, plan, {4, 0, OptimizerMode::Overlap});
  EXPECT_DOUBLE_EQ(alone.stepSeconds, 4);
  EXPECT_DOUBLE_EQ(alone.optimizerSecondsPerStep, 1);
  EXPECT_EQ(alone.stepEndPassSecondsPerStep, 0);

  // Sync computes the norm inside its one task: 1 s of AdamW and 0.125 s
  // of the norm, one after the other, each alone.
  p.hostMemoryBytesPerSecond = kOptimizerHostBytesPerParam * 1e9;
  SimResult sync = simulate(p, plan, {4, 0, OptimizerMode::Sync});
  EXPECT_NEAR(sync.stepSeconds, 4.125, 1e-9);
}

TEST(SimulateTest, CopiesAndTheOptimizerShareTheHost) {
  // Two workers: the AdamW task of the tail (T on worker 1) runs while
  // worker 0 downloads B1's gradients; the host cannot serve both at their
  // own rates, so the task and the download both take longer than alone,
  // and a host twice as fast gives them back.
  PlanProblem p;
  p.layers = {layer(1, 1, 0, 40), layer(1, 1, 0, 40)};
  p.workers = 2;
  p.microbatches = 2;
  p.linkBytesPerSecond = 40;
  p.trainableParams = {1e9, 1e9};
  p.optimizerParamsPerSecond = 1e9;
  Plan plan = makePlan({fwd(0, 1)}, tailStage(1, 2), {bwd(0, 1)});
  SimResult alone = simulate(p, plan, {4, 0, OptimizerMode::Overlap});
  p.hostMemoryBytesPerSecond = kOptimizerHostBytesPerParam * 1e9;
  SimResult shared = simulate(p, plan, {4, 0, OptimizerMode::Overlap});
  EXPECT_GT(shared.optimizerSecondsPerStep,
            alone.optimizerSecondsPerStep * 1.01);
  EXPECT_DOUBLE_EQ(shared.optimizerAloneSecondsPerStep,
                   alone.optimizerSecondsPerStep);
  EXPECT_GT(shared.stepSeconds, alone.stepSeconds);
  p.hostMemoryBytesPerSecond *= 1e6;
  SimResult roomy = simulate(p, plan, {4, 0, OptimizerMode::Overlap});
  EXPECT_NEAR(roomy.optimizerSecondsPerStep, alone.optimizerSecondsPerStep,
              1e-6);
}

TEST(SimulateTest, ReplicaProcessesShareTheHost) {
  // The same plan in each of two replica processes on one host, optimizer
  // sharded: each updates half the parameters at half the host's AdamW
  // rate (they split its cores), 1 s, and together they fill its memory
  // exactly; with replicas the end-of-step pass waits for the tasks, then
  // both processes read their halves of the gradients at half the pass
  // rate each: 2 GB at 16 GB/s, 0.125 s.
  PlanProblem p = hostBoundProblem();
  p.replicas = 2;
  p.replicasPerHost = 2;
  p.replicaBytesPerSecond = 0; // the sum itself is free here
  Plan plan = makePlan({}, tailStage(0, 1), {});
  SimResult r = simulate(p, plan, {4, 0, OptimizerMode::Overlap});
  EXPECT_NEAR(r.optimizerSecondsPerStep, 1, 1e-9);
  EXPECT_NEAR(r.stepEndPassSecondsPerStep, 0.125, 1e-9);
  for (const TimelineEvent &ev : r.timeline)
    if (ev.lane == Lane::Trainer && ev.step == 0)
      EXPECT_NEAR(ev.start, 4, 1e-9);
  EXPECT_NEAR(r.stepSeconds, 4.125, 1e-9);
}

TEST(GanttTest, SvgHasRowsStagesAndEscapedTitle) {
  PlanProblem p;
  p.layers = {
      layer(1e-3, 2e-3, 1e6, 1e6, 1e5), layer(1e-3, 2e-3, 1e6, 1e6, 1e5),
      layer(2e-3, 3e-3, 1e6, 1e6, 1e5), layer(1e-3, 1e-3, 1e6, 1e6, 1e5)};
  p.workers = 3;
  p.microbatches = 4;
  p.linkBytesPerSecond = 1e9;
  p.trainableParams = {1e6, 1e6, 1e6, 1e6};
  Plan plan =
      makePlan({fwd(0, 1), fwd(1, 3)}, tailStage(3, 4), {bwd(2, 3), bwd(0, 2)});
  SimResult r = simulate(p, plan, {3, 0, OptimizerMode::Stale});
  std::ostringstream os;
  writeGanttSvg(os, p, plan, r, "Rondo <plan> & \"friends\"");
  std::string svg = os.str();
  ASSERT_EQ(svg.rfind("<svg", 0), 0u) << svg.substr(0, 80);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  for (int w = 0; w < p.workers; ++w)
    EXPECT_NE(svg.find(">worker " + std::to_string(w) + "<"), std::string::npos)
        << w;
  EXPECT_EQ(svg.find(">worker 3<"), std::string::npos);
  EXPECT_NE(svg.find(">host<"), std::string::npos);
  for (int j = 0; j < plan.numJobs(); ++j)
    EXPECT_NE(svg.find(">" + stageName(plan, j) + "<"), std::string::npos)
        << stageName(plan, j);
  EXPECT_NE(svg.find("Rondo &lt;plan&gt; &amp; &quot;friends&quot;"),
            std::string::npos);
  EXPECT_EQ(svg.find("<plan>"), std::string::npos);
  EXPECT_NE(svg.find("bubble"), std::string::npos);
  EXPECT_NE(svg.find("ms"), std::string::npos);
}
