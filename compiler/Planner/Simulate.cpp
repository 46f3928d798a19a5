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
//                           this job's hand-off time; a job with gradients
//                           also the worker's previous gradient download
//                           (one gradient buffer per worker);
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
//   step s+1:               issued once step s's worker ops have ended
//                           (the trainer's barrier) and, overlap mode, the
//                           trainer's pass over the gradients for the
//                           logged norm (after the host tasks with
//                           replicas).
// On shared cores (PlanProblem::sharedCores) the step is at least the
// CPU work over the cores. With a host memory bandwidth
// (PlanProblem::hostMemoryBytesPerSecond) the host-bound intervals (copies,
// optimizer tasks, the end-of-step pass) of every replica process on the
// host share it: each progresses at bandwidth / demand of its own rate while
// their demand exceeds it, and the replay is repeated with the lengths that
// gives until they stop moving.
// Jobs are replayed in issue order, which is a topological order of these
// dependencies (a stale task is replayed after the next step's jobs), so
// one pass computes the whole timeline.
//
//===----------------------------------------------------------------------===//

#include "Planner/Planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

int processesPerHost(const PlanProblem &problem) {
  return std::clamp(problem.replicasPerHost, 1, std::max(problem.replicas, 1));
}

namespace {

using Lane = TimelineEvent::Lane;

/// An optimizer task in two parts: the replica sum's copies through the
/// host (half before the update, the summed gradients' way in, and half
/// after, the updated weights' way back) and the update between them (the
/// host AdamW and the part sums, or the worker's AdamW of resident state):
/// seconds alone and the host memory each part streams.
struct Task {
  double copySeconds = 0, copyBytes = 0;
  double updateSeconds = 0, updateBytes = 0;
  double seconds() const { return copySeconds + updateSeconds; }
  Task &operator+=(const Task &o) {
    copySeconds += o.copySeconds;
    copyBytes += o.copyBytes;
    updateSeconds += o.updateSeconds;
    updateBytes += o.updateBytes;
    return *this;
  }
};

/// What every replay of one plan shares: the jobs, their stage costs, and
/// the host work of the optimizer tasks and the trainer's end-of-step pass
/// (seconds alone, and the host memory they stream).
struct Setup {
  std::vector<Stage> jobs;
  std::vector<StageCost> costs;
  int numJobs = 0, numWorkers = 1, numMicrobatches = 1, numLayers = 0;
  int period = 2, steps = 1;
  /// Per job: its optimizer task (overlap).
  std::vector<Task> task;
  /// Jobs whose gradients an update reads.
  std::vector<bool> updates;
  bool anyUpdate = false;
  /// Sync and stale: the one task of a step.
  Task whole;
  /// Overlap: the trainer's end-of-step pass over the host-held gradients.
  double passSeconds = 0, passHostBytes = 0;
};

Setup setUp(const PlanProblem &problem, const Plan &plan,
            const SimOptions &options) {
  Setup su;
  su.jobs = plan.jobs();
  su.numJobs = int(su.jobs.size());
  su.numWorkers = std::max(problem.workers, 1);
  su.numMicrobatches = std::max(problem.microbatches, 1);
  su.numLayers = int(problem.layers.size());
  // The rotation brings every job back to the same worker after
  // N / gcd(K, N) steps; the steady state is measured over such a period
  // (at least two steps, so one-step-stale steps that overlap average out),
  // after a warm-up of one step (two when stale: its updates reach back two
  // steps).
  su.period = std::max(
      su.numWorkers / std::gcd(std::max(su.numJobs, 1), su.numWorkers), 2);
  su.steps =
      options.steps > 0
          ? options.steps
          : 2 * su.period + (options.optimizer == OptimizerMode::Stale ? 2 : 1);
  su.costs.reserve(su.numJobs);
  for (const Stage &st : su.jobs)
    su.costs.push_back(costStage(problem, st));

  const double bandwidth = problem.hostMemoryBytesPerSecond;
  const double shards = optimizerShards(problem);
  // The replica processes of one host split its cores: each one's host
  // passes run at that share of their rate alone on the host (and share
  // its memory bandwidth with the copies as the schedule overlaps them).
  const double processes = processesPerHost(problem);
  const double hostRate = problem.optimizerParamsPerSecond / processes;
  const double partSumRate = bandwidth / processes;
  const double passRate =
      (problem.stepEndPassBytesPerSecond > 0 ? problem.stepEndPassBytesPerSecond
                                             : bandwidth) /
      processes;
  const bool crossing =
      problem.replicas > 1 && problem.replicaHostCrossingBytesPerSecond > 0;
  su.task.assign(su.numJobs, Task{});
  double hostParams = 0; // every streamed trainable parameter
  for (int n = 0; n < su.numJobs; ++n) {
    if (su.jobs[n].kind == StageKind::Forward ||
        problem.optimizerParamsPerSecond <= 0)
      continue;
    double params = 0, resident = 0;
    for (int l = su.jobs[n].first; l < su.jobs[n].end; ++l)
      if (l < int(problem.trainableParams.size()))
        (isResident(problem, l) ? resident : params) +=
            problem.trainableParams[l];
    hostParams += params;
    // Resident parameters are updated by the worker (one fused AdamW over
    // its memory, over its shard with replicas), orchestrated by the same
    // host task, after their gradients were summed across replicas in the
    // worker's memory.
    Task &t = su.task[n];
    if (resident > 0)
      t.updateSeconds +=
          (problem.deviceOptimizerParamsPerSecond > 0
               ? resident / shards / problem.deviceOptimizerParamsPerSecond
               : std::numeric_limits<double>::infinity()) +
          replicaSumSeconds(problem, resident,
                            /*hostHeld=*/false);
    t.updateSeconds += params / shards / hostRate;
    t.updateBytes = kOptimizerHostBytesPerParam * params / shards;
    t.copySeconds = replicaSumSeconds(problem, params, /*hostHeld=*/true);
    if (crossing)
      t.copyBytes =
          (problem.shardOptimizer ? 2.0 * (1.0 + 1.0 / problem.replicas)
                                  : 2.0) *
          params * 4.0;
  }
  // A parameter several stages read (a tied embedding) has a gradient part
  // from each; the task of the last of them (in job order) sums them before
  // it updates, and the end-of-step pass sums them again for the norm.
  double passPartSums = 0;
  for (const SharedParam &sp : problem.sharedParams) {
    if (sp.gradBytes <= 0)
      continue;
    int parts = 0, last = -1;
    for (int n = 0; n < su.numJobs; ++n) {
      if (su.jobs[n].kind == StageKind::Forward || su.costs[n].gradBytes <= 0)
        continue;
      bool holds = false;
      for (int l : sp.layers)
        holds |= l >= su.jobs[n].first && l < su.jobs[n].end &&
                 l < su.numLayers && !isResident(problem, l) &&
                 problem.layers[l].backwardWork;
      if (holds) {
        ++parts;
        last = n;
      }
    }
    if (parts < 2)
      continue;
    const double elements = sp.gradBytes / 4.0;
    double bytes =
        kPartSumHostBytesPerElement * (parts - 1) * elements / shards;
    Task &t = su.task[last];
    t.updateBytes += bytes;
    if (bandwidth > 0)
      t.updateSeconds += bytes / partSumRate;
    passPartSums += bytes;
    // Replicas sum every part across them before the parts are added
    // (ProgramGrads::sumAcrossReplicas): the others' parts cross the host
    // link on the way in too (all up, the shard down), and the ring.
    if (problem.replicas > 1 && problem.replicaBytesPerSecond > 0) {
      const double r = problem.replicas, extra = parts - 1;
      t.copySeconds += extra * 2.0 * (r - 1.0) / r * elements * 4.0 /
                       problem.replicaBytesPerSecond;
      if (crossing) {
        const double in = extra *
                          (problem.shardOptimizer ? 1.0 + 1.0 / r : 2.0) *
                          elements * 4.0;
        t.copyBytes += in;
        t.copySeconds += in / problem.replicaHostCrossingBytesPerSecond;
      }
    }
  }

  const double normBytes = kNormHostBytesPerParam * hostParams / shards;
  // Forward stages have no optimizer seconds.
  for (int n = 0; n < su.numJobs; ++n) {
    su.updates.push_back(
        su.jobs[n].kind != StageKind::Forward &&
        (su.task[n].seconds() > 0 || su.costs[n].gradBytes > 0));
    su.anyUpdate = su.anyUpdate || su.updates.back();
    su.whole += su.task[n];
  }
  if (options.optimizer == OptimizerMode::Overlap) {
    // The trainer thread reads every host-held gradient for the logged
    // norm once the step's worker ops have ended (Trainer::
    // pipelinedGradNorm); the next step is issued after it.
    su.passHostBytes = normBytes + passPartSums;
    if (bandwidth > 0)
      su.passSeconds = su.passHostBytes / passRate;
  } else if (su.anyUpdate) {
    // Sync and stale compute the norm inside their one task.
    su.whole.updateBytes += normBytes;
    if (bandwidth > 0)
      su.whole.updateSeconds += normBytes / passRate;
  }
  return su;
}

/// An optimizer task's parts as one replay runs them.
struct TaskLength {
  double copy = 0, update = 0;
  double seconds() const { return copy + update; }
};

/// The lengths of the host-bound intervals of one replay: [step][job] for
/// the copies and the per-stage optimizer tasks, [step] for the one task of
/// a sync or stale step and the end-of-step pass.
struct Lengths {
  std::vector<std::vector<double>> upload, download;
  std::vector<std::vector<TaskLength>> task;
  std::vector<TaskLength> whole;
  std::vector<double> pass;
};

Lengths alone(const Setup &su) {
  Lengths len;
  std::vector<double> up, down;
  for (const StageCost &c : su.costs) {
    up.push_back(c.uploadSeconds);
    down.push_back(c.downloadSeconds);
  }
  len.upload.assign(su.steps, up);
  len.download.assign(su.steps, down);
  std::vector<TaskLength> tasks;
  for (const Task &t : su.task)
    tasks.push_back({t.copySeconds, t.updateSeconds});
  len.task.assign(su.steps, tasks);
  len.whole.assign(su.steps,
                   TaskLength{su.whole.copySeconds, su.whole.updateSeconds});
  len.pass.assign(su.steps, su.passSeconds);
  return len;
}

SimResult replay(const PlanProblem &problem, const Setup &su,
                 const SimOptions &options, const Lengths &len) {
  SimResult result;
  const int numJobs = su.numJobs, numWorkers = su.numWorkers;
  const int numMicrobatches = su.numMicrobatches, numLayers = su.numLayers;
  const int steps = su.steps;
  const std::vector<Stage> &jobs = su.jobs;

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
  // Per step: when its last gradient landed, and when its last parameter
  // upload ended.
  std::vector<double> gradientsLandedAt(steps, 0.0), uploadsEndAt(steps, 0.0);
  // One task updating every layer (sync and stale).
  auto wholeUpdate = [&](int s, double ready) {
    double start = std::max(ready, optimizerFree);
    double end = start + len.whole[s].seconds();
    optimizerFree = end;
    for (int l = 0; l < numLayers; ++l)
      updated[s][l] = end;
    record(Lane::Optimizer, -1, s, -1, -1, start, end);
    return end;
  };

  // When the trainer issues the step: after the previous step's worker ops
  // (its barrier) and its end-of-step pass.
  double issuedAt = 0;
  long long c0 = options.firstWorker;
  for (int s = 0; s < steps; ++s) {
    double computeAndDownloadEnd = 0, optimizerEnd = 0;
    for (int n = 0; n < numJobs; ++n) {
      long long g = (long long)s * numJobs + n;
      int w = int(((c0 + g) % numWorkers + numWorkers) % numWorkers);
      Worker &wk = workers[w];
      const StageCost &c = su.costs[n];

      // Parameters: a free slot (the job two before has finished) and, for
      // the first steps, weights the optimizer has already updated.
      double uploadStart = std::max({wk.uploadFree, wk.jobBeforeEnd, issuedAt});
      int waitStep = mode == Mode::Stale ? s - 2 : s - 1;
      if (waitStep >= 0)
        for (int l = jobs[n].first; l < jobs[n].end && l < numLayers; ++l)
          uploadStart = std::max(uploadStart, updated[waitStep][l]);
      double uploadEnd = uploadStart + len.upload[s][n];
      wk.uploadFree = uploadEnd;
      uploadsEndAt[s] = std::max(uploadsEndAt[s], uploadEnd);
      record(Lane::Upload, w, s, n, -1, uploadStart, uploadEnd);

      // The worker has one gradient buffer (convert-pipe-to-exec's
      // "grads"): a job with gradients zeroes it, so it starts once the
      // previous gradient download from it has ended.
      double gradientSlotFree = c.gradBytes > 0 ? wk.downloadFree : 0;
      for (int m = 0; m < numMicrobatches; ++m) {
        double start = std::max(uploadEnd, wk.computeFree);
        if (m == 0)
          start = std::max(start, gradientSlotFree);
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
        double end = start + len.download[s][n];
        wk.downloadFree = end;
        gradientsLanded = end;
        computeAndDownloadEnd = std::max(computeAndDownloadEnd, end);
        record(Lane::Download, w, s, n, -1, start, end);
      }
      if (su.updates[n]) {
        gradientsLandedAt[s] = std::max(gradientsLandedAt[s], gradientsLanded);
        if (mode == Mode::Overlap) {
          double start = std::max(gradientsLanded, optimizerFree);
          double end = start + len.task[s][n].seconds();
          optimizerFree = end;
          for (int l = jobs[n].first; l < jobs[n].end && l < numLayers; ++l)
            updated[s][l] = std::max(updated[s][l], end);
          optimizerEnd = std::max(optimizerEnd, end);
          record(Lane::Optimizer, -1, s, n, -1, start, end);
        }
      }
      std::swap(previousMicrobatchEnd, microbatchEnd);
    }
    if (su.anyUpdate && mode == Mode::Sync)
      optimizerEnd = wholeUpdate(s, gradientsLandedAt[s]);
    // The stale update of the previous step: its gradients have landed and
    // this step's uploads have read the weights it changes.
    if (su.anyUpdate && mode == Mode::Stale && s > 0)
      wholeUpdate(s - 1, std::max(gradientsLandedAt[s - 1], uploadsEndAt[s]));
    stepEnd[s] = mode == Mode::Sync
                     ? std::max(computeAndDownloadEnd, optimizerEnd)
                     : computeAndDownloadEnd;
    // The next step is issued once this one's worker ops have ended; in
    // overlap mode after the trainer's pass over the gradients for the
    // logged norm, which with replicas first waits for the host tasks.
    issuedAt = computeAndDownloadEnd;
    if (mode == Mode::Overlap) {
      if (problem.replicas > 1)
        issuedAt = std::max(issuedAt, optimizerEnd);
      if (len.pass[s] > 0) {
        record(Lane::Trainer, -1, s, -1, -1, issuedAt, issuedAt + len.pass[s]);
        issuedAt += len.pass[s];
      }
    }
  }

  // The last step's stale update, which no later step waits for.
  if (su.anyUpdate && mode == Mode::Stale)
    wholeUpdate(steps - 1, gradientsLandedAt[steps - 1]);

  // A step is complete when it and every step before it have ended (with
  // the overlapped optimizer consecutive steps may finish out of order).
  for (int s = 1; s < steps; ++s)
    stepEnd[s] = std::max(stepEnd[s], stepEnd[s - 1]);
  int window = std::min(su.period, steps - 1);
  result.stepSeconds =
      steps == 1 ? stepEnd[0]
                 : (stepEnd[steps - 1] - stepEnd[steps - 1 - window]) / window;
  for (const StageCost &c : su.costs)
    result.computeSecondsPerStep += numMicrobatches * c.computeSeconds;
  // The host's work in the steps the step time is measured over.
  const int first = steps - std::max(window, 1);
  for (const TimelineEvent &ev : result.timeline) {
    if (ev.step < first)
      continue;
    if (ev.lane == Lane::Optimizer) {
      result.optimizerSecondsPerStep += ev.end - ev.start;
      result.optimizerAloneSecondsPerStep +=
          ev.job >= 0 ? su.task[ev.job].seconds() : su.whole.seconds();
    } else if (ev.lane == Lane::Trainer) {
      result.stepEndPassSecondsPerStep += ev.end - ev.start;
    }
  }
  result.optimizerSecondsPerStep /= std::max(window, 1);
  result.optimizerAloneSecondsPerStep /= std::max(window, 1);
  result.stepEndPassSecondsPerStep /= std::max(window, 1);
  if (problem.sharedCores > 0) {
    double optimizerPerStep = 0;
    for (const Task &t : su.task)
      optimizerPerStep += t.seconds();
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

/// One round of sharing the host's memory bandwidth: every host-bound
/// interval of `r` demands its own rate (the bytes it streams over its
/// length alone; an optimizer task's copies and update each theirs), the
/// host's processes demand the sum of the active ones times their count,
/// and while that exceeds the bandwidth each progresses at bandwidth /
/// demand of its own rate. Moves each length halfway to what its progress
/// over the replay's interval asks for (the replay then moves the
/// intervals); returns the largest relative change.
double shareHostMemory(const PlanProblem &problem, const Setup &su,
                       const Lengths &aloneLengths, const SimResult &r,
                       Lengths &len) {
  const double bandwidth = problem.hostMemoryBytesPerSecond;
  /// A length and the intervals of the replay it spans (an optimizer
  /// task's copies are two: before and after its update).
  struct Piece {
    double alone, demand;
    double *length;
    double starts[2], ends[2];
    int spans = 1;
  };
  std::vector<Piece> pieces;
  auto add = [&](double bytes, double aloneSeconds, double *length,
                 double start, double end) -> Piece * {
    if (!(bytes > 0 && aloneSeconds > 0 && std::isfinite(aloneSeconds) &&
          end > start))
      return nullptr;
    pieces.push_back(
        {aloneSeconds, bytes / aloneSeconds, length, {start, 0}, {end, 0}, 1});
    return &pieces.back();
  };
  for (const TimelineEvent &ev : r.timeline) {
    const int s = ev.step, n = ev.job;
    switch (ev.lane) {
    case Lane::Upload:
      add(su.costs[n].paramBytes, aloneLengths.upload[s][n], &len.upload[s][n],
          ev.start, ev.end);
      break;
    case Lane::Download:
      add(su.costs[n].gradBytes, aloneLengths.download[s][n],
          &len.download[s][n], ev.start, ev.end);
      break;
    case Lane::Optimizer: {
      const Task &t = n >= 0 ? su.task[n] : su.whole;
      const TaskLength &alone =
          n >= 0 ? aloneLengths.task[s][n] : aloneLengths.whole[s];
      TaskLength &now = n >= 0 ? len.task[s][n] : len.whole[s];
      const double updateStart = ev.start + now.copy / 2;
      const double updateEnd = updateStart + now.update;
      add(t.updateBytes, alone.update, &now.update, updateStart, updateEnd);
      if (Piece *copies =
              add(t.copyBytes, alone.copy, &now.copy, ev.start, updateStart)) {
        copies->starts[1] = updateEnd;
        copies->ends[1] = ev.end;
        copies->spans = 2;
      }
      break;
    }
    case Lane::Trainer:
      add(su.passHostBytes, aloneLengths.pass[s], &len.pass[s], ev.start,
          ev.end);
      break;
    case Lane::Compute:
      break;
    }
  }
  if (pieces.empty())
    return 0;
  std::vector<std::pair<double, double>> edges;
  for (const Piece &p : pieces)
    for (int k = 0; k < p.spans; ++k) {
      edges.emplace_back(p.starts[k], p.demand);
      edges.emplace_back(p.ends[k], -p.demand);
    }
  std::sort(edges.begin(), edges.end());
  // progress[k]: what an interval alone would have done from the first edge
  // to times[k] (at rate 1 while the demand fits the bandwidth).
  const double processes = processesPerHost(problem);
  std::vector<double> times, progress;
  double demand = 0, previous = edges.front().first, done = 0;
  for (size_t k = 0; k < edges.size();) {
    const double t = edges[k].first;
    const double total = std::max(demand, 0.0) * processes;
    done += (t - previous) * (total > bandwidth ? bandwidth / total : 1.0);
    times.push_back(t);
    progress.push_back(done);
    for (; k < edges.size() && edges[k].first == t; ++k)
      demand += edges[k].second;
    previous = t;
  }
  auto progressAt = [&](double t) {
    return progress[size_t(std::lower_bound(times.begin(), times.end(), t) -
                           times.begin())];
  };
  double change = 0;
  for (const Piece &p : pieces) {
    double made = 0, now = 0;
    for (int k = 0; k < p.spans; ++k) {
      made += progressAt(p.ends[k]) - progressAt(p.starts[k]);
      now += p.ends[k] - p.starts[k];
    }
    const double wanted = made > 0 ? p.alone * now / made : now;
    const double next = 0.5 * (*p.length + wanted);
    change = std::max(change, std::abs(next - *p.length) / *p.length);
    *p.length = next;
  }
  return change;
}

} // namespace

SimResult simulate(const PlanProblem &problem, const Plan &plan,
                   const SimOptions &options) {
  const Setup su = setUp(problem, plan, options);
  const Lengths aloneLengths = alone(su);
  SimResult result = replay(problem, su, options, aloneLengths);
  if (problem.hostMemoryBytesPerSecond > 0) {
    // The host-bound intervals' lengths depend on what they overlap, which
    // depends on their lengths: replay until they agree.
    Lengths len = aloneLengths;
    for (int round = 0; round < 40; ++round) {
      const double change =
          shareHostMemory(problem, su, aloneLengths, result, len);
      if (change == 0)
        break;
      result = replay(problem, su, options, len);
      if (change < 1e-4)
        break;
    }
  }
  return result;
}

} // namespace rondo::planner
