//===- rondo-calibrate-host.cpp - Measure this host for the planner -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Writes this machine's device spec where `--device=host` finds it
// (hostCalibrationPath), or to -o FILE for `--device=FILE`.
//
//===----------------------------------------------------------------------===//

#include "CostModel/CostModel.h"
#include "calibrate/HostCalibration.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static bool writeFile(StringRef path, StringRef text) {
  if (StringRef dir = sys::path::parent_path(path); !dir.empty())
    if (std::error_code ec = sys::fs::create_directories(dir)) {
      errs() << "error: cannot write '" << path << "': " << ec.message()
             << "\n";
      return false;
    }
  std::error_code ec;
  raw_fd_ostream os(path, ec);
  if (!ec)
    os << text;
  if (ec || os.has_error()) {
    errs() << "error: cannot write '" << path
           << "': " << (ec ? ec : os.error()).message() << "\n";
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  cl::OptionCategory category("rondo-calibrate-host options");
  cl::opt<std::string> output(
      "o",
      cl::desc("where to write the spec (default: where --device=host finds "
               "it, " +
               rondo::cost::hostCalibrationPath() + ")"),
      cl::value_desc("FILE.json"), cl::cat(category));
  cl::opt<std::string> samples(
      "samples", cl::desc("also write every measurement to this JSON file"),
      cl::value_desc("FILE.json"), cl::cat(category));
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "rondo-calibrate-host: measures this machine's kernels (one core per "
      "worker), copies and AdamW, and writes the device spec that "
      "rondo-compile --device=host plans with\n");
  std::string path =
      output.empty() ? rondo::cost::hostCalibrationPath() : output.getValue();
  if (path.empty()) {
    errs() << "error: neither XDG_CACHE_HOME nor HOME is set: give -o FILE\n";
    return 2;
  }
  // Checked first, so that a bad path costs nothing.
  if (!writeFile(path, "") || (!samples.empty() && !writeFile(samples, "")))
    return 1;
  rondo::rt::HostCalibration c = rondo::rt::calibrateHost(
      [](const char *line) { errs() << "rondo-calibrate-host: " << line << "\n"; });
  if (!writeFile(path, rondo::rt::hostSpecJson(c)) ||
      (!samples.empty() && !writeFile(samples, rondo::rt::hostSamplesJson(c))))
    return 1;
  // Read back with the compiler's own reader: what was written must plan.
  llvm::Expected<rondo::cost::DeviceSpec> spec =
      rondo::cost::lookupDeviceSpec(path);
  if (!spec) {
    errs() << "error: " << toString(spec.takeError()) << "\n";
    return 1;
  }
  errs() << "rondo-calibrate-host: wrote '" << path << "' (" << c.cores
         << " cores, " << format("%.1f", c.physicalMemoryBytes / 1e9)
         << " GB)\n";
  return 0;
}
