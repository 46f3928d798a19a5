//===- DataFeed.cpp - The rows each step trains on ------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "trainer/DataFeed.h"
#include "rondo/runtime/Error.h"

#include <limits>

namespace rondo::rt {

namespace {

constexpr int64_t kIgnoreIndex = -100;

/// (step * rowsPerStep) mod rows without overflowing for long runs.
uint64_t firstRowOf(int64_t step, int64_t rowsPerStep, int64_t numRows) {
  const uint64_t rows = uint64_t(numRows);
  return (uint64_t(step) % rows) * (uint64_t(rowsPerStep) % rows) % rows;
}

} // namespace

void DataFeed::open(const TrainerOptions &opts) {
  TokenDType binType = opts.dataDType.value_or(TokenDType::UInt16);
  const int64_t vocabLimit = model.vocabSize > 0
                                 ? model.vocabSize
                                 : std::numeric_limits<int64_t>::max();
  auto open = [&](const std::string &path) {
    auto m = std::make_unique<TokenMatrix>(
        TokenMatrix::open(path, binType, model.seqLen));
    if (m->cols() != model.seqLen)
      throw Error(path + ": rows have " + std::to_string(m->cols()) +
                  " tokens, the trainer was compiled for seq-len " +
                  std::to_string(model.seqLen));
    m->checkRange(0, vocabLimit);
    return m;
  };
  data = open(opts.data);
  if (!opts.labels.empty()) {
    labels = std::make_unique<TokenMatrix>(TokenMatrix::openNpy(opts.labels));
    if (labels->rows() != data->rows() || labels->cols() != data->cols())
      throw Error(opts.labels + ": shape [" + std::to_string(labels->rows()) +
                  ", " + std::to_string(labels->cols()) +
                  "] differs from the data's [" + std::to_string(data->rows()) +
                  ", " + std::to_string(data->cols()) + "] (" + opts.data +
                  ")");
    labels->checkRange(0, vocabLimit, kIgnoreIndex);
  }
  rowsPerStep_ = opts.gradAccum * model.batch;
  if (!opts.evalData.empty()) {
    evalData = open(opts.evalData);
    if (evalData->rows() < rowsPerStep_)
      throw Error("--eval-data " + opts.evalData + ": " +
                  std::to_string(evalData->rows()) +
                  " rows, fewer than one batch of " +
                  std::to_string(rowsPerStep_));
  }
  batchIds.resize(size_t(rowsPerStep_ * model.seqLen));
  batchLabels.resize(batchIds.size());
}

void DataFeed::gatherRows(const TokenMatrix &source,
                          const TokenMatrix *sourceLabels, uint64_t first) {
  const int64_t seq = model.seqLen;
  const uint64_t rows = uint64_t(source.rows());
  first %= rows;
  for (int64_t j = 0; j < rowsPerStep_; ++j) {
    int64_t row = int64_t((first + uint64_t(j)) % rows);
    source.readRow(row, &batchIds[size_t(j * seq)]);
    if (sourceLabels)
      sourceLabels->readRow(row, &batchLabels[size_t(j * seq)]);
  }
  if (!sourceLabels)
    batchLabels = batchIds;
}

uint64_t DataFeed::firstRow(int64_t step) const {
  // The data cursor of the checkpoint the run resumed from, advanced by the
  // steps since; the same rows as an uninterrupted run on the same data.
  const uint64_t rows = uint64_t(data->rows());
  // With replicas a step is replicas.count() batches; replica r trains the
  // r-th of them.
  return (cursorRow % rows +
          firstRowOf(step - cursorStep, rowsPerStep_ * replicas.count(),
                     data->rows()) +
          uint64_t(replicas.rank()) * uint64_t(rowsPerStep_) % rows) %
         rows;
}

int64_t DataFeed::countTargets() const {
  const int64_t seq = model.seqLen;
  int64_t count = 0;
  for (int64_t r = 0; r < rowsPerStep_; ++r)
    for (int64_t t = 1; t < seq; ++t)
      count += batchLabels[size_t(r * seq + t)] != kIgnoreIndex;
  return count;
}

float DataFeed::lossScaleFor(int64_t count, int64_t microbatches) const {
  // With no target at all PyTorch's mean is 0/0 = nan and the gradient 0;
  // a zero scale gives the same gradient without NaNs in the buffers.
  if (model.loss == LossKind::CausalLM)
    return count > 0 ? float(1.0 / double(count)) : 0.0f;
  return float(1.0 / double(microbatches));
}

} // namespace rondo::rt
