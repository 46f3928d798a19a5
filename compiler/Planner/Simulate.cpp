//===- Simulate.cpp - Replay of the round-robin job order -----------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// An event-driven replay of RoundPipe's dispatch order with the planner's
// stage costs: jobs are issued in order g = s*K + n to worker
// (c0 + g) mod N, and every interval starts at the latest of its
// dependencies:
//   upload of job g:        the worker's upload lane, the end of the compute
//                           of the job two before it on the same worker (two
//                           parameter slots), and the optimizer updates of
//                           its layers from step s-1 (sync, overlap) or s-2
//                           (stale);
//   microbatch m of job g:  its upload, the worker's compute lane and, for
//                           n > 0, the end of microbatch m of job g-1 plus
//                           this job's hand-off time;
//   download of job g:      its last microbatch and the download lane;
//   optimizer tasks:        the host optimizer lane runs them in issue
//                           order, as the trainer's --optimizer-mode does:
//                           overlap: one task per tail/backward stage with
//                           trainable parameters, after its download (or
//                           its last microbatch), updating that stage's
//                           layers (per-parameter AdamW needs nothing
//                           else); sync: one task per step after the last
//                           gradient has landed, updating every layer;
//                           stale: sync's task, which also waits until the
//                           parameter uploads of step s+1 have read the
//                           weights.
// On shared cores (PlanProblem::sharedCores) the step is at least the
// CPU work over the cores.
// Jobs are replayed in issue order, which is a topological order of these
// dependencies (a stale task is replayed after the next step's jobs), so
// one pass computes the whole timeline.
//
//===----------------------------------------------------------------------===//

#include "Planner/Planner.h"

#include <limits>
#include <numeric>

#include <algorithm>

namespace rondo::planner {

double replicaSumSeconds(const PlanProblem &problem, double params,
                         bool hostHeld) {
  if (problem.replicas <= 1 || problem.replicaBytesPerSecond <= 0)
    return 0;
  const double r = problem.replicas;
  double seconds =
      2.0 * (r - 1.0) / r * params * 4.0 / problem.replicaBytesPerSecond;
  // Host-held gradients go to the GPU and back for the sum (fp32): all of
  // them up and the replica's shard down, its updated shard up and every
  // weight down (sharded); or all up and all down (each replica updates
  // everything). Two processes of W1 streamed over 2 + 2 H200s moved
  // 20.6 GB a step each this way; unpriced, their step was 1.82x the plan's.
  if (hostHeld && problem.replicaHostCrossingBytesPerSecond > 0) {
    const double crossings =
        problem.shardOptimizer ? 2.0 * (1.0 + 1.0 / r) : 2.0;
    seconds +=
        crossings * params * 4.0 / problem.replicaHostCrossingBytesPerSecond;
  }
  return seconds;
}

double optimizerShards(const PlanProblem &problem) {
  return problem.replicas > 1 && problem.shardOptimizer ? problem.replicas : 1;
}

SimResult simulate(const PlanProblem &problem, const Plan &plan,
                   const SimOptions &options) {
  using Lane = TimelineEvent::Lane;
  SimResult result;
  std::vector<Stage> jobs = plan.jobs();
  int numJobs = int(jobs.size());
  int numWorkers = std::max(problem.workers, 1);
  int numMicrobatches = std::max(problem.microbatches, 1);
  // The rotation brings every job back to the same worker after
  // N / gcd(K, N) steps; the steady state is measured over such a period
  // (at least two steps, so one-step-stale steps that overlap average out),
  // after a warm-up of one step (two when stale: its updates reach back two
  // steps).
  int period =
      std::max(numWorkers / std::gcd(std::max(numJobs, 1), numWorkers), 2);
  int steps =
      options.steps > 0
          ? options.steps
          : 2 * period + (options.optimizer == OptimizerMode::Stale ? 2 : 1);

  std::vector<StageCost> costs;
  costs.reserve(numJobs);
  for (const Stage &st : jobs)
    costs.push_back(costStage(problem, st));

  int numLayers = int(problem.layers.size());
  // Optimizer seconds of each job's parameters.
  std::vector<double> optimizerSeconds(numJobs, 0.0);
  for (int n = 0; n < numJobs; ++n) {
    if (jobs[n].kind == StageKind::Forward ||
        problem.optimizerParamsPerSecond <= 0)
      continue;
    double params = 0, resident = 0;
    for (int l = jobs[n].first; l < jobs[n].end; ++l)
      if (l < int(problem.trainableParams.size()))
        (isResident(problem, l) ? resident : params) +=
            problem.trainableParams[l];
    // Resident parameters are updated by the worker (one fused AdamW over
    // its memory, over its shard with replicas), orchestrated by the same
    // host task, after their gradients were summed across replicas in the
    // worker's memory.
    if (resident > 0)
      optimizerSeconds[n] += (problem.deviceOptimizerParamsPerSecond > 0
                                  ? resident / optimizerShards(problem) /
                                        problem.deviceOptimizerParamsPerSecond
                                  : std::numeric_limits<double>::infinity()) +
                             replicaSumSeconds(problem, resident,
                                               /*hostHeld=*/false);
    optimizerSeconds[n] +=
        params / optimizerShards(problem) /
        (problem.optimizerParamsPerSecond /
         std::clamp(problem.replicasPerHost, 1, std::max(problem.replicas, 1)));
    optimizerSeconds[n] +=
        replicaSumSeconds(problem, params, /*hostHeld=*/true);
  }

  struct Worker {
    double uploadFree = 0, computeFree = 0, downloadFree = 0;
    // Compute ends of the last two jobs on this worker, most recent first.
    double lastJobEnd = 0, jobBeforeEnd = 0;
  };
  std::vector<Worker> workers(numWorkers);
  // updated[s][l]: when the optimizer finished layer l's step-s update.
  std::vector<std::vector<double>> updated(steps,
                                           std::vector<double>(numLayers, 0.0));
  std::vector<double> stepEnd(steps, 0.0);
  double optimizerFree = 0;
  std::vector<double> previousMicrobatchEnd(numMicrobatches, 0.0);
  std::vector<double> microbatchEnd(numMicrobatches, 0.0);

  auto record = [&](Lane lane, int worker, int step, int job, int mb,
                    double start, double end) {
    result.timeline.push_back({lane, worker, step, job, mb, start, end});
  };

  using Mode = OptimizerMode;
  const Mode mode = options.optimizer;
  // Jobs whose gradients an update reads (tail and backward stages with
  // trainable parameters or gradients); forward stages have no optimizer
  // seconds.
  std::vector<bool> updates(numJobs, false);
  bool anyUpdate = false;
  double totalOptimizerSeconds = 0;
  for (int n = 0; n < numJobs; ++n) {
    updates[n] = jobs[n].kind != StageKind::Forward &&
                 (optimizerSeconds[n] > 0 || costs[n].gradBytes > 0);
    anyUpdate |= updates[n];
    totalOptimizerSeconds += optimizerSeconds[n];
  }
  // Per step: when its last gradient landed, and when its last parameter
  // upload ended.
  std::vector<double> gradientsLandedAt(steps, 0.0), uploadsEndAt(steps, 0.0);
  // One task updating every layer (sync and stale).
  auto wholeUpdate = [&](int s, double ready) {
    double start = std::max(ready, optimizerFree);
    double end = start + totalOptimizerSeconds;
    optimizerFree = end;
    for (int l = 0; l < numLayers; ++l)
      updated[s][l] = end;
    record(Lane::Optimizer, -1, s, -1, -1, start, end);
    return end;
  };

  long long c0 = options.firstWorker;
  for (int s = 0; s < steps; ++s) {
    double computeAndDownloadEnd = 0, optimizerEnd = 0;
    for (int n = 0; n < numJobs; ++n) {
      long long g = (long long)s * numJobs + n;
      int w = int(((c0 + g) % numWorkers + numWorkers) % numWorkers);
      Worker &wk = workers[w];
      const StageCost &c = costs[n];

      // Parameters: a free slot (the job two before has finished) and, for
      // the first steps, weights the optimizer has already updated.
      double uploadStart = std::max(wk.uploadFree, wk.jobBeforeEnd);
      int waitStep = mode == Mode::Stale ? s - 2 : s - 1;
      if (waitStep >= 0)
        for (int l = jobs[n].first; l < jobs[n].end && l < numLayers; ++l)
          uploadStart = std::max(uploadStart, updated[waitStep][l]);
      double uploadEnd = uploadStart + c.uploadSeconds;
      wk.uploadFree = uploadEnd;
      uploadsEndAt[s] = std::max(uploadsEndAt[s], uploadEnd);
      record(Lane::Upload, w, s, n, -1, uploadStart, uploadEnd);

      for (int m = 0; m < numMicrobatches; ++m) {
        double start = std::max(uploadEnd, wk.computeFree);
        if (n > 0)
          start = std::max(start, previousMicrobatchEnd[m] + c.hopSeconds);
        double end = start + c.computeSeconds;
        wk.computeFree = end;
        microbatchEnd[m] = end;
        record(Lane::Compute, w, s, n, m, start, end);
      }
      wk.jobBeforeEnd = wk.lastJobEnd;
      wk.lastJobEnd = wk.computeFree;
      computeAndDownloadEnd = std::max(computeAndDownloadEnd, wk.computeFree);

      double gradientsLanded = wk.computeFree;
      if (c.gradBytes > 0) {
        double start = std::max(wk.computeFree, wk.downloadFree);
        double end = start + c.downloadSeconds;
        wk.downloadFree = end;
        gradientsLanded = end;
        computeAndDownloadEnd = std::max(computeAndDownloadEnd, end);
        record(Lane::Download, w, s, n, -1, start, end);
      }
      if (updates[n]) {
        gradientsLandedAt[s] = std::max(gradientsLandedAt[s], gradientsLanded);
        if (mode == Mode::Overlap) {
          double start = std::max(gradientsLanded, optimizerFree);
          double end = start + optimizerSeconds[n];
          optimizerFree = end;
          for (int l = jobs[n].first; l < jobs[n].end && l < numLayers; ++l)
            updated[s][l] = std::max(updated[s][l], end);
          optimizerEnd = std::max(optimizerEnd, end);
          record(Lane::Optimizer, -1, s, n, -1, start, end);
        }
      }
      std::swap(previousMicrobatchEnd, microbatchEnd);
    }
    if (anyUpdate && mode == Mode::Sync)
      optimizerEnd = wholeUpdate(s, gradientsLandedAt[s]);
    // The stale update of the previous step: its gradients have landed and
    // this step's uploads have read the weights it changes.
    if (anyUpdate && mode == Mode::Stale && s > 0)
      wholeUpdate(s - 1, std::max(gradientsLandedAt[s - 1], uploadsEndAt[s]));
    stepEnd[s] = mode == Mode::Sync
                     ? std::max(computeAndDownloadEnd, optimizerEnd)
                     : computeAndDownloadEnd;
  }

  // The last step's stale update, which no later step waits for.
  if (anyUpdate && mode == Mode::Stale)
    wholeUpdate(steps - 1, gradientsLandedAt[steps - 1]);

  // A step is complete when it and every step before it have ended (with
  // the overlapped optimizer consecutive steps may finish out of order).
  for (int s = 1; s < steps; ++s)
    stepEnd[s] = std::max(stepEnd[s], stepEnd[s - 1]);
  int window = std::min(period, steps - 1);
  result.stepSeconds =
      steps == 1 ? stepEnd[0]
                 : (stepEnd[steps - 1] - stepEnd[steps - 1 - window]) / window;
  for (const StageCost &c : costs)
    result.computeSecondsPerStep += numMicrobatches * c.computeSeconds;
  if (problem.sharedCores > 0) {
    double optimizerPerStep = 0;
    for (double o : optimizerSeconds)
      optimizerPerStep += o;
    result.stepSeconds = std::max(
        result.stepSeconds,
        result.computeSecondsPerStep / problem.sharedCores + optimizerPerStep);
  }
  result.bubbleFraction =
      result.stepSeconds > 0
          ? std::max(0.0, 1.0 - result.computeSecondsPerStep /
                                    (numWorkers * result.stepSeconds))
          : 0.0;
  // Rounding noise of a perfectly packed pipeline is not a bubble.
  if (result.bubbleFraction < 1e-12)
    result.bubbleFraction = 0;
  return result;
}

} // namespace rondo::planner
