//===- OptimizerState.h - AdamW's state and its update ----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The AdamW moments of every trainable parameter, the learning-rate
// schedule and the step count. With --shard-optimizer and several replicas
// (ZeRO-1) each replica keeps the moments of its shard of every parameter
// only, updates that shard and all-gathers the weights; the checkpoint
// holds the moments whole, so a run resumes with any number of replicas.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_OPTIMIZERSTATE_H
#define RONDO_RUNTIME_SRC_TRAINER_OPTIMIZERSTATE_H

#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/Buffer.h"
#include "rondo/runtime/DeviceOps.h"
#include "rondo/runtime/Model.h"

#include "Checkpoint.h"
#include "Cli.h"
#include "trainer/ReplicaSync.h"

#include <cstdint>
#include <string>
#include <vector>

namespace rondo::rt {

/// One trainable parameter's optimizer state. `grad` points at the
/// gradient the update reads: the host gradients of a program (one part),
/// a per-parameter sum (several), or with --grad-accum the sum over the
/// optimizer step's program steps (ProgramGrads binds it).
struct OptParam {
  int index = 0;
  float *param = nullptr;
  float *grad = nullptr;
  FloatBuffer expAvg, expAvgSq;
  int64_t numel = 0;
  double weightDecay = 0;
  /// Device-resident (ResidentState): the worker whose memory holds the
  /// state the update reads and writes, at the pointers below; -1 when it
  /// streams. `param` and the moments above are then host copies, current
  /// after ResidentState::pull, and `grad` is null. The worker's moments
  /// are whole; with a sharded optimizer only this replica's shard of
  /// them is used (and copied to and from the host's shard buffers).
  int32_t worker = -1;
  float *workerParam = nullptr, *workerGrad = nullptr;
  float *workerExpAvg = nullptr, *workerExpAvgSq = nullptr;
  /// The weights' bf16 copy on the worker, rewritten after every update
  /// (null when the plan keeps none).
  uint16_t *workerBf16 = nullptr;
  bool resident() const { return worker >= 0; }
};

/// A gradient in host memory (worker -1) or in a worker's memory.
struct GradRef {
  const float *data = nullptr;
  int64_t numel = 0;
  int32_t worker = -1;
};

/// gradNorm over host and worker gradients alike: every tensor's block
/// partials added in order, so it gives gradNorm's bits for host tensors
/// and, on the host backend, whatever the residency.
double gradNormOf(const std::vector<GradRef> &grads, DeviceOps *device);

class OptimizerState {
public:
  OptimizerState(const ModelSpec &model, const TrainerOptions &opts,
                 ReplicaSync &replicas)
      : model(model), opts(opts), replicas(replicas) {}

  /// The state of every trainable parameter of `params`; a program binds
  /// their gradients (ProgramGrads::bind).
  void setUp(float *const *params);

  std::vector<OptParam> &tensors() { return opt; }
  const std::vector<OptParam> &tensors() const { return opt; }
  /// Model parameter -> index into tensors(), or -1 for a frozen one.
  int indexOf(int param) const { return optOf[size_t(param)]; }
  /// 0 .. tensors().size()-1.
  const std::vector<int> &all() const { return allOpt; }

  double lrAt(int64_t step) const;
  /// The elements of a tensor of `numel` this replica updates.
  Shard owned(int64_t numel) const { return replicas.owned(numel); }
  /// Where device-resident tensors are updated (ResidentState::bind).
  void bindDevice(DeviceOps *ops) { device = ops; }
  DeviceOps *deviceOps() const { return device; }
  /// The owned ranges of the gradients `which` (indices into tensors())
  /// read, in host or worker memory.
  std::vector<GradRef> ownedGrads(const std::vector<int> &which) const;
  /// gradNormOf(ownedGrads(which)).
  double ownedGradNorm(const std::vector<int> &which) const {
    return gradNormOf(ownedGrads(which), device);
  }
  /// AdamW on `which`, on this replica's shards when sharded, whose weights
  /// are then all-gathered.
  void update(const std::vector<int> &which, int64_t step);
  /// Every parameter's update of `step`, after clipping the gradients
  /// whose norm is `norm` (--clip-grad-norm).
  void clipAndUpdate(int64_t step, double norm);
  /// --on-nan=skip: step `step` applies no update.
  void skip(int64_t step, const std::string &why);
  /// Steps skipped by --on-nan=skip (checkpointed): AdamW's step count is
  /// step - skippedSteps + 1.
  int64_t skippedSteps() const { return skipped; }

  /// The checkpoint's tensors: every trainable weight and its moments.
  /// With a sharded optimizer the moments are whole only in the
  /// checkpoint: `fullMoments` receives buffers for them (two per
  /// trainable parameter), which the tensors then name.
  std::vector<CheckpointTensor>
  checkpointTensors(std::vector<FloatBuffer> &fullMoments);
  /// Before writing: every replica's shards into `fullMoments`.
  void gatherMoments(std::vector<FloatBuffer> &fullMoments);
  /// After reading: this replica's shards from `fullMoments`, and the
  /// checkpoint's skipped steps.
  void restore(const std::vector<FloatBuffer> &fullMoments,
               int64_t skippedSteps);

private:
  const ModelSpec &model;
  const TrainerOptions &opts;
  ReplicaSync &replicas;
  AdamWConfig adamw;
  DeviceOps *device = nullptr;
  std::vector<OptParam> opt; ///< Trainable params, in table order.
  std::vector<int> optOf;
  std::vector<int> allOpt;
  int64_t skipped = 0;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_OPTIMIZERSTATE_H
