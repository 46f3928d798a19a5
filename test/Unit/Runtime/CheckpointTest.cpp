//===- CheckpointTest.cpp - Crash-safe checkpoints ------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Checkpoint.h"

#include "TestUtil.h"

#include "rondo/runtime/Error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <functional>
#include <random>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace rondo::rt;
using namespace rondo::test;
using ::testing::HasSubstr;

namespace {

/// Owned storage for a set of checkpoint tensors.
struct State {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;

  void add(const std::string &name, std::vector<float> data) {
    names.push_back(name);
    values.push_back(std::move(data));
  }

  std::vector<CheckpointTensor> tensors() {
    std::vector<CheckpointTensor> result;
    for (size_t i = 0; i < names.size(); ++i)
      result.push_back({names[i], values[i].data(), int64_t(values[i].size())});
    return result;
  }

  /// Same names and sizes, zero-filled: a buffer to read into.
  State zeroed() const {
    State s = *this;
    for (auto &v : s.values)
      std::fill(v.begin(), v.end(), 0.0f);
    return s;
  }

  bool bitwiseEqual(const State &other) const {
    if (names != other.names || values.size() != other.values.size())
      return false;
    for (size_t i = 0; i < values.size(); ++i)
      // memcmp's pointers must not be null, even for no bytes (UBSan).
      if (values[i].size() != other.values[i].size() ||
          (!values[i].empty() &&
           std::memcmp(values[i].data(), other.values[i].data(),
                       values[i].size() * sizeof(float)) != 0))
        return false;
    return true;
  }
};

/// Arbitrary bit patterns, NaN payloads, -0 and denormals included: a
/// checkpoint must restore the bits, not just the values.
std::vector<float> randomBits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float &f : v) {
    uint32_t bits = rng();
    std::memcpy(&f, &bits, sizeof(f));
  }
  return v;
}

/// A parameter, its two moments and an empty tensor; odd sizes so records
/// do not line up with the checksum's 32-byte blocks.
State makeState(uint32_t seed) {
  State s;
  s.add("w", randomBits(37, seed));
  s.add("exp_avg/w", randomBits(37, seed + 1));
  s.add("exp_avg_sq/w", randomBits(37, seed + 2));
  s.add("b", randomBits(5, seed + 3));
  s.add("empty", {});
  return s;
}

CheckpointMeta makeMeta(int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  meta.dataCursor = 0x123456789abcdefull + uint64_t(step);
  meta.rngState = std::string("rng\0state\xff", 10) + std::to_string(step);
  meta.program = "toy.train";
  meta.model = "models/toy.onnx";
  return meta;
}

void write(const std::string &dir, int64_t step, State &state) {
  writeCheckpoint(dir, makeMeta(step), state.tensors());
}

/// The latest checkpoint in `dir` is that of `step` and reads back as `state`.
void expectLatest(const std::string &dir, int64_t step, const State &state) {
  State loaded = state.zeroed();
  EXPECT_EQ(readLatestCheckpoint(dir, loaded.tensors()).step, step);
  EXPECT_TRUE(loaded.bitwiseEqual(state));
}

bool exists(const std::string &path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  DIR *d = ::opendir(dir.c_str());
  while (d) {
    struct dirent *e = ::readdir(d);
    if (!e)
      break;
    std::string name = e->d_name;
    if (name != "." && name != "..")
      names.push_back(name);
  }
  if (d)
    ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

/// Writes `s1` and `s2` as steps 1 and 2 in `dir`, then replaces step 2's
/// file by `damage` of its bytes; returns its path.
std::string damageStep2(const std::string &dir, State &s1, State &s2,
                        const std::function<std::string(std::string)> &damage) {
  write(dir, 1, s1);
  write(dir, 2, s2);
  std::string path = dir + "/step-2.ckpt";
  writeBytes(path, damage(readText(path)));
  return path;
}

/// A write of step 2 after step 1 that failed with `error`: the error names
/// the checkpoint and `reason`, `dir` then holds `listing`, and step 1 is still
/// the latest and reads back as `s1`.
void expectStep2Failed(const std::string &dir, const std::string &error,
                       const std::string &reason,
                       const std::vector<std::string> &listing,
                       const State &s1) {
  EXPECT_THAT(error, HasSubstr(dir + "/step-2.ckpt"));
  EXPECT_THAT(error, HasSubstr(reason));
  EXPECT_EQ(listDir(dir), listing);
  expectLatest(dir, 1, s1);
}

TEST(Checkpoint, RoundTripIsBitwise) {
  std::string dir = makeTempDir();
  State state = makeState(1);
  write(dir, 7, state);
  ASSERT_TRUE(hasCheckpoint(dir));

  State loaded = state.zeroed();
  CheckpointMeta meta = readLatestCheckpoint(dir, loaded.tensors());
  EXPECT_TRUE(loaded.bitwiseEqual(state));
  CheckpointMeta expected = makeMeta(7);
  EXPECT_EQ(meta.step, expected.step);
  EXPECT_EQ(meta.dataCursor, expected.dataCursor);
  EXPECT_EQ(meta.rngState, expected.rngState);
  EXPECT_EQ(meta.program, expected.program);
  EXPECT_EQ(meta.model, expected.model);

  // The same file read directly, with the tensors listed in another order.
  State reordered;
  for (size_t i = state.names.size(); i-- > 0;)
    reordered.add(state.names[i], std::vector<float>(state.values[i].size()));
  readCheckpoint(dir + "/step-7.ckpt", reordered.tensors());
  for (size_t i = 0; i < state.names.size(); ++i)
    EXPECT_TRUE(state.values[i].empty() ||
                std::memcmp(reordered.values[state.names.size() - 1 - i].data(),
                            state.values[i].data(),
                            state.values[i].size() * sizeof(float)) == 0)
        << state.names[i];
}

TEST(Checkpoint, HasherDoesNotDependOnSplits) {
  std::vector<float> data = randomBits(301, 5);
  const auto *bytes = reinterpret_cast<const unsigned char *>(data.data());
  size_t size = data.size() * sizeof(float);
  CheckpointHasher whole;
  whole.update(bytes, size);
  for (size_t step : {1, 3, 8, 31, 32, 33, 100}) {
    CheckpointHasher pieces;
    for (size_t pos = 0; pos < size; pos += step)
      pieces.update(bytes + pos, std::min(step, size - pos));
    EXPECT_EQ(pieces.finish(), whole.finish()) << "pieces of " << step;
  }
  // Flipping the top bit of two words must not cancel out.
  std::vector<float> flipped = data;
  auto *w = reinterpret_cast<unsigned char *>(flipped.data());
  w[7] ^= 0x80;
  w[15] ^= 0x80;
  CheckpointHasher other;
  other.update(w, size);
  EXPECT_NE(other.finish(), whole.finish());
}

TEST(Checkpoint, CreatesMissingDirectory) {
  std::string dir = makeTempDir() + "/run/ckpt";
  EXPECT_FALSE(hasCheckpoint(dir));
  State state = makeState(2);
  write(dir, 0, state);
  EXPECT_TRUE(hasCheckpoint(dir));
  EXPECT_TRUE(exists(dir + "/step-0.ckpt"));
}

TEST(Checkpoint, LatestNamesNewestAndPreviousIsKept) {
  std::string dir = makeTempDir();
  State s1 = makeState(10), s2 = makeState(20), s3 = makeState(30);
  write(dir, 100, s1);
  write(dir, 200, s2);
  EXPECT_EQ(readText(dir + "/LATEST"), "step-200.ckpt\n");
  EXPECT_TRUE(exists(dir + "/step-100.ckpt"));
  write(dir, 300, s3);
  EXPECT_EQ(readText(dir + "/LATEST"), "step-300.ckpt\n");
  // The newest and the one before it; older ones and no temporaries.
  EXPECT_EQ(listDir(dir), (std::vector<std::string>{"LATEST", "step-200.ckpt",
                                                    "step-300.ckpt"}));

  expectLatest(dir, 300, s3);
  State previous = s2.zeroed();
  EXPECT_EQ(readCheckpoint(dir + "/step-200.ckpt", previous.tensors()).step,
            200);
  EXPECT_TRUE(previous.bitwiseEqual(s2));
}

TEST(Checkpoint, UnwritableDirectoryLeavesPreviousCheckpoint) {
  std::string dir = makeTempDir();
  State s1 = makeState(1), s2 = makeState(2);
  write(dir, 1, s1);
  ASSERT_EQ(::chmod(dir.c_str(), 0555), 0);
  if (::access(dir.c_str(), W_OK) == 0) {
    ::chmod(dir.c_str(), 0755);
    GTEST_SKIP() << "running as root: a 0555 directory is still writable";
  }
  std::string error = errorOf([&] { write(dir, 2, s2); });
  ::chmod(dir.c_str(), 0755);
  expectStep2Failed(dir, error, std::strerror(EACCES),
                    {"LATEST", "step-1.ckpt"}, s1);
}

TEST(Checkpoint, FailedRenameRemovesTemporary) {
  std::string dir = makeTempDir();
  State s1 = makeState(1), s2 = makeState(2);
  write(dir, 1, s1);
  // A non-empty directory where the checkpoint goes: everything up to the
  // rename succeeds, then the rename fails.
  ASSERT_EQ(::mkdir((dir + "/step-2.ckpt").c_str(), 0755), 0);
  writeBytes(dir + "/step-2.ckpt/keep", "x");
  std::string error = errorOf([&] { write(dir, 2, s2); });
  expectStep2Failed(dir, error, "rename",
                    {"LATEST", "step-1.ckpt", "step-2.ckpt"}, s1);
  EXPECT_EQ(readText(dir + "/LATEST"), "step-1.ckpt\n");
}

TEST(Checkpoint, FailedWriteRemovesTemporary) {
  std::string dir = makeTempDir();
  State s1 = makeState(1), s2 = makeState(2);
  write(dir, 1, s1);
  // A file size limit makes a write fail part way through (EFBIG), as a
  // full disk would (ENOSPC), without needing a small file system.
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 200;
  void (*oldHandler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error = errorOf([&] { write(dir, 2, s2); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);
  expectStep2Failed(dir, error, std::strerror(EFBIG), {"LATEST", "step-1.ckpt"},
                    s1);
}

TEST(Checkpoint, TruncatedLatestFallsBackToPrevious) {
  std::string dir = makeTempDir();
  State s1 = makeState(1), s2 = makeState(2);
  std::string path = damageStep2(dir, s1, s2, [](std::string bytes) {
    return bytes.substr(0, bytes.size() / 2);
  });

  State loaded = s2.zeroed();
  std::string error = errorOf([&] { readCheckpoint(path, loaded.tensors()); });
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("truncated"));

  ::testing::internal::CaptureStderr();
  CheckpointMeta meta = readLatestCheckpoint(dir, loaded.tensors());
  std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(meta.step, 1);
  EXPECT_TRUE(loaded.bitwiseEqual(s1));
  EXPECT_THAT(warning, HasSubstr(path));
  EXPECT_THAT(warning, HasSubstr(dir + "/step-1.ckpt"));
}

TEST(Checkpoint, CorruptByteFailsChecksumAndFallsBack) {
  std::string dir = makeTempDir();
  State s1 = makeState(1), s2 = makeState(2);
  std::string path = damageStep2(dir, s1, s2, [](std::string bytes) {
    bytes[bytes.size() - 40] ^= 0x01; // Inside the data of 'b'.
    return bytes;
  });

  State loaded = s2.zeroed();
  std::string error = errorOf([&] { readCheckpoint(path, loaded.tensors()); });
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("checksum"));
  // Nothing is copied out of a file that fails verification.
  EXPECT_TRUE(loaded.bitwiseEqual(s2.zeroed()));

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(readLatestCheckpoint(dir, loaded.tensors()).step, 1);
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(loaded.bitwiseEqual(s1));
}

TEST(Checkpoint, EveryTruncationAndBitFlipIsDetected) {
  std::string dir = makeTempDir();
  State state = makeState(3);
  write(dir, 4, state);
  std::string path = dir + "/step-4.ckpt";
  std::string bytes = readText(path);
  State loaded = state.zeroed();
  for (size_t len = 0; len < bytes.size(); ++len) {
    writeBytes(path, bytes.substr(0, len));
    EXPECT_THAT(errorOf([&] { readCheckpoint(path, loaded.tensors()); }),
                HasSubstr(path))
        << "truncated to " << len << " bytes";
  }
  writeBytes(path, bytes + "x");
  EXPECT_THAT(errorOf([&] { readCheckpoint(path, loaded.tensors()); }),
              HasSubstr("after the checksum"));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] ^= 0x10;
    writeBytes(path, damaged);
    EXPECT_THAT(errorOf([&] { readCheckpoint(path, loaded.tensors()); }),
                HasSubstr(path))
        << "bit flipped in byte " << i;
  }
}

TEST(Checkpoint, OnlyCheckpointCorruptIsAnError) {
  std::string dir = makeTempDir();
  State state = makeState(1);
  write(dir, 1, state);
  std::string path = dir + "/step-1.ckpt";
  writeBytes(path, "RONDOCKP");
  EXPECT_THAT(errorOf([&] { readLatestCheckpoint(dir, state.tensors()); }),
              HasSubstr(path));
}

TEST(Checkpoint, NoLatestIsAnError) {
  std::string dir = makeTempDir();
  State state = makeState(1);
  EXPECT_FALSE(hasCheckpoint(dir));
  EXPECT_THAT(errorOf([&] { readLatestCheckpoint(dir, state.tensors()); }),
              HasSubstr(dir + "/LATEST"));
}

TEST(Checkpoint, TensorMismatchNamesTensorAndFile) {
  std::string dir = makeTempDir();
  State state = makeState(1);
  write(dir, 1, state);
  std::string path = dir + "/step-1.ckpt";

  State missing = state.zeroed();
  missing.add("exp_avg/w2", std::vector<float>(3));
  std::string error =
      errorOf([&] { readLatestCheckpoint(dir, missing.tensors()); });
  EXPECT_THAT(error, HasSubstr("'exp_avg/w2'"));
  EXPECT_THAT(error, HasSubstr(path));
  // A mismatch is found before anything is overwritten.
  EXPECT_TRUE(missing.values[0] == std::vector<float>(37, 0.0f));

  State resized = state.zeroed();
  resized.values[3].resize(6);
  error = errorOf([&] { readLatestCheckpoint(dir, resized.tensors()); });
  EXPECT_THAT(error, HasSubstr("'b'"));
  EXPECT_THAT(error, HasSubstr("5 elements in the checkpoint but 6"));
  EXPECT_THAT(error, HasSubstr(path));

  State fewer = state.zeroed();
  fewer.names.pop_back();
  fewer.values.pop_back();
  error = errorOf([&] { readLatestCheckpoint(dir, fewer.tensors()); });
  EXPECT_THAT(error, HasSubstr("'empty'"));
  EXPECT_THAT(error, HasSubstr(path));
}

TEST(Checkpoint, DuplicateTensorIsRejectedOnWrite) {
  std::string dir = makeTempDir();
  State state = makeState(1);
  state.add("w", {1.0f});
  EXPECT_THAT(errorOf([&] { write(dir, 1, state); }), HasSubstr("'w'"));
  EXPECT_FALSE(hasCheckpoint(dir));
}

} // namespace

/// The pid of a process that has exited (and been reaped).
static pid_t deadPid() {
  pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

TEST(Checkpoint, KilledWritersTemporariesDoNotBreakResumeAndAreRemoved) {
  // What a writer killed with SIGKILL leaves behind: a partial checkpoint
  // and a partial LATEST, never renamed into place.
  std::string dir = makeTempDir();
  State s1 = makeState(11), s2 = makeState(22);
  write(dir, 1, s1);
  const std::string dead = std::to_string(deadPid());
  const std::string live = std::to_string(::getppid());
  writeBytes(dir + "/step-2.ckpt.tmp." + dead, "RONDOCKP\x01");
  writeBytes(dir + "/LATEST.tmp." + dead, "step-");
  writeBytes(dir + "/step-2.ckpt.tmp." + live, "RONDOCKP");
  writeBytes(dir + "/notes.tmp." + dead, "the user's own file");

  expectLatest(dir, 1, s1);

  write(dir, 2, s2);
  EXPECT_EQ(listDir(dir), (std::vector<std::string>{
                              "LATEST", "notes.tmp." + dead, "step-1.ckpt",
                              "step-2.ckpt", "step-2.ckpt.tmp." + live}));
  expectLatest(dir, 2, s2);
}

TEST(Checkpoint, SkippedStepsRoundTripAndVersion1ReadsAsZero) {
  std::string dir = makeTempDir();
  State s = makeState(5);
  CheckpointMeta meta = makeMeta(7);
  meta.skippedSteps = 3;
  writeCheckpoint(dir, meta, s.tensors());
  State loaded = s.zeroed();
  EXPECT_EQ(readLatestCheckpoint(dir, loaded.tensors()).skippedSteps, 3);

  // The same file as version 1 wrote it: no skippedSteps field.
  std::string bytes = readText(dir + "/step-7.ckpt");
  const size_t skippedAt = 8 + 4 + 8 + 8;
  bytes.erase(skippedAt, 8);
  const uint32_t one = 1;
  std::memcpy(&bytes[8], &one, sizeof(one));
  CheckpointHasher hasher;
  hasher.update(bytes.data(), bytes.size() - 8);
  const uint64_t sum = hasher.finish();
  std::memcpy(&bytes[bytes.size() - 8], &sum, sizeof(sum));
  writeBytes(dir + "/v1.ckpt", bytes);
  State old = s.zeroed();
  CheckpointMeta v1 = readCheckpoint(dir + "/v1.ckpt", old.tensors());
  EXPECT_EQ(v1.step, 7);
  EXPECT_EQ(v1.skippedSteps, 0);
  EXPECT_EQ(v1.dataCursor, meta.dataCursor);
  EXPECT_TRUE(old.bitwiseEqual(s));
}

TEST(Checkpoint, LockedDirectoryIsRefusedNamingTheHolderUntilReleased) {
  std::string dir = makeTempDir() + "/run";
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  {
    CheckpointDirLock held(dir);
    // flock conflicts between two opens of the file, in one process too.
    std::string error = errorOf([&] { CheckpointDirLock second(dir); });
    EXPECT_THAT(error, HasSubstr(dir + " is in use by another trainer (pid " +
                                 std::to_string(::getpid()) + " on host " +
                                 host + ")"));
    // The holder is unharmed: it can still write its checkpoints.
    State s = makeState(3);
    write(dir, 1, s);
  }
  CheckpointDirLock again(dir);
  EXPECT_TRUE(hasCheckpoint(dir));
}

TEST(Checkpoint, LockOnARegularFileNamesIt) {
  std::string file = makeTempDir() + "/plain";
  writeBytes(file, "x");
  EXPECT_THAT(errorOf([&] { CheckpointDirLock lock(file); }),
              HasSubstr(file + ": not a directory"));
}

TEST(Checkpoint, KeepCheckpointsKeepsTheNewestN) {
  std::string dir = makeTempDir();
  State s = makeState(4);
  for (int64_t step = 1; step <= 5; ++step)
    writeCheckpoint(dir, makeMeta(step), s.tensors(), /*keep=*/3);
  EXPECT_EQ(listDir(dir),
            (std::vector<std::string>{"LATEST", "step-3.ckpt", "step-4.ckpt",
                                      "step-5.ckpt"}));
  writeCheckpoint(dir, makeMeta(6), s.tensors(), /*keep=*/1);
  EXPECT_EQ(listDir(dir), (std::vector<std::string>{"LATEST", "step-6.ckpt"}));
  EXPECT_THAT(
      errorOf([&] { writeCheckpoint(dir, makeMeta(7), s.tensors(), 0); }),
      HasSubstr("cannot keep 0 checkpoints"));
}
