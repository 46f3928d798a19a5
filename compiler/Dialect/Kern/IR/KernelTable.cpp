//===- KernelTable.cpp - The compiler's view of KernelList.def ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Parameter kinds come from the list's C++ types through templates over the
// function type `void PARAMS` (only declarations of Kernels.h are used, so
// the compiler links nothing of the kernel library); parameter names come
// from the same text, stringised.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/IR/KernOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include "Kernels.h"

#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace {

template <class T> struct KindOf;
#define RONDO_KIND(type, kind)                                                 \
  template <> struct KindOf<type> {                                            \
    static constexpr ParamKind value = ParamKind::kind;                        \
  };
RONDO_KIND(cpu::CFView, Input)
RONDO_KIND(cpu::CBView, Bf16Input)
RONDO_KIND(cpu::IView, IntInput)
RONDO_KIND(const cpu::CFView *, InputList)
RONDO_KIND(const cpu::IView *, IntInputList)
RONDO_KIND(cpu::FView, Output)
RONDO_KIND(cpu::BView, Bf16Output)
RONDO_KIND(cpu::MIView, IntOutput)
RONDO_KIND(float *, LossOutput)
RONDO_KIND(int *, ErrorFlag)
RONDO_KIND(float, F32)
RONDO_KIND(bool, Bool)
RONDO_KIND(int, I32)
RONDO_KIND(int64_t, I64)
RONDO_KIND(const int64_t *, I64Array)
RONDO_KIND(cpu::UnaryKind, UnaryKind)
RONDO_KIND(cpu::BinaryKind, BinaryKind)
#undef RONDO_KIND

template <class F> struct Signature;
template <class... Args> struct Signature<void(Args...)> {
  static std::vector<ParamKind> kinds() { return {KindOf<Args>::value...}; }
};

/// "(CFView x, float eps, FView y)" -> {"x", "eps", "y"}.
std::vector<std::string> paramNames(StringRef text) {
  std::vector<std::string> names;
  text = text.trim().drop_front().drop_back(); // the parentheses
  SmallVector<StringRef> pieces;
  text.split(pieces, ',');
  for (StringRef p : pieces) {
    p = p.trim();
    size_t start = p.find_last_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    names.push_back(p.drop_front(start + 1).str());
  }
  return names;
}

KernelInfo makeKernel(const char *name, const char *params,
                      std::vector<ParamKind> kinds) {
  KernelInfo info{name, {}};
  std::vector<std::string> names = paramNames(params);
  for (size_t k = 0; k < kinds.size(); ++k) {
    ParamKind kind = kinds[k];
    // The int that follows an array is its length.
    if (kind == ParamKind::I32 && k > 0 &&
        (kinds[k - 1] == ParamKind::InputList ||
         kinds[k - 1] == ParamKind::IntInputList))
      kind = ParamKind::ListSize;
    info.params.push_back({kind, names[k]});
  }
  return info;
}

const std::vector<KernelInfo> &kernels() {
  using namespace rondo::cpu;
  static const std::vector<KernelInfo> list = {
#define RONDO_KERNEL(NAME, PARAMS)                                             \
  makeKernel(#NAME, #PARAMS, Signature<void PARAMS>::kinds()),
#include "KernelList.def"
  };
  return list;
}

} // namespace

const KernelInfo *rondo::kern::lookupKernel(StringRef name) {
  static const llvm::StringMap<const KernelInfo *> byName = [] {
    llvm::StringMap<const KernelInfo *> m;
    for (const KernelInfo &k : kernels())
      m[k.name] = &k;
    return m;
  }();
  return byName.lookup(name);
}

ArrayRef<KernelInfo> rondo::kern::kernelList() { return kernels(); }

ArrayRef<StringRef> rondo::kern::unaryKindNames() {
#define RONDO_NAME(name) #name,
  static const StringRef names[] = {RONDO_UNARY_KINDS(RONDO_NAME)};
  return names;
}

ArrayRef<StringRef> rondo::kern::binaryKindNames() {
  static const StringRef names[] = {RONDO_BINARY_KINDS(RONDO_NAME)};
  return names;
#undef RONDO_NAME
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

namespace {

bool isFloatTensor(Type t) {
  return cast<RankedTensorType>(t).getElementType().isF32();
}
bool isBf16Tensor(Type t) {
  return cast<RankedTensorType>(t).getElementType().isBF16();
}
bool isIntTensor(Type t) {
  return cast<RankedTensorType>(t).getElementType().isInteger();
}
bool isScalarFloat(Type t) {
  return isFloatTensor(t) && cast<RankedTensorType>(t).getNumElements() == 1;
}

} // namespace

FailureOr<SmallVector<BoundParam>> rondo::kern::bindParams(CallOp call,
                                                           std::string &error) {
  const KernelInfo *kernel = lookupKernel(call.getKernel());
  if (!kernel) {
    error = "calls '" + call.getKernel().str() +
            "', which is not a kernel of KernelList.def";
    return failure();
  }
  auto fail = [&](const KernelParam &p, const Twine &what) {
    error =
        ("parameter '" + p.name + "' of kernel '" + kernel->name + "' " + what)
            .str();
    return failure();
  };
  DictionaryAttr args = call.getArgsAttr();
  auto arg = [&](const KernelParam &p) {
    return args ? args.get(p.name) : Attribute();
  };
  OperandRange inputs = call.getInputs();
  ResultRange results = call.getResults();
  ArrayRef<int64_t> skip =
      call.getSkip() ? *call.getSkip() : ArrayRef<int64_t>();
  unsigned nextInput = 0, nextResult = 0;
  SmallVector<BoundParam> bound;
  for (const KernelParam &p : kernel->params) {
    BoundParam b;
    b.param = &p;
    switch (p.kind) {
    case ParamKind::Input:
    case ParamKind::Bf16Input:
    case ParamKind::IntInput: {
      if (nextInput >= inputs.size())
        return fail(p, "has no input");
      Type t = inputs[nextInput].getType();
      bool ok = p.kind == ParamKind::Input       ? isFloatTensor(t)
                : p.kind == ParamKind::Bf16Input ? isBf16Tensor(t)
                                                 : isIntTensor(t);
      if (!ok)
        return fail(p, Twine("needs ") +
                           (p.kind == ParamKind::Input       ? "an f32"
                            : p.kind == ParamKind::Bf16Input ? "a bf16"
                                                             : "an integer") +
                           " tensor");
      b.operand = nextInput++;
      break;
    }
    case ParamKind::InputList:
    case ParamKind::IntInputList:
      b.operand = nextInput;
      b.count = inputs.size() - nextInput;
      for (; nextInput < inputs.size(); ++nextInput) {
        Type t = inputs[nextInput].getType();
        if (p.kind == ParamKind::InputList ? !isFloatTensor(t)
                                           : !isIntTensor(t))
          return fail(p, "takes tensors of another element type");
      }
      break;
    case ParamKind::ListSize:
      b.count = bound.back().count;
      break;
    case ParamKind::Output:
    case ParamKind::Bf16Output:
    case ParamKind::IntOutput:
    case ParamKind::LossOutput: {
      if (nextResult >= results.size())
        return fail(p, "has no result");
      Type t = results[nextResult].getType();
      bool ok = p.kind == ParamKind::Output       ? isFloatTensor(t)
                : p.kind == ParamKind::Bf16Output ? isBf16Tensor(t)
                : p.kind == ParamKind::IntOutput  ? isIntTensor(t)
                                                  : isScalarFloat(t);
      if (!ok)
        return fail(p, p.kind == ParamKind::LossOutput
                           ? "needs a one-element f32 result"
                           : "has a result of the wrong element type");
      b.result = nextResult++;
      b.skipped = llvm::is_contained(skip, b.result);
      if (b.skipped && p.kind != ParamKind::Output &&
          p.kind != ParamKind::Bf16Output)
        return fail(p, "cannot be skipped");
      break;
    }
    case ParamKind::ErrorFlag:
      break;
    case ParamKind::F32:
      if (Attribute a = arg(p)) {
        auto f = dyn_cast<FloatAttr>(a);
        if (!f || !f.getType().isF32())
          return fail(p, "needs an f32 attribute");
        b.attr = a;
        break;
      }
      if (nextInput >= inputs.size() ||
          !isScalarFloat(inputs[nextInput].getType()))
        return fail(p, "needs an `args` entry or a one-element f32 input");
      b.operand = nextInput++;
      break;
    case ParamKind::Bool:
    case ParamKind::I32:
    case ParamKind::I64:
    case ParamKind::I64Array:
    case ParamKind::UnaryKind:
    case ParamKind::BinaryKind: {
      Attribute a = arg(p);
      if (!a)
        return fail(p, "needs an `args` entry");
      bool ok = false;
      switch (p.kind) {
      case ParamKind::Bool:
        ok = isa<BoolAttr>(a);
        break;
      case ParamKind::I32:
      case ParamKind::I64:
        ok = isa<IntegerAttr>(a) && !isa<BoolAttr>(a);
        break;
      case ParamKind::I64Array:
        ok = isa<DenseI64ArrayAttr>(a);
        break;
      default: {
        auto s = dyn_cast<StringAttr>(a);
        ArrayRef<StringRef> names = p.kind == ParamKind::UnaryKind
                                        ? unaryKindNames()
                                        : binaryKindNames();
        ok = s && llvm::is_contained(names, s.getValue());
      }
      }
      if (!ok)
        return fail(p, "has an `args` entry of the wrong kind");
      b.attr = a;
      break;
    }
    }
    bound.push_back(b);
  }
  if (nextInput != inputs.size()) {
    error = "passes " + std::to_string(inputs.size()) + " inputs to '" +
            kernel->name + "', which takes " + std::to_string(nextInput);
    return failure();
  }
  if (nextResult != results.size()) {
    error = "has " + std::to_string(results.size()) + " results, '" +
            kernel->name + "' produces " + std::to_string(nextResult);
    return failure();
  }
  if (args)
    for (NamedAttribute entry : args) {
      bool known = llvm::any_of(bound, [&](const BoundParam &b) {
        return b.attr && b.param->name == entry.getName().getValue();
      });
      if (!known) {
        error = "has an `args` entry '" + entry.getName().str() +
                "' that no parameter of '" + kernel->name + "' takes";
        return failure();
      }
    }
  return bound;
}

bool rondo::kern::isBinaryOf(CallOp call, llvm::StringRef kind,
                             llvm::StringRef kernel) {
  if (!call || call.getKernel() != kernel || call.getInputs().size() != 2 ||
      !call.getInits().empty() || !call.getArgs())
    return false;
  auto k = dyn_cast_or_null<StringAttr>(call.getArgsAttr().get("kind"));
  return k && k.getValue() == kind;
}

bool rondo::kern::isHeadTransposeOf(CallOp call, llvm::StringRef kernel) {
  if (!call || call.getKernel() != kernel || !call.getArgs() ||
      !call.getInits().empty())
    return false;
  auto perm =
      dyn_cast_or_null<DenseI64ArrayAttr>(call.getArgsAttr().get("perm"));
  return perm && perm.asArrayRef() == ArrayRef<int64_t>{0, 2, 1, 3};
}

bool rondo::kern::isStorableBf16Product(CallOp call) {
  if (!call || call.getKernel() != "matmulBf16" || call->getNumResults() != 1 ||
      !cast<RankedTensorType>(call.getResult(0).getType())
           .getElementType()
           .isF32() ||
      !call.getArgs())
    return false;
  auto accumulate =
      dyn_cast_or_null<BoolAttr>(call.getArgsAttr().get("accumulate"));
  if (!accumulate)
    return false;
  if (!accumulate.getValue())
    return call.getInits().empty();
  if (call.getInits().size() != 1 || !call.getInits()[0].hasOneUse())
    return false;
  return isStorableBf16Product(call.getInits()[0].getDefiningOp<CallOp>());
}

CallOp rondo::kern::storeProductInBf16(CallOp product) {
  SmallVector<Value> inits;
  if (!product.getInits().empty())
    inits.push_back(
        storeProductInBf16(product.getInits()[0].getDefiningOp<CallOp>())
            .getResult(0));
  auto type = cast<RankedTensorType>(product.getResult(0).getType());
  OpBuilder b(product);
  return CallOp::create(
      b, product.getLoc(),
      TypeRange{RankedTensorType::get(type.getShape(),
                                      BFloat16Type::get(b.getContext()))},
      FlatSymbolRefAttr::get(b.getContext(), "matmulBf16ToBf16"),
      product.getInputs(), inits, product.getArgsAttr(), nullptr);
}

void rondo::kern::eraseProductChain(CallOp product) {
  while (product) {
    CallOp init = product.getInits().empty()
                      ? CallOp()
                      : product.getInits()[0].getDefiningOp<CallOp>();
    product.erase();
    product = init;
  }
}
