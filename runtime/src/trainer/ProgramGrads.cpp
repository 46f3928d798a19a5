//===- ProgramGrads.cpp - A program's gradients, as AdamW reads them ------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/ProgramGrads.h"
#include "trainer/NanGuard.h"

#include "rondo/runtime/Error.h"

#include <algorithm>

namespace rondo::rt {

ProgramGrads::ProgramGrads(const rondo_program &program, const ModelSpec &model,
                           const ProgramInfo &info, const ReplicaSync &replicas,
                           char *image, char *hostGrads,
                           const ResidentState &resident, int32_t passes)
    : program(program), model(model), info(info), replicas(replicas),
      image(image), hostGrads(hostGrads), resident(resident), passes(passes) {
  // The order non-finite gradients are looked for in: stages by their
  // first job, parts by their place in the stage's gradient image.
  std::vector<int32_t> firstJob(size_t(program.numStages), program.numJobs);
  for (int32_t n = program.numJobs - 1; n >= 0; --n)
    firstJob[size_t(program.jobStages[n])] = n;
  for (int32_t i = 0; i < program.numGradParts; ++i)
    partsInJobOrder.push_back(i);
  std::stable_sort(partsInJobOrder.begin(), partsInJobOrder.end(),
                   [&](int32_t a, int32_t b) {
                     const rondo_grad_part &x = program.gradParts[a],
                                           &y = program.gradParts[b];
                     if (firstJob[size_t(x.stage)] != firstJob[size_t(y.stage)])
                       return firstJob[size_t(x.stage)] <
                              firstJob[size_t(y.stage)];
                     return x.hostOffset < y.hostOffset;
                   });
  partsReadBy.assign(size_t(program.numStages), {});
  for (int32_t part : partsInJobOrder) {
    int32_t owner = info.finalStage[size_t(program.gradParts[part].param)];
    if (owner >= 0)
      partsReadBy[size_t(owner)].push_back(part);
  }
}

void ProgramGrads::bind(OptimizerState &opt) {
  // Gradients: in the image for one part, summed for several.
  int64_t largest = 0;
  partSums.resize(size_t(model.numParams));
  normSums.resize(size_t(model.numParams));
  for (OptParam &o : opt.tensors()) {
    const std::vector<int32_t> &parts = info.partsOf[size_t(o.index)];
    if (o.resident()) {
      if (parts.empty())
        throw Error(std::string("the compiled program '") + program.name +
                    "' keeps '" + model.params[o.index].name +
                    "' on the worker but computes no gradient for it; "
                    "freeze it (--freeze) or compile with "
                    "--residency=streamed");
      o.workerGrad = parts.size() == 1
                         ? resident.partData(program.gradParts[parts[0]])
                         : resident.sumOf(o.index);
      continue;
    }
    if (parts.size() == 1) {
      o.grad = reinterpret_cast<float *>(
          image + program.gradParts[parts[0]].hostOffset);
    } else if (parts.size() > 1) {
      partSums[size_t(o.index)] = FloatBuffer(o.numel);
      normSums[size_t(o.index)] = FloatBuffer(o.numel);
      o.grad = partSums[size_t(o.index)].data();
    }
    largest = std::max(largest,
                       parts.empty() && !o.resident() ? o.numel : int64_t(0));
  }
  zeroGrad = FloatBuffer(largest);
  for (OptParam &o : opt.tensors())
    if (info.partsOf[size_t(o.index)].empty() && !o.resident())
      o.grad = zeroGrad.data();
  if (passes > 1) {
    // The update, the norm, clipping and dumps read the sums over the
    // optimizer step's program steps (zero without parts).
    // Device-resident parameters' sums live on their worker, in one
    // allocation.
    accumulators.resize(size_t(model.numParams));
    int64_t onWorker = 0;
    for (const OptParam &o : opt.tensors())
      if (o.resident())
        onWorker += (o.numel + 15) / 16 * 16;
    if (onWorker > 0)
      workerAccumulators = resident.device().allocateArena(
          resident.worker(), size_t(onWorker) * sizeof(float));
    float *next = reinterpret_cast<float *>(workerAccumulators);
    for (OptParam &o : opt.tensors()) {
      if (o.resident()) {
        o.workerGrad = next;
        next += (o.numel + 15) / 16 * 16;
        continue;
      }
      accumulators[size_t(o.index)] = FloatBuffer(o.numel);
      o.grad = accumulators[size_t(o.index)].data();
    }
  }
  optByStage.assign(size_t(program.numStages), {});
  for (int32_t s = 0; s < program.numStages; ++s)
    for (int32_t q : info.finalises[size_t(s)])
      optByStage[size_t(s)].push_back(opt.indexOf(q));
}

void ProgramGrads::sumAcrossReplicas(const std::vector<int32_t> &parts,
                                     ReplicaSync &sync) const {
  if (!sync.active())
    return;
  // Every replica's tasks reach the same parts in the same (job) order, so
  // the sums pair up.
  std::vector<GradientSpan> spans;
  for (int32_t i : parts) {
    const rondo_grad_part &part = program.gradParts[i];
    // A part on the worker is host memory on the host backend, the GPU's
    // own memory for the NCCL engine (Trainer::setUpProgram).
    spans.push_back(
        {part.onWorker ? resident.partData(part)
                       : reinterpret_cast<float *>(hostGrads + part.hostOffset),
         numElements(model.params[part.param])});
  }
  sync.sumGradients(spans);
}

int ProgramGrads::firstNonFinite(const std::vector<int32_t> &parts) const {
  // The worker's parts are checked in one call (one synchronisation on a
  // GPU); the host's in order up to the first bad one on the worker.
  std::vector<FloatSpan> onWorker;
  std::vector<size_t> partOf;
  for (size_t k = 0; k < parts.size(); ++k) {
    const rondo_grad_part &part = program.gradParts[parts[k]];
    if (!part.onWorker)
      continue;
    const Shard range = replicas.owned(numElements(model.params[part.param]));
    onWorker.push_back({resident.partData(part) + range.begin, range.size()});
    partOf.push_back(k);
  }
  const int badOnWorker =
      onWorker.empty()
          ? -1
          : resident.device().firstNonFinite(resident.worker(), onWorker.data(),
                                             onWorker.size());
  const size_t end = badOnWorker < 0 ? parts.size() : partOf[badOnWorker];
  for (size_t k = 0; k < end; ++k) {
    const rondo_grad_part &part = program.gradParts[parts[k]];
    if (part.onWorker)
      continue;
    const Shard range = replicas.owned(numElements(model.params[part.param]));
    if (!allFinite(image + part.hostOffset + range.begin * sizeof(float),
                   range.size()))
      return int(k);
  }
  return badOnWorker < 0 ? -1 : int(end);
}

std::string ProgramGrads::describe(const std::vector<int32_t> &parts,
                                   int k) const {
  const rondo_grad_part &part = program.gradParts[parts[size_t(k)]];
  return std::string("stage ") + program.stages[part.stage].name +
         " (first in job order), parameter " + model.params[part.param].name;
}

void ProgramGrads::releaseWorkerMemory() {
  if (workerAccumulators)
    resident.device().releaseArena(resident.worker(), workerAccumulators);
  workerAccumulators = nullptr;
}

void ProgramGrads::accumulate(const OptParam &o, bool first) const {
  const std::vector<int32_t> &parts = info.partsOf[size_t(o.index)];
  const Shard range = replicas.owned(o.numel);
  const int64_t n = range.size();
  if (o.resident()) {
    // The same additions in the same order, on the worker (the sum reads
    // its element before it writes it).
    std::vector<const float *> data;
    if (!first)
      data.push_back(o.workerGrad + range.begin);
    for (int32_t i : parts)
      data.push_back(resident.partData(program.gradParts[i]) + range.begin);
    resident.device().sumParts(resident.worker(), o.workerGrad + range.begin,
                               data.data(), int32_t(data.size()), n);
    return;
  }
  float *sum = o.grad + range.begin;
  // Elementwise, so threading keeps the order of the additions (and the
  // bits) of the sequential loop: the previous steps' sum, then this
  // step's parts in table order.
  for (size_t i = 0; i < parts.size(); ++i) {
    const float *g = reinterpret_cast<const float *>(
                         image + program.gradParts[parts[i]].hostOffset) +
                     range.begin;
    if (first && i == 0) {
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
      for (int64_t e = 0; e < n; ++e)
        sum[e] = g[e];
    } else {
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
      for (int64_t e = 0; e < n; ++e)
        sum[e] += g[e];
    }
  }
}

void ProgramGrads::prepare(const OptParam &o) const {
  sumParts(o.index, o.resident() ? o.workerGrad : o.grad,
           replicas.owned(o.numel));
}

void ProgramGrads::sumParts(int q, float *sum, Shard range) const {
  const std::vector<int32_t> &parts = info.partsOf[size_t(q)];
  if (parts.size() < 2)
    return;
  if (info.residentOf[size_t(q)] >= 0) {
    // The same additions in the same order, on the worker.
    std::vector<const float *> data;
    for (int32_t i : parts)
      data.push_back(resident.partData(program.gradParts[i]) + range.begin);
    resident.device().sumParts(resident.worker(), sum + range.begin,
                               data.data(), int32_t(data.size()), range.size());
    return;
  }
  // The sum in table order, whatever order the parts arrived in.
  const int64_t n = range.size();
  sum += range.begin;
  auto part = [&](size_t i) {
    return reinterpret_cast<const float *>(
               image + program.gradParts[parts[i]].hostOffset) +
           range.begin;
  };
  // Elementwise, so threading keeps the order of the additions (and the
  // bits) of the sequential loop. The first two parts in one pass: a tied
  // embedding (two parts) is then read and written once.
  const float *first = part(0), *second = part(1);
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
  for (int64_t e = 0; e < n; ++e)
    sum[e] = first[e] + second[e];
  for (size_t i = 2; i < parts.size(); ++i) {
    const float *g = part(i);
#pragma omp parallel for simd schedule(static) if (n >= (int64_t(1) << 20))
    for (int64_t e = 0; e < n; ++e)
      sum[e] += g[e];
  }
}

double ProgramGrads::normForLog(const OptimizerState &opt) {
  std::vector<GradRef> g;
  for (const OptParam &o : opt.tensors()) {
    if (o.resident()) {
      const Shard range = replicas.owned(o.numel);
      float *grad = o.workerGrad;
      if (info.partsOf[size_t(o.index)].size() > 1) {
        grad = resident.normSumOf(o.index);
        sumParts(o.index, grad, range);
      }
      g.push_back({grad + range.begin, range.size(), o.worker});
      continue;
    }
    float *grad = o.grad;
    const Shard range = replicas.owned(o.numel);
    if (info.partsOf[size_t(o.index)].size() > 1) {
      grad = normSums[size_t(o.index)].data();
      sumParts(o.index, grad, range);
    }
    g.push_back({grad + range.begin, range.size()});
  }
  return gradNormOf(g, resident.active() ? &resident.device() : nullptr);
}

} // namespace rondo::rt
