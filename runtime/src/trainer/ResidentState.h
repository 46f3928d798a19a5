//===- ResidentState.h - Training state kept in a worker's memory -*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A program whose plan keeps parameters on the worker (the planner's
// device residency, docs/CostModel.md) holds their fp32 weights, AdamW
// moments and gradient parts in the worker's resident buffers for the whole
// run: stage-jobs read the weights there, accumulate the gradients there,
// and the OPTIMIZER tasks update them there through DeviceOps. The host
// copies (ParamStore's weights, OptimizerState's moments) are what
// checkpoints, exports and resumes read and write, so this component moves
// state between the two at those moments only: push() after the weights
// are loaded or resumed, pull() before anything reads the host copies.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_RESIDENTSTATE_H
#define RONDO_RUNTIME_SRC_TRAINER_RESIDENTSTATE_H

#include "rondo/runtime/Exec.h"
#include "rondo/runtime/Model.h"

#include "exec/HostExec.h"
#include "trainer/OptimizerState.h"

#include <cstdint>

namespace rondo::rt {

class ResidentState {
public:
  /// `params` are the host master weights (ParamStore::data()).
  ResidentState(const rondo_program &program, const ModelSpec &model,
                const ProgramInfo &info, const HostExec &exec,
                const void *const *params);

  /// Whether the program keeps any parameter on the worker.
  bool active() const { return program.numResidentParams > 0; }
  /// The worker holding the state (resident programs have one).
  int32_t worker() const { return 0; }
  DeviceOps &device() const { return exec.deviceOps(); }

  /// Points every resident trainable parameter's update at its worker
  /// state (its gradient: ProgramGrads::bind).
  void bind(OptimizerState &optimizer) const;
  /// Host -> worker: every resident weight (and its bf16 copy) and the
  /// moments of the trainable ones.
  void push(const OptimizerState &optimizer) const;
  /// Worker -> host: the weights and moments the run changes.
  void pull(OptimizerState &optimizer) const;

  /// A gradient part that stays on the worker (part.onWorker).
  float *partData(const rondo_grad_part &part) const {
    return reinterpret_cast<float *>(grads + part.hostOffset);
  }
  /// Parameter q's sum of parts, and its sum for the logged norm, on the
  /// worker (null unless q is resident with several parts).
  float *sumOf(int q) const { return at(q, &rondo_resident_param::sum); }
  float *normSumOf(int q) const {
    return at(q, &rondo_resident_param::normSum);
  }

private:
  float *at(int q, int64_t rondo_resident_param::*field) const;
  /// Parameter q's bf16 weight copy on the worker, or null.
  uint16_t *bf16Of(int q) const;

  const rondo_program &program;
  const ModelSpec &model;
  const ProgramInfo &info;
  const HostExec &exec;
  const void *const *params;
  char *state = nullptr; ///< The worker's resident buffer.
  char *grads = nullptr; ///< The worker's resident gradients buffer.
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_RESIDENTSTATE_H
