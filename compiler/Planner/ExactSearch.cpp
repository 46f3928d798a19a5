//===- ExactSearch.cpp - The exact partition search -----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The plan of minimal objective among all that fit the budgets.
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
//
//===----------------------------------------------------------------------===//

#include "PlannerInternal.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <vector>

namespace rondo::planner {

using namespace detail;

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
    // Takes the backward stages of `cell` for b when their checkpoints fit
    // the host budget.
    auto choose = [&](const Cell &cell, Source source) {
      if (cell.count < 0 || cell.checkpoint > hostAvailable)
        return false;
      ev.source[b] = source;
      ev.backwardJobs[b] = cell.count;
      return true;
    };
    if (!choose(bwdDP[b], Source::Fewest)) {
      // The host budget rules out these backward stages: the fewest stages
      // with the fewest checkpoint bytes, or else more stages.
      if (!haveCheckpointDP) {
        haveCheckpointDP = true;
        prefixDP(bwdCheckpointDP, backward, backwardOk, cap, true);
      }
      if (!choose(bwdCheckpointDP[b], Source::FewestCheckpoints)) {
        if (!haveCountDP) {
          haveCountDP = true;
          countedDP(cap);
        }
        for (int g = bwdDP[b].count + 1; g <= b; ++g)
          if (choose(countDP[id(b, g)], Source::Counted))
            break;
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
  for (int b = 0; b < numLayers; ++b) {
    if (ev.source[b] == Source::None)
      continue;
    Plan plan = reconstruct(b, ev);
    // The cached stage costs are costStage's numbers; combine them in the
    // order planObjective and bruteForce's scores use so that scores compare
    // exactly.
    Score s;
    s.jobs = plan.numJobs();
    double slowest = 0;
    auto add = [&](double job) {
      slowest = std::max(slowest, job);
      s.sumJobSeconds += job;
    };
    for (const Stage &st : plan.forward)
      add(forward[id(st.first, st.end)].job);
    add(tail[b].job);
    for (const Stage &st : plan.backward)
      add(backward[id(st.first, st.end)].job);
    s.objective = objectiveOf(problem, s.jobs, slowest);
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
  // The objective's own expression, so that ties are kept.
  auto bound = [&](int jobs, double cap) {
    return objectiveOf(problem, jobs, cap);
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
    if (ev.minJobs <= problem.workers)
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
  // Stage-local pruning: the stages share the worker with the resident
  // state (fitsBudgets counts both for whole plans).
  workerBudget = problem.workerMemoryBytes;
  if (workerBudget > 0) {
    workerBudget -= residentBytes(problem);
    if (workerBudget <= 0)
      return std::nullopt;
  }
  if (problem.hostMemoryBytes > 0) {
    hostAvailable = problem.hostMemoryBytes - hostBaseBytes(problem);
    if (hostAvailable < 0)
      return std::nullopt;
  }
  precompute();

  // (parameter bytes, memory bytes) of every stage, by parameter bytes.
  std::vector<std::pair<double, double>> stages;
  for (int a = 0; a < numLayers; ++a)
    for (int e = a + 1; e < numLayers; ++e) {
      stages.emplace_back(forward[id(a, e)].params, forward[id(a, e)].memory);
      stages.emplace_back(backward[id(a, e)].params, backward[id(a, e)].memory);
    }
  for (const Interval &iv : tail)
    stages.emplace_back(iv.params, iv.memory);
  std::sort(stages.begin(), stages.end());

  // Slot caps: every distinct stage parameter size when the worker budget
  // binds; otherwise one unlimited slot.
  std::vector<double> slots;
  if (workerBudget > 0) {
    for (const auto &[params, memory] : stages)
      if (slots.empty() || params != slots.back())
        slots.push_back(params);
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
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!keep[i])
      continue;
    setSlot(slots[i]);
    capsByJobs(capForJobs);
    double bound = kInf;
    for (int k = 1; k < int(capForJobs.size()); ++k)
      if (capForJobs[k] < kInf)
        bound = std::min(bound, objectiveOf(problem, k, capForJobs[k]));
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

} // namespace rondo::planner
