//===- Options.h - What one compilation takes -------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// CompileOptions holds everything a compilation takes. rondo-compile's
// flags are declared once, in CompileFlags, and bind straight into it; the
// planning knobs are pipe-partition's option struct (declared in
// compiler/Dialect/Pipe/Transforms/Passes.td), so a new knob is one option
// there plus its flag here, with no copy in between.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DRIVER_OPTIONS_H
#define RONDO_DRIVER_OPTIONS_H

#include "Dialect/Pipe/Transforms/Passes.h"

#include "llvm/Support/CommandLine.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rondo {

enum class Emit { TG, Train, Pipe, Exec, Cpp, Exe };

struct CompileOptions {
  std::string inputFile;
  /// "": `trainer` for --emit=exe, stdout otherwise.
  std::string outputFile;
  int64_t batch = -1;
  int64_t seqLen = -1;
  /// `NAME=d0,d1,...` each.
  std::vector<std::string> inputShapes;
  Emit emit = Emit::Exe;

  std::string loss = "causal-lm";
  std::string trainable;
  std::string freeze;
  /// --lora's spec; std::nullopt: no adapters.
  std::optional<std::string> lora;
  int64_t chunkRows = 1024;

  /// The target as given ("": not given; resolveTarget decides).
  std::string target;
  std::string device;
  std::string precision;

  /// The planning knobs; `device` and `precision` in it are left alone:
  /// the resolved target (rondo.target) decides them.
  pipe::PipePartitionPassOptions plan;
  /// "on" or "off" (plan.shardOptimizer), checked when planning.
  std::string shardOptimizer = "on";
  /// "peer" or "host".
  std::string handoff = "peer";
  /// --explain: std::nullopt when not given, "" without a directory.
  std::optional<std::string> explain;
  bool summary = false;
  /// --quiet: no progress lines (one per phase, and what was written) on
  /// stderr; errors and warnings still go there.
  bool quiet = false;
};

/// rondo-compile's command-line flags in `category`, bound to an options
/// struct. Construct it before llvm::cl::ParseCommandLineOptions, call
/// finish() after.
class CompileFlags {
public:
  CompileFlags(CompileOptions &options, llvm::cl::OptionCategory &category);
  ~CompileFlags();
  /// Fills what depends on whether a flag was given at all (--target,
  /// --lora, --explain). Returns false, after an error on stderr naming the
  /// flag and the value, when a numeric flag was given a value that is not
  /// positive.
  [[nodiscard]] bool finish();

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace rondo

#endif // RONDO_DRIVER_OPTIONS_H
