//===- Interpreter.cpp - Run a tg function on the CPU -----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The function is lowered to kernel calls by the same patterns as a stage
// function (convert-tg-to-kern), and every `kern.call` runs the CPU kernel
// of that name from a table generated from KernelList.def, so a result
// computed here is what a compiled trainer computes, and an op the emitter
// cannot lower fails here the same way. Integer tensors (i64 ids, i1 masks)
// are stored as int64. Kernels abort on malformed input, as they have no
// error channel, so everything that depends on data (ids, labels) is checked
// here first and reported as a diagnostic instead.
//
// Values live in shared storage: a reshape aliases its operand's buffer, and
// a buffer is released after its last use, as in the emitted program.
//
//===----------------------------------------------------------------------===//

#include "Interpreter/Interpreter.h"

#include "Conversion/TGToKern/Passes.h"
#include "Dialect/Kern/Transforms/Passes.h"
#include "Dialect/TG/IR/TGOps.h"
#include "Kernels.h"
#include "rondo/runtime/RotaryTable.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

using namespace mlir;
using namespace rondo;
using llvm::ArrayRef;
using llvm::SmallVector;

//===----------------------------------------------------------------------===//
// HostBuffer
//===----------------------------------------------------------------------===//

const char *rondo::elementKindName(ElementKind kind) {
  switch (kind) {
  case ElementKind::F32:
    return "f32";
  case ElementKind::I64:
    return "i64";
  case ElementKind::I1:
    return "i1";
  }
  return "?";
}

int64_t HostBuffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string HostBuffer::describe() const {
  std::string s = elementKindName(kind);
  s += "[";
  for (auto [k, d] : llvm::enumerate(shape))
    s += (k ? ", " : "") + std::to_string(d);
  return s + "]";
}

HostBuffer HostBuffer::floats(ArrayRef<int64_t> shape,
                              std::vector<float> data) {
  HostBuffer b;
  b.kind = ElementKind::F32;
  b.shape.assign(shape.begin(), shape.end());
  b.f = std::move(data);
  return b;
}

HostBuffer HostBuffer::ints(ArrayRef<int64_t> shape,
                            std::vector<int64_t> data) {
  HostBuffer b;
  b.kind = ElementKind::I64;
  b.shape.assign(shape.begin(), shape.end());
  b.i = std::move(data);
  return b;
}

HostBuffer HostBuffer::bools(ArrayRef<int64_t> shape,
                             std::vector<int64_t> data) {
  HostBuffer b = ints(shape, std::move(data));
  b.kind = ElementKind::I1;
  return b;
}

FailureOr<ElementKind> rondo::elementKindOf(RankedTensorType type) {
  Type e = type.getElementType();
  if (e.isF32())
    return ElementKind::F32;
  if (e.isInteger(64))
    return ElementKind::I64;
  if (e.isInteger(1))
    return ElementKind::I1;
  return failure();
}

std::string rondo::argumentName(func::FuncOp func, unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, tg::kParamAttr))
    return name.str();
  if (auto name = func.getArgAttrOfType<StringAttr>(index, tg::kInputAttr))
    return name.str();
  if (func.getArgAttr(index, tg::kLabelsAttr))
    return "labels";
  if (func.getArgAttr(index, tg::kLossScaleAttr))
    return "loss_scale";
  return "arg" + std::to_string(index);
}

std::string rondo::resultName(func::FuncOp func, unsigned index) {
  if (auto name =
          func.getResultAttrOfType<StringAttr>(index, tg::kResultNameAttr))
    return name.str();
  if (auto of = func.getResultAttrOfType<StringAttr>(index, tg::kGradOfAttr))
    return of.str() + ".grad";
  return "result" + std::to_string(index);
}

//===----------------------------------------------------------------------===//
// The interpreter
//===----------------------------------------------------------------------===//

namespace {

/// A value during execution: like HostBuffer, but the storage is shared so
/// that reshapes alias it.
struct Tensor {
  ElementKind kind = ElementKind::F32;
  SmallVector<int64_t> shape;
  std::shared_ptr<std::vector<float>> f;
  std::shared_ptr<std::vector<int64_t>> i;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

Tensor allocate(RankedTensorType type, ElementKind kind) {
  Tensor t;
  t.kind = kind;
  t.shape.assign(type.getShape().begin(), type.getShape().end());
  if (kind == ElementKind::F32)
    t.f = std::make_shared<std::vector<float>>(t.numel());
  else
    t.i = std::make_shared<std::vector<int64_t>>(t.numel());
  return t;
}

cpu::Shape shapeOf(ArrayRef<int64_t> dims) {
  return cpu::Shape(dims.data(), int(dims.size()));
}
cpu::CFView cview(const Tensor &t) { return {t.f->data(), shapeOf(t.shape)}; }
cpu::FView view(Tensor &t) { return {t.f->data(), shapeOf(t.shape)}; }
cpu::IView iview(const Tensor &t) { return {t.i->data(), shapeOf(t.shape)}; }
cpu::MIView miview(Tensor &t) { return {t.i->data(), shapeOf(t.shape)}; }

//===----------------------------------------------------------------------===//
// Kernel dispatch: name -> CPU kernel, generated from KernelList.def
//===----------------------------------------------------------------------===//

/// One bound argument of a call; the kernel's parameter type picks the field.
struct Arg {
  cpu::CFView input;
  cpu::CBView bf16Input;
  cpu::BView bf16Output;
  cpu::IView intInput;
  cpu::FView output;
  cpu::MIView intOutput;
  const cpu::CFView *inputList = nullptr;
  const cpu::IView *intInputList = nullptr;
  float *lossSum = nullptr;
  int *flag = nullptr;
  float f32 = 0;
  bool b = false;
  int64_t i64 = 0;
  const int64_t *array = nullptr;
  cpu::UnaryKind unary = cpu::UnaryKind::Neg;
  cpu::BinaryKind binary = cpu::BinaryKind::Add;
};

template <class T> T as(const Arg &a);
template <> cpu::CFView as(const Arg &a) { return a.input; }
template <> cpu::CBView as(const Arg &a) { return a.bf16Input; }
template <> cpu::BView as(const Arg &a) { return a.bf16Output; }
template <> cpu::IView as(const Arg &a) { return a.intInput; }
template <> cpu::FView as(const Arg &a) { return a.output; }
template <> cpu::MIView as(const Arg &a) { return a.intOutput; }
template <> const cpu::CFView *as(const Arg &a) { return a.inputList; }
template <> const cpu::IView *as(const Arg &a) { return a.intInputList; }
template <> float *as(const Arg &a) { return a.lossSum; }
template <> int *as(const Arg &a) { return a.flag; }
template <> float as(const Arg &a) { return a.f32; }
template <> bool as(const Arg &a) { return a.b; }
template <> int as(const Arg &a) { return int(a.i64); }
template <> int64_t as(const Arg &a) { return a.i64; }
template <> const int64_t *as(const Arg &a) { return a.array; }
template <> cpu::UnaryKind as(const Arg &a) { return a.unary; }
template <> cpu::BinaryKind as(const Arg &a) { return a.binary; }

template <class... P, size_t... I>
void invokeWith(void (*kernel)(P...), ArrayRef<Arg> args,
                std::index_sequence<I...>) {
  kernel(as<P>(args[I])...);
}
template <class... P> void invoke(void (*kernel)(P...), ArrayRef<Arg> args) {
  invokeWith(kernel, args, std::index_sequence_for<P...>{});
}

using Invoker = void (*)(ArrayRef<Arg>);
Invoker lookupInvoker(StringRef name) {
  using namespace rondo::cpu;
  static const llvm::StringMap<Invoker> table = {
#define RONDO_KERNEL(NAME, PARAMS)                                             \
  {#NAME, +[](ArrayRef<Arg> args) {                                            \
     invoke(static_cast<void(*) PARAMS>(&cpu::NAME), args);                    \
   }},
#include "KernelList.def"
  };
  return table.lookup(name);
}

template <class Enum> Enum enumerator(Attribute a, ArrayRef<StringRef> names) {
  return Enum(llvm::find(names, cast<StringAttr>(a).getValue()) -
              names.begin());
}

class Interpreter {
public:
  explicit Interpreter(func::FuncOp func, bool timeKernels = false)
      : func(func), timeKernels(timeKernels) {}
  FailureOr<std::vector<HostBuffer>> run(ArrayRef<HostBuffer> args);
  /// With timeKernels: the seconds the last run spent inside kernels.
  double kernelSeconds = 0;

private:
  LogicalResult execute(Operation *op);
  LogicalResult call(kern::CallOp op);
  LogicalResult checkTypes(Operation *op);
  LogicalResult checkIds(Operation *op, const Tensor &ids, int64_t rows);

  const Tensor &get(Value v) { return env.find(v)->second; }
  /// A fresh buffer for result `k` of `op`.
  Tensor &result(Operation *op, unsigned k = 0) {
    auto type = cast<RankedTensorType>(op->getResult(k).getType());
    return env[op->getResult(k)] = allocate(type, *elementKindOf(type));
  }

  struct ValueHash {
    size_t operator()(Value v) const { return hash_value(v); }
  };
  func::FuncOp func;
  bool timeKernels;
  /// Node-based, so that references to operands stay valid while results
  /// are inserted.
  std::unordered_map<Value, Tensor, ValueHash> env;
};

FailureOr<std::vector<HostBuffer>> Interpreter::run(ArrayRef<HostBuffer> args) {
  if (!func.getBody().hasOneBlock())
    return func.emitError("rondo-run executes functions of one block"),
           failure();
  Block &block = func.getBody().front();
  if (args.size() != block.getNumArguments())
    return func.emitError("@")
               << func.getSymName() << " takes " << block.getNumArguments()
               << " arguments, " << args.size() << " given",
           failure();
  for (auto [k, arg] : llvm::enumerate(block.getArguments())) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    FailureOr<ElementKind> kind =
        type ? elementKindOf(type) : FailureOr<ElementKind>(failure());
    if (failed(kind))
      return func.emitError("argument '")
                 << argumentName(func, k) << "' has type " << arg.getType()
                 << ", which the interpreter does not execute (f32, i64 "
                    "and i1 tensors only)",
             failure();
    const HostBuffer &given = args[k];
    if (given.kind != *kind ||
        ArrayRef<int64_t>(given.shape) != type.getShape()) {
      HostBuffer expected;
      expected.kind = *kind;
      expected.shape.assign(type.getShape().begin(), type.getShape().end());
      return func.emitError("argument '")
                 << argumentName(func, k) << "' expects " << expected.describe()
                 << ", got " << given.describe(),
             failure();
    }
    size_t have =
        given.kind == ElementKind::F32 ? given.f.size() : given.i.size();
    if (int64_t(have) != given.numel())
      return func.emitError("argument '")
                 << argumentName(func, k) << "' holds " << have
                 << " elements, its shape " << given.describe() << " needs "
                 << given.numel(),
             failure();
    Tensor t;
    t.kind = given.kind;
    t.shape = given.shape;
    if (given.kind == ElementKind::F32)
      t.f = std::make_shared<std::vector<float>>(given.f);
    else
      t.i = std::make_shared<std::vector<int64_t>>(given.i);
    env[arg] = std::move(t);
  }

  // Remaining uses of each value, to release buffers as the emitter does.
  llvm::DenseMap<Value, unsigned> uses;
  for (Operation &op : block)
    for (Value v : op.getOperands())
      ++uses[v];

  for (Operation &op : block) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      std::vector<HostBuffer> results;
      for (Value v : ret.getOperands()) {
        const Tensor &t = get(v);
        HostBuffer b;
        b.kind = t.kind;
        b.shape = t.shape;
        if (t.kind == ElementKind::F32)
          b.f = *t.f;
        else
          b.i = *t.i;
        results.push_back(std::move(b));
      }
      return results;
    }
    if (failed(checkTypes(&op)) || failed(execute(&op)))
      return failure();
    for (Value v : op.getOperands())
      if (--uses[v] == 0)
        env.erase(v);
  }
  return func.emitError("@") << func.getSymName() << " has no func.return",
         failure();
}

/// Every operand and result must be a ranked tensor of a kind the
/// interpreter stores, with a rank the kernels accept.
LogicalResult Interpreter::checkTypes(Operation *op) {
  for (Type t :
       llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes())) {
    auto type = dyn_cast<RankedTensorType>(t);
    if (!type || failed(elementKindOf(type)))
      return op->emitError("the interpreter does not execute values of type ")
             << t << " (f32, i64 and i1 tensors only)";
    if (type.getRank() > cpu::kMaxRank)
      return op->emitError("rank ")
             << type.getRank() << " exceeds the kernels' maximum of "
             << cpu::kMaxRank;
  }
  return success();
}

LogicalResult Interpreter::checkIds(Operation *op, const Tensor &ids,
                                    int64_t rows) {
  for (int64_t k = 0, n = ids.numel(); k < n; ++k) {
    int64_t id = (*ids.i)[k];
    if (id < -rows || id >= rows)
      return op->emitError("index ")
             << id << " (element " << k << " of the indices) is out of range "
             << "for a table of " << rows << " rows";
  }
  return success();
}

LogicalResult Interpreter::execute(Operation *op) {
  // An op whose results are all empty has nothing to compute (ONNX allows
  // zero-sized tensors; the kernels need not see them).
  if (op->getNumResults() > 0 && llvm::all_of(op->getResultTypes(), [](Type t) {
        return cast<RankedTensorType>(t).getNumElements() == 0;
      })) {
    for (unsigned k = 0; k < op->getNumResults(); ++k)
      result(op, k);
    return success();
  }

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](kern::CallOp c) { return call(c); })
      .Case([&](tg::ConstantOp c) -> LogicalResult {
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!dense)
          return c.emitError("the interpreter needs dense constants, got ")
                 << c.getValue();
        Tensor &out = result(c);
        if (out.kind == ElementKind::F32)
          llvm::copy(dense.getValues<float>(), out.f->begin());
        else if (out.kind == ElementKind::I64)
          llvm::copy(dense.getValues<int64_t>(), out.i->begin());
        else
          for (auto [k, b] : llvm::enumerate(dense.getValues<bool>()))
            (*out.i)[k] = b;
        return success();
      })
      .Case([&](tg::ReshapeOp r) -> LogicalResult {
        // Same elements, new shape: alias the operand's storage.
        Tensor t = get(r.getX());
        auto type = cast<RankedTensorType>(r.getType());
        t.shape.assign(type.getShape().begin(), type.getShape().end());
        env[r] = std::move(t);
        return success();
      })
      .Case([&](tg::RotaryTableOp r) -> LogicalResult {
        Tensor &out = result(r);
        ArrayRef<float> freqs = r.getFreqs();
        rt::fillRotaryTable(out.f->data(), out.numel(),
                            out.shape[out.shape.size() - 2], freqs.size(),
                            freqs.data(), r.getKind() == tg::UnaryKind::sin,
                            r.getScale().convertToFloat());
        return success();
      })
      .Default([&](Operation *op) -> LogicalResult {
        return op->emitError("the interpreter has no kernel for '")
               << op->getName() << "'";
      });
}

LogicalResult Interpreter::call(kern::CallOp op) {
  std::string error;
  FailureOr<SmallVector<kern::BoundParam>> bound = kern::bindParams(op, error);
  if (failed(bound))
    return op.emitOpError(error);
  StringRef kernel = op.getKernel();
  auto input = [&](int k) -> const Tensor & { return get(op.getInputs()[k]); };
  // Ids the kernels would abort on.
  if (kernel == "gatherRows" &&
      failed(checkIds(op, input(1), input(0).shape[0])))
    return failure();
  if (kernel == "gatherRowsBackward" &&
      failed(checkIds(
          op, input(0),
          cast<RankedTensorType>(op.getResult(0).getType()).getDimSize(0))))
    return failure();

  // Accumulating results start from (and reuse) their init's storage.
  for (auto [k, init] : llvm::enumerate(op.getInits()))
    env[op.getResult(k)] = get(init);
  for (unsigned k = op.getInits().size(); k < op.getNumResults(); ++k)
    result(op, k);

  std::vector<Arg> args(bound->size());
  std::vector<cpu::CFView> list;
  std::vector<cpu::IView> intList;
  int flag = 0;
  for (auto [a, b] : llvm::zip(args, *bound)) {
    switch (b.param->kind) {
    case kern::ParamKind::Input:
      a.input = cview(input(b.operand));
      break;
    case kern::ParamKind::IntInput:
      a.intInput = iview(input(b.operand));
      break;
    case kern::ParamKind::Bf16Input:
    case kern::ParamKind::Bf16Output:
      // Not reached: no bf16 value gets this far (checkTypes), since only
      // kern-bf16-storage makes them, for GPU trainers.
      return op.emitError("the interpreter does not execute bf16 storage");
    case kern::ParamKind::InputList:
      for (int k = 0; k < b.count; ++k)
        list.push_back(cview(input(b.operand + k)));
      a.inputList = list.data();
      break;
    case kern::ParamKind::IntInputList:
      for (int k = 0; k < b.count; ++k)
        intList.push_back(iview(input(b.operand + k)));
      a.intInputList = intList.data();
      break;
    case kern::ParamKind::ListSize:
      a.i64 = b.count;
      break;
    case kern::ParamKind::Output: {
      Tensor &out = env.find(op.getResult(b.result))->second;
      // A skipped output has null data: the kernel does not compute it.
      a.output =
          b.skipped ? cpu::FView{nullptr, shapeOf(out.shape)} : view(out);
      break;
    }
    case kern::ParamKind::IntOutput:
      a.intOutput = miview(env.find(op.getResult(b.result))->second);
      break;
    case kern::ParamKind::LossOutput:
      a.lossSum = env.find(op.getResult(b.result))->second.f->data();
      break;
    case kern::ParamKind::ErrorFlag:
      a.flag = &flag;
      break;
    case kern::ParamKind::F32:
      a.f32 = b.attr ? float(cast<FloatAttr>(b.attr).getValueAsDouble())
                     : (*input(b.operand).f)[0];
      break;
    case kern::ParamKind::Bool:
      a.b = cast<BoolAttr>(b.attr).getValue();
      break;
    case kern::ParamKind::I32:
    case kern::ParamKind::I64:
      a.i64 = cast<IntegerAttr>(b.attr).getInt();
      break;
    case kern::ParamKind::I64Array:
      a.array = cast<DenseI64ArrayAttr>(b.attr).asArrayRef().data();
      break;
    case kern::ParamKind::UnaryKind:
      a.unary = enumerator<cpu::UnaryKind>(b.attr, kern::unaryKindNames());
      break;
    case kern::ParamKind::BinaryKind:
      a.binary = enumerator<cpu::BinaryKind>(b.attr, kern::binaryKindNames());
      break;
    }
  }
  if (timeKernels) {
    auto start = std::chrono::steady_clock::now();
    lookupInvoker(kernel)(args);
    kernelSeconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  } else {
    lookupInvoker(kernel)(args);
  }
  if (!flag)
    return success();
  auto ignore = op.getArgsAttr().getAs<IntegerAttr>("ignoreIndex");
  if (kernel == "crossEntropy")
    return op.emitError("a label is outside the vocabulary of ")
           << input(0).shape.back() << " (and is not the "
           << "ignore index " << ignore.getInt() << ")";
  if (kernel == "linearCrossEntropy" || kernel == "linearCrossEntropyWithGrad")
    return op.emitError("a label is outside the vocabulary (and is not "
                        "the ignore index ")
           << ignore.getInt() << ")";
  return op.emitError("kernel '") << kernel << "' reported invalid data";
}

} // namespace

FailureOr<std::vector<HostBuffer>>
rondo::runFunction(func::FuncOp func, ArrayRef<HostBuffer> args) {
  // Lowered on a copy: the caller's function stays tg.
  OwningOpRef<func::FuncOp> lowered = func.clone();
  if (failed(kern::convertToKernelCalls(*lowered)))
    return failure();
  Interpreter interpreter(*lowered);
  return interpreter.run(args);
}

FailureOr<std::vector<double>>
rondo::timeKernels(func::FuncOp func, ArrayRef<HostBuffer> args, int threads,
                   double budgetSeconds, int minRuns) {
  OwningOpRef<func::FuncOp> lowered = func.clone();
  if (failed(kern::convertToKernelCalls(*lowered)))
    return failure();
  // The calls a trainer's stage makes: the LM head's loss and gradient in
  // one (kern-fuse-linear-cross-entropy). Without it the README's shape
  // (512 tokens a microbatch) timed 1.4x the trainer's step.
  kern::fuseLinearCrossEntropy(*lowered);
  // As in a trainer: every GEMM runs on the calling (worker's) thread.
  const int blasBefore = openblas_get_num_threads();
  openblas_set_num_threads(1);
#ifdef _OPENMP
  const int ompBefore = omp_get_max_threads();
  omp_set_num_threads(std::max(1, threads));
#endif
  std::vector<double> runs;
  double total = 0;
  bool ok = true;
  // One untimed run warms caches and pages, as every step after a
  // trainer's first finds them.
  for (int rep = -1; rep < minRuns || (total < budgetSeconds && rep < 200);
       ++rep) {
    Interpreter interpreter(*lowered, /*timeKernels=*/true);
    if (failed(interpreter.run(args))) {
      ok = false;
      break;
    }
    if (rep < 0)
      continue;
    runs.push_back(interpreter.kernelSeconds);
    total += interpreter.kernelSeconds;
  }
#ifdef _OPENMP
  omp_set_num_threads(ompBefore);
#endif
  openblas_set_num_threads(blasBefore);
  if (!ok)
    return failure();
  return runs;
}
