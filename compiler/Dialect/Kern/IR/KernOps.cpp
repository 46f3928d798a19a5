//===- KernOps.cpp - The kern dialect -------------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/IR/KernOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace rondo::kern;

#include "Dialect/Kern/IR/KernDialect.cpp.inc"

void KernDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Dialect/Kern/IR/KernOps.cpp.inc"
      >();
}

LogicalResult CallOp::verify() {
  std::string error;
  if (failed(bindParams(*this, error)))
    return emitOpError(error);
  if (getInits().size() > getNumResults())
    return emitOpError("has ") << getInits().size() << " inits for "
                               << getNumResults() << " results";
  for (auto [k, init] : llvm::enumerate(getInits())) {
    if (init.getType() != getResult(k).getType())
      return emitOpError("init ") << k << " has type " << init.getType()
                                  << ", its result " << getResult(k).getType();
    // The result is computed in the init's buffer.
    if (!init.hasOneUse())
      return emitOpError("init ") << k << " has other uses";
  }
  if (auto skip = getSkip())
    for (int64_t k : *skip)
      if (k < 0 || k >= int64_t(getNumResults()) || !getResult(k).use_empty())
        return emitOpError("skips result ")
               << k << ", which does not exist or is used";
  return success();
}

#define GET_OP_CLASSES
#include "Dialect/Kern/IR/KernOps.cpp.inc"
