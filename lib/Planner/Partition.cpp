//===- Partition.cpp - Stage costs, greedy and exact partitioning ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Stage costs (costStage and the peaks derived from it), the plan objective,
// RoundPipe's greedy partitioner reproduced literally, and an exact search
// over every valid plan that fits the memory budgets.
//
//===----------------------------------------------------------------------===//

#include "rondo/Planner/Planner.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cmath>
#include <limits>
#include <sstream>

namespace rondo::planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The activation entering layer `x`; nothing enters "layer L".
double inputOf(const PlanProblem &problem, int x) {
  return x >= 0 && x < int(problem.layers.size()) ? problem.layers[x].inputBytes
                                                  : 0.0;
}

/// Seconds to move `bytes` at `bytesPerSecond` (nothing to move is free; a
/// missing link makes any real transfer infinitely slow).
double transferSeconds(double bytes, double bytesPerSecond) {
  if (bytes <= 0)
    return 0;
  return bytesPerSecond > 0 ? bytes / bytesPerSecond : kInf;
}

/// An activation hand-off between two workers: a peer copy, or a D2H then an
/// H2D over the host link.
double handoffSeconds(const PlanProblem &problem, double bytes) {
  if (problem.peerBytesPerSecond > 0)
    return transferSeconds(bytes, problem.peerBytesPerSecond);
  return 2 * transferSeconds(bytes, problem.linkBytesPerSecond);
}

/// The checkpoint a backward stage starting at `first` keeps on the host for
/// all microbatches (layer 0's input is the token data: free).
double checkpointBytes(const PlanProblem &problem, int first) {
  return first > 0 ? problem.microbatches * inputOf(problem, first) : 0.0;
}

double maxInputBytes(const PlanProblem &problem) {
  double m = 0;
  for (const LayerCost &l : problem.layers)
    m = std::max(m, l.inputBytes);
  return m;
}

/// Host bytes every plan needs: the fixed part and the staging buffers.
double hostBaseBytes(const PlanProblem &problem) {
  return problem.hostFixedBytes +
         2.0 * problem.workers * maxInputBytes(problem);
}

/// Tie-break order shared by the exact search and the brute force: smaller
/// objective, then fewer jobs, then smaller sum of job times.
struct Score {
  double objective = kInf;
  int jobs = 0;
  double sumJobSeconds = 0;
  bool betterThan(const Score &o) const {
    if (objective != o.objective)
      return objective < o.objective;
    if (jobs != o.jobs)
      return jobs < o.jobs;
    return sumJobSeconds < o.sumJobSeconds;
  }
};

Score scorePlan(const PlanProblem &problem, const Plan &plan) {
  Score s;
  s.objective = planObjective(problem, plan);
  s.jobs = plan.numJobs();
  for (const Stage &st : plan.jobs())
    s.sumJobSeconds += costStage(problem, st).jobSeconds;
  return s;
}

bool problemIsUsable(const PlanProblem &problem) {
  return !problem.layers.empty() && problem.workers >= 1 &&
         problem.microbatches >= 1;
}

} // namespace

//===----------------------------------------------------------------------===//
// Plans and stage costs
//===----------------------------------------------------------------------===//

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

StageCost costStage(const PlanProblem &problem, const Stage &stage) {
  StageCost c;
  const std::vector<LayerCost> &layers = problem.layers;
  int first = std::max(stage.first, 0);
  int end = std::min(stage.end, int(layers.size()));
  double link = problem.linkBytesPerSecond;

  double forwardSum = 0, fullSum = 0, workspaceSum = 0, workspaceMax = 0;
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
    c.paramBytes += lc.paramBytes;
    c.gradBytes += lc.gradBytes;
  }
  for (const SharedParam &shared : problem.sharedParams) {
    int inStage = 0;
    for (int l : shared.layers)
      inStage += l >= first && l < end;
    if (inStage > 1) {
      c.paramBytes -= (inStage - 1) * shared.paramBytes;
      c.gradBytes -= (inStage - 1) * shared.gradBytes;
    }
  }
  double inFirst = inputOf(problem, first);
  double inEnd = inputOf(problem, end);

  switch (stage.kind) {
  case StageKind::Forward:
    c.computeSeconds = forwardSum;
    c.hopSeconds = first == 0 ? transferSeconds(inputOf(problem, 0), link)
                              : handoffSeconds(problem, inFirst);
    c.activationBytes = 2 * inFirst + 2 * inEnd + workspaceMax;
    // A forward stage produces no gradients.
    c.gradBytes = 0;
    break;
  case StageKind::Tail:
    c.computeSeconds = fullSum;
    c.hopSeconds = first == 0 ? transferSeconds(inputOf(problem, 0), link)
                              : handoffSeconds(problem, inFirst);
    c.activationBytes = 2 * inFirst + 2 * inFirst + workspaceSum;
    break;
  case StageKind::Backward:
    if (!anyWork)
      return StageCost{}; // An empty launch: no gradient in or out.
    c.computeSeconds = fullSum;
    c.hopSeconds =
        handoffSeconds(problem, inEnd) + transferSeconds(inFirst, link);
    c.activationBytes = inFirst + 2 * inEnd + 2 * inFirst + workspaceSum;
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

double workerPeakBytes(const PlanProblem &problem, const Plan &plan) {
  double running = 0, slot = 0;
  for (const Stage &st : plan.jobs()) {
    StageCost c = costStage(problem, st);
    running = std::max(running, c.memoryBytes);
    slot = std::max(slot, c.paramBytes);
  }
  return running + slot;
}

double workerArenaBytes(const PlanProblem &problem, const Plan &plan) {
  const double boundary = maxInputBytes(problem);
  const double m = problem.microbatches;
  double maxParam = 0, maxGrad = 0, temporaries = 0;
  size_t maxCheckpoints = 0;
  for (const Stage &st : plan.jobs()) {
    StageCost c = costStage(problem, st);
    maxParam = std::max(maxParam, c.paramBytes);
    maxGrad = std::max(maxGrad, c.gradBytes);
    double sum = 0, largest = 0;
    for (int l = std::max(st.first, 0);
         l < std::min(st.end, int(problem.layers.size())); ++l) {
      sum += problem.layers[l].workspaceBytes;
      largest = std::max(largest, problem.layers[l].workspaceBytes);
    }
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
         m * double(maxCheckpoints) * boundary + temporaries;
}

double hostPeakBytes(const PlanProblem &problem, const Plan &plan) {
  double bytes = problem.hostFixedBytes;
  for (const Stage &st : plan.backward)
    bytes += checkpointBytes(problem, st.first);
  return bytes + 2.0 * problem.workers * maxInputBytes(problem);
}

Plan finestPlan(int numLayers) {
  Plan fine;
  fine.tail = {StageKind::Tail, numLayers - 1, numLayers};
  for (int l = 0; l + 1 < numLayers; ++l)
    fine.forward.push_back({StageKind::Forward, l, l + 1});
  for (int l = numLayers - 2; l >= 0; --l)
    fine.backward.push_back({StageKind::Backward, l, l + 1});
  return fine;
}

int64_t maxSequenceLength(const PlanProblem &problem,
                          double tokensPerMicrobatch, int64_t granularity,
                          int64_t limit) {
  if (problem.layers.empty() || tokensPerMicrobatch <= 0)
    return 0;
  if (problem.workerMemoryBytes <= 0 && problem.hostMemoryBytes <= 0)
    return limit;
  const Plan fine = finestPlan(int(problem.layers.size()));
  auto fits = [&](int64_t tokens) {
    PlanProblem scaled = problem;
    scaled.microbatches = 1;
    const double s = double(tokens) / tokensPerMicrobatch;
    for (LayerCost &l : scaled.layers) {
      l.inputBytes *= s;
      l.workspaceBytes *= s;
      l.forwardSeconds *= s;
      l.backwardSeconds *= s;
    }
    if (!fitsBudgets(scaled, fine, nullptr))
      return false;
    return scaled.workerMemoryBytes <= 0 ||
           workerArenaBytes(scaled, fine) <= scaled.workerMemoryBytes;
  };
  if (!fits(granularity))
    return 0;
  if (fits(limit))
    return limit;
  int64_t lo = 1, hi = limit / granularity; // lo fits, hi does not
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid * granularity) ? lo : hi) = mid;
  }
  return lo * granularity;
}

/// The fewest stage-jobs the objective counts: max(N, minJobs).
static int jobFloor(const PlanProblem &problem) {
  return std::max({problem.workers, problem.minJobs, 1});
}

double planObjective(const PlanProblem &problem, const Plan &plan) {
  int k = plan.numJobs();
  int n = std::max(problem.workers, 1);
  double slowest = 0;
  for (const Stage &st : plan.jobs())
    slowest = std::max(slowest, costStage(problem, st).jobSeconds);
  return double(std::max(k, jobFloor(problem))) * slowest / n;
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
      os << "host memory: the plan needs " << host << " bytes (fixed "
         << problem.hostFixedBytes << " + checkpoints and staging), the "
         << "budget is " << problem.hostMemoryBytes << " bytes";
      *why = os.str();
    }
    return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// RoundPipe's greedy partitioner
//===----------------------------------------------------------------------===//

Plan greedyRoundPipe(const PlanProblem &problem, double memoryLimit) {
  const std::vector<LayerCost> &layers = problem.layers;
  int numLayers = int(layers.size());
  std::vector<double> fwdT(numLayers), bwdT(numLayers), size(numLayers),
      bwdSize(numLayers);
  for (int l = 0; l < numLayers; ++l) {
    fwdT[l] = layers[l].forwardSeconds;
    bwdT[l] = layers[l].forwardSeconds + layers[l].backwardSeconds;
    size[l] = layers[l].paramBytes;
    bwdSize[l] = layers[l].paramBytes + layers[l].gradBytes;
  }

  // The heaviest single layer and the memory cap (raised when one layer
  // alone would not fit half of it). A limit of 0 means "no limit", like
  // the problem's budgets.
  double heaviest = 0, largest = 0;
  for (int l = 0; l < numLayers; ++l) {
    heaviest = std::max({heaviest, fwdT[l], bwdT[l]});
    largest = std::max(largest, bwdSize[l]);
  }
  double limit = memoryLimit > 0 ? memoryLimit : kInf;
  if (largest > limit / 2)
    limit = 2 * largest;
  double half = limit / 2;
  const double upperThreshold = 1.1;

  // Candidate caps: every contiguous sum of either time list within
  // [W, 1.1 W], accumulated in RoundPipe's order.
  std::vector<double> candidates;
  for (const std::vector<double> *times : {&fwdT, &bwdT}) {
    for (int start = 0; start < numLayers; ++start) {
      double sum = 0;
      for (int end = start; end < numLayers; ++end) {
        sum += (*times)[end];
        if (sum > heaviest * upperThreshold)
          break;
        if (sum >= heaviest)
          candidates.push_back(sum);
      }
    }
  }
  std::sort(candidates.begin(), candidates.end());

  Plan best;
  best.tail = {StageKind::Tail, 0, numLayers};
  double bestCost = kInf;
  for (double cap : candidates) {
    Plan plan;
    // Carve the fused tail from the last layer downwards.
    int b = numLayers;
    double tailTime = 0, tailSize = 0;
    for (int l = numLayers - 1; l >= 0; --l) {
      if (tailTime + bwdT[l] > cap || tailSize + bwdSize[l] > half)
        break;
      tailTime += bwdT[l];
      tailSize += bwdSize[l];
      b = l;
    }
    plan.tail = {StageKind::Tail, b, numLayers};

    // Forward stages: pack b-1 .. 0 walking down, then reverse.
    {
      std::vector<Stage> reversed;
      double time = 0, bytes = 0;
      for (int l = b - 1; l >= 0; --l) {
        if (reversed.empty() || time + fwdT[l] > cap ||
            bytes + size[l] > half) {
          reversed.push_back({StageKind::Forward, l, l + 1});
          time = bytes = 0;
        }
        reversed.back().first = l;
        time += fwdT[l];
        bytes += size[l];
      }
      plan.forward.assign(reversed.rbegin(), reversed.rend());
    }
    // Backward stages: pack 0 .. b-1 walking up, emitted deepest first.
    {
      std::vector<Stage> ascending;
      double time = 0, bytes = 0;
      for (int l = 0; l < b; ++l) {
        if (ascending.empty() || time + bwdT[l] > cap ||
            bytes + bwdSize[l] > half) {
          ascending.push_back({StageKind::Backward, l, l});
          time = bytes = 0;
        }
        ascending.back().end = l + 1;
        time += bwdT[l];
        bytes += bwdSize[l];
      }
      plan.backward.assign(ascending.rbegin(), ascending.rend());
    }

    double cost = double(std::max(plan.numJobs(), jobFloor(problem))) * cap;
    if (cost < bestCost) {
      bestCost = cost;
      best = std::move(plan);
    }
  }
  return best;
}

//===----------------------------------------------------------------------===//
// The exact search
//===----------------------------------------------------------------------===//
//
// Every plan P has a slowest job C(P) and a largest parameter slot S(P).
// Under a slot cap S (one of the distinct stage parameter sizes) a stage is
// admissible when its parameters fit S and its running memory fits next to
// a slot of S; under a time cap C it must also take at most C. Every plan
// that fits the worker budget is made of stages admissible under S(P) and
// C(P), so sweeping both caps and taking, per tail start, the fewest
// admissible stages finds the optimum, as long as the host budget is
// respected too.
//
// Slots. A slot whose admissible stages are a subset of those of a larger
// slot (or of the next smaller one, when none has exactly its size) is
// skipped. Each remaining slot gets the bound of its best plan without the
// host budget: bottleneck DPs over (cut point, stage count) give, per job
// count k, the smallest possible slowest job C_S(k). Slots are searched in
// ascending order of that bound until it exceeds the best objective found.
//
// Caps within a slot. The fewest jobs K_S(C) is non-increasing in C. A plan
// of k jobs whose slowest job exceeds some C' with K_S(C') <= k is strictly
// beaten by the fewest-job plan at C', because the objective is
// max(K, N) * slowest / N. Without a host budget the only caps worth an
// evaluation are therefore the C_S(k); with one, the caps where K_S drops
// are found by binary search over the sorted distinct job times.
//
// Evaluation at a cap: for every tail start b, the fewest forward and
// backward stages by dynamic programming over cut points (ties to the
// smaller sum of job times). When the host budget rules out those backward
// stages, the fewest stages with the fewest checkpoint bytes are tried, and
// then a DP over (cut point, stage count) finds the fewest stages whose
// checkpoints fit. Every candidate is checked with fitsBudgets.
//
// Cost for L layers: O(L^3) for the stage costs; O(L^2) per slot candidate
// (O(L^2) of them) for the subset test; O(L^3) per remaining slot for its
// bound; per searched slot at most 2L evaluations of O(L^2) each without a
// host budget, O(steps * log L) evaluations with one (O(L^3) when the
// counted DP is needed).

namespace {

class ExactSearch {
public:
  explicit ExactSearch(const PlanProblem &problem)
      : problem(problem), numLayers(int(problem.layers.size())),
        width(numLayers + 1) {}

  std::optional<Plan> run();

private:
  struct Interval {
    double job = 0, params = 0, memory = 0, checkpoint = 0;
  };
  struct Cell {
    int count = -1; // -1: unreachable
    double checkpoint = 0, sum = 0;
    int parent = -1;
  };
  /// Where the backward stages of a tail start come from.
  enum class Source : char { None, Fewest, FewestCheckpoints, Counted };
  /// One evaluation at a (slot, time) cap: the fewest jobs over all tail
  /// starts, and per tail start which DP holds its backward stages.
  struct Evaluation {
    int minJobs = -1; // -1: no plan
    std::vector<Source> source;
    std::vector<int> backwardJobs;
  };

  int id(int a, int e) const { return a * width + e; }
  bool admissible(const Interval &iv, double slot) const {
    if (iv.params > slot)
      return false;
    return workerBudget <= 0 || iv.memory + slot <= workerBudget;
  }

  void precompute();
  void setSlot(double slot);
  void prefixDP(std::vector<Cell> &dp, const std::vector<Interval> &intervals,
                const std::vector<char> &ok, double cap,
                bool checkpointsFirst) const;
  void countedDP(double cap);
  Evaluation evaluate(double cap, int below = -1);
  Plan reconstruct(int b, const Evaluation &ev) const;
  void consider(const Evaluation &ev);
  void capsByJobs(std::vector<double> &capForJobs);
  void searchSlot(const std::vector<double> &capForJobs);

  const PlanProblem &problem;
  int numLayers;
  int width;
  double workerBudget = 0;
  double hostAvailable = kInf; // checkpoint bytes the host budget leaves

  std::vector<Interval> forward, backward, tail;
  std::vector<char> forwardOk, backwardOk, tailOk; // under the current slot

  // Per end point e: the best cover of [0, e).
  std::vector<Cell> fwdDP, bwdDP, bwdCheckpointDP;
  // Per (end point, count): the fewest checkpoint bytes (host budget).
  std::vector<Cell> countDP;
  // Per (end point, count): the smallest slowest stage (no host budget).
  std::vector<double> fwdBottleneck, bwdBottleneck;

  std::optional<Plan> best;
  Score bestScore;
};

void ExactSearch::precompute() {
  forward.assign(width * width, {});
  backward.assign(width * width, {});
  tail.assign(numLayers, {});
  auto fill = [&](Interval &iv, const Stage &st) {
    StageCost c = costStage(problem, st);
    iv.job = c.jobSeconds;
    iv.params = c.paramBytes;
    iv.memory = c.memoryBytes;
  };
  // Forward and backward stages end at most at L-1: the tail is non-empty.
  for (int a = 0; a < numLayers; ++a)
    for (int e = a + 1; e < numLayers; ++e) {
      fill(forward[id(a, e)], {StageKind::Forward, a, e});
      Interval &bw = backward[id(a, e)];
      fill(bw, {StageKind::Backward, a, e});
      bw.checkpoint = checkpointBytes(problem, a);
    }
  for (int b = 0; b < numLayers; ++b)
    fill(tail[b], {StageKind::Tail, b, numLayers});
}

void ExactSearch::setSlot(double slot) {
  forwardOk.assign(width * width, 0);
  backwardOk.assign(width * width, 0);
  tailOk.assign(numLayers, 0);
  for (int a = 0; a < numLayers; ++a)
    for (int e = a + 1; e < numLayers; ++e) {
      forwardOk[id(a, e)] = admissible(forward[id(a, e)], slot);
      backwardOk[id(a, e)] = admissible(backward[id(a, e)], slot);
    }
  for (int b = 0; b < numLayers; ++b)
    tailOk[b] = admissible(tail[b], slot);
}

/// The fewest admissible stages covering [0, e) for every e, ties to the
/// smaller sum of job times (or first to fewer checkpoint bytes).
void ExactSearch::prefixDP(std::vector<Cell> &dp,
                           const std::vector<Interval> &intervals,
                           const std::vector<char> &ok, double cap,
                           bool checkpointsFirst) const {
  dp.assign(numLayers, {});
  dp[0].count = 0;
  for (int e = 1; e < numLayers; ++e) {
    Cell &cur = dp[e];
    for (int a = 0; a < e; ++a) {
      const Cell &from = dp[a];
      int k = id(a, e);
      if (from.count < 0 || !ok[k] || intervals[k].job > cap)
        continue;
      Cell cand{from.count + 1, from.checkpoint + intervals[k].checkpoint,
                from.sum + intervals[k].job, a};
      bool take;
      if (cur.count < 0 || cand.count != cur.count)
        take = cur.count < 0 || cand.count < cur.count;
      else if (checkpointsFirst && cand.checkpoint != cur.checkpoint)
        take = cand.checkpoint < cur.checkpoint;
      else
        take = cand.sum < cur.sum;
      if (take)
        cur = cand;
    }
  }
}

/// For every (e, g): the fewest checkpoint bytes of g admissible backward
/// stages covering [0, e), ties to the smaller sum of job times.
void ExactSearch::countedDP(double cap) {
  countDP.assign(numLayers * width, {});
  countDP[id(0, 0)].count = 0;
  for (int e = 1; e < numLayers; ++e)
    for (int a = 0; a < e; ++a) {
      int k = id(a, e);
      if (!backwardOk[k] || backward[k].job > cap)
        continue;
      for (int g = 0; g <= a; ++g) {
        const Cell &from = countDP[id(a, g)];
        if (from.count < 0)
          continue;
        Cell cand{g + 1, from.checkpoint + backward[k].checkpoint,
                  from.sum + backward[k].job, a};
        Cell &cur = countDP[id(e, g + 1)];
        if (cur.count < 0 || cand.checkpoint < cur.checkpoint ||
            (cand.checkpoint == cur.checkpoint && cand.sum < cur.sum))
          cur = cand;
      }
    }
}

/// Without the host budget: for every job count k, the smallest slowest
/// job of a plan of exactly k jobs under the current slot (bottleneck DPs
/// over (cut point, stage count)); kInf where there is none.
void ExactSearch::capsByJobs(std::vector<double> &capForJobs) {
  auto sweep = [&](const std::vector<Interval> &intervals,
                   const std::vector<char> &ok, std::vector<double> &dp) {
    dp.assign(numLayers * width, kInf);
    dp[id(0, 0)] = 0;
    for (int e = 1; e < numLayers; ++e)
      for (int a = 0; a < e; ++a) {
        int k = id(a, e);
        if (!ok[k])
          continue;
        double job = intervals[k].job;
        for (int c = 0; c <= a; ++c) {
          double from = dp[id(a, c)];
          if (from == kInf)
            continue;
          double &cur = dp[id(e, c + 1)];
          cur = std::min(cur, std::max(from, job));
        }
      }
  };
  sweep(forward, forwardOk, fwdBottleneck);
  sweep(backward, backwardOk, bwdBottleneck);

  capForJobs.assign(2 * numLayers + 1, kInf);
  // Only counts that lower the bottleneck matter on either side.
  std::vector<std::pair<int, double>> fwdFront, bwdFront;
  auto front = [&](const std::vector<double> &dp, int b,
                   std::vector<std::pair<int, double>> &out) {
    out.clear();
    for (int c = 0; c <= b; ++c) {
      double v = dp[id(b, c)];
      if (v < (out.empty() ? kInf : out.back().second))
        out.emplace_back(c, v);
    }
  };
  for (int b = 0; b < numLayers; ++b) {
    if (!tailOk[b])
      continue;
    front(fwdBottleneck, b, fwdFront);
    front(bwdBottleneck, b, bwdFront);
    for (const auto &[kf, f] : fwdFront)
      for (const auto &[kb, g] : bwdFront) {
        double &cap = capForJobs[kf + 1 + kb];
        cap = std::min(cap, std::max({f, tail[b].job, g}));
      }
  }
}

/// With `below` >= 0 only plans of fewer than `below` jobs are sought: the
/// result then only answers "is there one" (binary searches).
ExactSearch::Evaluation ExactSearch::evaluate(double cap, int below) {
  prefixDP(fwdDP, forward, forwardOk, cap, false);
  prefixDP(bwdDP, backward, backwardOk, cap, false);
  bool haveCheckpointDP = false, haveCountDP = false;

  Evaluation ev;
  ev.source.assign(numLayers, Source::None);
  ev.backwardJobs.assign(numLayers, -1);
  for (int b = 0; b < numLayers; ++b) {
    if (!tailOk[b] || tail[b].job > cap || fwdDP[b].count < 0 ||
        bwdDP[b].count < 0)
      continue;
    if (below >= 0 && fwdDP[b].count + 1 + bwdDP[b].count >= below)
      continue;
    if (bwdDP[b].checkpoint <= hostAvailable) {
      ev.source[b] = Source::Fewest;
      ev.backwardJobs[b] = bwdDP[b].count;
    } else {
      // The host budget rules out these backward stages: the fewest stages
      // with the fewest checkpoint bytes, or else more stages.
      if (!haveCheckpointDP) {
        haveCheckpointDP = true;
        prefixDP(bwdCheckpointDP, backward, backwardOk, cap, true);
      }
      if (bwdCheckpointDP[b].checkpoint <= hostAvailable) {
        ev.source[b] = Source::FewestCheckpoints;
        ev.backwardJobs[b] = bwdCheckpointDP[b].count;
      } else {
        if (!haveCountDP) {
          haveCountDP = true;
          countedDP(cap);
        }
        for (int g = bwdDP[b].count + 1; g <= b; ++g) {
          const Cell &c = countDP[id(b, g)];
          if (c.count >= 0 && c.checkpoint <= hostAvailable) {
            ev.source[b] = Source::Counted;
            ev.backwardJobs[b] = g;
            break;
          }
        }
        if (ev.source[b] == Source::None)
          continue;
      }
    }
    int jobs = fwdDP[b].count + 1 + ev.backwardJobs[b];
    if (below >= 0 && jobs >= below) {
      ev.source[b] = Source::None;
      continue;
    }
    if (ev.minJobs < 0 || jobs < ev.minJobs)
      ev.minJobs = jobs;
  }
  return ev;
}

Plan ExactSearch::reconstruct(int b, const Evaluation &ev) const {
  Plan plan;
  plan.tail = {StageKind::Tail, b, numLayers};
  for (int e = b; e > 0; e = fwdDP[e].parent)
    plan.forward.push_back({StageKind::Forward, fwdDP[e].parent, e});
  std::reverse(plan.forward.begin(), plan.forward.end());
  // Walking the parents from b down yields the backward stages deepest
  // first, their issue order.
  if (ev.source[b] == Source::Counted) {
    for (int e = b, g = ev.backwardJobs[b]; e > 0; --g) {
      int a = countDP[id(e, g)].parent;
      plan.backward.push_back({StageKind::Backward, a, e});
      e = a;
    }
  } else {
    const std::vector<Cell> &dp =
        ev.source[b] == Source::Fewest ? bwdDP : bwdCheckpointDP;
    for (int e = b; e > 0; e = dp[e].parent)
      plan.backward.push_back({StageKind::Backward, dp[e].parent, e});
  }
  return plan;
}

/// Scores the plan of every tail start of the last evaluation and keeps the
/// best one that fits the budgets.
void ExactSearch::consider(const Evaluation &ev) {
  int n = problem.workers;
  for (int b = 0; b < numLayers; ++b) {
    if (ev.source[b] == Source::None)
      continue;
    Plan plan = reconstruct(b, ev);
    // The cached stage costs are costStage's numbers; combine them in the
    // order planObjective and scorePlan use so that scores compare exactly.
    Score s;
    s.jobs = plan.numJobs();
    double slowest = 0;
    for (const Stage &st : plan.forward) {
      double job = forward[id(st.first, st.end)].job;
      slowest = std::max(slowest, job);
      s.sumJobSeconds += job;
    }
    slowest = std::max(slowest, tail[b].job);
    s.sumJobSeconds += tail[b].job;
    for (const Stage &st : plan.backward) {
      double job = backward[id(st.first, st.end)].job;
      slowest = std::max(slowest, job);
      s.sumJobSeconds += job;
    }
    s.objective = double(std::max(s.jobs, jobFloor(problem))) * slowest / n;
    if (best && !s.betterThan(bestScore))
      continue;
    if (!fitsBudgets(problem, plan, nullptr))
      continue;
    bestScore = s;
    best = std::move(plan);
  }
}

/// Searches the current slot. Without a host budget the caps worth an
/// evaluation are exactly the smallest slowest jobs per job count (any other
/// plan is beaten by the one at the cap of its count or a smaller one).
/// With a host budget the counts may be higher, so the caps where the
/// fewest-job count K(C) drops are found by binary search instead.
void ExactSearch::searchSlot(const std::vector<double> &capForJobs) {
  int n = problem.workers;
  // The same expression as the objective, so that ties are kept.
  auto bound = [&](int jobs, double cap) {
    return double(std::max(jobs, jobFloor(problem))) * cap / n;
  };

  if (hostAvailable == kInf) {
    std::vector<std::pair<double, double>> order; // (bound, cap)
    for (int k = 1; k < int(capForJobs.size()); ++k)
      if (capForJobs[k] < kInf)
        order.emplace_back(bound(k, capForJobs[k]), capForJobs[k]);
    std::sort(order.begin(), order.end());
    std::vector<double> evaluated;
    for (const auto &[b, cap] : order) {
      if (best && b > bestScore.objective)
        break;
      if (std::find(evaluated.begin(), evaluated.end(), cap) != evaluated.end())
        continue;
      evaluated.push_back(cap);
      consider(evaluate(cap));
    }
    return;
  }

  std::vector<double> caps;
  for (int a = 0; a < numLayers; ++a)
    for (int e = a + 1; e < numLayers; ++e) {
      if (forwardOk[id(a, e)])
        caps.push_back(forward[id(a, e)].job);
      if (backwardOk[id(a, e)])
        caps.push_back(backward[id(a, e)].job);
    }
  for (int b = 0; b < numLayers; ++b)
    if (tailOk[b])
      caps.push_back(tail[b].job);
  if (caps.empty())
    return;
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());

  // Every plan under this slot has at least `fewest` jobs, so caps whose
  // bound with `fewest` jobs exceeds the best objective cannot help.
  int fewest = evaluate(caps.back()).minJobs;
  if (fewest < 0)
    return;
  auto usefulEnd = [&](size_t lo) {
    if (!best)
      return caps.size();
    return size_t(std::partition_point(caps.begin() + lo, caps.end(),
                                       [&](double cap) {
                                         return bound(fewest, cap) <=
                                                bestScore.objective;
                                       }) -
                  caps.begin());
  };
  // The smallest index in [lo, usefulEnd) whose fewest-job count is below
  // `below` (any count when below < 0); caps.size() if none.
  auto firstBelow = [&](size_t lo, int below) {
    size_t hi = usefulEnd(lo);
    size_t found = caps.size();
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (evaluate(caps[mid], below < 0 ? INT_MAX : below).minJobs >= 0) {
        found = mid;
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return found;
  };

  // No plan is faster than the smallest bottleneck without the host budget.
  double smallestCap = *std::min_element(capForJobs.begin(), capForJobs.end());
  size_t i = firstBelow(
      std::lower_bound(caps.begin(), caps.end(), smallestCap) - caps.begin(),
      -1);
  while (i < usefulEnd(i)) {
    Evaluation ev = evaluate(caps[i]);
    consider(ev);
    // With at most N jobs the objective is the slowest job: larger caps
    // only make it worse.
    if (ev.minJobs <= n)
      break;
    // Fewer jobs need at least the cap they need without the host budget.
    double needed = kInf;
    for (int k = 1; k < ev.minJobs; ++k)
      needed = std::min(needed, capForJobs[k]);
    size_t lo =
        std::lower_bound(caps.begin(), caps.end(), needed) - caps.begin();
    i = firstBelow(std::max(i + 1, lo), ev.minJobs);
  }
}

std::optional<Plan> ExactSearch::run() {
  if (!problemIsUsable(problem))
    return std::nullopt;
  workerBudget = problem.workerMemoryBytes;
  if (problem.hostMemoryBytes > 0) {
    hostAvailable = problem.hostMemoryBytes - hostBaseBytes(problem);
    if (hostAvailable < 0)
      return std::nullopt;
  }
  precompute();

  // Slot caps: every distinct stage parameter size when the worker budget
  // binds; otherwise one unlimited slot.
  std::vector<double> slots;
  if (workerBudget > 0) {
    for (int a = 0; a < numLayers; ++a)
      for (int e = a + 1; e < numLayers; ++e) {
        slots.push_back(forward[id(a, e)].params);
        slots.push_back(backward[id(a, e)].params);
      }
    for (const Interval &iv : tail)
      slots.push_back(iv.params);
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  } else {
    slots.push_back(kInf);
  }

  // Which slots need a search: a slot whose largest admissible stage
  // memory also fits next to the next larger kept slot admits a subset of
  // what that slot admits (strictly: the larger one admits a stage of its
  // own size), and a slot without an admissible stage of its own size
  // admits a subset of the next smaller one.
  std::vector<char> hasExact(slots.size()), keep(slots.size());
  std::vector<double> largestMemory(slots.size(), 0.0);
  {
    // (parameter bytes, memory bytes) of every stage, by parameter bytes.
    std::vector<std::pair<double, double>> stages;
    for (int a = 0; a < numLayers; ++a)
      for (int e = a + 1; e < numLayers; ++e) {
        stages.emplace_back(forward[id(a, e)].params, forward[id(a, e)].memory);
        stages.emplace_back(backward[id(a, e)].params,
                            backward[id(a, e)].memory);
      }
    for (const Interval &iv : tail)
      stages.emplace_back(iv.params, iv.memory);
    std::sort(stages.begin(), stages.end());
    for (size_t i = 0; i < slots.size(); ++i) {
      hasExact[i] = workerBudget <= 0;
      for (const auto &[params, memory] : stages) {
        if (params > slots[i])
          break;
        if (workerBudget > 0 && memory + slots[i] > workerBudget)
          continue;
        hasExact[i] |= params == slots[i];
        largestMemory[i] = std::max(largestMemory[i], memory);
      }
    }
  }
  double nextExact = kInf;
  for (size_t i = slots.size(); i-- > 0;) {
    keep[i] = hasExact[i] && !(nextExact < kInf &&
                               largestMemory[i] + nextExact <= workerBudget);
    if (hasExact[i])
      nextExact = slots[i];
  }

  // Bound every kept slot by its best plan without the host budget (exact
  // when there is none), then search the slots in ascending order of that
  // bound until it exceeds the best objective found.
  struct SlotBound {
    double bound;
    size_t index;
  };
  std::vector<SlotBound> bounds;
  std::vector<double> capForJobs;
  int n = problem.workers;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!keep[i])
      continue;
    setSlot(slots[i]);
    capsByJobs(capForJobs);
    double bound = kInf;
    for (int k = 1; k < int(capForJobs.size()); ++k)
      if (capForJobs[k] < kInf)
        bound = std::min(bound, double(std::max(k, jobFloor(problem))) *
                                    capForJobs[k] / n);
    if (bound < kInf)
      bounds.push_back({bound, i});
  }
  std::stable_sort(
      bounds.begin(), bounds.end(),
      [](const SlotBound &x, const SlotBound &y) { return x.bound < y.bound; });
  for (const SlotBound &sb : bounds) {
    if (best && sb.bound > bestScore.objective)
      break;
    setSlot(slots[sb.index]);
    capsByJobs(capForJobs);
    searchSlot(capForJobs);
  }
  return best;
}

} // namespace

std::optional<Plan> exactSearch(const PlanProblem &problem) {
  ExactSearch search(problem);
  return search.run();
}

//===----------------------------------------------------------------------===//
// Brute force
//===----------------------------------------------------------------------===//

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
