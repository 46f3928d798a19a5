//===- KernOps.h - The kern dialect -----------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_KERN_IR_KERNOPS_H
#define RONDO_DIALECTS_KERN_IR_KERNOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"

#include "Dialect/Kern/IR/KernDialect.h.inc"

#define GET_OP_CLASSES
#include "Dialect/Kern/IR/KernOps.h.inc"

#include "Dialect/Kern/IR/KernelTable.h"

#endif // RONDO_DIALECTS_KERN_IR_KERNOPS_H
