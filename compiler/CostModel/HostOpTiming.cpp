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

#include "CostModel/CostModel.h"
#include "CostModel/KernelTimes.h"

#include "Dialect/TG/IR/TGOps.h"
#include "Interpreter/Interpreter.h"

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
using rondo::cost::leastSeconds;
using rondo::cost::typicalSeconds;

namespace {

/// The step's rows and tokens (the shape of its `tg.input` argument), and
/// the tokens that have a next token to predict (a causal LM's shifted
/// labels: rows x (seq - 1)).
struct StepSize {
  int64_t rows = 0, tokens = 0, shiftedTokens = 0;
  bool isTokenDim(int64_t d) const {
    return d == rows || d == tokens || d == shiftedTokens;
  }
};

StepSize stepSizeOf(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), tg::kInputAttr))
      if (auto t = dyn_cast<RankedTensorType>(arg.getType()))
        if (t.getRank() >= 1)
          return {t.getDimSize(0), t.getNumElements(),
                  t.getNumElements() - t.getDimSize(0)};
  return {};
}

/// Values of @main that depend on the step's inputs or labels: the ones a
/// microbatch holds a share of.
llvm::DenseSet<Value> perTokenValues(func::FuncOp func) {
  llvm::DenseSet<Value> set;
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

/// The type of `v` in a microbatch of 1/microbatches of the step: its
/// leading dimension divided when it is per-token and that dimension is the
/// step's rows or tokens; `scaled` turns false when such a dimension is not
/// a multiple of the microbatches. (A shape this gets wrong fails the op's
/// verifier, and the op is priced by the roofline.)
Type microbatchType(Value v, const llvm::DenseSet<Value> &perToken,
                    StepSize step, int64_t microbatches, bool &scaled) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !perToken.contains(v) || t.getRank() == 0)
    return v.getType();
  int64_t d0 = t.getDimSize(0);
  // A per-token value led by another dimension sums over the tokens (a
  // weight's gradient): a microbatch makes all of it.
  if (!step.isTokenDim(d0))
    return v.getType();
  if (d0 % microbatches != 0) {
    scaled = false;
    return v.getType();
  }
  SmallVector<int64_t> shape(t.getShape());
  shape[0] = d0 / microbatches;
  return t.clone(shape);
}

/// Inputs for a function's arguments: small finite floats (no denormals, no
/// overflow in exp); indices and labels of zero, valid for every table.
std::optional<std::vector<HostBuffer>> syntheticArguments(TypeRange types) {
  std::vector<HostBuffer> args;
  for (Type t : types) {
    auto tensor = dyn_cast<RankedTensorType>(t);
    FailureOr<ElementKind> kind =
        tensor ? elementKindOf(tensor) : FailureOr<ElementKind>(failure());
    if (failed(kind))
      return std::nullopt;
    HostBuffer buffer;
    buffer.kind = *kind;
    buffer.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
    int64_t n = tensor.getNumElements();
    if (*kind == ElementKind::F32) {
      buffer.f.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i)
        buffer.f[size_t(i)] = 0.25f * std::sin(0.37f * float(i % 1009) + 1);
    } else {
      buffer.i.assign(size_t(n), 0);
    }
    args.push_back(std::move(buffer));
  }
  return args;
}

/// timeKernels without diagnostics: a function the kernels refuse is
/// priced by the roofline instead.
std::optional<std::vector<double>> quietRuns(func::FuncOp fn,
                                             ArrayRef<HostBuffer> args,
                                             int threads, double budgetSeconds,
                                             int minRuns = 5) {
  ScopedDiagnosticHandler quiet(fn.getContext(),
                                [](Diagnostic &) { return success(); });
  FailureOr<std::vector<double>> runs =
      timeKernels(fn, args, threads, budgetSeconds, minRuns);
  if (failed(runs) || runs->empty())
    return std::nullopt;
  return std::move(*runs);
}

/// The measured seconds of (op, microbatches, threads), including failures
/// (nullopt), and the whole function's factors, so that each is measured
/// once per compilation.
std::mutex cacheMutex;
llvm::StringMap<std::optional<double>> measured;
llvm::StringMap<std::optional<double>> functionFactors;

/// Ops that run no kernel of their own: constants and tables made once at
/// start-up, the never-materialised causal mask, and reshapes (views).
bool runsNoKernel(Operation *op) {
  return isa<tg::ConstantOp, tg::RotaryTableOp, tg::CausalMaskOp, tg::ReshapeOp,
             func::ReturnOp>(op);
}

/// An LM head loss whose gradient follows in its function: the trainer
/// computes both in one call (kern-fuse-linear-cross-entropy), which takes
/// the gradient's time alone (each chunk's logits once, for the loss and
/// then for its gradient), so the loss's own time is none.
bool fusedIntoItsGradient(Operation *op) {
  auto loss = dyn_cast<tg::LinearCrossEntropyOp>(op);
  if (!loss)
    return false;
  return llvm::any_of(loss->getOperand(2).getUsers(), [&](Operation *user) {
    auto grad = dyn_cast<tg::LinearCrossEntropyGradOp>(user);
    return grad && grad->getBlock() == op->getBlock() &&
           op->isBeforeInBlock(grad) &&
           llvm::equal(grad->getOperands().take_front(3), op->getOperands());
  });
}

std::optional<double> measure(Operation *op, int64_t microbatches,
                              int threads) {
  auto func = op->getParentOfType<func::FuncOp>();
  if (!func)
    return std::nullopt;
  StepSize step = stepSizeOf(func);
  llvm::DenseSet<Value> perToken = perTokenValues(func);

  // Scale every per-token value's leading dimension, or none.
  bool scaled = microbatches > 1;
  auto scaleOf = [&](Value v) {
    return microbatchType(v, perToken, step, microbatches, scaled);
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

  std::optional<std::vector<HostBuffer>> args =
      syntheticArguments(operandTypes);
  if (!args)
    return std::nullopt;
  std::optional<std::vector<double>> runs =
      quietRuns(fn, *args, threads, /*budgetSeconds=*/0.02);
  if (!runs)
    return std::nullopt;
  double seconds = leastSeconds(*runs);
  return scaled || microbatches <= 1 ? seconds : seconds / microbatches;
}

/// Runs of the kernels of the whole function at the microbatch's shape, in
/// its order with its buffers, or nullopt when it cannot be run so.
std::optional<std::vector<double>>
measureFunction(func::FuncOp func, int64_t microbatches, int threads) {
  OwningOpRef<func::FuncOp> clone = func.clone();
  StepSize step = stepSizeOf(*clone);
  llvm::DenseSet<Value> perToken = perTokenValues(*clone);
  bool scaled = true;
  SmallVector<std::pair<Value, Type>> retype;
  for (BlockArgument arg : clone->getArguments())
    retype.push_back(
        {arg, microbatchType(arg, perToken, step, microbatches, scaled)});
  clone->walk([&](Operation *op) {
    for (Value r : op->getResults())
      retype.push_back(
          {r, microbatchType(r, perToken, step, microbatches, scaled)});
  });
  if (!scaled)
    return std::nullopt;
  for (auto [value, type] : retype)
    value.setType(type);
  auto ret = cast<func::ReturnOp>(clone->getBody().front().getTerminator());
  clone->setFunctionType(FunctionType::get(
      clone->getContext(), clone->getBody().front().getArgumentTypes(),
      ret.getOperandTypes()));
  {
    ScopedDiagnosticHandler quiet(clone->getContext(),
                                  [](Diagnostic &) { return success(); });
    if (failed(verify(*clone)))
      return std::nullopt;
  }
  std::optional<std::vector<HostBuffer>> args =
      syntheticArguments(clone->getArgumentTypes());
  if (!args)
    return std::nullopt;
  // Half of the runs before the ops alone are measured and half after
  // (functionFactor), each at least three.
  return quietRuns(*clone, *args, threads, /*budgetSeconds=*/0.15,
                   /*minRuns=*/3);
}

/// Ops measured alone run on warm caches, each after itself; in a step
/// each follows others that evicted part of what it reads. The whole
/// function's typical kernel time at the microbatch's shape over the sum
/// of its ops' least alone carries that into every op, so that the ops of
/// a step sum to what the function's kernels typically take in sequence.
/// Its runs are taken before and after the ops', up to a second apart: the
/// machine's speed moves on that scale. nullopt when the function cannot be
/// run at that shape.
std::optional<double> functionFactor(func::FuncOp func, int64_t microbatches,
                                     int threads) {
  std::string key = (func.getSymName() + " / " + llvm::Twine(microbatches) +
                     " on " + llvm::Twine(threads))
                        .str();
  {
    std::lock_guard<std::mutex> lock(cacheMutex);
    auto it = functionFactors.find(key);
    if (it != functionFactors.end())
      return it->second;
  }
  std::optional<double> factor;
  if (std::optional<std::vector<double>> runs =
          measureFunction(func, microbatches, threads)) {
    double alone = 0;
    for (Operation &op : func.getBody().front())
      if (std::optional<double> s =
              rondo::cost::measuredHostOpSeconds(&op, microbatches, threads))
        alone += *s;
    if (std::optional<std::vector<double>> after =
            measureFunction(func, microbatches, threads))
      runs->insert(runs->end(), after->begin(), after->end());
    double whole = typicalSeconds(*runs);
    if (alone > 0 && std::isfinite(whole / alone))
      factor = whole / alone;
  }
  std::lock_guard<std::mutex> lock(cacheMutex);
  functionFactors[key] = factor;
  return factor;
}

} // namespace

std::optional<double>
rondo::cost::measuredHostOpSecondsInStep(Operation *op, int64_t microbatches,
                                         int threads,
                                         double concurrentSlowdown) {
  std::optional<double> alone =
      measuredHostOpSeconds(op, microbatches, threads);
  auto func = op->getParentOfType<func::FuncOp>();
  if (!alone || !func)
    return alone;
  double seconds = *alone;
  if (std::optional<double> factor =
          functionFactor(func, microbatches, threads))
    seconds *= *factor;
  return seconds * concurrentSlowdown;
}

std::optional<double> rondo::cost::measuredHostOpSeconds(Operation *op,
                                                         int64_t microbatches,
                                                         int threads) {
  if (runsNoKernel(op))
    return std::nullopt;
  if (fusedIntoItsGradient(op))
    return 0.0;
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
