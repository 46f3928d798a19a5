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
//                           parameter slots), and the optimizer of step s-1
//                           (sync) or s-2 (overlapped);
//   microbatch m of job g:  its upload, the worker's compute lane and, for
//                           n > 0, the end of microbatch m of job g-1 plus
//                           this job's hand-off time;
//   download of job g:      its last microbatch and the download lane;
//   optimizer of step s:    every compute and download of step s and the
//                           optimizer of step s-1 (one host lane).
// Jobs are replayed in issue order, which is a topological order of these
// dependencies, so one pass computes the whole timeline.
//
//===----------------------------------------------------------------------===//

#include "rondo/Planner/Planner.h"

#include <algorithm>

namespace rondo::planner {

SimResult simulate(const PlanProblem &problem, const Plan &plan,
                   const SimOptions &options) {
  using Lane = TimelineEvent::Lane;
  SimResult result;
  std::vector<Stage> jobs = plan.jobs();
  int numJobs = int(jobs.size());
  int numWorkers = std::max(problem.workers, 1);
  int numMicrobatches = std::max(problem.microbatches, 1);
  int steps = std::max(options.steps, 1);

  std::vector<StageCost> costs;
  costs.reserve(numJobs);
  for (const Stage &st : jobs)
    costs.push_back(costStage(problem, st));

  double trainable = 0;
  for (double p : problem.trainableParams)
    trainable += p;
  double optimizerSeconds = problem.optimizerParamsPerSecond > 0
                                ? trainable / problem.optimizerParamsPerSecond
                                : 0.0;

  struct Worker {
    double uploadFree = 0, computeFree = 0, downloadFree = 0;
    // Compute ends of the last two jobs on this worker, most recent first.
    double lastJobEnd = 0, jobBeforeEnd = 0;
  };
  std::vector<Worker> workers(numWorkers);
  std::vector<double> optimizerEnd(steps, 0.0), stepEnd(steps, 0.0);
  std::vector<double> previousMicrobatchEnd(numMicrobatches, 0.0);
  std::vector<double> microbatchEnd(numMicrobatches, 0.0);

  auto record = [&](Lane lane, int worker, int step, int job, int mb,
                    double start, double end) {
    TimelineEvent ev{lane};
    ev.worker = worker;
    ev.step = step;
    ev.job = job;
    ev.microbatch = mb;
    ev.start = start;
    ev.end = end;
    result.timeline.push_back(ev);
  };

  long long c0 = options.firstWorker;
  for (int s = 0; s < steps; ++s) {
    double computeAndDownloadEnd = 0;
    for (int n = 0; n < numJobs; ++n) {
      long long g = (long long)s * numJobs + n;
      int w = int(((c0 + g) % numWorkers + numWorkers) % numWorkers);
      Worker &wk = workers[w];
      const StageCost &c = costs[n];

      // Parameters: a free slot (the job two before has finished) and, for
      // the first steps, weights the optimizer has already updated.
      double uploadStart = std::max(wk.uploadFree, wk.jobBeforeEnd);
      int waitStep = options.overlapOptimizer ? s - 2 : s - 1;
      if (waitStep >= 0)
        uploadStart = std::max(uploadStart, optimizerEnd[waitStep]);
      double uploadEnd = uploadStart + c.uploadSeconds;
      wk.uploadFree = uploadEnd;
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

      if (c.gradBytes > 0) {
        double start = std::max(wk.computeFree, wk.downloadFree);
        double end = start + c.downloadSeconds;
        wk.downloadFree = end;
        computeAndDownloadEnd = std::max(computeAndDownloadEnd, end);
        record(Lane::Download, w, s, n, -1, start, end);
      }
      std::swap(previousMicrobatchEnd, microbatchEnd);
    }

    double optimizerStart = computeAndDownloadEnd;
    if (s > 0)
      optimizerStart = std::max(optimizerStart, optimizerEnd[s - 1]);
    optimizerEnd[s] = optimizerStart + optimizerSeconds;
    record(Lane::Optimizer, -1, s, -1, -1, optimizerStart, optimizerEnd[s]);
    stepEnd[s] = options.overlapOptimizer
                     ? computeAndDownloadEnd
                     : std::max(computeAndDownloadEnd, optimizerEnd[s]);
  }

  result.stepSeconds =
      steps == 1 ? stepEnd[0] : stepEnd[steps - 1] - stepEnd[steps - 2];
  for (const StageCost &c : costs)
    result.computeSecondsPerStep += numMicrobatches * c.computeSeconds;
  result.bubbleFraction =
      result.stepSeconds > 0
          ? std::max(0.0, 1.0 - result.computeSecondsPerStep /
                                    (numWorkers * result.stepSeconds))
          : 0.0;
  return result;
}

} // namespace rondo::planner
