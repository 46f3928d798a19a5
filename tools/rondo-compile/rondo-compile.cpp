//===- rondo-compile.cpp - The Rondo compiler driver ------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// rondo-compile MODEL.onnx [-o OUT] --batch B --seq-len T
// --emit=tg|train|pipe|cpp|exe --workers N[,N...] --device=... --explain[=DIR]
//
// Every output is written to a temporary file next to its destination and
// renamed into place only when the whole phase succeeded, so a failed
// compile never leaves a partial output behind.
//
//===----------------------------------------------------------------------===//

#include "Exec/IR/ExecOps.h"
#include "Pipe/IR/PipeOps.h"
#include "TG/IR/TGOps.h"
#include "TG/Transforms/Passes.h"
#include "rondo/CostModel/CostModel.h"
#include "rondo/Explain/Explain.h"
#include "rondo/Import/OnnxImporter.h"
#include "rondo/Pipelines/Pipelines.h"
#include "rondo/Target/Cpp/TrainerEmitter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory category("rondo-compile options");
static cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"),
                                      cl::Required, cl::cat(category));
static cl::opt<std::string> outputFile("o",
                                       cl::desc("output file ('-' for stdout)"),
                                       cl::value_desc("path"),
                                       cl::cat(category));
static cl::opt<int64_t>
    batch("batch", cl::desc("rows per step (the dynamic batch dimension)"),
          cl::init(-1), cl::cat(category));
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("tokens per row (the dynamic sequence dimension)"),
           cl::init(-1), cl::cat(category));
static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("NAME=d0,d1,...: the shape of a graph input"),
                cl::cat(category));
enum class Emit { TG, Train, Pipe, Exec, Cpp, Exe };
static cl::opt<Emit>
    emit("emit", cl::desc("what to produce"), cl::init(Emit::Exe),
         cl::values(clEnumValN(Emit::TG, "tg", "imported, recognised tg IR"),
                    clEnumValN(Emit::Train, "train",
                               "the training function (loss and gradients)"),
                    clEnumValN(Emit::Pipe, "pipe",
                               "the plan: layers, stages, job order"),
                    clEnumValN(Emit::Exec, "exec",
                               "per plan: stage functions and exec programs"),
                    clEnumValN(Emit::Cpp, "cpp", "the trainer's C++ source"),
                    clEnumValN(Emit::Exe, "exe", "the trainer executable")),
         cl::cat(category));
static cl::opt<std::string> loss("loss", cl::desc("causal-lm or output:NAME"),
                                 cl::init("causal-lm"), cl::cat(category));
static cl::opt<std::string>
    trainable("trainable", cl::desc("regex: only these parameters train"),
              cl::init(""), cl::cat(category));
static cl::opt<std::string>
    freeze("freeze", cl::desc("regex: these parameters are frozen"),
           cl::init(""), cl::cat(category));
static cl::opt<std::string> lora(
    "lora",
    cl::desc("LoRA fine-tuning: rank=R,alpha=A,dropout=0,targets=ROLES|REGEX "
             "adds low-rank adapters to the selected linear weights and "
             "trains only them (roles: q, k, v, o, gate, up, down, attn, "
             "mlp, all-linear, joined by '+'; defaults rank=8, alpha=8, "
             "targets=all-linear)"),
    cl::value_desc("spec"), cl::init(""), cl::cat(category));
static cl::opt<std::string>
    target("target",
           cl::desc("host (CPU worker threads) or cuda (one GPU per worker)"),
           cl::init("host"), cl::cat(category));
static cl::opt<int64_t>
    chunkRows("loss-chunk-rows",
              cl::desc("rows of logits the fused loss holds at once"),
              cl::init(1024), cl::cat(category));
static cl::list<int64_t>
    workers("workers", cl::desc("worker counts to plan for (N[,N...])"),
            cl::CommaSeparated, cl::cat(category));
static cl::opt<int64_t>
    microbatches("microbatches",
                 cl::desc("microbatches per step (default: chosen by the "
                          "planner, at least workers + 1)"),
                 cl::init(0), cl::cat(category));
static cl::opt<std::string>
    device("device",
           cl::desc("cost model: h100|h200|rtx4090|host|SPEC.json "
                    "(default: host for --target=host)"),
           cl::init(""), cl::cat(category));
static cl::opt<std::string> precision("precision",
                                      cl::desc("fp32|bf16 (default: bf16 "
                                               "on GPUs, fp32 on the host)"),
                                      cl::init(""), cl::cat(category));
static cl::opt<std::string>
    planStrategy("plan-strategy",
                 cl::desc("exact (default) or greedy (RoundPipe's)"),
                 cl::init("exact"), cl::cat(category));
static cl::opt<std::string>
    forcedStages("stages",
                 cl::desc("force the partition: fwd:A+B+...,tail:T,bwd:C+D+... "
                          "(layer counts in job order)"),
                 cl::init(""), cl::cat(category));
static cl::opt<double>
    workerMemoryGB("worker-memory-gb",
                   cl::desc("device memory budget per worker in GB (default: "
                            "90% of the device's)"),
                   cl::init(0), cl::cat(category));
static cl::opt<double>
    hostMemoryGB("host-memory-gb",
                 cl::desc("host memory budget in GB (default: the device "
                          "spec's host memory)"),
                 cl::init(0), cl::cat(category));
static cl::opt<int64_t> planReplicas(
    "replicas",
    cl::desc("plan for this many data-parallel replicas (trainer "
             "--replicas): their gradient sums enter the predicted step and "
             "--explain shows how throughput scales with replicas"),
    cl::init(1), cl::cat(category));
static cl::opt<double> replicaLinkGBps(
    "replica-link-gbps",
    cl::desc("bandwidth between replicas in GB/s (default 25: 200 Gb/s)"),
    cl::init(25), cl::cat(category));
static cl::opt<std::string> shardOptimizer(
    "shard-optimizer",
    cl::desc("on (default) or off: whether the replicas shard the optimizer, "
             "as trainer --shard-optimizer; the plan costs that mode and "
             "--explain shows both"),
    cl::init("on"), cl::cat(category));
static cl::opt<int64_t> replicasPerHost(
    "replicas-per-host",
    cl::desc("replicas that share one host's cores for the optimizer "
             "(default 1)"),
    cl::init(1), cl::cat(category));
static cl::opt<std::string>
    explain("explain",
            cl::desc("explain the plan; with =DIR also write the plan, its "
                     "table and a timeline SVG into DIR"),
            cl::ValueOptional, cl::init(""), cl::cat(category));
static cl::opt<bool> summary("summary",
                             cl::desc("print a summary of the model on stderr"),
                             cl::init(false), cl::cat(category));

static LogicalResult parseInputShapes(rondo::ImportOptions &opts) {
  for (const std::string &spec : inputShapes)
    if (llvm::Error err = rondo::addInputShape(opts, spec)) {
      llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
      return failure();
    }
  return success();
}

static void printSummary(ModuleOp module) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return;
  int64_t params = 0, elements = 0, trainableParams = 0, trainableElements = 0;
  std::string table;
  llvm::raw_string_ostream tableOs(table);
  for (unsigned k = 0; k < func.getNumArguments(); ++k) {
    auto name = func.getArgAttrOfType<StringAttr>(k, rondo::tg::kParamAttr);
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(func.getArgument(k).getType());
    int64_t n = type.getNumElements();
    ++params;
    elements += n;
    bool on = func.getArgAttr(k, rondo::tg::kTrainableAttr) != nullptr;
    if (on) {
      ++trainableParams;
      trainableElements += n;
    }
    auto torch =
        func.getArgAttrOfType<StringAttr>(k, rondo::tg::kTorchNameAttr);
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
    if (auto cost = dyn_cast<rondo::tg::CostOpInterface>(op))
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

/// One line for --explain: what trains, and the LoRA adapters when there are
/// any (the plan's memory and optimizer costs follow from it).
static void printParameterLine(ModuleOp module, llvm::raw_ostream &os) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return;
  int64_t tensors = 0, elements = 0, trainableTensors = 0,
          trainableElements = 0, adapters = 0;
  for (unsigned k = 0; k < func.getNumArguments(); ++k) {
    if (!func.getArgAttr(k, rondo::tg::kParamAttr))
      continue;
    int64_t n =
        cast<RankedTensorType>(func.getArgument(k).getType()).getNumElements();
    ++tensors;
    elements += n;
    if (func.getArgAttr(k, rondo::tg::kTrainableAttr)) {
      ++trainableTensors;
      trainableElements += n;
    }
    adapters += func.getArgAttr(k, rondo::tg::kLoraOfAttr) != nullptr;
  }
  os << llvm::formatv("Parameters: {0} elements in {1} tensors; trainable: "
                      "{2} elements in {3} tensors ({4:f2}%)",
                      elements, tensors, trainableElements, trainableTensors,
                      elements ? 100.0 * trainableElements / elements : 0.0);
  if (auto lora =
          module->getAttrOfType<DictionaryAttr>(rondo::tg::kLoraConfigAttr)) {
    auto rank = lora.getAs<IntegerAttr>("rank");
    auto alpha = lora.getAs<FloatAttr>("alpha");
    auto targets = lora.getAs<StringAttr>("targets");
    if (rank && alpha && targets)
      os << llvm::formatv("; LoRA rank {0}, alpha ", rank.getInt())
         << llvm::format("%g", alpha.getValueAsDouble())
         << llvm::formatv(", targets {0}: {1} adapters on {2} linear weights, "
                          "every other parameter frozen (no gradient, no "
                          "optimizer state)",
                          targets.getValue(), adapters, adapters / 2);
  }
  os << "\n\n";
}

/// Compiles the generated C++ into an executable with the system compiler.
/// The precision the stage functions compute in: --precision, else bf16 on
/// GPUs and fp32 on the host (as the planner's default).
static std::string effectivePrecision() {
  if (!precision.empty())
    return precision;
  return target == "cuda" ? "bf16" : "fp32";
}

static LogicalResult buildExecutable(llvm::StringRef cppPath,
                                     llvm::StringRef exePath) {
  // The generated file names its target; so does the link line below.
  auto cxx = llvm::sys::findProgramByName(RONDO_CXX);
  if (!cxx) {
    cxx = llvm::sys::findProgramByName("c++");
    if (!cxx) {
      llvm::errs() << "error: no C++ compiler found (looked for " << RONDO_CXX
                   << " and c++)\n";
      return failure();
    }
  }
  // The generated code is straight-line calls into the optimised kernel
  // library and the runtime; optimising it saves nothing measurable and
  // costs five times the compile time on a model with many stages.
  llvm::SmallVector<llvm::StringRef> args = {*cxx,
                                             "-std=c++17",
                                             "-O0",
                                             "-fopenmp",
                                             "-I",
                                             RONDO_RUNTIME_INCLUDE_DIR,
                                             "-I",
                                             RONDO_KERNELS_INCLUDE_DIR,
                                             cppPath,
                                             "-o",
                                             exePath,
                                             RONDO_RUNTIME_LIB,
                                             RONDO_KERNELS_LIB,
                                             RONDO_ONNX_PROTO_LIB,
                                             "-lprotobuf",
                                             "-lopenblas",
                                             "-lpthread"};
  llvm::SmallVector<llvm::StringRef> extra;
  llvm::StringRef(RONDO_TRAINER_FLAGS).split(extra, ' ', -1, false);
  args.append(extra.begin(), extra.end());
  llvm::SmallVector<llvm::StringRef> libs;
  llvm::StringRef(RONDO_TRAINER_LIBS).split(libs, ' ', -1, false);
  args.append(libs.begin(), libs.end());
#ifdef RONDO_CUDA_KERNELS_LIB
  // GPU trainers: the device ops and CUDA kernels come before the runtime
  // that calls into them; cuBLAS and the CUDA runtime last.
  if (target == "cuda") {
    auto runtimeLib = llvm::find(args, llvm::StringRef(RONDO_RUNTIME_LIB));
    args.insert(runtimeLib, {RONDO_RUNTIME_CUDA_LIB, RONDO_CUDA_KERNELS_LIB});
    args.insert(args.begin() + 1,
                {"-DRONDO_TARGET_CUDA", "-I", RONDO_CUDA_KERNELS_INCLUDE_DIR,
                 "-I", RONDO_CUDA_INCLUDE_DIR});
    args.append({RONDO_CUDA_KERNELS_LIB, "-L", RONDO_CUDA_LIB_DIR, "-lcublasLt",
                 "-lcublas", "-lnccl", "-lcudart",
                 "-Wl,-rpath," RONDO_CUDA_LIB_DIR});
  }
#endif
  std::string message;
  int rc =
      llvm::sys::ExecuteAndWait(*cxx, args, std::nullopt, {}, 0, 0, &message);
  if (rc != 0) {
    llvm::errs() << "error: compiling the generated trainer failed (" << *cxx
                 << " exited with " << rc
                 << (message.empty() ? "" : ": " + message) << ")\n";
    return failure();
  }
  return success();
}

/// Lowers every plan of `module` to exec programs. Stage functions take one
/// microbatch, so each group of plans with the same rows per microbatch gets
/// the training function rebuilt at that shape (the layering is the same:
/// only the batch dimension differs); its stage functions and programs are
/// then moved into `module`.
static cl::opt<std::string>
    handoff("handoff",
            cl::desc("how activations move between workers: peer "
                     "(device-to-device) or host (staged through host "
                     "memory)"),
            cl::init("peer"), cl::cat(category));

static LogicalResult lowerPlans(MLIRContext &ctx, ModuleOp module,
                                const rondo::ImportOptions &importOpts,
                                const rondo::TrainPipelineOptions &trainOpts) {
  std::map<int64_t, SmallVector<rondo::pipe::PlanOp>> byRows;
  for (auto plan : module.getOps<rondo::pipe::PlanOp>())
    byRows[plan.getRowsPerMicrobatch()].push_back(plan);
  if (byRows.empty()) {
    llvm::errs() << "error: nothing to lower: no plan (give --workers)\n";
    return failure();
  }
  for (auto &[rows, plans] : byRows) {
    rondo::ImportOptions opts = importOpts;
    opts.batch = rows;
    OwningOpRef<ModuleOp> micro = rondo::importOnnxFile(&ctx, inputFile, opts);
    if (!micro)
      return failure();
    OpBuilder b(&ctx);
    b.setInsertionPointToEnd(micro->getBody());
    for (rondo::pipe::PlanOp plan : plans)
      b.clone(*plan);
    PassManager pm(&ctx);
    if (failed(applyPassManagerCLOptions(pm)))
      return failure();
    rondo::buildTGPipeline(pm);
    rondo::buildTrainPipeline(pm, trainOpts);
    rondo::buildExecPipeline(pm, handoff != "host");
    if (failed(pm.run(*micro)))
      return failure();
    SmallVector<Operation *> moved;
    for (Operation &op : micro->getBody()->getOperations())
      if (isa<rondo::exec::ProgramOp>(op) ||
          (isa<func::FuncOp>(op) && op.hasAttr("exec.stage")))
        moved.push_back(&op);
    for (Operation *op : moved) {
      op->remove();
      module.getBody()->push_back(op);
    }
  }
  return success();
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  // LLVM's backends register hundreds of options in the general category;
  // --help shows Rondo's own, --help-hidden everything (MLIR's IR printing
  // included).
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "Rondo: ONNX to a standalone training program\n");

  if (handoff != "peer" && handoff != "host") {
    llvm::errs() << "error: --handoff=" << handoff
                 << " is not one of peer, host\n";
    return 2;
  }
  if (target != "host" && target != "cuda") {
    llvm::errs() << "error: --target=" << target
                 << " is not one of host, cuda\n";
    return 2;
  }
#ifndef RONDO_CUDA_KERNELS_LIB
  if (target == "cuda" && emit == Emit::Exe) {
    llvm::errs() << "error: --target=cuda: this rondo-compile was built "
                    "without the CUDA runtime (configure with "
                    "-DRONDO_ENABLE_CUDA=ON); --emit=cpp still works\n";
    return 2;
  }
#endif
  rondo::ImportOptions opts;
  opts.batch = batch;
  opts.seqLen = seqLen;
  if (failed(parseInputShapes(opts)))
    return 2;
  if (outputFile.empty())
    outputFile = emit == Emit::Exe ? "trainer" : "-";
  rondo::TrainPipelineOptions trainOpts;
  trainOpts.loss = loss;
  trainOpts.trainable = trainable;
  trainOpts.freeze = freeze;
  trainOpts.chunkRows = chunkRows;
  if (lora.getNumOccurrences()) {
    if (llvm::Error err = rondo::parseLoraSpec(lora, trainOpts)) {
      llvm::errs() << "error: " << llvm::toString(std::move(err)) << "\n";
      return 2;
    }
    if (emit == Emit::TG) {
      llvm::errs() << "error: --lora adapts the training function; "
                      "--emit=tg stops before it (use --emit=train)\n";
      return 2;
    }
  }

  DialectRegistry registry;
  registry.insert<rondo::tg::TGDialect, rondo::pipe::PipeDialect,
                  rondo::exec::ExecDialect, func::FuncDialect>();
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
  OwningOpRef<ModuleOp> module = rondo::importOnnxFile(&ctx, inputFile, opts);
  if (!module)
    return 1;

  PassManager pm(&ctx);
  if (failed(applyPassManagerCLOptions(pm)))
    return 2;
  DefaultTimingManager tm;
  applyDefaultTimingManagerCLOptions(tm);
  TimingScope timing = tm.getRootScope();
  pm.enableTiming(timing);
  rondo::buildTGPipeline(pm);
  if (emit != Emit::TG)
    rondo::buildTrainPipeline(pm, trainOpts);
  bool explaining = explain.getNumOccurrences() > 0;
  bool lowering = emit == Emit::Exec || emit == Emit::Cpp || emit == Emit::Exe;
  // A trainer runs a compiled plan; without --workers it gets the plan for
  // one worker, the round-robin pipeline's degenerate case.
  if (lowering && workers.empty())
    workers.push_back(1);
  bool planning = emit == Emit::Pipe || explaining || !workers.empty();
  if (planning) {
    if (emit == Emit::TG) {
      llvm::errs() << "error: planning (--workers, --explain) needs the "
                      "training function; it cannot stop at --emit=tg\n";
      return 2;
    }
    if (shardOptimizer != "on" && shardOptimizer != "off") {
      llvm::errs() << "error: --shard-optimizer=" << shardOptimizer
                   << ": expected on or off\n";
      return 2;
    }
    rondo::PlanPipelineOptions planOpts;
    planOpts.workers = workers;
    planOpts.microbatches = microbatches;
    planOpts.device = !device.empty()    ? std::string(device)
                      : target == "cuda" ? std::string("h100")
                                         : std::string(target);
    planOpts.precision = precision;
    planOpts.strategy = planStrategy;
    planOpts.stages = forcedStages;
    planOpts.workerMemoryGB = workerMemoryGB;
    planOpts.hostMemoryGB = hostMemoryGB;
    planOpts.replicas = planReplicas;
    planOpts.replicaLinkGBps = replicaLinkGBps;
    planOpts.shardOptimizer = shardOptimizer == "on";
    planOpts.replicasPerHost = replicasPerHost;
    rondo::buildPlanPipeline(pm, planOpts);
  }
  if (failed(pm.run(*module)))
    return 1;
  if (lowering && failed(lowerPlans(ctx, *module, opts, trainOpts)))
    return 1;
  if (summary)
    printSummary(*module);
  if (explaining) {
    // The explanation goes where the IR does not.
    bool irOnStdout = outputFile == "-" && emit != Emit::Exe;
    printParameterLine(*module, irOnStdout ? llvm::errs() : llvm::outs());
    rondo::printExplanation(*module, irOnStdout ? llvm::errs() : llvm::outs());
    if (!explain.empty()) {
      std::string error;
      if (failed(rondo::writeExplainDir(*module, explain, error))) {
        llvm::errs() << "error: --explain=" << explain << ": " << error << "\n";
        return 1;
      }
      // The template of a measured profile for this model and device.
      std::string specName = device.empty() ? std::string(target) : device;
      llvm::Expected<rondo::cost::DeviceSpec> spec =
          rondo::cost::lookupDeviceSpec(specName);
      auto func = module->lookupSymbol<func::FuncOp>("main");
      if (spec && func) {
        llvm::SmallString<256> path(explain);
        llvm::sys::path::append(path, "op-timings.json");
        std::string text;
        llvm::raw_string_ostream os(text);
        bool bf16 = precision.empty() ? spec->isGpu : precision == "bf16";
        rondo::cost::writeOpTimingsTemplate(func, *spec, bf16, os);
        if (failed(rondo::writeFileAtomically(path, text, error))) {
          llvm::errs() << "error: --explain=" << explain << ": " << error
                       << "\n";
          return 1;
        }
      } else if (!spec) {
        llvm::consumeError(spec.takeError());
      }
    }
  }

  if (emit == Emit::TG || emit == Emit::Train || emit == Emit::Pipe ||
      emit == Emit::Exec || emit == Emit::Cpp) {
    std::string error;
    auto out = openOutputFile(outputFile, &error);
    if (!out) {
      llvm::errs() << "error: cannot write '" << outputFile << "': " << error
                   << "\n";
      return 1;
    }
    if (emit == Emit::Cpp) {
      llvm::SmallString<256> abs(inputFile);
      llvm::sys::fs::make_absolute(abs);
      if (failed(rondo::emitTrainerCpp(
              *module, out->os(),
              {abs.str().str(), target, effectivePrecision()})))
        return 1;
    } else {
      module->print(out->os());
    }
    out->keep();
    return 0;
  }

  // --emit=exe: generate C++ into a temporary file and compile it to a
  // temporary executable, then move it into place.
  llvm::SmallString<256> abs(inputFile);
  llvm::sys::fs::make_absolute(abs);
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
    rondo::TrainerEmitOptions emitOptions{abs.str().str(), target,
                                          effectivePrecision()};
    emitOptions.blobDir = blobDir.str().str();
    if (failed(rondo::emitTrainerCpp(*module, cppOut, emitOptions))) {
      removeTemporaries();
      return 1;
    }
  }
  std::string tmpExe = outputFile + ".tmp-rondo";
  LogicalResult built = buildExecutable(cppPath, tmpExe);
  removeTemporaries();
  if (failed(built)) {
    llvm::sys::fs::remove(tmpExe);
    return 1;
  }
  if (auto ec = llvm::sys::fs::rename(tmpExe, outputFile)) {
    llvm::errs() << "error: cannot write '" << outputFile
                 << "': " << ec.message() << "\n";
    llvm::sys::fs::remove(tmpExe);
    return 1;
  }
  return 0;
}
