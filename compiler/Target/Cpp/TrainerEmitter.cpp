//===- TrainerEmitter.cpp - tg training function to C++ ---------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The translation unit around the stage functions (StageFunctions.cpp) and
// the programs (Programs.cpp): includes, constants, the parameter, LoRA and
// model tables, and the `main` that hands them to the runtime.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include "Dialect/Pipe/IR/PipeOps.h"

namespace rondo::cpp_emit {

LogicalResult Emitter::run() {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no @main function to emit");
  if (func.getNumResults() == 0 || !func.getResultAttr(0, kResultNameAttr))
    return func.emitError(
        "emit a differentiated training function (run the train phase)");
  SmallVector<exec::ProgramOp> programs(module.getOps<exec::ProgramOp>());
  if (programs.empty())
    return module.emitError("no exec.program to emit: plan the model "
                            "(--workers) and lower it (--emit=exec) first");

  // The parameter table, in @main's order.
  struct ParamInfo {
    std::string name, torchName;
    SmallVector<int64_t> dims;
    bool trainable;
    std::string loraFactor, loraBase; ///< Empty unless a LoRA adapter.
    bool loraBaseTransposed = false;
    bool loraParameter = false;
    std::string torchAliases; ///< Comma-separated, when there are several.
    bool torchTransposed = false;
    /// Held in bf16 alone on the host (the programs' frozen_bf16).
    bool bf16 = false;
  };
  SmallVector<ParamInfo> params;
  llvm::StringMap<unsigned> paramIndex;
  std::string inputName;
  int64_t seq = 0, vocab = 0;
  Value ids;
  for (unsigned k = 0; k < func.getNumArguments(); ++k) {
    Value arg = func.getArgument(k);
    auto t = cast<RankedTensorType>(arg.getType());
    if (auto name = func.getArgAttrOfType<StringAttr>(k, kParamAttr)) {
      auto torch = func.getArgAttrOfType<StringAttr>(k, kTorchNameAttr);
      paramIndex[name.getValue()] = params.size();
      params.push_back({name.str(), torch ? torch.str() : "",
                        SmallVector<int64_t>(t.getShape()),
                        func.getArgAttr(k, kTrainableAttr) != nullptr});
      if (auto aliases = func.getArgAttrOfType<ArrayAttr>(k, kTorchAliasesAttr))
        for (Attribute a : aliases)
          params.back().torchAliases +=
              (params.back().torchAliases.empty() ? "" : ",") +
              cast<StringAttr>(a).str();
      params.back().torchTransposed =
          func.getArgAttr(k, kTorchTransposedAttr) != nullptr;
      if (auto base = func.getArgAttrOfType<StringAttr>(k, kLoraOfAttr)) {
        auto factor = func.getArgAttrOfType<StringAttr>(k, kLoraFactorAttr);
        if (!factor || (factor.getValue() != "A" && factor.getValue() != "B"))
          return func.emitError("LoRA adapter '")
                 << name.getValue() << "' has no factor A or B";
        params.back().loraFactor = factor.str();
        params.back().loraBase = base.str();
        params.back().loraBaseTransposed =
            func.getArgAttr(k, kLoraBaseTransposedAttr) != nullptr;
        params.back().loraParameter =
            func.getArgAttr(k, kLoraParameterAttr) != nullptr;
      }
    } else if (auto in = func.getArgAttrOfType<StringAttr>(k, kInputAttr)) {
      if (!t.getElementType().isInteger(64) || t.getRank() != 2)
        return func.emitError(
                   "the trainer takes one int64 [batch, seq] token input; '")
               << in.getValue() << "' is " << t;
      inputName = in.str();
      seq = t.getDimSize(1);
      ids = arg;
    } else if (!func.getArgAttr(k, kLabelsAttr) &&
               !func.getArgAttr(k, kLossScaleAttr)) {
      return func.emitError("argument ")
             << k << " has no role the trainer can supply";
    }
  }
  if (inputName.empty())
    return func.emitError("the training function has no token input");
  func.walk([&](GatherOp g) {
    if (g.getIds() == ids)
      vocab = cast<RankedTensorType>(g.getTable().getType()).getDimSize(0);
  });
  // Every program trains the same global batch: its replicas' shares.
  auto globalRows = [](exec::ProgramOp p) {
    return p.getReplicas().value_or(1) * p.getMicrobatches() *
           p.getRowsPerMicrobatch();
  };
  int64_t globalBatch = globalRows(programs.front());
  for (exec::ProgramOp p : programs)
    if (globalRows(p) != globalBatch)
      return p.emitOpError("runs ")
             << globalRows(p) << " rows per step, another program "
             << globalBatch;

  // Host storage is one per trainer, whichever program runs: the programs
  // agree on the frozen weights held in bf16 (one module's decision).
  auto frozenOf = [](exec::ProgramOp p) {
    llvm::StringSet<> names;
    if (ArrayAttr frozen = p.getFrozenBf16Attr())
      for (Attribute a : frozen)
        names.insert(cast<StringAttr>(a).getValue());
    return names;
  };
  llvm::StringSet<> frozenBf16 = frozenOf(programs.front());
  for (exec::ProgramOp p : programs) {
    llvm::StringSet<> mine = frozenOf(p);
    if (mine.size() != frozenBf16.size() ||
        llvm::any_of(mine, [&](const auto &e) {
          return !frozenBf16.contains(e.getKey());
        }))
      return p.emitOpError("holds other frozen weights in bf16 (frozen_bf16) "
                           "than @")
             << programs.front().getSymName()
             << "; one trainer has one host copy of its weights";
  }
  for (const auto &e : frozenBf16) {
    auto it = paramIndex.find(e.getKey());
    if (it == paramIndex.end())
      return programs.front().emitOpError("holds '")
             << e.getKey() << "' in bf16, which @main does not have";
    params[it->second].bf16 = true;
  }

  llvm::StringSet<> emitted;
  for (exec::ProgramOp p : programs)
    for (auto st : p.getBody().getOps<exec::StageOp>()) {
      StringRef fnName = st.getFunction();
      if (!emitted.insert(fnName).second)
        continue;
      auto fn = module.lookupSymbol<func::FuncOp>(fnName);
      if (!fn)
        return st.emitOpError("names missing function @") << fnName;
      if (failed(emitStageFunction(fn, cIdent(fnName))))
        return failure();
    }
  for (exec::ProgramOp p : programs)
    if (failed(emitProgram(p, paramIndex)))
      return failure();

  auto lossKind = module->getAttrOfType<StringAttr>(kLossAttr);
  bool causal = !lossKind || lossKind.getValue() == "causal-lm";
  os << "// Generated by rondo-compile from " << cString(opts.modelPath)
     << ". Do not edit.\n"
     << "// Stage functions call the kernels of KernelList.def (one call per "
        "kern.call of the stage);\n"
     << "// issue functions make one runtime call per exec op "
        "(rondo-compile --emit=exec).\n"
     << "#include \"rondo/runtime/Exec.h\"\n"
     << "#include \"rondo/runtime/RotaryTable.h\"\n"
     << "#include \"rondo/runtime/Trainer.h\"\n\n"
     << "#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include "
        "<cstdlib>\n#include <cstring>\n"
     << "#include <vector>\n\n";
  if (opts.target == "cuda") {
    // Device kernels; Buf is the stream-ordered device buffer, and the
    // helpers below come from the CUDA library.
    os << "#include \"CudaKernels.h\"\n#include \"GeneratedSupport.h\"\n"
       << "#include \"rondo/runtime/DeviceOps.h\"\n\n"
       << "namespace {\nnamespace K = rondo::cuda;\n"
       << "using namespace rondo::cuda;\n"
       << "template <class T> using Buf = rondo::cuda::DeviceBuffer<T>;\n\n"
       << globals << "\n"
       << functions << tables << "\n"
       << issueText;
  } else {
    os << "#include \"Kernels.h\"\n#include \"TempBuffer.h\"\n\n"
       << "namespace {\nnamespace K = rondo::cpu;\n"
       << "using namespace rondo::cpu;\n"
       << "template <class T> using Buf = rondo::cpu::TempBuffer<T>;\n\n"
       << "void copyOut(void *dst, const void *src, size_t bytes) {\n"
       << "  std::memcpy(dst, src, bytes);\n}\n\n"
       << globals << "\n"
       << functions << tables << "\n"
       << issueText;
  }
  os << "const rondo::rt::ParamSpec kParams[] = {\n";
  for (const ParamInfo &p : params) {
    os << "    {" << cString(p.name) << ", " << cString(p.torchName) << ", "
       << p.dims.size() << ", {";
    for (auto [k, d] : llvm::enumerate(p.dims))
      os << (k ? ", " : "") << d;
    os << "}, " << (p.trainable ? "true" : "false");
    if (!p.loraFactor.empty() || !p.torchAliases.empty() || p.torchTransposed ||
        p.bf16) {
      os << ", rondo::rt::LoraFactor::"
         << (p.loraFactor.empty() ? "None" : p.loraFactor) << ", ";
      if (p.loraBase.empty())
        os << "nullptr";
      else
        os << cString(p.loraBase);
      os << ", " << (p.loraBaseTransposed ? "true" : "false") << ", "
         << cString(p.torchAliases) << ", "
         << (p.torchTransposed ? "true" : "false");
      if (p.loraParameter || p.bf16)
        os << ", " << (p.loraParameter ? "true" : "false");
      if (p.bf16)
        os << ", rondo::rt::ParamStorage::Bf16";
    }
    os << "},\n";
  }
  os << "};\n\n";
  // The adapter configuration, for the trainer's initialisation, messages
  // and PEFT's adapter_config.json.
  std::string loraSpec = "nullptr";
  if (auto lora = module->getAttrOfType<LoraAttr>(kLoraConfigAttr)) {
    os << llvm::formatv("const rondo::rt::LoraSpec kLora = {{{0}, {1:e17}, "
                        "{2:e17}, {3}};\n\n",
                        lora.getRank(), lora.getAlpha().getValueAsDouble(),
                        lora.getDropout().getValueAsDouble(),
                        cString(lora.getTargets()));
    loraSpec = "&kLora";
  }
  // The resolved target the plans were costed for decides (rondo.target,
  // compiler/Target/Target.h); a module without one takes the option.
  FailureOr<std::optional<TargetConfig>> resolved = getModuleTarget(module);
  if (failed(resolved))
    return failure();
  const std::string precision =
      *resolved ? (*resolved)->precision : opts.precision;
  if (opts.target != "cuda" && precision != "fp32")
    return module.emitError("the host kernels compute in fp32, not ")
           << precision;
  // The trainer's default optimizer mode is the one the plans minimise
  // (ModelSpec's default, overlap, unless given).
  std::string optimizerMode = "overlap";
  for (pipe::PlanOp plan : module.getOps<pipe::PlanOp>())
    optimizerMode = plan.getSearch().getOptimizerMode().str();
  os << "const rondo::rt::ModelSpec kModel = {\n"
     << "    " << cString(opts.modelPath) << ", " << cString(inputName) << ", "
     << globalBatch << ", " << seq << ", " << vocab << ",\n"
     << "    rondo::rt::LossKind::" << (causal ? "CausalLM" : "GraphOutput")
     << ", kParams, " << params.size() << ", " << cString(precision) << ", "
     << loraSpec
     << (optimizerMode == "overlap" ? "" : ", " + cString(optimizerMode))
     << "};\n\n"
     << "const rondo_program kPrograms[] = {\n"
     << programsText << "};\n"
     << "} // namespace\n\n"
     << "int main(int argc, char **argv) {\n";
  if (precision == "bf16")
    os << "  rondo::cuda::setPrecision(rondo::cuda::Precision::Bf16);\n";
  os << "  return rondo::rt::trainerMain(argc, argv, kModel, kPrograms, "
     << programs.size()
     << (opts.target == "cuda" ? ", rondo::rt::makeCudaDeviceOps" : "")
     << ");\n}\n";
  return success();
}

} // namespace rondo::cpp_emit

mlir::LogicalResult rondo::emitTrainerCpp(mlir::ModuleOp module,
                                          llvm::raw_ostream &os,
                                          const TrainerEmitOptions &options) {
  cpp_emit::Emitter emitter(module, os, options);
  return emitter.run();
}
