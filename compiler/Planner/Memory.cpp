//===- Memory.cpp - Worker and host memory of a plan ----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The memory model: the stage-local worker peak the search prunes with, the
// arena the executor really allocates, the host's checkpoints and staging,
// and the budget check built on them.
//
//===----------------------------------------------------------------------===//

#include "PlannerInternal.h"

#include <algorithm>
#include <sstream>

namespace rondo::planner {

using namespace detail;

namespace {

/// The largest activation a hand-off moves: every staging buffer and arena
/// hand-off slot is sized for it.
double maxInputBytes(const PlanProblem &problem) {
  double m = 0;
  for (const LayerCost &l : problem.layers)
    m = std::max(m, l.inputBytes);
  return m;
}

} // namespace

double hostStateBytes(const PlanProblem &problem) {
  double bytes = problem.hostFixedBytes;
  for (int l = 0; l < int(problem.layers.size()); ++l)
    if (isResident(problem, l))
      bytes -= problem.layers[l].gradBytes;
  // The gradient of a parameter used by several layers comes in a part per
  // layer (OutlineStages splits it across layers), each in the host image;
  // the trainer sums them into two buffers (ProgramGrads: partSums and
  // normSums). A streamed W1's tied embedding: 3.7 GB its plan missed
  // (bench/results/h200x1/host-rss-streamed-2026-11-28/).
  // Each using layer's gradBytes counts the parameter: what the loop above
  // took for its resident layers is given back first.
  for (const SharedParam &shared : problem.sharedParams) {
    if (shared.gradBytes <= 0)
      continue;
    int resident = 0;
    for (int l : shared.layers)
      resident += isResident(problem, l);
    bytes += resident * shared.gradBytes;
    if (resident == int(shared.layers.size()))
      bytes -= shared.gradBytes;
    else
      bytes += (double(shared.layers.size()) + 1) * shared.gradBytes;
  }
  return bytes;
}

double detail::hostBaseBytes(const PlanProblem &problem) {
  return hostStateBytes(problem) +
         2.0 * problem.workers * maxInputBytes(problem);
}

double residentBytes(const PlanProblem &problem) {
  double bytes = 0;
  for (int l = 0; l < int(problem.layers.size()); ++l) {
    if (!isResident(problem, l))
      continue;
    const LayerCost &lc = problem.layers[l];
    double trainable = l < int(problem.trainableParams.size())
                           ? problem.trainableParams[l]
                           : 0;
    bytes +=
        lc.residentBytes.value_or(lc.paramBytes) + lc.gradBytes + 8 * trainable;
  }
  // A shared parameter is held once; its gradient has a part per stage that
  // produces one (the layer count over-approximates them), and AdamW and
  // the logged norm each read a sum of the parts (exec.resident's `sum` and
  // `norm_sum`).
  for (const SharedParam &shared : problem.sharedParams) {
    int resident = 0;
    for (int l : shared.layers)
      resident += isResident(problem, l);
    if (resident > 1)
      bytes +=
          2 * shared.gradBytes -
          (resident - 1) * shared.residentBytes.value_or(shared.paramBytes);
  }
  return bytes;
}

double workerPeakBytes(const PlanProblem &problem, const Plan &plan) {
  double running = 0, slot = 0;
  for (const Stage &st : plan.jobs()) {
    StageCost c = costStage(problem, st);
    running = std::max(running, c.memoryBytes);
    slot = std::max(slot, c.paramBytes);
  }
  return running + slot + residentBytes(problem);
}

/// The largest activation that crosses one of `plan`'s cuts: the worker's
/// hand-off slots are sized for it (convert-pipe-to-exec sizes them by the
/// stage functions' activation arguments and results), so a plan of one
/// stage has none. Counting the largest layer input of the model instead
/// put 4.1 GB of hand-offs into the one-stage W1 plan's 74.2 GB, which
/// allocated 61.5.
static double cutBytes(const PlanProblem &problem, const Plan &plan) {
  const int layers = int(problem.layers.size());
  double bytes = 0;
  for (const Stage &st : plan.jobs())
    for (int cut : {st.first, st.end})
      if (cut > 0 && cut < layers)
        bytes = std::max(bytes, problem.layers[cut].inputBytes);
  return bytes;
}

double workerArenaBytes(const PlanProblem &problem, const Plan &plan) {
  const double boundary = cutBytes(problem, plan);
  const double m = problem.microbatches;
  double maxParam = 0, maxGrad = 0, temporaries = 0;
  size_t maxCheckpoints = 0;
  for (const Stage &st : plan.jobs()) {
    StageCost c = costStage(problem, st);
    maxParam = std::max(maxParam, c.paramBytes);
    maxGrad = std::max(maxGrad, c.gradBytes);
    double sum = 0, largest = 0, transient = 0;
    for (int l = std::max(st.first, 0);
         l < std::min(st.end, int(problem.layers.size())); ++l) {
      sum += problem.layers[l].workspaceBytes;
      largest = std::max(largest, problem.layers[l].workspaceBytes);
      transient = std::max(transient, problem.layers[l].transientBytes);
    }
    sum += transient;
    temporaries =
        std::max(temporaries, st.kind == StageKind::Forward ? largest : sum);
    if (st.kind == StageKind::Forward) {
      // The inputs of backward stages that start inside this stage (its own
      // input is checkpointed as it arrives).
      size_t checkpoints = 0;
      for (const Stage &b : plan.backward)
        checkpoints += b.first > st.first && b.first < st.end;
      maxCheckpoints = std::max(maxCheckpoints, checkpoints);
    }
  }
  // Activations and their gradients, in and out: the tail makes every plan
  // one with a backward.
  const double handoffs = 4 * m * boundary;
  return 2 * maxParam + maxGrad + handoffs +
         m * double(maxCheckpoints) * boundary + temporaries +
         residentBytes(problem);
}

double hostPeakBytes(const PlanProblem &problem, const Plan &plan) {
  double bytes = hostStateBytes(problem);
  for (const Stage &st : plan.backward)
    bytes += checkpointBytes(problem, st.first);
  return bytes + 2.0 * problem.workers * maxInputBytes(problem);
}

bool fitsBudgets(const PlanProblem &problem, const Plan &plan,
                 std::string *why) {
  if (!isValid(problem, plan, why))
    return false;
  double worker = workerPeakBytes(problem, plan);
  if (problem.workerMemoryBytes > 0 && worker > problem.workerMemoryBytes) {
    if (why) {
      std::ostringstream os;
      os << "worker memory: the plan needs " << worker
         << " bytes (largest running stage + largest parameter slot), the "
            "budget is "
         << problem.workerMemoryBytes << " bytes";
      *why = os.str();
    }
    return false;
  }
  double host = hostPeakBytes(problem, plan);
  if (problem.hostMemoryBytes > 0 && host > problem.hostMemoryBytes) {
    if (why) {
      std::ostringstream os;
      os << "host memory: the plan needs " << host << " bytes (state "
         << hostStateBytes(problem) << " + checkpoints and staging), the "
         << "budget is " << problem.hostMemoryBytes << " bytes";
      *why = os.str();
    }
    return false;
  }
  return true;
}

} // namespace rondo::planner
