//===- ResidentState.cpp - Training state kept in a worker's memory -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/ResidentState.h"

namespace rondo::rt {

ResidentState::ResidentState(const rondo_program &program,
                             const ModelSpec &model, const ProgramInfo &info,
                             const HostExec &exec, const void *const *params)
    : program(program), model(model), info(info), exec(exec), params(params) {
  if (!active())
    return;
  state = exec.workerBuffer(worker(), program.residentBuffer);
  if (program.residentGradsBuffer >= 0)
    grads = exec.workerBuffer(worker(), program.residentGradsBuffer);
}

float *ResidentState::at(int q, int64_t rondo_resident_param::*field) const {
  const int32_t r = info.residentOf[size_t(q)];
  if (r < 0 || program.residentParams[r].*field < 0)
    return nullptr;
  return reinterpret_cast<float *>(state + program.residentParams[r].*field);
}

void ResidentState::bind(OptimizerState &optimizer) const {
  optimizer.bindDevice(&device());
  for (OptParam &o : optimizer.tensors()) {
    if (info.residentOf[size_t(o.index)] < 0)
      continue;
    o.worker = worker();
    o.workerParam = at(o.index, &rondo_resident_param::weights);
    o.workerExpAvg = at(o.index, &rondo_resident_param::expAvg);
    o.workerExpAvgSq = at(o.index, &rondo_resident_param::expAvgSq);
    o.workerBf16 = bf16Of(o.index);
    o.grad = nullptr;
  }
}

uint16_t *ResidentState::bf16Of(int q) const {
  const int32_t r = info.residentOf[size_t(q)];
  if (r < 0 || program.residentParams[r].bf16 < 0)
    return nullptr;
  return reinterpret_cast<uint16_t *>(state + program.residentParams[r].bf16);
}

void ResidentState::push(const OptimizerState &optimizer) const {
  std::vector<Bf16Copy> copies;
  for (int32_t i = 0; i < program.numResidentParams; ++i) {
    const rondo_resident_param &r = program.residentParams[i];
    const int64_t n = numElements(model.params[r.param]);
    if (model.params[r.param].storage == ParamStorage::Bf16) {
      // A frozen weight held in bf16: its bits are the copy the stages
      // read, and the worker has no fp32 form of it.
      device().copyToWorker(worker(), bf16Of(r.param), params[r.param],
                            size_t(n) * sizeof(uint16_t));
      continue;
    }
    device().copyToWorker(worker(), state + r.weights, params[r.param],
                          size_t(n) * sizeof(float));
    if (r.bf16 >= 0)
      copies.push_back({reinterpret_cast<const float *>(state + r.weights),
                        bf16Of(r.param), n});
  }
  // Frozen weights keep these copies for the whole run; trainable ones get
  // new ones after every update (OptimizerState::update).
  if (!copies.empty())
    device().toBf16(worker(), copies.data(), copies.size());
  for (const OptParam &o : optimizer.tensors()) {
    if (!o.resident())
      continue;
    // The host holds this replica's shard of the moments.
    const Shard range = optimizer.owned(o.numel);
    const size_t bytes = size_t(range.size()) * sizeof(float);
    device().copyToWorker(o.worker, o.workerExpAvg + range.begin,
                          o.expAvg.data(), bytes);
    device().copyToWorker(o.worker, o.workerExpAvgSq + range.begin,
                          o.expAvgSq.data(), bytes);
  }
}

void ResidentState::pull(OptimizerState &optimizer) const {
  // Frozen weights never change: only the trainable state comes back.
  for (OptParam &o : optimizer.tensors()) {
    if (!o.resident())
      continue;
    device().copyFromWorker(o.worker, o.param, o.workerParam,
                            size_t(o.numel) * sizeof(float));
    const Shard range = optimizer.owned(o.numel);
    const size_t bytes = size_t(range.size()) * sizeof(float);
    device().copyFromWorker(o.worker, o.expAvg.data(),
                            o.workerExpAvg + range.begin, bytes);
    device().copyFromWorker(o.worker, o.expAvgSq.data(),
                            o.workerExpAvgSq + range.begin, bytes);
  }
}

} // namespace rondo::rt
