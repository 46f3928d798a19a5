//===- SelectTrainable.cpp - tg-select-trainable ----------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"

#include "llvm/ADT/Sequence.h"
#include "llvm/Support/Regex.h"

namespace rondo::tg {
#define GEN_PASS_DEF_TGSELECTTRAINABLEPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {
struct TGSelectTrainablePass
    : rondo::tg::impl::TGSelectTrainablePassBase<TGSelectTrainablePass> {
  using Base::Base;
  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>("main");
    if (!func)
      return;
    std::string error;
    llvm::Regex keep(trainable), freezeRe(freeze);
    if (!trainable.empty() && !keep.isValid(error)) {
      getOperation().emitError("--trainable: invalid regular expression '")
          << trainable << "': " << error;
      return signalPassFailure();
    }
    if (!freeze.empty() && !freezeRe.isValid(error)) {
      getOperation().emitError("--freeze: invalid regular expression '")
          << freeze << "': " << error;
      return signalPassFailure();
    }
    // LoRA fine-tuning trains its adapters; the weights they adapt, and
    // every other parameter, stay as loaded.
    bool lora =
        llvm::any_of(llvm::seq(func.getNumArguments()), [&](unsigned k) {
          return func.getArgAttr(k, kLoraOfAttr) != nullptr;
        });
    // A selection that trains nothing compiles into a trainer that fails
    // at run time; it is the regex's mistake, so it is reported here.
    bool any = false;
    StringRef example;
    for (unsigned k = 0; k < func.getNumArguments(); ++k) {
      auto name = func.getArgAttrOfType<StringAttr>(k, kParamAttr);
      if (!name)
        continue;
      if (example.empty())
        example = name.getValue();
      auto torch = func.getArgAttrOfType<StringAttr>(k, kTorchNameAttr);
      auto matches = [&](llvm::Regex &re) {
        return re.match(name.getValue()) ||
               (torch && re.match(torch.getValue()));
      };
      auto type = cast<RankedTensorType>(func.getArgument(k).getType());
      bool on = isa<FloatType>(type.getElementType()) && type.getRank() >= 1;
      if (lora && !func.getArgAttr(k, kLoraOfAttr))
        on = false;
      if (!trainable.empty())
        on = on && matches(keep);
      if (!freeze.empty() && matches(freezeRe))
        on = false;
      any |= on;
      if (on)
        func.setArgAttr(k, kTrainableAttr, UnitAttr::get(&getContext()));
      else
        func.removeArgAttr(k, kTrainableAttr);
    }
    if (any || example.empty())
      return;
    InFlightDiagnostic diag = getOperation().emitError();
    if (!trainable.empty())
      diag << "--trainable '" << trainable << "'";
    if (!trainable.empty() && !freeze.empty())
      diag << " with ";
    if (!freeze.empty())
      diag << "--freeze '" << freeze << "'";
    diag << " leaves no parameter to train (parameters are named like '"
         << example << "' or by their PyTorch names)";
    signalPassFailure();
  }
};
} // namespace
