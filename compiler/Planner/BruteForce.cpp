//===- BruteForce.cpp - Every plan, for the tests -------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The reference the exact search is tested against: every plan of a small
// table, scored in the same tie-break order.
//
//===----------------------------------------------------------------------===//

#include "PlannerInternal.h"

#include <cassert>
#include <optional>
#include <vector>

namespace rondo::planner {

using namespace detail;

static Score scorePlan(const PlanProblem &problem, const Plan &plan) {
  Score s;
  s.objective = planObjective(problem, plan);
  s.jobs = plan.numJobs();
  for (const Stage &st : plan.jobs())
    s.sumJobSeconds += costStage(problem, st).jobSeconds;
  return s;
}

std::optional<Plan> bruteForce(const PlanProblem &problem) {
  if (!problemIsUsable(problem))
    return std::nullopt;
  int numLayers = int(problem.layers.size());
  assert(numLayers <= 16 && "bruteForce enumerates 4^L plans");

  // Every composition of [0, b) as ascending ranges: bit i of `cuts` set
  // means a stage boundary after layer i.
  auto compositions = [](int b, StageKind kind) {
    std::vector<std::vector<Stage>> out;
    if (b == 0) {
      out.push_back({});
      return out;
    }
    for (unsigned cuts = 0; cuts < (1u << (b - 1)); ++cuts) {
      std::vector<Stage> stages;
      int first = 0;
      for (int l = 0; l < b; ++l)
        if (l == b - 1 || (cuts >> l & 1u)) {
          stages.push_back({kind, first, l + 1});
          first = l + 1;
        }
      out.push_back(std::move(stages));
    }
    return out;
  };

  std::optional<Plan> best;
  Score bestScore;
  for (int b = 0; b < numLayers; ++b) {
    std::vector<std::vector<Stage>> fwd = compositions(b, StageKind::Forward);
    std::vector<std::vector<Stage>> bwd = compositions(b, StageKind::Backward);
    for (const std::vector<Stage> &f : fwd)
      for (const std::vector<Stage> &g : bwd) {
        Plan plan;
        plan.forward = f;
        plan.tail = {StageKind::Tail, b, numLayers};
        plan.backward.assign(g.rbegin(), g.rend());
        if (!fitsBudgets(problem, plan, nullptr))
          continue;
        Score s = scorePlan(problem, plan);
        if (!best || s.betterThan(bestScore)) {
          bestScore = s;
          best = std::move(plan);
        }
      }
  }
  return best;
}

} // namespace rondo::planner
