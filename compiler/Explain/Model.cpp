//===- Model.cpp - What --explain says about the model ----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The parts of --explain that describe the training function rather than a
// plan: what trains, and the op-timings template for measuring the device.
//
//===----------------------------------------------------------------------===//

#include "Explain/Explain.h"

#include "CostModel/CostModel.h"
#include "Dialect/TG/IR/TGOps.h"
#include "Target/Target.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace mlir;

void rondo::printParameterLine(ModuleOp module, llvm::raw_ostream &os) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return;
  int64_t tensors = 0, elements = 0, trainableTensors = 0,
          trainableElements = 0, adapters = 0;
  for (unsigned k = 0; k < func.getNumArguments(); ++k) {
    if (!func.getArgAttr(k, tg::kParamAttr))
      continue;
    int64_t n =
        cast<RankedTensorType>(func.getArgument(k).getType()).getNumElements();
    ++tensors;
    elements += n;
    if (func.getArgAttr(k, tg::kTrainableAttr)) {
      ++trainableTensors;
      trainableElements += n;
    }
    adapters += func.getArgAttr(k, tg::kLoraOfAttr) != nullptr;
  }
  os << llvm::formatv("Parameters: {0} elements in {1} tensors; trainable: "
                      "{2} elements in {3} tensors ({4:f2}%)",
                      elements, tensors, trainableElements, trainableTensors,
                      elements ? 100.0 * trainableElements / elements : 0.0);
  if (auto lora = module->getAttrOfType<tg::LoraAttr>(tg::kLoraConfigAttr)) {
    os << llvm::formatv("; LoRA rank {0}, alpha ", lora.getRank())
       << llvm::format("%g", lora.getAlpha().getValueAsDouble())
       << llvm::formatv(", targets {0}: {1} adapters on {2} linear weights, "
                        "every other parameter frozen (no gradient, no "
                        "optimizer state)",
                        lora.getTargets(), adapters, adapters / 2);
  }
  os << "\n\n";
}

LogicalResult rondo::writeOpTimingsFile(ModuleOp module, StringRef dir,
                                        std::string &error) {
  FailureOr<std::optional<TargetConfig>> target = getModuleTarget(module);
  if (failed(target)) {
    error = "malformed " + kTargetAttr.str();
    return failure();
  }
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!*target || !func)
    return success();
  llvm::Expected<cost::DeviceSpec> spec =
      cost::lookupDeviceSpec((*target)->device);
  if (!spec) {
    // The planner has reported a bad spec already.
    llvm::consumeError(spec.takeError());
    return success();
  }
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, "op-timings.json");
  std::string text;
  llvm::raw_string_ostream os(text);
  cost::writeOpTimingsTemplate(func, *spec, (*target)->isBf16(), os);
  return writeFileAtomically(path, text, error);
}
