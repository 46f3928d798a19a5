//===- ProgramGrads.h - A program's gradients for AdamW ---------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A program downloads each stage's gradient image into one host buffer; a
// parameter's gradient is one part there, or several (a tied embedding
// used by two stages), which the optimizer reads summed in table order.
// This component owns those sums and the orders the optimizer tasks walk
// the parts in: stages by their first job, parts by their place in the
// stage's image (job order), all of them for the sync task and per stage
// those its overlap task reads. With --grad-accum K it also owns each
// parameter's accumulator, the sum of its gradients over the K program
// steps of an optimizer step, which the update then reads.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_PROGRAMGRADS_H
#define RONDO_RUNTIME_SRC_TRAINER_PROGRAMGRADS_H

#include "rondo/runtime/Buffer.h"
#include "rondo/runtime/Exec.h"
#include "rondo/runtime/Model.h"

#include "exec/HostExec.h"
#include "trainer/OptimizerState.h"
#include "trainer/ReplicaSync.h"
#include "trainer/ResidentState.h"

#include <cstdint>
#include <string>
#include <vector>

namespace rondo::rt {

class ProgramGrads {
public:
  /// `image` is the gradient image optimizer tasks read
  /// (HostExec::optimizerGradients()), `hostGrads` the program's host
  /// gradients buffer that downloads write.
  /// `passes`: program steps per optimizer step (--grad-accum; streamed
  /// state only).
  ProgramGrads(const rondo_program &program, const ModelSpec &model,
               const ProgramInfo &info, const ReplicaSync &replicas,
               char *image, char *hostGrads, const ResidentState &resident,
               int32_t passes = 1);

  /// Points every trainable parameter's gradient at its part, its sum, or
  /// zeros (a parameter the program computes no gradient for); for a
  /// device-resident one, at its part or sum on the worker. With several
  /// passes: at its accumulator.
  void bind(OptimizerState &opt);
  /// Whether the update reads accumulators (--grad-accum K > 1).
  bool accumulates() const { return passes > 1; }
  /// Adds this program step's gradient of `o` (its parts in table order)
  /// to its accumulator over its owned range (on the worker for a
  /// device-resident one); `first` (the optimizer step's first program
  /// step) sets it instead.
  void accumulate(const OptParam &o, bool first) const;
  /// Frees the worker's accumulators; before the executor (whose device
  /// allocated them) goes.
  void releaseWorkerMemory();

  /// Every part in job order (the sync task's).
  const std::vector<int32_t> &all() const { return partsInJobOrder; }
  /// The parts `stage`'s overlap task reads, in job order.
  const std::vector<int32_t> &readBy(int32_t stage) const {
    return partsReadBy[size_t(stage)];
  }
  /// The parameters (indices into OptimizerState::tensors()) `stage`'s
  /// overlap task updates.
  const std::vector<int> &finalisedBy(int32_t stage) const {
    return optByStage[size_t(stage)];
  }

  /// --replicas: sums the gradients of `parts` across replicas, in place
  /// in host memory (into this replica's shards when sharded).
  void sumAcrossReplicas(const std::vector<int32_t> &parts,
                         ReplicaSync &sync) const;
  /// The position in `parts` of the first one with a non-finite value in
  /// the range this replica owns, or -1.
  int firstNonFinite(const std::vector<int32_t> &parts) const;
  /// "stage X (first in job order), parameter P" for parts[k].
  std::string describe(const std::vector<int32_t> &parts, int k) const;
  /// describe() of the first non-finite part of `parts`, or "".
  std::string nonFinite(const std::vector<int32_t> &parts) const {
    const int k = firstNonFinite(parts);
    return k < 0 ? "" : describe(parts, k);
  }
  /// Sums the parts of `o`'s gradient over its owned range into its sum
  /// buffer (nothing for one part).
  void prepare(const OptParam &o) const;
  /// The gradient norm of this replica's ranges for the log, from sums of
  /// its own: the optimizer tasks may still read the others.
  double normForLog(const OptimizerState &opt);

private:
  /// Sums the parts of parameter q's gradient over `range` into `sum`
  /// (on the worker for a resident parameter).
  void sumParts(int q, float *sum, Shard range) const;

  const rondo_program &program;
  const ModelSpec &model;
  const ProgramInfo &info;
  const ReplicaSync &replicas;
  char *image;
  char *hostGrads;
  const ResidentState &resident;
  const int32_t passes;
  std::vector<int32_t> partsInJobOrder;
  std::vector<std::vector<int32_t>> partsReadBy;
  std::vector<std::vector<int>> optByStage;
  std::vector<FloatBuffer> partSums; ///< Per param with several parts.
  std::vector<FloatBuffer> normSums; ///< The same, for the logged norm.
  FloatBuffer zeroGrad;              ///< For params without gradient.
  std::vector<FloatBuffer> accumulators; ///< Per param, with passes > 1.
  char *workerAccumulators = nullptr;    ///< Device-resident ones, one block.
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_PROGRAMGRADS_H
