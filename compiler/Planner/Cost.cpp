//===- Cost.cpp - Stage costs and the plan objective ----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// What one stage costs under a problem (compute, hand-offs, uploads and
// downloads, its running memory) and the objective plans are ranked by.
//
//===----------------------------------------------------------------------===//

#include "PlannerInternal.h"

#include <algorithm>

namespace rondo::planner {

using namespace detail;

namespace {

/// Seconds to move `bytes` at `bytesPerSecond` (nothing to move is free; a
/// missing link makes any real transfer infinitely slow).
double transferSeconds(double bytes, double bytesPerSecond) {
  if (bytes <= 0)
    return 0;
  return bytesPerSecond > 0 ? bytes / bytesPerSecond : kInf;
}

/// An activation hand-off to the next stage-job: within the worker when
/// there is one (N = 1: job g+1 runs where job g ran); else between two
/// workers, a peer copy, or a D2H then an H2D over the host link.
double handoffSeconds(const PlanProblem &problem, double bytes) {
  if (problem.workers == 1 && problem.localCopyBytesPerSecond > 0)
    return transferSeconds(bytes, problem.localCopyBytesPerSecond);
  if (problem.peerBytesPerSecond > 0)
    return transferSeconds(bytes, problem.peerBytesPerSecond);
  return 2 * transferSeconds(bytes, problem.linkBytesPerSecond);
}

} // namespace

StageCost costStage(const PlanProblem &problem, const Stage &stage) {
  StageCost c;
  const std::vector<LayerCost> &layers = problem.layers;
  int first = std::max(stage.first, 0);
  int end = std::min(stage.end, int(layers.size()));
  double link = problem.linkBytesPerSecond;

  double forwardSum = 0, fullSum = 0, workspaceSum = 0, workspaceMax = 0,
         transientMax = 0;
  // A backward stage whose layers all lack backward work is an empty
  // launch. With work above them they still cost their recompute: it makes
  // the input of the layers that do have work.
  bool anyWork = false;
  for (int l = first; l < end; ++l)
    anyWork |= layers[l].backwardWork;
  for (int l = first; l < end; ++l) {
    const LayerCost &lc = layers[l];
    forwardSum += lc.forwardSeconds;
    fullSum += lc.forwardSeconds + lc.backwardSeconds;
    workspaceSum += lc.workspaceBytes;
    workspaceMax = std::max(workspaceMax, lc.workspaceBytes);
    transientMax = std::max(transientMax, lc.transientBytes);
    // A resident layer's weights and gradients stay where they live: the
    // stage-job moves nothing for them and its slots do not hold them.
    if (isResident(problem, l))
      continue;
    c.paramBytes += lc.paramBytes;
    c.gradBytes += lc.gradBytes;
  }
  for (const SharedParam &shared : problem.sharedParams) {
    int inStage = 0;
    for (int l : shared.layers)
      inStage += l >= first && l < end && !isResident(problem, l);
    if (inStage > 1) {
      c.paramBytes -= (inStage - 1) * shared.paramBytes;
      c.gradBytes -= (inStage - 1) * shared.gradBytes;
    }
  }
  double inFirst = inputOf(problem, first);
  double inEnd = inputOf(problem, end);
  // What brings a forward or tail stage its input: the token upload at layer
  // 0, else a hand-off from the stage below.
  double hopIn = first == 0 ? transferSeconds(inputOf(problem, 0), link)
                            : handoffSeconds(problem, inFirst);

  switch (stage.kind) {
  case StageKind::Forward:
    c.computeSeconds = forwardSum;
    c.hopSeconds = hopIn;
    c.activationBytes = 2 * inFirst + 2 * inEnd + workspaceMax;
    // A forward stage produces no gradients.
    c.gradBytes = 0;
    break;
  case StageKind::Tail:
    c.computeSeconds = fullSum;
    c.hopSeconds = hopIn;
    c.activationBytes = 2 * inFirst + 2 * inFirst + workspaceSum + transientMax;
    break;
  case StageKind::Backward:
    if (!anyWork)
      return StageCost{}; // An empty launch: no gradient in or out.
    c.computeSeconds = fullSum;
    c.hopSeconds =
        handoffSeconds(problem, inEnd) + transferSeconds(inFirst, link);
    c.activationBytes =
        inFirst + 2 * inEnd + 2 * inFirst + workspaceSum + transientMax;
    break;
  }
  c.uploadSeconds = transferSeconds(c.paramBytes, link);
  c.downloadSeconds = transferSeconds(c.gradBytes, link);
  c.jobSeconds =
      std::max({problem.microbatches * c.computeSeconds + c.hopSeconds,
                c.uploadSeconds, c.downloadSeconds});
  c.memoryBytes = c.paramBytes + c.gradBytes + c.activationBytes;
  return c;
}

double planObjective(const PlanProblem &problem, const Plan &plan) {
  double slowest = 0;
  for (const Stage &st : plan.jobs())
    slowest = std::max(slowest, costStage(problem, st).jobSeconds);
  return objectiveOf(problem, plan.numJobs(), slowest);
}

} // namespace rondo::planner
