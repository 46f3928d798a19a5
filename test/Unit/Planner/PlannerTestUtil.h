//===- PlannerTestUtil.h - Builders shared by the planner tests -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TEST_UNIT_PLANNER_PLANNERTESTUTIL_H
#define RONDO_TEST_UNIT_PLANNER_PLANNERTESTUTIL_H

#include "Planner/Planner.h"

#include <random>
#include <string>
#include <vector>

namespace rondo::planner::test {

inline LayerCost layer(double fwd, double bwd, double params = 0,
                       double grads = 0, double input = 0,
                       double workspace = 0) {
  LayerCost l;
  l.forwardSeconds = fwd;
  l.backwardSeconds = bwd;
  l.paramBytes = params;
  l.gradBytes = grads;
  l.inputBytes = input;
  l.workspaceBytes = workspace;
  return l;
}

inline Stage fwd(int a, int b) { return {StageKind::Forward, a, b}; }
inline Stage tailStage(int a, int b) { return {StageKind::Tail, a, b}; }
inline Stage bwd(int a, int b) { return {StageKind::Backward, a, b}; }

inline Plan makePlan(std::vector<Stage> forward, Stage tail,
                     std::vector<Stage> backward) {
  Plan p;
  p.forward = std::move(forward);
  p.tail = tail;
  p.backward = std::move(backward);
  return p;
}

/// "F[0,2) T[2,4) B[0,2) " for failure messages.
inline std::string show(const Plan &plan) {
  std::string s;
  for (const Stage &st : plan.jobs()) {
    const char *k = st.kind == StageKind::Forward ? "F"
                    : st.kind == StageKind::Tail  ? "T"
                                                  : "B";
    s += std::string(k) + "[" + std::to_string(st.first) + "," +
         std::to_string(st.end) + ") ";
  }
  return s;
}

/// A uniformly random valid plan (random tail start, random cuts).
inline Plan randomPlan(int numLayers, std::mt19937 &rng) {
  int b = std::uniform_int_distribution<int>(0, numLayers - 1)(rng);
  std::bernoulli_distribution cut(0.5);
  Plan p;
  p.tail = tailStage(b, numLayers);
  int first = 0;
  for (int l = 0; l < b; ++l)
    if (l == b - 1 || cut(rng)) {
      p.forward.push_back(fwd(first, l + 1));
      first = l + 1;
    }
  int end = b;
  for (int l = b - 1; l >= 0; --l)
    if (l == 0 || cut(rng)) {
      p.backward.push_back(bwd(l, end));
      end = l;
    }
  return p;
}

} // namespace rondo::planner::test

#endif // RONDO_TEST_UNIT_PLANNER_PLANNERTESTUTIL_H
