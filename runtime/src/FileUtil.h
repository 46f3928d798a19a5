//===- FileUtil.h - Mapped input files and atomic output files --*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Outputs of a trainer (gradient dumps, exported models, logs that tools
// poll) must never be seen half-written, even when the run is killed: they
// are written to a temporary file in the same directory and renamed over
// the destination. A destination that exists and is neither a regular file
// nor a directory (/dev/null, a pipe) is written in place instead: renaming
// over it would replace the device.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_FILEUTIL_H
#define RONDO_RUNTIME_SRC_FILEUTIL_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rondo::rt {

/// A read-only mapping of a whole, non-empty regular file.
struct MappedFile {
  const unsigned char *data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> keepAlive; ///< Unmaps when the last copy dies.
};

/// Maps `path`; throws rt::Error naming it when it cannot.
MappedFile mapFile(const std::string &path);

/// A file that appears at its path only when commit() succeeds.
class AtomicFile {
public:
  explicit AtomicFile(std::string path);
  ~AtomicFile(); ///< Removes the temporary file unless committed.
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  void write(const void *data, size_t size);
  /// The file descriptor of the temporary file, e.g. for protobuf streams.
  int fd() const { return handle; }
  uint64_t bytesWritten() const { return written; }
  /// Flushes to disk and renames the temporary file over the destination.
  void commit();

private:
  std::string path;
  std::string tmpPath;
  int handle = -1;
  uint64_t written = 0;
  bool committed = false;
};

void writeFileAtomically(const std::string &path, const void *data,
                         size_t size);

/// Fails now, not after hours of training, where writing `path` through an
/// AtomicFile would fail at its creation or rename: a missing or read-only
/// directory, a name too long once the temporary's suffix is added, a
/// directory in the way. Throws rt::Error "cannot write 'PATH': REASON";
/// leaves nothing behind. A disk that fills up later cannot be foreseen.
void checkCanWriteFile(const std::string &path);

/// The same for the files `names` in the directory `dir`, which the writer
/// creates if it is missing (one level, as the exports do): `dir` must be a
/// directory or creatable. Removes `dir` again if it created it.
void checkCanWriteInDirectory(const std::string &dir,
                              const std::vector<std::string> &names);

/// The directory part of `path` ("." when it has none).
std::string parentDirectory(const std::string &path);
/// The last component of `path`.
std::string baseName(const std::string &path);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_FILEUTIL_H
