//===- ExecOps.h - The exec dialect -----------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_EXEC_IR_EXECOPS_H
#define RONDO_DIALECTS_EXEC_IR_EXECOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"

#include "Dialect/Exec/IR/ExecDialect.h.inc"
#include "Dialect/Exec/IR/ExecEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "Dialect/Exec/IR/ExecTypes.h.inc"
#define GET_ATTRDEF_CLASSES
#include "Dialect/Exec/IR/ExecAttrs.h.inc"

namespace rondo::exec {
/// Discardable attributes of the stage functions pipe-outline-stages builds,
/// verified by the dialect (ExecOps.cpp): `exec.role` on each argument and
/// result says what it carries (kArgumentRoles, kResultRoles), `exec.layer`
/// on a checkpoint result the layer whose input it is, and `exec.stage`
/// marks the function as a stage function (the symbol of its `pipe.stage`,
/// or a unit attribute where no plan exists, as in kernel-lowering tests).
inline constexpr llvm::StringLiteral kRoleAttr = "exec.role";
inline constexpr llvm::StringLiteral kLayerAttr = "exec.layer";
inline constexpr llvm::StringLiteral kStageAttr = "exec.stage";
inline constexpr llvm::StringLiteral kArgumentRoles[] = {
    "activation", "gradient", "param",      "param_bf16", "param_unbound",
    "input_ids",  "labels",   "loss_scale", "data"};
inline constexpr llvm::StringLiteral kResultRoles[] = {
    "activation", "checkpoint", "loss_sum", "gradient", "param_grad"};

class StageOp;
class BufferOp;
} // namespace rondo::exec

#define GET_OP_CLASSES
#include "Dialect/Exec/IR/ExecOps.h.inc"

namespace rondo::exec {

/// One byte range an op reads or writes, on the worker of `job` (-1: host).
/// Master weights are tracked per parameter (`param` set, `slot` unused),
/// because stages that share a parameter have different images.
struct Access {
  mlir::StringAttr buffer;
  int64_t job = -1;
  int64_t slot = 0;
  int64_t offset = 0, bytes = 0;
  mlir::StringAttr param;
  bool write = false;
};

/// The stream queue an op is enqueued on: (job, stream) for worker ops,
/// (-1, host queue) for host tasks: batch loading and the optimizer have a
/// queue each so that loading the next batch never waits for AdamW.
struct Queue {
  int64_t job = -1;
  int stream = 0;
};
std::optional<Queue> getQueue(mlir::Operation *op);

/// Every range `op` reads and writes. Host tasks: load_batch writes the
/// host token buffers; an optimizer task reads the gradient parts and
/// writes the master weights of the parameters it finalises; stash_grads
/// reads @host_grads and writes @grad_stash; stale_optimizer reads the
/// gradient parts in @grad_stash and writes every trained weight.
void collectAccesses(ProgramOp program, mlir::Operation *op,
                     llvm::SmallVectorImpl<Access> &out);

/// Drops from RECORDS, the earlier accesses of one buffer (anything with
/// `offset` and `bytes`), the bytes a write of [offset, offset + bytes)
/// covers: the write orders and hides them. A record it covers in part keeps
/// the rest, split in two where the write falls inside it.
template <typename Record>
void hideWrittenBytes(llvm::SmallVectorImpl<Record> &records, int64_t offset,
                      int64_t bytes) {
  llvm::SmallVector<Record> kept;
  const int64_t lo = offset, hi = offset + bytes;
  for (const Record &r : records) {
    if (r.offset + r.bytes <= lo || hi <= r.offset) {
      kept.push_back(r);
      continue;
    }
    if (r.offset < lo) {
      Record head = r;
      head.bytes = lo - r.offset;
      kept.push_back(head);
    }
    if (hi < r.offset + r.bytes) {
      Record tail = r;
      tail.offset = hi;
      tail.bytes = r.offset + r.bytes - hi;
      kept.push_back(tail);
    }
  }
  records = std::move(kept);
}

/// The parameters whose last gradient part (in job order) `stage` produces:
/// an overlap-mode optimizer task for `stage` updates exactly these. With
/// a null stage: every parameter with a gradient.
llvm::SmallVector<mlir::StringAttr> finalisedParams(ProgramOp program,
                                                    StageOp stage);

/// Names of the buffers with a fixed meaning.
inline constexpr llvm::StringLiteral kParamsBuffer = "params";
inline constexpr llvm::StringLiteral kHostIdsBuffer = "host_ids";
inline constexpr llvm::StringLiteral kHostLabelsBuffer = "host_labels";
inline constexpr llvm::StringLiteral kHostGradsBuffer = "host_grads";
inline constexpr llvm::StringLiteral kHostLossBuffer = "host_loss";
/// A stale program's copy of the previous step's gradient images (the
/// layout of @host_grads), which its stale_optimizer task reads.
inline constexpr llvm::StringLiteral kGradStashBuffer = "grad_stash";
/// Worker buffers of device-resident state: weights, moments and sums
/// (exec.resident), and the gradient parts the stages accumulate.
inline constexpr llvm::StringLiteral kResidentBuffer = "resident";
inline constexpr llvm::StringLiteral kResidentGradsBuffer = "resident_grads";

} // namespace rondo::exec

#endif // RONDO_DIALECTS_EXEC_IR_EXECOPS_H
