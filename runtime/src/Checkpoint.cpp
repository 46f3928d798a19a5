//===- Checkpoint.cpp - Crash-safe training checkpoints -------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Checkpoint.h"

#include "FileUtil.h"

#include "rondo/runtime/Error.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

// Tensor data goes to disk as the host's floats in one write each; the
// format is little-endian, so a big-endian host would need byte swaps.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Checkpoint.cpp assumes a little-endian host"
#endif

namespace rondo::rt {

namespace {

constexpr char kMagic[8] = {'R', 'O', 'N', 'D', 'O', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 2;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
const char *const kLatest = "LATEST";

uint64_t load64(const unsigned char *p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t fnv1a(uint64_t h, const void *data, size_t size) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i)
    h = (h ^ p[i]) * kFnvPrime;
  return h;
}

void appendU32(std::string &out, uint32_t v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof(v));
}

void appendU64(std::string &out, uint64_t v) {
  out.append(reinterpret_cast<const char *>(&v), sizeof(v));
}

void appendString(std::string &out, const std::string &s) {
  appendU64(out, s.size());
  out += s;
}

/// Writes through `file` and hashes what it wrote.
struct HashingWriter {
  AtomicFile &file;
  CheckpointHasher hasher;

  void write(const void *data, size_t size) {
    if (size == 0) // An empty tensor may have no buffer at all.
      return;
    file.write(data, size);
    hasher.update(data, size);
  }
};

/// Makes the renames inside `dir` durable: without it a power loss can
/// bring back the old directory entry even though the file data is on disk.
void fsyncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw Error(dir +
                ": cannot open directory to sync it: " + std::strerror(errno));
  // Some file systems (FUSE, some network mounts) cannot sync a directory
  // and say so with EINVAL; the rename is as durable there as it gets.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    int err = errno;
    ::close(fd);
    throw Error(dir + ": cannot sync directory: " + std::strerror(err));
  }
  ::close(fd);
}

void makeDirectories(const std::string &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw Error(dir + ": not a directory");
    return;
  }
  std::string parent = parentDirectory(dir);
  if (parent != dir && parent != "." && parent != "/")
    makeDirectories(parent);
  // EEXIST: another process created it in the meantime.
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw Error(dir + ": cannot create directory: " + std::strerror(errno));
}

/// The step of a "step-<digits>.ckpt" name; false for any other name
/// (temporary files, LATEST, the user's own files).
bool parseCheckpointFileName(const std::string &name, int64_t &step) {
  const std::string prefix = "step-", suffix = ".ckpt";
  if (name.size() <= prefix.size() + suffix.size() ||
      name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(),
                   [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  step = std::stoll(digits);
  return true;
}

/// The checkpoints in `dir` by step; empty when it cannot be listed.
std::map<int64_t, std::string> listCheckpoints(const std::string &dir) {
  std::map<int64_t, std::string> result;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return result;
  while (struct dirent *entry = ::readdir(d)) {
    int64_t step;
    if (parseCheckpointFileName(entry->d_name, step))
      result[step] = entry->d_name;
  }
  ::closedir(d);
  return result;
}

/// Deletes the temporary files that writers killed mid-write (SIGKILL, a
/// power loss) left in `dir`: "<checkpoint or LATEST>.tmp.<pid>" of a
/// process that is gone. They were never renamed into place, so nothing
/// refers to them; a live writer's files (another trainer sharing the
/// directory by mistake) are left alone. Best effort.
void removeStaleTemporaries(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return;
  std::vector<std::string> stale;
  while (struct dirent *entry = ::readdir(d)) {
    std::string name = entry->d_name;
    size_t tmp = name.rfind(".tmp.");
    if (tmp == std::string::npos)
      continue;
    std::string base = name.substr(0, tmp), pid = name.substr(tmp + 5);
    int64_t step;
    if ((base != kLatest && !parseCheckpointFileName(base, step)) ||
        pid.empty() || pid.size() > 9 ||
        !std::all_of(pid.begin(), pid.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    pid_t owner = pid_t(std::stol(pid));
    if (owner == ::getpid() || (::kill(owner, 0) != 0 && errno == ESRCH))
      stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string &name : stale)
    ::unlink((dir + "/" + name).c_str());
}

/// The file name LATEST holds; "" when there is no readable LATEST.
std::string readLatestName(const std::string &dir) {
  std::ifstream in(dir + "/" + kLatest, std::ios::binary);
  if (!in)
    return "";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string name = ss.str();
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back())))
    name.pop_back();
  return name;
}

/// A checkpoint file whose structure and checksum have been verified.
struct ParsedCheckpoint {
  struct Entry {
    std::string name;
    const unsigned char *data;
    int64_t numel;
  };
  MappedFile file;
  CheckpointMeta meta;
  std::vector<Entry> entries;
};

/// Bounds-checked reads of a mapped checkpoint; every failure is a damaged
/// file and names it.
class Parser {
public:
  Parser(const std::string &path, const MappedFile &file)
      : path(path), data(file.data), size(file.size) {}

  [[noreturn]] void corrupt(const std::string &why) const {
    throw Error(path + ": truncated or corrupt checkpoint: " + why);
  }

  const unsigned char *take(uint64_t n, const char *what) {
    if (n > size - pos)
      corrupt(std::string(what) + " at offset " + std::to_string(pos) +
              " runs past the end of the file (" + std::to_string(size) +
              " bytes)");
    const unsigned char *p = data + pos;
    pos += n;
    return p;
  }
  uint32_t u32(const char *what) {
    uint32_t v;
    std::memcpy(&v, take(sizeof(v), what), sizeof(v));
    return v;
  }
  uint64_t u64(const char *what) { return load64(take(8, what)); }
  std::string string(const char *what) {
    uint64_t n = u64(what);
    return std::string(reinterpret_cast<const char *>(take(n, what)), n);
  }

  const std::string &path;
  const unsigned char *data;
  size_t size;
  size_t pos = 0;
};

ParsedCheckpoint parseCheckpoint(const std::string &path) {
  ParsedCheckpoint result;
  result.file = mapFile(path);
  Parser in(path, result.file);
  if (std::memcmp(in.take(sizeof(kMagic), "magic"), kMagic, sizeof(kMagic)) !=
      0)
    in.corrupt("no RONDOCKP magic");
  uint32_t version = in.u32("version");
  if (version != kVersion && version != 1)
    in.corrupt("format version " + std::to_string(version) +
               ", this runtime reads version " + std::to_string(kVersion));
  CheckpointMeta &meta = result.meta;
  meta.step = int64_t(in.u64("step"));
  meta.dataCursor = in.u64("data cursor");
  meta.skippedSteps = version >= 2 ? int64_t(in.u64("skipped steps")) : 0;
  meta.rngState = in.string("RNG state");
  meta.program = in.string("program name");
  meta.model = in.string("model name");
  uint64_t count = in.u64("tensor count");
  std::set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    ParsedCheckpoint::Entry entry;
    entry.name = in.string("tensor name");
    uint64_t numel = in.u64("tensor size");
    // Checked before multiplying so a huge numel cannot wrap around.
    if (numel > (in.size - in.pos) / sizeof(float))
      in.corrupt("tensor '" + entry.name + "' has " + std::to_string(numel) +
                 " elements, more than the rest of the file holds");
    entry.numel = int64_t(numel);
    entry.data = in.take(numel * sizeof(float), "tensor data");
    if (!seen.insert(entry.name).second)
      in.corrupt("tensor '" + entry.name + "' appears twice");
    result.entries.push_back(std::move(entry));
  }
  size_t payload = in.pos;
  uint64_t stored = in.u64("checksum");
  if (in.pos != in.size)
    in.corrupt(std::to_string(in.size - in.pos) +
               " unexpected bytes after the checksum");
  CheckpointHasher hasher;
  hasher.update(in.data, payload);
  if (hasher.finish() != stored)
    in.corrupt("checksum mismatch");
  return result;
}

/// Copies a verified checkpoint into `tensors` once every one of them is
/// known to match, so a mismatch leaves them all as they were.
CheckpointMeta loadInto(const std::string &path, const ParsedCheckpoint &ckpt,
                        const std::vector<CheckpointTensor> &tensors) {
  std::map<std::string, const ParsedCheckpoint::Entry *> byName;
  for (const auto &entry : ckpt.entries)
    byName[entry.name] = &entry;
  std::set<std::string> wanted;
  for (const CheckpointTensor &t : tensors) {
    auto it = byName.find(t.name);
    if (it == byName.end())
      throw Error(path + ": tensor '" + t.name +
                  "' is not in the checkpoint; was it written by another "
                  "model?");
    if (it->second->numel != t.numel)
      throw Error(path + ": tensor '" + t.name + "' has " +
                  std::to_string(it->second->numel) +
                  " elements in the checkpoint but " + std::to_string(t.numel) +
                  " in the program");
    wanted.insert(t.name);
  }
  // A tensor the program lacks means a different model: resuming without
  // it would silently drop state.
  for (const auto &entry : ckpt.entries)
    if (!wanted.count(entry.name))
      throw Error(path + ": checkpoint tensor '" + entry.name +
                  "' is not in the program; was it written by another "
                  "model?");
  for (const CheckpointTensor &t : tensors)
    if (t.numel > 0)
      std::memcpy(t.data, byName[t.name]->data, size_t(t.numel) * 4);
  return ckpt.meta;
}

/// Deletes the checkpoints older than `keepStep`, the one just written, but
/// the `keep` - 1 newest of them and, with `keep` >= 2, the one LATEST named
/// before (`previousName`). Best effort: the new checkpoint is already safe,
/// so a file that cannot be deleted only costs disk space.
void pruneCheckpoints(const std::string &dir, int64_t keepStep,
                      const std::string &previousName, int64_t keep) {
  std::map<int64_t, std::string> files = listCheckpoints(dir);
  int64_t previousStep = -1;
  if (keep >= 2)
    parseCheckpointFileName(previousName, previousStep);
  // Newer files than `keepStep` belong to a run this one restarted over;
  // they are not ours to judge, so they are left alone. Of the older ones,
  // the newest stay: without a usable LATEST before, the newest older file
  // is the fallback.
  int64_t older = 0;
  for (auto it = files.lower_bound(keepStep); it != files.begin();) {
    --it;
    if (++older >= keep && it->first != previousStep)
      ::unlink((dir + "/" + it->second).c_str());
  }
}

} // namespace

void CheckpointHasher::block(const unsigned char *p) {
  // The rotation feeds the product's high bits back into its low ones, so
  // unlike plain word-wise FNV, flips in the top bits of two words cannot
  // cancel out.
  for (int i = 0; i < 4; ++i) {
    uint64_t h = (lanes[i] ^ load64(p + 8 * i)) * kFnvPrime;
    lanes[i] = (h << 31) | (h >> 33);
  }
}

void CheckpointHasher::update(const void *data, size_t size) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  total += size;
  if (numPending > 0) {
    size_t n = std::min(size, sizeof(pending) - numPending);
    std::memcpy(pending + numPending, p, n);
    numPending += n;
    p += n;
    size -= n;
    if (numPending < sizeof(pending))
      return;
    block(pending);
    numPending = 0;
  }
  for (; size >= sizeof(pending); p += sizeof(pending), size -= sizeof(pending))
    block(p);
  std::memcpy(pending, p, size);
  numPending = size;
}

uint64_t CheckpointHasher::finish() const {
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv1a(h, lanes, sizeof(lanes));
  h = fnv1a(h, &total, sizeof(total));
  return fnv1a(h, pending, numPending);
}

std::string checkpointFileName(int64_t step) {
  return "step-" + std::to_string(step) + ".ckpt";
}

void writeCheckpoint(const std::string &dir, const CheckpointMeta &meta,
                     const std::vector<CheckpointTensor> &tensors,
                     int64_t keep) {
  if (keep < 1)
    throw Error(dir + ": cannot keep " + std::to_string(keep) +
                " checkpoints; at least the one written is kept");
  if (meta.step < 0)
    throw Error(dir + ": cannot checkpoint negative step " +
                std::to_string(meta.step));
  std::set<std::string> names;
  for (const CheckpointTensor &t : tensors) {
    if (!names.insert(t.name).second)
      throw Error(dir + ": checkpoint tensor '" + t.name + "' given twice");
    if (t.numel < 0 || (t.numel > 0 && !t.data))
      throw Error(dir + ": checkpoint tensor '" + t.name + "' has no data");
  }
  makeDirectories(dir);
  removeStaleTemporaries(dir);
  std::string previousName = readLatestName(dir);
  std::string name = checkpointFileName(meta.step);
  std::string path = dir + "/" + name;
  {
    // AtomicFile checks every write, the fsync, close and rename, and
    // deletes its temporary file when any of them throws.
    AtomicFile file(path);
    HashingWriter out{file, {}};
    std::string header(kMagic, sizeof(kMagic));
    appendU32(header, kVersion);
    appendU64(header, uint64_t(meta.step));
    appendU64(header, meta.dataCursor);
    appendU64(header, uint64_t(meta.skippedSteps));
    appendString(header, meta.rngState);
    appendString(header, meta.program);
    appendString(header, meta.model);
    appendU64(header, tensors.size());
    out.write(header.data(), header.size());
    for (const CheckpointTensor &t : tensors) {
      std::string record;
      appendString(record, t.name);
      appendU64(record, uint64_t(t.numel));
      out.write(record.data(), record.size());
      out.write(t.data, size_t(t.numel) * sizeof(float));
    }
    uint64_t checksum = out.hasher.finish();
    file.write(&checksum, sizeof(checksum));
    file.commit();
  }
  fsyncDirectory(dir);
  std::string latest = name + "\n";
  writeFileAtomically(dir + "/" + kLatest, latest.data(), latest.size());
  fsyncDirectory(dir);
  pruneCheckpoints(dir, meta.step, previousName, keep);
}

CheckpointMeta readCheckpoint(const std::string &path,
                              const std::vector<CheckpointTensor> &tensors) {
  ParsedCheckpoint ckpt = parseCheckpoint(path);
  return loadInto(path, ckpt, tensors);
}

CheckpointMeta
readLatestCheckpoint(const std::string &dir,
                     const std::vector<CheckpointTensor> &tensors) {
  std::string latestPath = dir + "/" + kLatest;
  if (!hasCheckpoint(dir))
    throw Error(latestPath +
                ": no checkpoint to resume from: " + std::strerror(errno));
  std::string name = readLatestName(dir);
  if (name.empty() || name.find('/') != std::string::npos)
    throw Error(latestPath + ": does not name a checkpoint file");
  std::string path = dir + "/" + name;
  ParsedCheckpoint ckpt;
  try {
    ckpt = parseCheckpoint(path);
  } catch (const Error &latestError) {
    // Fall back to the newest checkpoint older than the damaged one, which
    // writeCheckpoint keeps for exactly this case.
    int64_t step;
    std::map<int64_t, std::string> files = listCheckpoints(dir);
    auto it = parseCheckpointFileName(name, step) ? files.lower_bound(step)
                                                  : files.end();
    if (it == files.begin())
      throw;
    std::string previousPath = dir + "/" + std::prev(it)->second;
    try {
      ckpt = parseCheckpoint(previousPath);
    } catch (const Error &previousError) {
      throw Error(
          std::string(latestError.what()) +
          "; the previous checkpoint is unusable too: " + previousError.what());
    }
    std::fprintf(stderr,
                 "rondo: warning: %s; resuming from the previous checkpoint "
                 "%s instead\n",
                 latestError.what(), previousPath.c_str());
    path = previousPath;
  }
  return loadInto(path, ckpt, tensors);
}

bool hasCheckpoint(const std::string &dir) {
  return ::access((dir + "/" + kLatest).c_str(), F_OK) == 0;
}

CheckpointDirLock::CheckpointDirLock(const std::string &dir) {
  makeDirectories(dir);
  const std::string path = dir + "/LOCK";
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0)
    throw Error(path + ": cannot open the lock file: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[512] = {};
    ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    fd = -1;
    if (err != EWOULDBLOCK)
      throw Error(path + ": cannot lock: " + std::strerror(err));
    std::string who(holder, size_t(std::max<ssize_t>(n, 0)));
    while (!who.empty() && std::isspace((unsigned char)who.back()))
      who.pop_back();
    // The holder writes its name just after taking the lock.
    if (who.empty())
      who = "a process that has only just started";
    throw Error(dir + " is in use by another trainer (" + who +
                "); two runs in one directory would delete and resume each "
                "other's checkpoints: wait for that run to end or choose "
                "another directory");
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0)
    std::strcpy(host, "?");
  const std::string who =
      "pid " + std::to_string(::getpid()) + " on host " + host + "\n";
  // Best effort: the lock is held either way; the name only helps the
  // message of a second trainer.
  if (::ftruncate(fd, 0) == 0 &&
      ::pwrite(fd, who.data(), who.size(), 0) != ssize_t(who.size()))
    ::ftruncate(fd, 0);
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd >= 0)
    ::close(fd);
}

} // namespace rondo::rt
