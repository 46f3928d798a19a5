//===- Driver.cpp - One whole compilation -----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Every output is written to a temporary file next to its destination and
// renamed into place only when the whole phase succeeded, so a failed
// compile never leaves a partial output behind.
//
//===----------------------------------------------------------------------===//

#include "Driver/Driver.h"

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/Pipe/IR/PipeOps.h"
#include "Dialect/TG/IR/TGOps.h"
#include "Dialect/TG/Transforms/Passes.h"
#include "Explain/Explain.h"
#include "Target/Cpp/TrainerEmitter.h"
#include "Target/Target.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <map>

using namespace mlir;
using namespace rondo;

/// A pass manager honouring MLIR's pass-manager flags (--mlir-print-ir-*),
/// registered here too so that library callers need not.
static FailureOr<std::unique_ptr<PassManager>>
makePassManager(MLIRContext &ctx) {
  registerPassManagerCLOptions();
  auto pm = std::make_unique<PassManager>(&ctx);
  if (failed(applyPassManagerCLOptions(*pm)))
    return failure();
  return pm;
}

/// Progress on stderr: one line per phase with its wall time once it ends
/// ("rondo-compile: import: 0.41 s"), and at the end what was written. A
/// large model's compile otherwise says nothing for seconds. The lines start
/// with "rondo-compile: " and never reach stdout, which may carry the IR or
/// C++ of --emit; --quiet turns them off.
class Progress {
public:
  explicit Progress(bool quiet) : quiet(quiet) {}
  /// Ends the phase that began at the previous call (or at construction).
  void done(StringRef phase, StringRef detail = "") {
    auto now = std::chrono::steady_clock::now();
    double seconds = std::chrono::duration<double>(now - start).count();
    start = now;
    if (quiet)
      return;
    llvm::errs() << "rondo-compile: " << phase;
    if (!detail.empty())
      llvm::errs() << " (" << detail << ")";
    llvm::errs() << llvm::formatv(": {0:f2} s\n", seconds);
  }
  /// Restarts the clock without a line (time outside any phase).
  void restart() { start = std::chrono::steady_clock::now(); }
  void say(const Twine &line) const {
    if (!quiet)
      llvm::errs() << "rondo-compile: " << line << "\n";
  }

private:
  bool quiet;
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
};

/// The parameter elements of @main (0 without one).
static int64_t parameterElements(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return 0;
  int64_t elements = 0;
  for (unsigned k = 0; k < func.getNumArguments(); ++k)
    if (func.getArgAttr(k, tg::kParamAttr))
      elements += cast<RankedTensorType>(func.getArgument(k).getType())
                      .getNumElements();
  return elements;
}

/// The summary line of a written output: what, where, how large, and for a
/// trainer every compiled plan ("plan_w2: 4 stages on 2 workers, 4
/// microbatches").
static std::string describeOutput(ModuleOp module, const CompileOptions &o) {
  static const char *const kinds[] = {"tg IR",   "training IR", "plan IR",
                                      "exec IR", "C++",         "trainer"};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "wrote " << kinds[int(o.emit)] << " '" << o.outputFile << "' ("
     << parameterElements(module) << " parameters";
  for (pipe::PlanOp plan : module.getOps<pipe::PlanOp>()) {
    int64_t stages = 0;
    plan->walk([&](pipe::StageOp) { ++stages; });
    os << "; " << plan.getSymName() << ": " << stages
       << (stages == 1 ? " stage" : " stages") << " on " << plan.getWorkers()
       << (plan.getWorkers() == 1 ? " worker, " : " workers, ")
       << plan.getMicrobatches()
       << (plan.getMicrobatches() == 1 ? " microbatch" : " microbatches");
  }
  os << ")";
  return text;
}

static void printSummary(ModuleOp module, StringRef inputFile, Emit emit) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return;
  int64_t params = 0, elements = 0, trainableParams = 0, trainableElements = 0;
  std::string table;
  llvm::raw_string_ostream tableOs(table);
  for (unsigned k = 0; k < func.getNumArguments(); ++k) {
    auto name = func.getArgAttrOfType<StringAttr>(k, tg::kParamAttr);
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(func.getArgument(k).getType());
    int64_t n = type.getNumElements();
    ++params;
    elements += n;
    bool on = func.getArgAttr(k, tg::kTrainableAttr) != nullptr;
    if (on) {
      ++trainableParams;
      trainableElements += n;
    }
    auto torch = func.getArgAttrOfType<StringAttr>(k, tg::kTorchNameAttr);
    tableOs << "  "
            << (emit == Emit::TG ? "param    "
                : on             ? "trainable"
                                 : "frozen   ")
            << "  " << name.getValue();
    if (torch)
      tableOs << " (" << torch.getValue() << ")";
    tableOs << " [";
    llvm::interleave(type.getShape(), tableOs, ",");
    tableOs << "]\n";
  }
  llvm::StringMap<int64_t> histogram;
  double flops = 0;
  func.walk([&](Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "tg")
      ++histogram[op->getName().getStringRef()];
    if (auto cost = dyn_cast<tg::CostOpInterface>(op))
      flops += cost.getFlops();
  });
  llvm::errs() << "model: " << inputFile << "\n"
               << llvm::formatv("parameters: {0} tensors, {1} elements", params,
                                elements);
  if (trainableParams)
    llvm::errs() << llvm::formatv(" ({0} tensors, {1} elements trainable)",
                                  trainableParams, trainableElements);
  llvm::errs() << llvm::formatv("\nFLOPs per step (analytic): {0:e3}\nops:",
                                flops);
  llvm::SmallVector<std::pair<std::string, int64_t>> sorted;
  for (auto &e : histogram)
    sorted.push_back({e.getKey().str(), e.getValue()});
  llvm::sort(sorted);
  for (auto &[name, count] : sorted)
    llvm::errs() << " " << name << "=" << count;
  llvm::errs() << "\n" << table;
}

/// The first dimension of @main's first data input (the planner's batch),
/// or 0 without one.
static int64_t firstInputRows(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return 0;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), tg::kInputAttr))
      if (auto t = dyn_cast<RankedTensorType>(arg.getType());
          t && t.getRank() > 0)
        return t.getDimSize(0);
  return 0;
}

LogicalResult rondo::lowerPlans(ModuleOp module, StringRef modelPath,
                                const ImportOptions &importOptions,
                                const TrainPipelineOptions &trainOptions,
                                bool peerHandoff) {
  MLIRContext &ctx = *module.getContext();
  std::map<int64_t, SmallVector<pipe::PlanOp>> byRows;
  for (auto plan : module.getOps<pipe::PlanOp>())
    byRows[plan.getRowsPerMicrobatch()].push_back(plan);
  if (byRows.empty()) {
    llvm::errs() << "error: nothing to lower: no plan (give --workers)\n";
    return failure();
  }
  // bf16 precision stores the products' operands in bf16 (the emitter reads
  // the same rondo.target for the kernels' precision).
  FailureOr<std::optional<TargetConfig>> target = getModuleTarget(module);
  if (failed(target))
    return failure();
  bool bf16Storage = *target && (*target)->isBf16();
  // GPU trainers add products into their sums in cuBLAS's epilogue and fuse
  // the query / key norm chains; the host keeps the separate calls its
  // references were taken with.
  bool gpuKernels = *target && (*target)->backend == "cuda";
  for (auto &[rows, plans] : byRows) {
    ImportOptions opts = importOptions;
    opts.batch = rows;
    OwningOpRef<ModuleOp> micro = importOnnxFile(&ctx, modelPath, opts);
    if (!micro)
      return failure();
    // A batch fixed by the model or --input-shape does not follow --batch,
    // so the import at the microbatch shape keeps it; said here, before a
    // plan verifier sees the mismatch.
    if (int64_t fixed = firstInputRows(*micro); fixed > 0 && fixed != rows) {
      llvm::errs() << "error: the model's batch is fixed at " << fixed
                   << " rows (by the model or --input-shape), so it cannot "
                      "be split into microbatches of "
                   << rows
                   << " rows; give it a dynamic batch dimension, or "
                      "--microbatches 1\n";
      return failure();
    }
    OpBuilder b(&ctx);
    b.setInsertionPointToEnd(micro->getBody());
    for (pipe::PlanOp plan : plans)
      b.clone(*plan);
    FailureOr<std::unique_ptr<PassManager>> pm = makePassManager(ctx);
    if (failed(pm))
      return failure();
    buildTGPipeline(**pm);
    buildTrainPipeline(**pm, trainOptions);
    buildExecPipeline(**pm, peerHandoff, bf16Storage, gpuKernels);
    if (failed((*pm)->run(*micro)))
      return failure();
    SmallVector<Operation *> moved;
    for (Operation &op : micro->getBody()->getOperations())
      if (isa<exec::ProgramOp>(op) ||
          (isa<func::FuncOp>(op) && op.hasAttr(exec::kStageAttr)))
        moved.push_back(&op);
    for (Operation *op : moved) {
      op->remove();
      module.getBody()->push_back(op);
    }
  }
  // Grouping by rows per microbatch reorders the programs; put them back in
  // their plans' order, which is --workers' order: the trainer runs the
  // first program's worker count when none is given ("the first compiled
  // worker count"), so `--workers 1,2,4` must not default to 4.
  llvm::StringMap<size_t> planIndex;
  for (pipe::PlanOp plan : module.getOps<pipe::PlanOp>())
    planIndex.try_emplace(plan.getSymName(), planIndex.size());
  SmallVector<exec::ProgramOp> programs(module.getOps<exec::ProgramOp>());
  llvm::stable_sort(programs, [&](exec::ProgramOp a, exec::ProgramOp b) {
    return planIndex.lookup(a.getPlan()) < planIndex.lookup(b.getPlan());
  });
  for (exec::ProgramOp program : programs)
    program->moveBefore(module.getBody(), module.getBody()->end());
  return success();
}

/// Whether `path` exists and is neither a regular file nor a directory
/// (/dev/null, a pipe): an output is copied into it, never renamed over it
/// (which replaced /dev/null itself with the trainer when run as root).
static bool isSpecialFile(StringRef path) {
  namespace fs = llvm::sys::fs;
  fs::file_status status;
  if (fs::status(path, status))
    return false;
  return fs::exists(status) && !fs::is_regular_file(status) &&
         !fs::is_directory(status);
}

/// Why `path` cannot be written, or "" when it can. Checked before the model
/// is read, so a typo in -o costs no compile and never surfaces as a linker
/// error: every output is created beside `path` (a temporary file renamed
/// over it), so its directory must take a new file; outputs other than the
/// executable are opened in place, so an existing file must be writable.
static std::string whyNotWritable(StringRef path, bool renamedIntoPlace) {
  namespace fs = llvm::sys::fs;
  if (fs::is_directory(path))
    return std::make_error_code(std::errc::is_a_directory).message();
  if (isSpecialFile(path)) { // written in place, nothing created beside it
    if (std::error_code ec = fs::access(path, fs::AccessMode::Write))
      return ec.message();
    return "";
  }
  llvm::SmallString<256> probe(path);
  llvm::sys::path::remove_filename(probe);
  if (probe.empty())
    probe = ".";
  llvm::sys::path::append(probe, ".rondo-write-test-%%%%%%%%");
  int fd;
  if (std::error_code ec = fs::createUniqueFile(probe, fd, probe))
    return ec.message();
  llvm::sys::Process::SafelyCloseFileDescriptor(fd);
  fs::remove(probe);
  if (!renamedIntoPlace && fs::exists(path))
    if (std::error_code ec = fs::access(path, fs::AccessMode::Write))
      return ec.message();
  return "";
}

/// --emit=exe: generates C++ into a temporary file and compiles it to a
/// temporary executable, then moves it into place.
static int emitExecutable(ModuleOp module, const CompileOptions &options,
                          TrainerEmitOptions emitOptions, Progress &progress) {
  llvm::SmallString<256> cppPath;
  int fd;
  if (llvm::sys::fs::createTemporaryFile("rondo-trainer", "cpp", fd, cppPath)) {
    llvm::errs()
        << "error: cannot create a temporary file for the generated C++\n";
    return 1;
  }
  // Large constants go to files the assembler embeds (.incbin); they live
  // in a temporary directory until the trainer is linked.
  llvm::SmallString<256> blobDir;
  if (llvm::sys::fs::createUniqueDirectory("rondo-constants", blobDir)) {
    llvm::errs() << "error: cannot create a temporary directory for the "
                    "trainer's constants\n";
    llvm::sys::fs::remove(cppPath);
    return 1;
  }
  auto removeTemporaries = [&] {
    llvm::sys::fs::remove(cppPath);
    llvm::sys::fs::remove_directories(blobDir);
  };
  {
    llvm::raw_fd_ostream cppOut(fd, /*shouldClose=*/true);
    emitOptions.blobDir = blobDir.str().str();
    if (failed(emitTrainerCpp(module, cppOut, emitOptions))) {
      removeTemporaries();
      return 1;
    }
  }
  progress.done("emit C++");
  // Built beside the destination, so that the rename is atomic; built in
  // the temporary directory and copied for a destination written in place.
  bool inPlace = isSpecialFile(options.outputFile);
  std::string tmpExe = options.outputFile + ".tmp-rondo";
  if (inPlace) {
    llvm::SmallString<256> path;
    if (llvm::sys::fs::createTemporaryFile("rondo-trainer", "", path)) {
      llvm::errs() << "error: cannot name a temporary trainer\n";
      removeTemporaries();
      return 1;
    }
    tmpExe = path.str().str();
  }
  LogicalResult built = buildExecutable(cppPath, tmpExe, emitOptions.target);
  removeTemporaries();
  if (failed(built)) {
    llvm::sys::fs::remove(tmpExe);
    return 1;
  }
  if (auto ec = inPlace ? llvm::sys::fs::copy_file(tmpExe, options.outputFile)
                        : llvm::sys::fs::rename(tmpExe, options.outputFile)) {
    llvm::errs() << "error: cannot write '" << options.outputFile
                 << "': " << ec.message() << "\n";
    llvm::sys::fs::remove(tmpExe);
    return 1;
  }
  if (inPlace)
    llvm::sys::fs::remove(tmpExe);
  progress.done("build the trainer");
  progress.say(describeOutput(module, options));
  return 0;
}

/// --explain: the parameter line and every plan's explanation, and with a
/// directory the files for it.
static LogicalResult explain(ModuleOp module, const CompileOptions &options) {
  // The explanation goes where the IR does not.
  bool irOnStdout = options.outputFile == "-" && options.emit != Emit::Exe;
  llvm::raw_ostream &os = irOnStdout ? llvm::errs() : llvm::outs();
  printParameterLine(module, os);
  printExplanation(module, os);
  if (options.explain->empty())
    return success();
  std::string error;
  if (failed(writeExplainDir(module, *options.explain, error)) ||
      failed(writeOpTimingsFile(module, *options.explain, error))) {
    llvm::errs() << "error: --explain=" << *options.explain << ": " << error
                 << "\n";
    return failure();
  }
  return success();
}

int rondo::compile(CompileOptions options) {
  if (options.handoff != "peer" && options.handoff != "host") {
    llvm::errs() << "error: --handoff=" << options.handoff
                 << " is not one of peer, host\n";
    return 2;
  }
  if (!options.target.empty() && options.target != "host" &&
      options.target != "cuda") {
    llvm::errs() << "error: --target=" << options.target
                 << " is not one of host, cuda\n";
    return 2;
  }
  ImportOptions importOpts;
  importOpts.batch = options.batch;
  importOpts.seqLen = options.seqLen;
  for (const std::string &spec : options.inputShapes)
    if (llvm::Error err = addInputShape(importOpts, spec)) {
      llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
      return 2;
    }
  Emit emit = options.emit;
  if (options.outputFile.empty())
    options.outputFile = emit == Emit::Exe ? "trainer" : "-";
  if (options.outputFile != "-")
    if (std::string why = whyNotWritable(options.outputFile, emit == Emit::Exe);
        !why.empty()) {
      llvm::errs() << "error: cannot write '" << options.outputFile
                   << "': " << why << "\n";
      return 1;
    }
  TrainPipelineOptions trainOpts;
  trainOpts.loss = options.loss;
  trainOpts.trainable = options.trainable;
  trainOpts.freeze = options.freeze;
  trainOpts.chunkRows = options.chunkRows;
  if (options.lora) {
    if (llvm::Error err = parseLoraSpec(*options.lora, trainOpts)) {
      llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
      return 2;
    }
    if (emit == Emit::TG) {
      llvm::errs() << "error: --lora adapts the training function; "
                      "--emit=tg stops before it (use --emit=train)\n";
      return 2;
    }
  }
  bool lowering = emit == Emit::Exec || emit == Emit::Cpp || emit == Emit::Exe;
  // A trainer runs a compiled plan; without --workers it gets the plan for
  // one worker, the round-robin pipeline's degenerate case.
  // With --gpus the planner chooses every layout's workers.
  if (lowering && options.plan.workers.empty() && options.plan.gpus == 0)
    options.plan.workers.push_back(1);
  bool planning = emit == Emit::Pipe || options.explain ||
                  !options.plan.workers.empty() || options.plan.gpus != 0;
  // The target is resolved once, for the planner, the emitter and
  // --explain alike (rondo/Driver/Target.h).
  TargetConfig target{options.target.empty() ? "host" : options.target, "",
                      "fp32"};
  if (planning) {
    if (emit == Emit::TG) {
      llvm::errs() << "error: planning (--workers, --explain) needs the "
                      "training function; it cannot stop at --emit=tg\n";
      return 2;
    }
    if (options.shardOptimizer != "on" && options.shardOptimizer != "off") {
      llvm::errs() << "error: --shard-optimizer=" << options.shardOptimizer
                   << ": expected on or off\n";
      return 2;
    }
    options.plan.shardOptimizer = options.shardOptimizer == "on";
    const std::string &mode = options.plan.optimizerMode;
    if (mode != "overlap" && mode != "sync" && mode != "stale") {
      llvm::errs() << "error: --optimizer-mode=" << mode
                   << ": expected overlap, sync or stale\n";
      return 2;
    }
    const std::string &residency = options.plan.residency;
    if (residency != "auto" && residency != "device" &&
        residency != "streamed") {
      llvm::errs() << "error: --residency=" << residency
                   << ": expected auto, device or streamed\n";
      return 2;
    }
    llvm::Expected<TargetConfig> resolved =
        resolveTarget(options.target, options.device, options.precision);
    if (!resolved) {
      llvm::errs() << "error: " << llvm::toString(resolved.takeError()) << "\n";
      return 2;
    }
    target = *resolved;
    const std::string &frozen = options.plan.frozenStorage;
    if (!frozen.empty() && frozen != "bf16" && frozen != "fp32") {
      llvm::errs() << "error: --frozen-storage=" << frozen
                   << ": expected bf16 or fp32\n";
      return 2;
    }
    if (frozen == "bf16" && target.precision != "bf16") {
      llvm::errs() << "error: --frozen-storage=bf16 needs a bf16 plan, but "
                      "this one computes in "
                   << target.precision << " (--target=" << target.backend
                   << "), so its frozen weights stay fp32; drop the flag or "
                      "compile with --target=cuda --precision=bf16\n";
      return 2;
    }
  }
  if (emit == Emit::Exe && !canLink(target.backend)) {
    llvm::errs() << "error: --target=cuda: this rondo-compile was built "
                    "without the CUDA runtime (configure with "
                    "-DRONDO_ENABLE_CUDA=ON); --emit=cpp still works\n";
    return 2;
  }

  DialectRegistry registry;
  registry.insert<tg::TGDialect, pipe::PipeDialect, exec::ExecDialect,
                  func::FuncDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  // Warnings (MLIR drops them without a handler) go to stderr once: plans
  // at a microbatch shape import the model again and would repeat them.
  llvm::StringSet<> warned;
  ScopedDiagnosticHandler warnings(&ctx, [&](Diagnostic &diag) {
    if (diag.getSeverity() != DiagnosticSeverity::Warning)
      return failure();
    std::string text;
    llvm::raw_string_ostream os(text);
    if (auto file = dyn_cast<FileLineColLoc>(diag.getLocation()))
      os << file.getFilename().getValue();
    else
      os << diag.getLocation();
    os << ": warning: " << diag;
    if (warned.insert(text).second)
      llvm::errs() << text << "\n";
    return success();
  });
  Progress progress(options.quiet);
  OwningOpRef<ModuleOp> module =
      importOnnxFile(&ctx, options.inputFile, importOpts);
  if (!module)
    return 1;
  if (planning)
    setModuleTarget(*module, target);

  // One pass manager per phase, so that each phase's time can be said;
  // --mlir-timing reports them all under one root. Bad pass-manager flags
  // are a usage error, found before the first phase.
  if (failed(makePassManager(ctx)))
    return 2;
  DefaultTimingManager tm;
  applyDefaultTimingManagerCLOptions(tm);
  TimingScope timing = tm.getRootScope();
  auto runPhase =
      [&](llvm::function_ref<void(PassManager &)> build) -> LogicalResult {
    FailureOr<std::unique_ptr<PassManager>> pm = makePassManager(ctx);
    if (failed(pm))
      return failure();
    (*pm)->enableTiming(timing);
    build(**pm);
    return (*pm)->run(*module);
  };
  if (failed(runPhase([](PassManager &pm) { buildTGPipeline(pm); })))
    return 1;
  progress.done("import", options.inputFile);
  if (emit != Emit::TG) {
    if (failed(runPhase(
            [&](PassManager &pm) { buildTrainPipeline(pm, trainOpts); })))
      return 1;
    progress.done("differentiate");
  }
  if (planning) {
    if (failed(runPhase(
            [&](PassManager &pm) { buildPlanPipeline(pm, options.plan); })))
      return 1;
    size_t plans = llvm::range_size(module->getOps<pipe::PlanOp>());
    progress.done("plan",
                  std::to_string(plans) + (plans == 1 ? " plan" : " plans"));
  }
  if (lowering) {
    if (failed(lowerPlans(*module, options.inputFile, importOpts, trainOpts,
                          options.handoff != "host")))
      return 1;
    progress.done("lower");
  }
  if (options.summary)
    printSummary(*module, options.inputFile, emit);
  if (options.explain && failed(explain(*module, options)))
    return 1;
  // Printing the summary or explanation is no phase.
  progress.restart();

  llvm::SmallString<256> modelPath(options.inputFile);
  llvm::sys::fs::make_absolute(modelPath);
  TrainerEmitOptions emitOptions{modelPath.str().str(), target.backend,
                                 target.precision};
  if (emit == Emit::Exe)
    return emitExecutable(*module, options, emitOptions, progress);
  std::string error;
  auto out = openOutputFile(options.outputFile, &error);
  if (!out) {
    llvm::errs() << "error: cannot write '" << options.outputFile
                 << "': " << error << "\n";
    return 1;
  }
  if (emit == Emit::Cpp) {
    if (failed(emitTrainerCpp(*module, out->os(), emitOptions)))
      return 1;
  } else {
    module->print(out->os());
  }
  out->keep();
  // On stdout the output speaks for itself.
  if (options.outputFile != "-") {
    progress.done(emit == Emit::Cpp ? "emit C++" : "print the IR");
    progress.say(describeOutput(*module, options));
  }
  return 0;
}
