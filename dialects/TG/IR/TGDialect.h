//===- TGDialect.h - The tensor graph dialect -------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_TG_IR_TGDIALECT_H
#define RONDO_DIALECTS_TG_IR_TGDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/ValueRange.h"

#include "TG/IR/TGDialect.h.inc"
#include "TG/IR/TGEnums.h.inc"

namespace rondo::tg {
/// Attribute names shared by the importer, passes and emitter.
inline constexpr llvm::StringLiteral kParamAttr = "tg.param";
inline constexpr llvm::StringLiteral kTrainableAttr = "tg.trainable";
inline constexpr llvm::StringLiteral kTorchNameAttr = "tg.torch_name";
inline constexpr llvm::StringLiteral kInputAttr = "tg.input";
inline constexpr llvm::StringLiteral kLabelsAttr = "tg.labels";
inline constexpr llvm::StringLiteral kLossScaleAttr = "tg.loss_scale";
inline constexpr llvm::StringLiteral kResultNameAttr = "tg.result";
} // namespace rondo::tg

#endif // RONDO_DIALECTS_TG_IR_TGDIALECT_H
