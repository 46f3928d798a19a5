//===- Bf16Storage.cpp - The kern-bf16-storage pass -----------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Decides, per stage function, which values live in bf16: the operands of
// matrix products (matmul, and the experts' expertMatmul and
// expertMatmulWeightGrad where their expert weights have a resident bf16
// copy: their bf16 kernels then read both operands without an fp32 copy),
// and attention's q, k and v (forward and backward), which its kernels used
// to round from fp32 copies at every call; then attention's output, dO and
// gradients where their readers take bf16 (storeAttentionInBf16).
// A value read only by products is produced in bf16 by its kernel's twin;
// any other gets a toBf16 copy in front of its products. Both round exactly
// where the products used to round their operands, so the bits stay.
//
// A device-resident weight whose stage function also takes its bf16 copy
// (the `param_bf16` argument convert-pipe-to-exec adds) is read from that
// copy: the trainer rounds it once per update, not once per microbatch. A
// frozen weight the plan holds in bf16 alone (its fp32 argument is
// `param_unbound`, which no launch binds) is read the same way, and its
// fp32 argument is then removed; a reader other than a product is an error.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/Kern/IR/KernelTable.h"
#include "Dialect/Kern/Transforms/Bf16Twins.h"
#include "Dialect/TG/IR/TGOps.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSwitch.h"

#include <functional>

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNBF16STORAGEPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

/// The kernel that computes `kernel`'s result from its leading operands in
/// bf16 (bf16Operands of them), or "" when `kernel` reads none in bf16: the
/// products (a and b) and attention (q, k and v, which cuDNN reads in bf16
/// and Rondo's kernels round to bf16 themselves).
StringRef bf16ProductTwin(StringRef kernel) {
  return llvm::StringSwitch<StringRef>(kernel)
      .Case("matmul", "matmulBf16")
      .Case("expertMatmul", "expertMatmulBf16")
      .Case("expertMatmulWeightGrad", "expertMatmulWeightGradBf16")
      .Case("attention", "attentionBf16")
      .Case("attentionBackward", "attentionBackwardBf16")
      .Default("");
}

/// The fused LM head's kernels that read its weight (operand 1) in bf16,
/// by the kernel they replace ("" for any other kernel).
StringRef lmHeadBf16WeightTwin(StringRef kernel) {
  return llvm::StringSwitch<StringRef>(kernel)
      .Case("linearCrossEntropy", "linearCrossEntropyBf16W")
      .Case("linearCrossEntropyBackward", "linearCrossEntropyBackwardBf16W")
      .Case("linearCrossEntropyWithGrad", "linearCrossEntropyWithGradBf16W")
      .Default("");
}

/// How many leading operands of a product its bf16 twin reads in bf16.
unsigned bf16Operands(Operation *product) {
  StringRef kernel = cast<CallOp>(product).getKernel();
  return kernel == "attention" || kernel == "attentionBackward" ? 3 : 2;
}

/// The calls this pass treats as products of one stage function.
using ProductSet = llvm::SmallPtrSet<Operation *, 32>;

/// One operand (a or b) of a product, and the reshapes between it and the
/// value it reads (outermost last).
struct ProductUse {
  OpOperand *operand;
  SmallVector<tg::ReshapeOp> chain;
};

/// `operand` and the reshapes between it and the value they reshape
/// (outermost last); that value is returned in `source`.
ProductUse useThroughReshapes(OpOperand &operand, Value &source) {
  ProductUse use{&operand, {}};
  Value v = operand.get();
  while (auto r = v.getDefiningOp<tg::ReshapeOp>()) {
    use.chain.push_back(r);
    v = r.getX();
  }
  std::reverse(use.chain.begin(), use.chain.end());
  source = v;
  return use;
}

/// Whether every use of `v`, through reshapes, is an operand a product
/// reads in bf16 (a function result or any other reader is not).
bool onlyProducts(Value v, const ProductSet &products) {
  for (OpOperand &use : v.getUses()) {
    if (auto r = dyn_cast<tg::ReshapeOp>(use.getOwner())) {
      if (!onlyProducts(r.getResult(), products))
        return false;
      continue;
    }
    // Those are the leading operands (inputs come before inits).
    if (!products.contains(use.getOwner()) ||
        use.getOperandNumber() >= bf16Operands(use.getOwner()))
      return false;
  }
  return true;
}

/// Points `use` at `stored` (bf16), rebuilding its reshapes in bf16 just in
/// front of the product.
void redirect(ProductUse &use, Value stored) {
  OpBuilder b(use.operand->getOwner());
  for (tg::ReshapeOp r : use.chain)
    stored = tg::ReshapeOp::create(b, r.getLoc(), asBf16(r.getType()), stored);
  use.operand->set(stored);
}

/// Erases the reshapes of `v` that nothing reads any more.
void eraseDeadReshapes(Value v) {
  for (Operation *user : llvm::make_early_inc_range(v.getUsers()))
    if (auto r = dyn_cast<tg::ReshapeOp>(user)) {
      eraseDeadReshapes(r.getResult());
      if (r->use_empty())
        r.erase();
    }
}

using UsesBySource = llvm::MapVector<Value, SmallVector<ProductUse>>;

/// Replaces `producer` by its bf16 twin when every result the twin stores in
/// bf16 is read only by products (a skipped or unread result stays unread):
/// each such result's products then read the twin's result; results the
/// twin keeps in fp32 keep their readers. The caller erases `producer` on
/// success.
LogicalResult storeResultsInBf16(CallOp producer, UsesBySource &bySource,
                                 const ProductSet &products) {
  std::optional<Bf16ResultTwin> twin = bf16ResultTwin(producer);
  if (!twin)
    return failure();
  for (auto [k, r] : llvm::enumerate(producer->getResults()))
    if (twin->bf16[k] && !r.use_empty() &&
        (!bySource.count(r) || !onlyProducts(r, products)))
      return failure();
  CallOp stored = createBf16ResultTwin(producer, *twin);
  for (auto [k, r] : llvm::enumerate(producer->getResults())) {
    if (!twin->bf16[k]) {
      r.replaceAllUsesWith(stored.getResult(k));
      continue;
    }
    if (auto it = bySource.find(r); it != bySource.end())
      for (ProductUse &use : it->second)
        redirect(use, stored.getResult(k));
    eraseDeadReshapes(r);
  }
  return success();
}

/// The kernel that reads some of `call`'s operands in bf16 in place of its
/// fp32 kernel (KernelList.def's `<kernel>Bf16`), or "": gatedAct's, the
/// transposes in front of attention, a residual Add (same shapes), a
/// norm's backward, whose dY is the sum of the input gradients of the
/// projections that read the norm (q, k and v; gate and up), and the query
/// and key heads' norm-and-rotary, forward and backward, and their
/// transpose-and-rotary where they have no norm, which read the
/// projection's result.
StringRef bf16OperandTwin(CallOp call) {
  if (isBinaryOf(call, "Add") && call->getNumResults() == 1 &&
      isF32(call.getResult(0)) && llvm::all_of(call.getInputs(), [&](Value v) {
        return v.getType() == call.getResult(0).getType();
      }))
    return "addBf16";
  return llvm::StringSwitch<StringRef>(call.getKernel())
      .Case("gatedActToBf16", "gatedActBf16")
      .Case("gatedActBackwardToBf16", "gatedActBackwardBf16")
      .Case("transposeToBf16", "transposeBf16")
      .Case("rmsNormBackward", "rmsNormBackwardBf16")
      .Case("rmsNormRotaryToBf16", "rmsNormRotaryBf16ToBf16")
      .Case("rmsNormRotaryBackwardBf16ToBf16",
            "rmsNormRotaryBf16BackwardBf16ToBf16")
      .Case("transposeRotaryToBf16", "transposeRotaryBf16ToBf16")
      .Default("");
}

/// The positions among `call`'s inputs that kernel `twin` reads in bf16
/// where `call` reads fp32 (its CBView parameters whose operand is fp32
/// now; one already bf16 stays as it is): the operands in parameter order,
/// a float parameter counting as one only when the call's `args` does not
/// name it.
SmallVector<unsigned> bf16InputPositions(CallOp call, StringRef twin) {
  SmallVector<unsigned> positions;
  unsigned input = 0;
  for (const KernelParam &p : lookupKernel(twin)->params) {
    switch (p.kind) {
    case ParamKind::Bf16Input:
      if (isF32(call.getInputs()[input]))
        positions.push_back(input);
      ++input;
      break;
    case ParamKind::Input:
    case ParamKind::IntInput:
      ++input;
      break;
    case ParamKind::F32:
      if (!call.getArgs() || !call.getArgsAttr().get(p.name))
        ++input;
      break;
    default:
      break;
    }
  }
  return positions;
}

/// The value `v` reshapes (itself when no tg.reshape produces it).
Value throughReshapes(Value v) {
  while (auto r = v.getDefiningOp<tg::ReshapeOp>())
    v = r.getX();
  return v;
}

/// bf16 activations: a reader with a bf16-operand twin (gatedAct's, the
/// transposes in front of attention, the residual Adds after the output and
/// down projections, the norms' backward) whose every bf16 operand is a
/// product (or a reshape of one) read only by such readers, each at one of
/// its bf16 operands, reads those products stored in bf16
/// (matmulBf16ToBf16: cuBLAS rounds the fp32 accumulators as it stores
/// them, where the reader used to round them as it loaded them). A chain of
/// products accumulating into one another (the input gradients of q, k and
/// v, or of gate and up) is stored as a whole: each adds into its
/// predecessor's bf16 result and rounds the sum, as autocast's bf16
/// gradients are summed; a norm's backward then reads the sum in bf16 where
/// it read an fp32 sum (12 bytes an element less traffic for three
/// products). The set is the greatest fixed point: a reader with any other
/// operand there keeps fp32, and so do the products it reads.
void storeProductsInBf16(func::FuncOp fn) {
  auto isProductValue = [](Value v) {
    return isStorableBf16Product(throughReshapes(v).getDefiningOp<CallOp>());
  };
  // Each reader with its twin and the operands the twin reads in bf16.
  struct Reader {
    StringRef twin;
    SmallVector<unsigned> positions;
  };
  llvm::MapVector<Operation *, Reader> readers;
  fn.walk([&](CallOp call) {
    StringRef twin = bf16OperandTwin(call);
    if (twin.empty())
      return;
    // addBf16 reads its second operand in bf16: a product first is moved
    // there (a + b is b + a, bit for bit).
    if (twin == "addBf16" && isProductValue(call.getInputs()[0]) &&
        !isProductValue(call.getInputs()[1])) {
      Value first = call.getInputs()[0];
      call->setOperand(0, call.getInputs()[1]);
      call->setOperand(1, first);
    }
    readers[call] = {twin, bf16InputPositions(call, twin)};
  });
  // Whether every use of `v`, through reshapes, is a bf16 operand of a
  // reader still in the set.
  std::function<bool(Value)> readOnlyInBf16 = [&](Value v) {
    return llvm::all_of(v.getUses(), [&](OpOperand &use) {
      if (auto r = dyn_cast<tg::ReshapeOp>(use.getOwner()))
        return readOnlyInBf16(r.getResult());
      auto it = readers.find(use.getOwner());
      return it != readers.end() &&
             llvm::is_contained(it->second.positions, use.getOperandNumber());
    });
  };
  auto storable = [&](Value v) {
    Value source = throughReshapes(v);
    return isProductValue(source) && readOnlyInBf16(source);
  };
  for (bool changed = true; changed;) {
    llvm::MapVector<Operation *, Reader> kept;
    for (auto &[reader, r] : readers)
      if (llvm::all_of(r.positions, [&](unsigned k) {
            return storable(reader->getOperand(k));
          }))
        kept[reader] = r;
    changed = kept.size() != readers.size();
    readers = std::move(kept);
  }
  MLIRContext *ctx = fn.getContext();
  IRMapping stored;
  for (auto &[reader, r] : readers)
    for (unsigned k : r.positions) {
      Value v = throughReshapes(reader->getOperand(k));
      if (stored.contains(v))
        continue;
      stored.map(v, storeProductInBf16(v.getDefiningOp<CallOp>()).getResult(0));
    }
  for (auto &[op, r] : readers) {
    auto reader = cast<CallOp>(op);
    StringRef twinName = r.twin;
    for (unsigned k : r.positions) {
      Value v;
      ProductUse use = useThroughReshapes(reader->getOpOperand(k), v);
      redirect(use, stored.lookup(v));
    }
    // The twin takes the reader's arguments its parameters name (addBf16
    // has no `kind`).
    OpBuilder b(reader);
    SmallVector<NamedAttribute> args;
    if (reader.getArgs())
      for (NamedAttribute a : reader.getArgsAttr())
        if (llvm::any_of(lookupKernel(twinName)->params,
                         [&](const KernelParam &p) {
                           return p.name == a.getName().getValue();
                         }))
          args.push_back(a);
    auto twin = CallOp::create(
        b, reader.getLoc(), reader->getResultTypes(),
        FlatSymbolRefAttr::get(ctx, twinName), reader.getInputs(),
        reader.getInits(), args.empty() ? nullptr : b.getDictionaryAttr(args),
        reader.getSkipAttr());
    reader->replaceAllUsesWith(twin->getResults());
    reader.erase();
  }
  for (auto [from, to] : stored.getValueMap()) {
    eraseDeadReshapes(from);
    eraseProductChain(from.getDefiningOp<CallOp>());
  }
}

/// Whether `use` is operand `operand` of a call of `kernel`.
bool isOperandOf(OpOperand &use, StringRef kernel, unsigned operand) {
  auto call = dyn_cast<CallOp>(use.getOwner());
  return call && call.getKernel() == kernel &&
         use.getOperandNumber() == operand;
}

/// A copy of `call` as `kernel` with operand `operand` set to `value` (whose
/// type may differ: the bf16 form of what it read); the caller's results
/// are replaced and the call erased.
CallOp recall(CallOp call, StringRef kernel, unsigned operand, Value value) {
  SmallVector<Value> inputs(call.getInputs());
  inputs[operand] = value;
  OpBuilder b(call);
  auto twin =
      CallOp::create(b, call.getLoc(), call->getResultTypes(),
                     FlatSymbolRefAttr::get(call.getContext(), kernel), inputs,
                     call.getInits(), call.getArgsAttr(), call.getSkipAttr());
  call->replaceAllUsesWith(twin->getResults());
  call.erase();
  return twin;
}

/// The kernel that reads attention's gradient at `use` as attention stores
/// it in bf16, or "": the query and key gradients' norm-and-rotary or
/// transpose-and-rotary backward, and the values' transpose.
StringRef bf16GradientReaderTwin(OpOperand &use) {
  struct Twin {
    StringRef kernel;
    unsigned operand;
    StringRef twin;
  };
  static const Twin twins[] = {
      {"rmsNormRotaryBackward", 4, "rmsNormRotaryBackwardBf16"},
      {"rmsNormRotaryBackwardToBf16", 4, "rmsNormRotaryBackwardBf16ToBf16"},
      {"transposeRotaryBackward", 0, "transposeRotaryBackwardBf16"},
      {"transposeRotaryBackwardToBf16", 0, "transposeRotaryBackwardBf16ToBf16"},
      {"transposeToBf16", 0, "transposeBf16"},
  };
  for (const Twin &t : twins)
    if (isOperandOf(use, t.kernel, t.operand))
      return t.twin;
  return "";
}

/// attentionBackwardBf16 `grad` reading the bf16 output `out` of its
/// forward, its dOut in bf16 (the transpose in front of it stores bf16, or
/// a toBf16 copy), and storing its gradients in bf16: the query and key
/// gradients' norm-and-rotary or transpose-and-rotary backward and the
/// values' transpose read them as they are, any other reader through one
/// fromBf16.
void storeAttentionBackwardInBf16(CallOp grad, Value out) {
  MLIRContext *ctx = grad.getContext();
  OpBuilder b(grad);
  Value dOut = grad.getInputs()[5];
  Value dOut16;
  auto transpose = dOut.getDefiningOp<CallOp>();
  if (transpose && transpose.getKernel() == "transpose" && dOut.hasOneUse()) {
    OpBuilder tb(transpose);
    dOut16 = CallOp::create(tb, transpose.getLoc(),
                            TypeRange{asBf16(dOut.getType())},
                            FlatSymbolRefAttr::get(ctx, "transposeToBf16"),
                            transpose.getInputs(), ValueRange{},
                            transpose.getArgsAttr(), nullptr)
                 .getResult(0);
  } else {
    dOut16 = CallOp::create(b, grad.getLoc(), TypeRange{asBf16(dOut.getType())},
                            FlatSymbolRefAttr::get(ctx, "toBf16"),
                            ValueRange{dOut}, ValueRange{}, nullptr, nullptr)
                 .getResult(0);
  }
  SmallVector<Value> inputs(grad.getInputs());
  inputs[3] = out;
  inputs[5] = dOut16;
  SmallVector<Type> types;
  for (Value r : grad->getResults())
    types.push_back(asBf16(r.getType()));
  auto stored = CallOp::create(
      b, grad.getLoc(), types,
      FlatSymbolRefAttr::get(ctx, "attentionBackwardBf16ToBf16"), inputs,
      ValueRange{}, grad.getArgsAttr(), grad.getSkipAttr());
  for (auto [k, r] : llvm::enumerate(grad->getResults())) {
    Value r16 = stored.getResult(k);
    Value widened;
    for (OpOperand &use : llvm::make_early_inc_range(r.getUses())) {
      if (StringRef twin = bf16GradientReaderTwin(use); !twin.empty()) {
        recall(cast<CallOp>(use.getOwner()), twin, use.getOperandNumber(), r16);
      } else {
        if (!widened) {
          OpBuilder wb(ctx);
          wb.setInsertionPointAfter(stored);
          widened =
              CallOp::create(wb, grad.getLoc(), TypeRange{r.getType()},
                             FlatSymbolRefAttr::get(ctx, "fromBf16"),
                             ValueRange{r16}, ValueRange{}, nullptr, nullptr)
                  .getResult(0);
        }
        use.set(widened);
      }
    }
  }
  grad.erase();
  if (transpose && transpose->use_empty())
    transpose.erase();
}

/// Attention's output in bf16 where its readers are the transpose in front
/// of the output projection (which stored it in bf16 anyway) and the
/// backward; the backward then reads out and dOut in bf16 and stores its
/// gradients in bf16. cuDNN reads and writes these tensors in bf16 itself,
/// so this removes its conversions (about 0.2 ms a layer at W1's
/// microbatch) and keeps every bit.
void storeAttentionInBf16(func::FuncOp fn) {
  SmallVector<CallOp> forwards;
  fn.walk([&](CallOp call) {
    if (call.getKernel() == "attentionBf16")
      forwards.push_back(call);
  });
  for (CallOp forward : forwards) {
    Value out = forward.getResult(0);
    if (out.use_empty() || !llvm::all_of(out.getUses(), [](OpOperand &use) {
          return isOperandOf(use, "transposeToBf16", 0) ||
                 isOperandOf(use, "attentionBackwardBf16", 3);
        }))
      continue;
    OpBuilder b(forward);
    auto stored = CallOp::create(
        b, forward.getLoc(),
        TypeRange{asBf16(out.getType()), forward.getResult(1).getType()},
        FlatSymbolRefAttr::get(fn.getContext(), "attentionBf16ToBf16"),
        forward.getInputs(), ValueRange{}, forward.getArgsAttr(),
        forward.getSkipAttr());
    forward.getResult(1).replaceAllUsesWith(stored.getResult(1));
    for (OpOperand &use : llvm::make_early_inc_range(out.getUses())) {
      auto reader = cast<CallOp>(use.getOwner());
      if (reader.getKernel() == "transposeToBf16")
        recall(reader, "transposeBf16", 0, stored.getResult(0));
      else
        storeAttentionBackwardInBf16(reader, stored.getResult(0));
    }
    forward.erase();
  }
}

struct KernBf16StoragePass
    : kern::impl::KernBf16StoragePassBase<KernBf16StoragePass> {
  using KernBf16StoragePassBase::KernBf16StoragePassBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr) || !fn.getBody().hasOneBlock())
      return;
    MLIRContext *ctx = &getContext();

    // The bf16 copies the trainer keeps of resident weights, by parameter.
    DenseMap<Attribute, Value> residentCopy;
    for (BlockArgument arg : fn.getArguments())
      if (auto role = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                      exec::kRoleAttr);
          role && role.getValue() == "param_bf16")
        residentCopy[fn.getArgAttr(arg.getArgNumber(), tg::kParamAttr)] = arg;
    auto copyOf = [&](Value v) -> Value {
      auto arg = dyn_cast<BlockArgument>(v);
      if (!arg || arg.getOwner()->getParentOp() != fn)
        return {};
      Attribute name = fn.getArgAttr(arg.getArgNumber(), tg::kParamAttr);
      return name ? residentCopy.lookup(name) : Value();
    };

    // The products: every matmul, and the experts' grouped products that
    // need no copy of an expert weight: an expertMatmul whose weights
    // (operand 1) have the trainer's resident bf16 copy (or are bf16
    // already), and the weight gradients of the same routing (ids), whose
    // operands are rows. A streamed [E, K, M] weight stack keeps the
    // fp32-staged kernels, which round it as they load it: a toBf16 of the
    // whole stack every microbatch would cost more than the bf16 kernels
    // save below ~1,000 rows an expert on an H100 (bench/results/h100x1/
    // grouped-gemm-bf16-2026-11-27).
    auto bf16Weights = [&](CallOp call) {
      Value w = throughReshapes(call.getInputs()[1]);
      return !isF32(w) || copyOf(w);
    };
    DenseSet<Value> bf16Routing;
    fn.walk([&](CallOp call) {
      if (call.getKernel() == "expertMatmul" && bf16Weights(call))
        bf16Routing.insert(call.getInputs()[2]);
    });
    auto isProduct = [&](CallOp call) {
      StringRef kernel = call.getKernel();
      if (kernel == "expertMatmul")
        return bf16Weights(call);
      if (kernel == "expertMatmulWeightGrad")
        return bf16Routing.contains(call.getInputs()[2]);
      return kernel == "matmul" || kernel == "attention" ||
             kernel == "attentionBackward";
    };
    DenseMap<Operation *, unsigned> position;
    SmallVector<CallOp> products;
    ProductSet productSet;
    for (Operation &op : fn.getBody().front()) {
      position[&op] = position.size();
      if (auto call = dyn_cast<CallOp>(op); call && isProduct(call)) {
        products.push_back(call);
        productSet.insert(call);
      }
    }
    // The fp32 values products read, each with its product operands in
    // program order.
    llvm::MapVector<Value, SmallVector<ProductUse>> bySource;
    for (CallOp product : products)
      for (unsigned k = 0, e = bf16Operands(product); k < e; ++k) {
        Value v;
        ProductUse use = useThroughReshapes(product->getOpOperand(k), v);
        if (isF32(v))
          bySource[v].push_back(std::move(use));
      }

    // Producers are looked up before any is replaced (a replaced
    // producer's results are gone).
    SmallVector<CallOp> producers;
    for (auto &entry : bySource)
      producers.push_back(entry.first.getDefiningOp<CallOp>());
    DenseSet<Operation *> replaced;
    for (auto [index, entry] : llvm::enumerate(bySource)) {
      CallOp producer = producers[index];
      if (producer && replaced.contains(producer))
        continue; // stored in bf16 with a sibling result
      Value value = entry.first;
      SmallVector<ProductUse> &uses = entry.second;
      if (Value copy = copyOf(value)) {
        for (ProductUse &use : uses)
          redirect(use, copy);
        eraseDeadReshapes(value);
        continue;
      }
      if (producer &&
          succeeded(storeResultsInBf16(producer, bySource, productSet))) {
        replaced.insert(producer);
        producer.erase();
        continue;
      }
      // One copy in front of the first product of each run of products
      // that follow it closely.
      Value copy;
      unsigned copyAt = 0;
      for (ProductUse &use : uses) {
        Operation *product = use.operand->getOwner();
        unsigned at = position.lookup(product);
        if (!copy || at > copyAt + shareWindow) {
          OpBuilder b(product);
          copy = CallOp::create(
                     b, product->getLoc(), TypeRange{asBf16(value.getType())},
                     FlatSymbolRefAttr::get(ctx, "toBf16"), ValueRange{value},
                     ValueRange{}, nullptr, nullptr)
                     .getResult(0);
          copyAt = at;
        }
        redirect(use, copy);
      }
      eraseDeadReshapes(value);
    }

    // The fused LM head reads its weight's resident bf16 copy where there
    // is one (its kernels round the fp32 weight once per call otherwise:
    // the same bits).
    SmallVector<CallOp> heads;
    fn.walk([&](CallOp call) {
      if (!lmHeadBf16WeightTwin(call.getKernel()).empty() &&
          copyOf(call.getInputs()[1]))
        heads.push_back(call);
    });
    for (CallOp head : heads)
      recall(head, lmHeadBf16WeightTwin(head.getKernel()), 1,
             copyOf(head.getInputs()[1]));

    for (CallOp product : products)
      if (llvm::none_of(product.getInputs().take_front(bf16Operands(product)),
                        isF32))
        product.setKernelAttr(
            FlatSymbolRefAttr::get(ctx, bf16ProductTwin(product.getKernel())));
    // Attention first: its backward's dOut gets the transpose that
    // storeProductsInBf16 then feeds from a bf16 product.
    storeAttentionInBf16(fn);
    storeProductsInBf16(fn);

    // A frozen weight held in bf16 alone has no fp32 form to bind: once the
    // products read its bf16 argument, its fp32 argument goes.
    llvm::BitVector unbound(fn.getNumArguments());
    for (BlockArgument arg : fn.getArguments()) {
      auto role =
          fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), exec::kRoleAttr);
      if (!role || role.getValue() != "param_unbound")
        continue;
      eraseDeadReshapes(arg);
      if (!arg.use_empty()) {
        Operation *reader = *arg.getUsers().begin();
        auto call = dyn_cast<CallOp>(reader);
        fn.emitOpError("holds '")
            << fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                               tg::kParamAttr)
                   .getValue()
            << "' in bf16 alone (a frozen weight of a bf16 plan), but "
            << (call ? "kernel '" + call.getKernel().str() + "'"
                     : "'" + reader->getName().getStringRef().str() + "'")
            << " reads it in fp32";
        return signalPassFailure();
      }
      unbound.set(arg.getArgNumber());
    }
    if (unbound.any() && failed(fn.eraseArguments(unbound)))
      return signalPassFailure();
  }
};

} // namespace
