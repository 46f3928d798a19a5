//===- FileUtil.cpp - Mapped input files and atomic output files ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "FileUtil.h"

#include "rondo/runtime/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace rondo::rt {

MappedFile mapFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  MappedFile file;
  file.size = size_t(st.st_size);
  if (file.size == 0) {
    ::close(fd);
    throw Error(path + ": file is empty");
  }
  void *addr = ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (addr == MAP_FAILED)
    throw Error(path + ": cannot map: " + std::strerror(err));
  file.data = static_cast<const unsigned char *>(addr);
  size_t len = file.size;
  file.keepAlive = std::shared_ptr<const void>(
      addr, [len](const void *p) { ::munmap(const_cast<void *>(p), len); });
  return file;
}

namespace {

/// The temporary an AtomicFile of `path` writes: next to the destination so
/// that rename() is atomic.
std::string temporaryPathFor(const std::string &path) {
  return path + ".tmp." + std::to_string(::getpid());
}

Error cannotWrite(const std::string &path, int err) {
  return Error("cannot write '" + path + "': " + std::strerror(err));
}

/// Whether `path` names something other than a regular file or a directory
/// (/dev/null, a pipe, a terminal): written in place, never replaced. A
/// temporary renamed over /dev/null replaced the device itself with a
/// regular file when the trainer ran as root (and failed for anyone else,
/// who may not create files in /dev).
bool isSpecialFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) &&
         !S_ISDIR(st.st_mode);
}

} // namespace

AtomicFile::AtomicFile(std::string destination) : path(std::move(destination)) {
  if (isSpecialFile(path)) {
    handle = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (handle < 0)
      throw cannotWrite(path, errno);
    return;
  }
  tmpPath = temporaryPathFor(path);
  handle =
      ::open(tmpPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (handle < 0)
    throw Error(path + ": cannot create '" + tmpPath +
                "': " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (handle >= 0)
    ::close(handle);
  if (!committed && !tmpPath.empty())
    ::unlink(tmpPath.c_str());
}

void AtomicFile::write(const void *data, size_t size) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::write(handle, p, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw Error(path + ": write failed: " + std::strerror(errno));
    }
    p += n;
    size -= size_t(n);
    written += uint64_t(n);
  }
}

void AtomicFile::commit() {
  if (tmpPath.empty()) { // written in place (isSpecialFile): nothing to sync
    int fd = handle;
    handle = -1;
    if (::close(fd) != 0)
      throw Error(path + ": close failed: " + std::strerror(errno));
    committed = true;
    return;
  }
  if (::fsync(handle) != 0)
    throw Error(path + ": fsync failed: " + std::strerror(errno));
  if (::close(handle) != 0) {
    handle = -1;
    throw Error(path + ": close failed: " + std::strerror(errno));
  }
  handle = -1;
  if (::rename(tmpPath.c_str(), path.c_str()) != 0)
    throw Error(path + ": cannot rename '" + tmpPath +
                "' into place: " + std::strerror(errno));
  committed = true;
}

void writeFileAtomically(const std::string &path, const void *data,
                         size_t size) {
  AtomicFile file(path);
  file.write(data, size);
  file.commit();
}

void checkCanWriteFile(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw cannotWrite(path, EISDIR);
  if (isSpecialFile(path)) { // written in place: it must take writes
    if (::access(path.c_str(), W_OK) != 0)
      throw cannotWrite(path, errno);
    return;
  }
  // Creating the very temporary the writer will create checks the
  // directory, the permissions and the length of the longest name.
  const std::string tmp = temporaryPathFor(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw cannotWrite(path, errno);
  ::close(fd);
  ::unlink(tmp.c_str());
}

void checkCanWriteInDirectory(const std::string &dir,
                              const std::vector<std::string> &names) {
  struct stat st;
  bool created = false;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw cannotWrite(dir, ENOTDIR);
  } else if (::mkdir(dir.c_str(), 0777) == 0) {
    created = true;
  } else {
    throw cannotWrite(dir, errno);
  }
  try {
    for (const std::string &name : names)
      checkCanWriteFile(dir + "/" + name);
  } catch (const Error &) {
    if (created)
      ::rmdir(dir.c_str());
    throw;
  }
  if (created)
    ::rmdir(dir.c_str());
}

std::string parentDirectory(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

} // namespace rondo::rt
