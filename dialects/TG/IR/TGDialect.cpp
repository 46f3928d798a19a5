//===- TGDialect.cpp - The tensor graph dialect -----------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "TG/IR/TGDialect.h"
#include "TG/IR/TGOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace rondo::tg;

#include "TG/IR/TGDialect.cpp.inc"
#include "TG/IR/TGEnums.cpp.inc"

void TGDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "TG/IR/TGOps.cpp.inc"
      >();
}

Operation *TGDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                          Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}
