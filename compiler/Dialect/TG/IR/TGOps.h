//===- TGOps.h - tg ops and interfaces --------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_TG_IR_TGOPS_H
#define RONDO_DIALECTS_TG_IR_TGOPS_H

#include "Dialect/TG/IR/TGDialect.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir {
class ModuleOp;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace rondo::tg::detail {
/// Sum of the byte sizes of the ranked tensors among `values`.
double sumTensorBytes(mlir::ValueRange values);
} // namespace rondo::tg::detail

#include "Dialect/TG/IR/TGInterfaces.h.inc"

namespace rondo::tg {
/// Result types implied by operands, for the builders of ops whose result
/// type is determined (the verifiers check the same rules with messages).
mlir::Type inferBinaryType(mlir::Value lhs, mlir::Value rhs);
mlir::Type inferMatmulType(mlir::Value a, mlir::Value b, bool transA,
                           bool transB);
mlir::Type inferReduceType(mlir::Value x, llvm::ArrayRef<int64_t> axes,
                           bool keepdims);
mlir::Type inferSelectType(mlir::Value cond, mlir::Value a, mlir::Value b);
mlir::Type inferTransposeType(mlir::Value x, llvm::ArrayRef<int64_t> perm);
mlir::Type inferConcatType(mlir::ValueRange inputs, int64_t axis);
mlir::Type inferGatherType(mlir::Value table, mlir::Value ids);
} // namespace rondo::tg

#define GET_OP_CLASSES
#include "Dialect/TG/IR/TGOps.h.inc"

namespace rondo::tg {
/// Broadcast shape of two shapes with NumPy rules, or failure.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);
/// Whether `from` broadcasts to `to` with NumPy rules.
bool broadcastsTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);
/// Whether `v` is read, through reshapes, only as an operand of matrix
/// products (and at least once): the weights whose bf16 rounding is all a
/// bf16 trainer computes with, so a bf16 copy can stand in for them.
bool readOnlyByProducts(mlir::Value v);
/// Whether a reader that computes with `v` rounded to bf16 under bf16
/// precision reads it, directly: a matrix product (through reshapes) or
/// the fused LM head's weight operand. A device-resident weight so read
/// keeps a bf16 copy beside its fp32 master weights, which those readers
/// read instead of rounding it at every microbatch; its other readers (the
/// tied embedding's gather) keep the fp32 weights.
bool readByBf16Products(mlir::Value v);
/// Whether argument `i` of `fn` is a frozen parameter (no `tg.trainable`)
/// that only matrix products read: what a bf16 plan may hold in bf16 alone,
/// on the host and in its stage's parameter image, since every use rounds
/// it to bf16 and nothing updates it.
bool isFrozenProductWeight(mlir::func::FuncOp fn, unsigned i);
/// The module's @main, the training function the tg and pipe passes
/// rewrite; null, with "`pass`: no @main function" emitted, without one.
mlir::func::FuncOp lookupMain(mlir::ModuleOp module, llvm::StringRef pass);
} // namespace rondo::tg

#endif // RONDO_DIALECTS_TG_IR_TGOPS_H
