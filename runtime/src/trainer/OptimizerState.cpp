//===- OptimizerState.cpp - AdamW's state and its update ------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/OptimizerState.h"
#include "rondo/runtime/Schedule.h"
#include "trainer/NanGuard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <regex>

namespace rondo::rt {

void OptimizerState::setUp(float *const *params) {
  adamw.beta1 = opts.beta1;
  adamw.beta2 = opts.beta2;
  adamw.eps = opts.eps;
  std::optional<std::regex> noDecay;
  if (!opts.noDecay.empty())
    noDecay.emplace(opts.noDecay);
  optOf.assign(size_t(model.numParams), -1);
  opt.reserve(size_t(model.numParams));
  for (int i = 0; i < model.numParams; ++i) {
    const ParamSpec &p = model.params[i];
    if (!p.trainable)
      continue;
    bool exempt = noDecay && (std::regex_search(p.name, *noDecay) ||
                              (p.displayName && *p.displayName &&
                               std::regex_search(p.displayName, *noDecay)));
    OptParam o;
    o.index = i;
    o.param = params[i];
    o.numel = numElements(p);
    o.expAvg = FloatBuffer(replicas.owned(o.numel).size());
    o.expAvgSq = FloatBuffer(replicas.owned(o.numel).size());
    o.weightDecay = exempt ? 0.0 : opts.weightDecay;
    optOf[size_t(i)] = int(opt.size());
    allOpt.push_back(int(opt.size()));
    opt.push_back(std::move(o));
  }
}

double OptimizerState::lrAt(int64_t step) const {
  return opts.lr * lrMultiplier(opts.schedule, step, opts.warmup, opts.steps);
}

double gradNormOf(const std::vector<GradRef> &grads, DeviceOps *device) {
  int64_t blocks = 0;
  for (const GradRef &g : grads)
    blocks += gradNormBlocks(g.numel);
  std::vector<double> partials(static_cast<size_t>(blocks));
  double *out = partials.data();
  // A run of tensors on one worker goes to the device in one call; the
  // partials keep the tensors' order, so the sum is the same.
  for (size_t k = 0; k < grads.size();) {
    const GradRef &g = grads[k];
    if (g.worker < 0) {
      gradNormPartials(g.data, g.numel, out);
      out += gradNormBlocks(g.numel);
      ++k;
      continue;
    }
    std::vector<FloatSpan> run;
    for (; k < grads.size() && grads[k].worker == g.worker; ++k)
      run.push_back({grads[k].data, grads[k].numel});
    device->gradNormPartials(g.worker, run.data(), run.size(), out);
    for (const FloatSpan &span : run)
      out += gradNormBlocks(span.n);
  }
  double sum = 0.0;
  for (double s : partials)
    sum += s;
  return std::sqrt(sum);
}

std::vector<GradRef>
OptimizerState::ownedGrads(const std::vector<int> &which) const {
  std::vector<GradRef> g;
  for (int i : which) {
    const OptParam &o = opt[size_t(i)];
    const Shard range = replicas.owned(o.numel);
    if (o.resident())
      g.push_back({o.workerGrad + range.begin, range.size(), o.worker});
    else
      g.push_back({o.grad + range.begin, range.size()});
  }
  return g;
}

void OptimizerState::update(const std::vector<int> &which, int64_t step) {
  // AdamW is elementwise: the host and the worker tensors may be updated
  // apart, in any order, with the same bits.
  std::vector<AdamWTensor> tensors, onWorker;
  tensors.reserve(which.size());
  int32_t worker = -1;
  for (int i : which) {
    OptParam &o = opt[size_t(i)];
    AdamWTensor t;
    t.weightDecay = o.weightDecay;
    const Shard range = replicas.owned(o.numel);
    if (o.resident()) {
      t.param = o.workerParam + range.begin;
      t.grad = o.workerGrad + range.begin;
      t.expAvg = o.workerExpAvg + range.begin;
      t.expAvgSq = o.workerExpAvgSq + range.begin;
      t.numel = range.size();
      worker = o.worker;
      onWorker.push_back(t);
      continue;
    }
    t.param = o.param + range.begin;
    t.grad = o.grad + range.begin;
    t.expAvg = o.expAvg.data();
    t.expAvgSq = o.expAvgSq.data();
    t.numel = range.size();
    tensors.push_back(t);
  }
  const double lr = lrAt(step);
  const int64_t adamStep = step - skipped + 1;
  if (!tensors.empty())
    adamwUpdate(tensors.data(), tensors.size(), adamw, lr, adamStep);
  if (!onWorker.empty())
    device->adamw(worker, onWorker.data(), onWorker.size(), adamw, lr,
                  adamStep);
  // The collectives read the worker's memory in place: host memory on the
  // host backend, the GPU's own over NCCL (Trainer::setUpProgram).
  std::vector<GradientSpan> updated;
  for (int i : which) {
    const OptParam &o = opt[size_t(i)];
    updated.push_back({o.resident() ? o.workerParam : o.param, o.numel});
  }
  replicas.allGatherShards(updated);
  // The stage functions read the bf16 copies of the whole weights.
  std::vector<Bf16Copy> copies;
  for (int i : which)
    if (const OptParam &o = opt[size_t(i)]; o.workerBf16)
      copies.push_back({o.workerParam, o.workerBf16, o.numel});
  if (!copies.empty())
    device->toBf16(worker, copies.data(), copies.size());
}

void OptimizerState::clipAndUpdate(int64_t step, double norm) {
  if (opts.clipGradNorm) {
    std::vector<GradTensor> onHost;
    for (const GradRef &g : ownedGrads(allOpt))
      if (g.worker < 0)
        onHost.push_back({const_cast<float *>(g.data), g.numel});
    const float factor =
        clipGradNorm(onHost.data(), onHost.size(), norm, *opts.clipGradNorm);
    // The worker's gradients by the factor the host ones were scaled by.
    if (factor != 1.0f)
      for (const OptParam &o : opt)
        if (o.resident()) {
          const Shard range = replicas.owned(o.numel);
          device->scale(o.worker, o.workerGrad + range.begin, range.size(),
                        factor);
        }
  }
  update(allOpt, step);
}

void OptimizerState::skip(int64_t step, const std::string &why) {
  ++skipped;
  std::fprintf(stderr,
               "rondo: warning: %s; %s skipped (--on-nan=skip): no "
               "parameter or optimizer state changed\n",
               why.c_str(), stepName(step).c_str());
}

std::vector<CheckpointTensor>
OptimizerState::checkpointTensors(std::vector<FloatBuffer> &fullMoments) {
  const bool sharded = replicas.sharded();
  std::vector<CheckpointTensor> t;
  if (sharded) {
    fullMoments.clear();
    for (const OptParam &o : opt) {
      fullMoments.emplace_back(o.numel);
      fullMoments.emplace_back(o.numel);
    }
  }
  for (size_t k = 0; k < opt.size(); ++k) {
    OptParam &o = opt[k];
    std::string name = model.params[o.index].name;
    t.push_back({name, o.param, o.numel});
    t.push_back({"exp_avg/" + name,
                 sharded ? fullMoments[2 * k].data() : o.expAvg.data(),
                 o.numel});
    t.push_back({"exp_avg_sq/" + name,
                 sharded ? fullMoments[2 * k + 1].data() : o.expAvgSq.data(),
                 o.numel});
  }
  return t;
}

void OptimizerState::gatherMoments(std::vector<FloatBuffer> &fullMoments) {
  if (!replicas.sharded())
    return;
  for (size_t k = 0; k < opt.size(); ++k) {
    const OptParam &o = opt[k];
    const Shard range = replicas.owned(o.numel);
    for (int m = 0; m < 2; ++m) {
      float *full = fullMoments[2 * k + size_t(m)].data();
      const FloatBuffer &mine = m == 0 ? o.expAvg : o.expAvgSq;
      std::copy(mine.data(), mine.data() + range.size(), full + range.begin);
      replicas.allGatherShards(full, o.numel);
    }
  }
}

void OptimizerState::restore(const std::vector<FloatBuffer> &fullMoments,
                             int64_t skippedSteps) {
  for (size_t k = 0; replicas.sharded() && k < opt.size(); ++k) {
    OptParam &o = opt[k];
    const Shard range = replicas.owned(o.numel);
    for (int m = 0; m < 2; ++m) {
      const float *full = fullMoments[2 * k + size_t(m)].data();
      std::copy(full + range.begin, full + range.end,
                (m == 0 ? o.expAvg : o.expAvgSq).data());
    }
  }
  skipped = skippedSteps;
}

} // namespace rondo::rt
