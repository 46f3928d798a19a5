//===- Plan.cpp - The plan shape: jobs, names, validity -------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The jobs of a plan in issue order, their short names, and the structural
// rules every plan obeys (contiguous coverage, a non-empty tail).
//
//===----------------------------------------------------------------------===//

#include "Planner/Planner.h"

#include <string>
#include <vector>

namespace rondo::planner {

std::vector<Stage> Plan::jobs() const {
  std::vector<Stage> out;
  out.reserve(forward.size() + 1 + backward.size());
  out.insert(out.end(), forward.begin(), forward.end());
  out.push_back(tail);
  out.insert(out.end(), backward.begin(), backward.end());
  return out;
}

std::string stageName(const Plan &plan, int job) {
  int numForward = int(plan.forward.size());
  if (job < 0 || job >= plan.numJobs())
    return "?";
  if (job < numForward)
    return "F" + std::to_string(job);
  if (job == numForward)
    return "T";
  return "B" + std::to_string(job - numForward);
}

bool isValid(const PlanProblem &problem, const Plan &plan, std::string *why) {
  auto fail = [&](const std::string &msg) {
    if (why)
      *why = msg;
    return false;
  };
  auto range = [](const Stage &s) {
    return "[" + std::to_string(s.first) + ", " + std::to_string(s.end) + ")";
  };
  int numLayers = int(problem.layers.size());
  if (numLayers == 0)
    return fail("the layer table is empty");
  if (problem.workers < 1)
    return fail("the problem needs at least one worker");
  if (problem.microbatches < 1)
    return fail("the problem needs at least one microbatch");

  const Stage &tail = plan.tail;
  if (tail.kind != StageKind::Tail)
    return fail("the tail stage " + range(tail) + " is not of kind Tail");
  if (tail.end != numLayers)
    return fail("the tail " + range(tail) + " does not end at the last layer " +
                std::to_string(numLayers));
  if (tail.first < 0 || tail.first >= tail.end)
    return fail("the tail " + range(tail) + " is empty");
  int b = tail.first;

  int next = 0;
  for (size_t i = 0; i < plan.forward.size(); ++i) {
    const Stage &s = plan.forward[i];
    std::string name = "forward stage F" + std::to_string(i) + " " + range(s);
    if (s.kind != StageKind::Forward)
      return fail(name + " is not of kind Forward");
    if (s.first >= s.end)
      return fail(name + " is empty");
    if (s.first != next)
      return fail(name + " should start at layer " + std::to_string(next));
    next = s.end;
  }
  if (next != b)
    return fail("the forward stages end at layer " + std::to_string(next) +
                " but the tail starts at " + std::to_string(b));

  next = b;
  for (size_t i = 0; i < plan.backward.size(); ++i) {
    const Stage &s = plan.backward[i];
    std::string name =
        "backward stage B" + std::to_string(i + 1) + " " + range(s);
    if (s.kind != StageKind::Backward)
      return fail(name + " is not of kind Backward");
    if (s.first >= s.end)
      return fail(name + " is empty");
    if (s.end != next)
      return fail(name + " should end at layer " + std::to_string(next) +
                  " (backward stages run deepest first)");
    next = s.first;
  }
  if (next != 0)
    return fail("the backward stages leave layers [0, " + std::to_string(next) +
                ") uncovered");
  return true;
}

} // namespace rondo::planner
