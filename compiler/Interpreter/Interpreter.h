//===- Interpreter.h - Run a tg function on the CPU -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Executes `func.func @main` of a tg module op by op with the CPU reference
// kernels (runtime/kernels/cpu/Kernels.h), using the same op-to-kernel mapping
// as the trainer emitter (compiler/Target/Cpp/TrainerEmitter.cpp). It exists so
// that tests and users can check what an imported graph computes without
// compiling a trainer: rondo-run and the ONNX conformance suite are built on
// it.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_INTERPRETER_INTERPRETER_H
#define RONDO_INTERPRETER_INTERPRETER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>
#include <vector>

namespace rondo {

/// The element types the interpreter holds: tg computes in f32, indices are
/// i64 and conditions i1 (see the tg dialect's invariants).
enum class ElementKind { F32, I64, I1 };

const char *elementKindName(ElementKind kind);

/// A dense, row-major host tensor. F32 data lives in `f`; I64 and I1 data
/// (0 or 1) live in `i`, so boolean masks need no third storage kind.
struct HostBuffer {
  ElementKind kind = ElementKind::F32;
  llvm::SmallVector<int64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;

  int64_t numel() const;
  /// "f32[2, 3]": for diagnostics.
  std::string describe() const;

  static HostBuffer floats(llvm::ArrayRef<int64_t> shape,
                           std::vector<float> data);
  static HostBuffer ints(llvm::ArrayRef<int64_t> shape,
                         std::vector<int64_t> data);
  static HostBuffer bools(llvm::ArrayRef<int64_t> shape,
                          std::vector<int64_t> data);
};

/// The interpreter's kind for a tensor type, or failure for element types it
/// does not execute (f16, bf16, f64, i32: the importer never produces them).
mlir::FailureOr<ElementKind> elementKindOf(mlir::RankedTensorType type);

/// A name for argument `index` of `func`, for diagnostics and command lines:
/// its `tg.param` or `tg.input` name, "labels" and "loss_scale" for the
/// training arguments, else "arg<index>".
std::string argumentName(mlir::func::FuncOp func, unsigned index);

/// A name for result `index`: its `tg.result` name, "<param>.grad" for a
/// gradient (`tg.grad_of`), else "result<index>".
std::string resultName(mlir::func::FuncOp func, unsigned index);

/// Runs `func` (one block of tg ops) on `args`, which must match the
/// argument types exactly (kind and shape). Returns one buffer per result.
/// On failure (a mismatched argument, an op without a kernel, an index or
/// label out of range) an error naming the culprit has been emitted through
/// the context's diagnostic engine.
mlir::FailureOr<std::vector<HostBuffer>>
runFunction(mlir::func::FuncOp func, llvm::ArrayRef<HostBuffer> args);

/// Runs `func` on `args` repeatedly (lowered once, with the kernel calls a
/// trainer's stage makes; at least `minRuns` timed runs after an untimed
/// one, more while their total is under `budgetSeconds`) with `threads`
/// OpenMP threads and one BLAS thread, as a trainer's worker runs its
/// kernels, and returns the time each run spent inside kernel calls: what
/// the cost model's host op timings are measured from
/// (rondo/CostModel/KernelTimes.h).
mlir::FailureOr<std::vector<double>>
timeKernels(mlir::func::FuncOp func, llvm::ArrayRef<HostBuffer> args,
            int threads, double budgetSeconds, int minRuns = 5);

} // namespace rondo

#endif // RONDO_INTERPRETER_INTERPRETER_H
