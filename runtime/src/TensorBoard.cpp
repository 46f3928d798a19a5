//===- TensorBoard.cpp - TensorBoard event files (--tensorboard) ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "TensorBoard.h"
#include "rondo/runtime/Error.h"

#include "TensorBoardEvent.pb.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

namespace rondo::rt {

namespace {

/// The byte-at-a-time table of the reflected Castagnoli polynomial. Debian
/// packages no CRC32C library for C++ (libcrc32c-dev is not in the
/// archive), and a few records per step need no hardware CRC.
std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

/// The largest TIME of the files events.out.tfevents.TIME.* in `dir`, or
/// 0 without one.
int64_t latestEventFileTime(const std::string &dir) {
  static const char prefix[] = "events.out.tfevents.";
  int64_t latest = 0;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return 0;
  while (const dirent *entry = ::readdir(d)) {
    const char *name = entry->d_name;
    if (std::strncmp(name, prefix, sizeof(prefix) - 1) != 0)
      continue;
    latest = std::max<int64_t>(
        latest, std::strtoll(name + sizeof(prefix) - 1, nullptr, 10));
  }
  ::closedir(d);
  return latest;
}

double wallTime() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

uint32_t crc32c(const void *data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = makeCrcTable();
  const auto *p = static_cast<const unsigned char *>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t maskedCrc32c(const void *data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardLog::TensorBoardLog(const std::string &dir, int64_t firstStep) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 && ::mkdir(dir.c_str(), 0777) != 0)
    throw Error("cannot create '" + dir + "': " + std::strerror(errno));
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  // TensorFlow's name. TensorBoard reads a directory's files in the order
  // of their names, and a run's START record drops the steps it redoes
  // from the files read before it, so a resumed run's file must sort after
  // every earlier one: its time is past theirs, even within one second.
  const int64_t time =
      std::max(int64_t(wallTime()), latestEventFileTime(dir) + 1);
  filePath = dir + "/events.out.tfevents." + std::to_string(time) + "." + host;
  file = std::fopen(filePath.c_str(), "wbx");
  if (!file)
    throw Error("cannot write '" + filePath + "': " + std::strerror(errno));
  tensorboard::Event version;
  version.set_wall_time(wallTime());
  version.set_file_version("brain.Event:2");
  writeRecord(version.SerializeAsString());
  tensorboard::Event start;
  start.set_wall_time(wallTime());
  start.set_step(firstStep + 1);
  start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  writeRecord(start.SerializeAsString());
}

TensorBoardLog::~TensorBoardLog() {
  if (file)
    std::fclose(file);
}

void TensorBoardLog::scalars(
    int64_t step, const std::vector<std::pair<std::string, double>> &values) {
  tensorboard::Event event;
  event.set_wall_time(wallTime());
  event.set_step(step);
  tensorboard::Summary *summary = event.mutable_summary();
  for (const auto &[tag, value] : values) {
    tensorboard::Summary::Value *v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
  }
  writeRecord(event.SerializeAsString());
}

void TensorBoardLog::writeRecord(const std::string &data) {
  unsigned char header[12];
  const uint64_t length = data.size();
  for (int i = 0; i < 8; ++i) // little-endian, whatever the host
    header[i] = static_cast<unsigned char>(length >> (8 * i));
  const uint32_t lengthCrc = maskedCrc32c(header, 8);
  const uint32_t dataCrc = maskedCrc32c(data.data(), data.size());
  unsigned char footer[4];
  for (int i = 0; i < 4; ++i) {
    header[8 + i] = static_cast<unsigned char>(lengthCrc >> (8 * i));
    footer[i] = static_cast<unsigned char>(dataCrc >> (8 * i));
  }
  if (std::fwrite(header, 1, sizeof(header), file) != sizeof(header) ||
      std::fwrite(data.data(), 1, data.size(), file) != data.size() ||
      std::fwrite(footer, 1, sizeof(footer), file) != sizeof(footer) ||
      std::fflush(file) != 0)
    throw Error("cannot write '" + filePath + "': " + std::strerror(errno));
}

namespace {
/// A "Vm...:  N kB" line of /proc/self/status in GB, or 0. VmRSS and VmHWM
/// come from the same counters there (getrusage's peak lags behind).
double procStatusGB(const char *key) {
  std::FILE *status = std::fopen("/proc/self/status", "r");
  if (!status)
    return 0;
  char line[256];
  double gb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof(line), status))
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      gb = std::strtod(line + n + 1, nullptr) * 1024.0 / 1e9; // in kB
      break;
    }
  std::fclose(status);
  return gb;
}
} // namespace

double residentMemoryGB() { return procStatusGB("VmRSS"); }

double peakResidentMemoryGB() { return procStatusGB("VmHWM"); }

} // namespace rondo::rt
