//===- Checkpoint.h - Crash-safe training checkpoints -----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A checkpoint is everything a trainer needs to resume bit-for-bit: the
// parameters, AdamW's moments, the step, the data cursor and the RNG state.
// Jobs are killed at any moment (preemption, OOM, a full disk), so a
// checkpoint directory must always hold at least one complete checkpoint:
//
//   <dir>/step-<step>.ckpt   written to a temporary file, fsynced, renamed
//                            into place, and the directory fsynced;
//   <dir>/LATEST             then replaced the same way to name it;
//   <dir>/LOCK               flock-ed by the one trainer using <dir>.
//
// The checkpoint LATEST named before stays on disk, so a file damaged after
// the fact (a truncated copy, a bad sector) still leaves one to resume from.
//
// File format (little-endian; strings are a u64 length and the bytes):
//
//   "RONDOCKP"  u32 version  i64 step  u64 dataCursor  i64 skippedSteps
//   string rngState  string program  string model  u64 tensorCount
//   tensorCount x { string name  i64 numel  numel x f32 }
//   u64 checksum of every byte before it
//
// Version 1 files (no skippedSteps) are read with skippedSteps = 0.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_CHECKPOINT_H
#define RONDO_RUNTIME_SRC_CHECKPOINT_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rondo::rt {

/// One fp32 tensor of the training state, owned by the caller. The
/// optimizer's moments are named "exp_avg/<param>" and "exp_avg_sq/<param>".
struct CheckpointTensor {
  std::string name;
  float *data = nullptr; ///< Read from when writing, filled when reading.
  int64_t numel = 0;
};

/// The scalar state saved alongside the tensors.
struct CheckpointMeta {
  int64_t step = 0;        ///< Optimizer steps completed.
  uint64_t dataCursor = 0; ///< Where the data loader resumes.
  /// Steps skipped by --on-nan=skip: they moved the data cursor but not
  /// AdamW, whose step count is step - skippedSteps.
  int64_t skippedSteps = 0;
  std::string rngState; ///< Opaque bytes (may contain NULs).
  std::string program;  ///< Compiled plan name, to refuse a foreign one.
  std::string model;    ///< Model path or hash, for the same reason.
};

/// The file name ("step-<step>.ckpt") a checkpoint of `step` is written to.
std::string checkpointFileName(int64_t step);

/// How many checkpoints a directory keeps unless told otherwise: the newest
/// and the one before it, the fallback when the newest is damaged.
constexpr int64_t kDefaultKeepCheckpoints = 2;

/// Writes <dir>/step-<meta.step>.ckpt and points <dir>/LATEST at it, creating
/// `dir` when it does not exist. Then deletes older checkpoints but the
/// `keep` - 1 newest (and, with `keep` >= 2, the one LATEST named before);
/// checkpoints of later steps (a run restarted over) are left alone. Throws
/// rt::Error naming the file and the system's reason on any failure, in
/// which case the temporary file is gone and the previous checkpoint and
/// LATEST are untouched.
void writeCheckpoint(const std::string &dir, const CheckpointMeta &meta,
                     const std::vector<CheckpointTensor> &tensors,
                     int64_t keep = kDefaultKeepCheckpoints);

/// Reads the checkpoint file `path` into `tensors` and returns its meta.
/// The file must hold exactly the tensors listed, by name and numel.
/// Throws rt::Error naming the file (and the tensor, for a mismatch) when it
/// is truncated, corrupt or does not match; the tensors are only written
/// once the whole file has been verified against its checksum.
CheckpointMeta readCheckpoint(const std::string &path,
                              const std::vector<CheckpointTensor> &tensors);

/// readCheckpoint() of the file <dir>/LATEST names. When that file is
/// damaged (missing, truncated, corrupt) but an older step-*.ckpt in `dir`
/// is whole, resumes from the newest such one with a warning on stderr
/// naming both. A tensor mismatch does not fall back: an older checkpoint of
/// the same run has the same tensors.
CheckpointMeta
readLatestCheckpoint(const std::string &dir,
                     const std::vector<CheckpointTensor> &tensors);

/// Whether `dir` has a LATEST file, i.e. a run can resume from it.
bool hasCheckpoint(const std::string &dir);

/// An exclusive advisory lock (flock) on <dir>/LOCK, held while the object
/// lives and released by the kernel when the process dies however it dies.
/// Two trainers on one directory would delete each other's checkpoints and
/// resume from each other's weights, so the second one is refused. Creates
/// `dir`; writes the holder's pid and host into LOCK for the refusal.
class CheckpointDirLock {
public:
  /// Throws rt::Error naming `dir` and, when it holds the lock, the other
  /// process's pid and host; or naming `dir` and the system's reason when
  /// it cannot be created or locked.
  explicit CheckpointDirLock(const std::string &dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock &) = delete;
  CheckpointDirLock &operator=(const CheckpointDirLock &) = delete;

private:
  int fd = -1;
};

/// The checksum of the format: four interleaved multiply-rotate lanes with
/// the FNV-1a prime over 8-byte words (so multi-GB checkpoints hash at memory
/// speed, unlike byte-wise FNV-1a), folded together with FNV-1a. The result
/// does not depend on how the bytes are split into update() calls.
class CheckpointHasher {
public:
  void update(const void *data, size_t size);
  uint64_t finish() const;

private:
  void block(const unsigned char *p);

  uint64_t lanes[4] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull,
                       0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full};
  unsigned char pending[32] = {};
  size_t numPending = 0;
  uint64_t total = 0;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_CHECKPOINT_H
