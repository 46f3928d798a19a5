//===- TGDialect.cpp - The tensor graph dialect -----------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/IR/TGDialect.h"
#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace rondo::tg;

#include "Dialect/TG/IR/TGDialect.cpp.inc"
#include "Dialect/TG/IR/TGEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "Dialect/TG/IR/TGAttrs.cpp.inc"

void TGDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Dialect/TG/IR/TGOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Dialect/TG/IR/TGAttrs.cpp.inc"
      >();
}

LogicalResult
LoraAttr::verify(llvm::function_ref<InFlightDiagnostic()> emitError,
                 int64_t rank, FloatAttr alpha, FloatAttr dropout,
                 StringRef targets) {
  if (rank <= 0)
    return emitError() << "LoRA rank must be positive, got " << rank;
  if (!alpha || !dropout)
    return emitError() << "LoRA alpha and dropout must be floats";
  if (targets.empty())
    return emitError() << "LoRA targets must not be empty";
  return success();
}

Operation *TGDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

//===----------------------------------------------------------------------===//
// Discardable attributes
//===----------------------------------------------------------------------===//

namespace {
/// Where a `tg.` attribute may sit (no key belongs on an operation other
/// than the module).
enum class Place { Argument, Result, Module, Op };

StringRef describe(Place place) {
  switch (place) {
  case Place::Argument:
    return "a function argument";
  case Place::Result:
    return "a function result";
  case Place::Module:
    return "the module";
  case Place::Op:
    return "an operation";
  }
  llvm_unreachable("unknown place");
}

bool isName(Attribute a) {
  auto s = dyn_cast<StringAttr>(a);
  return s && !s.getValue().empty();
}
bool isUnit(Attribute a) { return isa<UnitAttr>(a); }
bool isNameList(Attribute a) {
  auto names = dyn_cast<ArrayAttr>(a);
  return names && llvm::all_of(names, isName);
}
bool isLoraFactor(Attribute a) {
  auto s = dyn_cast<StringAttr>(a);
  return s && (s.getValue() == "A" || s.getValue() == "B");
}
bool isLossKind(Attribute a) {
  auto s = dyn_cast<StringAttr>(a);
  return s && (s.getValue() == "output" || s.getValue() == "causal-lm");
}
bool isLoraConfig(Attribute a) { return isa<LoraAttr>(a); }

/// One key: where it sits and what its value must be (in words, for the
/// diagnostic, and as a predicate).
struct Rule {
  StringRef name;
  Place place;
  StringRef expected;
  bool (*accepts)(Attribute);
};

const Rule kRules[] = {
    {kParamAttr, Place::Argument, "a non-empty string", isName},
    {kTrainableAttr, Place::Argument, "a unit attribute", isUnit},
    {kExternalF32Attr, Place::Argument, "a unit attribute", isUnit},
    {kTorchNameAttr, Place::Argument, "a non-empty string", isName},
    {kTorchAliasesAttr, Place::Argument, "an array of non-empty strings",
     isNameList},
    {kTorchTransposedAttr, Place::Argument, "a unit attribute", isUnit},
    {kInputAttr, Place::Argument, "a non-empty string", isName},
    {kLabelsAttr, Place::Argument, "a unit attribute", isUnit},
    {kLossScaleAttr, Place::Argument, "a unit attribute", isUnit},
    {kLoraOfAttr, Place::Argument, "a non-empty string", isName},
    {kLoraFactorAttr, Place::Argument, "\"A\" or \"B\"", isLoraFactor},
    {kLoraBaseTransposedAttr, Place::Argument, "a unit attribute", isUnit},
    {kLoraParameterAttr, Place::Argument, "a unit attribute", isUnit},
    {kResultNameAttr, Place::Result, "a non-empty string", isName},
    {kGradOfAttr, Place::Result, "a non-empty string", isName},
    {kLoraConfigAttr, Place::Module, "a #tg.lora attribute", isLoraConfig},
    {kLossAttr, Place::Module, "\"output\" or \"causal-lm\"", isLossKind},
    {kSourceAttr, Place::Module, "a non-empty string", isName},
};

LogicalResult verifyAttr(Operation *op, NamedAttribute attr, Place place) {
  const Rule *rule = llvm::find_if(
      kRules, [&](const Rule &r) { return r.name == attr.getName(); });
  if (rule == std::end(kRules))
    return op->emitError() << "unknown attribute '" << attr.getName().strref()
                           << "'";
  if (rule->place != place)
    return op->emitError() << "'" << attr.getName().strref() << "' belongs on "
                           << describe(rule->place) << ", not on "
                           << describe(place);
  if (!rule->accepts(attr.getValue()))
    return op->emitError() << "'" << attr.getName().strref() << "' must be "
                           << rule->expected;
  return success();
}
} // namespace

LogicalResult TGDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                  unsigned,
                                                  NamedAttribute attr) {
  return verifyAttr(op, attr, Place::Argument);
}

LogicalResult TGDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                     unsigned,
                                                     NamedAttribute attr) {
  return verifyAttr(op, attr, Place::Result);
}

LogicalResult TGDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  return verifyAttr(op, attr, isa<ModuleOp>(op) ? Place::Module : Place::Op);
}

func::FuncOp rondo::tg::lookupMain(ModuleOp module, StringRef pass) {
  auto main = module.lookupSymbol<func::FuncOp>("main");
  if (!main)
    module.emitError(pass) << ": no @main function";
  return main;
}
