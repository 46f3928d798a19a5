//===- HostOpTiming.cpp - An op's time measured on this machine -*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// On a host spec written by rondo-calibrate-host ("measure_ops"), an op's
// time is not a roofline: it is the time its CPU kernels take on this
// machine at the microbatch's shape, measured once per distinct op by the
// interpreter. The roofline missed by 3x on small models, whose ops are
// dominated by what no rate captures (a transcendental per element in the
// gated activation and its gradient, the norms' row statistics and column
// sums, attention's per-head set-up, OpenBLAS's per-call packing), and the
// kernels that run are exactly the trainer's.
//
// The op is cloned into a function of its own whose token-sized dimensions
// are divided by the number of microbatches: a value that depends on the
// step's inputs and whose leading dimension is the step's rows or tokens.
// When some such value cannot be scaled (another leading dimension, or one
// the microbatches do not divide), the op is measured at the whole step's
// shape and its time divided by the microbatches, as op_timings are.
//
//===----------------------------------------------------------------------===//

#include "rondo/CostModel/CostModel.h"

#include "TG/IR/TGOps.h"
#include "rondo/Interpreter/Interpreter.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <mutex>

using namespace mlir;
using namespace rondo;

namespace {

/// The step's rows and tokens (the shape of its `tg.input` argument).
struct StepSize {
  int64_t rows = 0, tokens = 0;
};

StepSize stepSizeOf(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), tg::kInputAttr))
      if (auto t = dyn_cast<RankedTensorType>(arg.getType()))
        if (t.getRank() >= 1)
          return {t.getDimSize(0), t.getNumElements()};
  return {};
}

/// Values of @main that depend on the step's inputs or labels, computed once
/// per function (the planner costs every op of it for every M).
const llvm::DenseSet<Value> &perTokenValues(func::FuncOp func) {
  static std::mutex mu;
  static llvm::DenseMap<Operation *, llvm::DenseSet<Value>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = cache.try_emplace(func.getOperation());
  if (!inserted)
    return it->second;
  llvm::DenseSet<Value> &set = it->second;
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), tg::kInputAttr) ||
        func.getArgAttr(arg.getArgNumber(), tg::kLabelsAttr))
      set.insert(arg);
  func.walk([&](Operation *op) {
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return set.contains(v); }))
      for (Value r : op->getResults())
        set.insert(r);
  });
  return set;
}

/// The measured seconds of (op, microbatches, threads), including failures
/// (nullopt), so that each is measured once per compilation.
std::mutex cacheMutex;
llvm::StringMap<std::optional<double>> measured;

std::optional<double> measure(Operation *op, int64_t microbatches,
                              int threads) {
  auto func = op->getParentOfType<func::FuncOp>();
  if (!func)
    return std::nullopt;
  StepSize step = stepSizeOf(func);
  const llvm::DenseSet<Value> &perToken = perTokenValues(func);

  // Scale every per-token value's leading dimension, or none.
  bool scaled = microbatches > 1;
  auto scaleOf = [&](Value v) -> Type {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t || !perToken.contains(v) || t.getRank() == 0)
      return v.getType();
    int64_t d0 = t.getDimSize(0);
    if ((d0 != step.rows && d0 != step.tokens) || d0 % microbatches != 0) {
      scaled = false;
      return v.getType();
    }
    SmallVector<int64_t> shape(t.getShape());
    shape[0] = d0 / microbatches;
    return t.clone(shape);
  };
  SmallVector<Type> operandTypes, resultTypes;
  for (Value v : op->getOperands())
    operandTypes.push_back(scaleOf(v));
  for (Value v : op->getResults())
    resultTypes.push_back(scaleOf(v));
  if (!scaled) {
    operandTypes.assign(op->getOperandTypes().begin(),
                        op->getOperandTypes().end());
    resultTypes.assign(op->getResultTypes().begin(),
                       op->getResultTypes().end());
  }

  MLIRContext *ctx = op->getContext();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(op->getLoc());
  b.setInsertionPointToEnd(module->getBody());
  auto fn = func::FuncOp::create(b, op->getLoc(), "measure",
                                 b.getFunctionType(operandTypes, resultTypes));
  Block *body = fn.addEntryBlock();
  b.setInsertionPointToEnd(body);
  IRMapping mapping;
  for (auto [from, to] : llvm::zip(op->getOperands(), body->getArguments()))
    mapping.map(from, to);
  Operation *clone = b.clone(*op, mapping);
  for (auto [r, t] : llvm::zip(clone->getResults(), resultTypes))
    r.setType(t);
  func::ReturnOp::create(b, op->getLoc(), clone->getResults());
  // A shape the op does not accept (a scaled dimension it ties to an
  // unscaled one) leaves the op to the analytic model.
  {
    ScopedDiagnosticHandler quiet(ctx, [](Diagnostic &) { return success(); });
    if (failed(verify(clone)))
      return std::nullopt;
  }

  std::vector<HostBuffer> args;
  for (Type t : operandTypes) {
    auto tensor = dyn_cast<RankedTensorType>(t);
    FailureOr<ElementKind> kind =
        tensor ? elementKindOf(tensor) : FailureOr<ElementKind>(failure());
    if (failed(kind))
      return std::nullopt;
    HostBuffer buffer;
    buffer.kind = *kind;
    buffer.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
    int64_t n = tensor.getNumElements();
    // Small finite values (no denormals, no overflow in exp); indices and
    // labels of zero are valid for every table.
    if (*kind == ElementKind::F32) {
      buffer.f.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i)
        buffer.f[size_t(i)] = 0.25f * std::sin(0.37f * float(i % 1009) + 1);
    } else {
      buffer.i.assign(size_t(n), 0);
    }
    args.push_back(std::move(buffer));
  }
  FailureOr<double> seconds;
  {
    ScopedDiagnosticHandler quiet(ctx, [](Diagnostic &) { return success(); });
    seconds = timeKernels(fn, args, threads, /*budgetSeconds=*/0.02);
  }
  if (failed(seconds))
    return std::nullopt;
  return scaled || microbatches <= 1 ? *seconds : *seconds / microbatches;
}

} // namespace

std::optional<double> rondo::cost::measuredHostOpSeconds(Operation *op,
                                                         int64_t microbatches,
                                                         int threads) {
  std::string key;
  {
    llvm::raw_string_ostream os(key);
    os << opTimingKey(op) << " -> (";
    llvm::interleaveComma(op->getResultTypes(), os);
    os << ") / " << microbatches << " on " << threads;
  }
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto it = measured.find(key);
    if (it != measured.end())
      return it->second;
  }
  std::optional<double> seconds = measure(op, microbatches, threads);
  std::lock_guard<std::mutex> lock(cacheMutex);
  measured[key] = seconds;
  return seconds;
}
