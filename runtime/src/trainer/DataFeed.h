//===- DataFeed.h - The rows each step trains on ----------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The training and evaluation data, the data cursor and the batch of the
// current step. Step s trains on rows (s * rowsPerStep + j) mod rows,
// j < rowsPerStep, counted from the cursor of the checkpoint the run
// resumed from; with R replicas a step is R batches and replica r trains
// the r-th. The labels are the ids unless --labels gives them (-100 =
// ignore).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_DATAFEED_H
#define RONDO_RUNTIME_SRC_TRAINER_DATAFEED_H

#include "rondo/runtime/Data.h"
#include "rondo/runtime/Model.h"

#include "Cli.h"
#include "trainer/ReplicaSync.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace rondo::rt {

class DataFeed {
public:
  DataFeed(const ModelSpec &model, const ReplicaSync &replicas)
      : model(model), replicas(replicas) {}

  /// Opens --data, --labels and --eval-data and checks them against the
  /// model; a step takes `gradAccum` batches.
  void open(const TrainerOptions &opts);
  /// The cursor of a checkpoint: step `step` starts at row `row`.
  void resumeAt(int64_t step, uint64_t row) {
    cursorStep = step;
    cursorRow = row;
  }

  /// The first data row of `step`.
  uint64_t firstRow(int64_t step) const;
  /// Loads the batch of training step `step`.
  void gatherStep(int64_t step) {
    gatherRows(*data, labels.get(), firstRow(step));
  }
  /// Loads evaluation batch `batch` (labels: the ids).
  void gatherEval(int64_t batch) {
    gatherRows(*evalData, nullptr, uint64_t(batch * rowsPerStep_));
  }
  /// CausalLM: the non-ignored targets of the batch, labels[:, 1:].
  int64_t countTargets() const;
  /// The factor the loss is multiplied by before differentiation, so that
  /// the sum over microbatches is the global mean: 1/count (CausalLM) or
  /// 1/microbatches.
  float lossScaleFor(int64_t count, int64_t microbatches) const;

  int64_t rowsPerStep() const { return rowsPerStep_; }
  const TokenMatrix &train() const { return *data; }
  /// --eval-data, or null.
  const TokenMatrix *eval() const { return evalData.get(); }
  /// The batch: [rowsPerStep, seqLen] ids and labels.
  const std::vector<int64_t> &ids() const { return batchIds; }
  const std::vector<int64_t> &labelsOfBatch() const { return batchLabels; }

private:
  /// Rows [first, first + rowsPerStep) mod rows of `source` into the batch.
  void gatherRows(const TokenMatrix &source, const TokenMatrix *sourceLabels,
                  uint64_t first);

  const ModelSpec &model;
  const ReplicaSync &replicas;
  std::unique_ptr<TokenMatrix> data;
  std::unique_ptr<TokenMatrix> labels;
  std::unique_ptr<TokenMatrix> evalData;
  int64_t rowsPerStep_ = 0;
  int64_t cursorStep = 0; ///< Step of the checkpoint resumed from (or 0),
  uint64_t cursorRow = 0; ///< and its data cursor.
  std::vector<int64_t> batchIds; ///< [rowsPerStep, seqLen] of this step.
  std::vector<int64_t> batchLabels;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_DATAFEED_H
