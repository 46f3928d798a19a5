//===- TensorBoard.h - TensorBoard event files (--tensorboard) --*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Scalars as TensorBoard reads them: a file events.out.tfevents.TIME.HOST in
// the directory, holding TFRecords (a little-endian uint64 length, the
// masked CRC32C of those 8 bytes, the data, the masked CRC32C of the data)
// of tensorflow.Event protos (TensorBoardEvent.proto): first the file
// version "brain.Event:2", then a SessionLog START at the run's first step,
// then one Event per step with its scalars. Every run, a resumed one too,
// writes a new file (TensorBoard merges the files of a directory); the
// START record makes TensorBoard drop what an interrupted run wrote past
// the step the resumed run starts from, as --log-json drops those lines.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TENSORBOARD_H
#define RONDO_RUNTIME_SRC_TENSORBOARD_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace rondo::rt {

/// CRC-32C (Castagnoli), as TFRecord frames use it, continuing `crc`.
uint32_t crc32c(const void *data, size_t size, uint32_t crc = 0);
/// TFRecord's masked CRC: rotated and offset, so that a CRC of data that
/// holds CRCs does not degenerate.
uint32_t maskedCrc32c(const void *data, size_t size);

class TensorBoardLog {
public:
  /// Creates `dir` if it is missing (one level) and a new event file in it
  /// for a run whose first step (steps done before it) is `firstStep`.
  /// Throws rt::Error naming the path when it cannot.
  TensorBoardLog(const std::string &dir, int64_t firstStep);
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog &) = delete;
  TensorBoardLog &operator=(const TensorBoardLog &) = delete;

  /// One Event at `step` (steps done: the progress line's step) holding a
  /// simple_value per (tag, value); flushed, so TensorBoard follows a
  /// running job.
  void scalars(int64_t step,
               const std::vector<std::pair<std::string, double>> &values);
  const std::string &path() const { return filePath; }

private:
  void writeRecord(const std::string &data);

  std::string filePath;
  std::FILE *file = nullptr;
};

/// The resident and peak resident memory of this process in GB (0 where
/// the system does not say), TensorBoard's memory scalars.
double residentMemoryGB();
double peakResidentMemoryGB();

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TENSORBOARD_H
