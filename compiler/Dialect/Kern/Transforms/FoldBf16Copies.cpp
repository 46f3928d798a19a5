//===- FoldBf16Copies.cpp - The kern-fold-bf16-copies pass ----------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// kern-bf16-storage gives a value that something other than a product reads
// a toBf16 copy in front of its products, and so it does for a product's
// result that other products read (it stores a product's result in bf16
// only for the readers that take a bf16 operand: gatedActBf16, addBf16,
// ...). Once kern-fuse-product-scale has moved LoRA's scales into the
// products' epilogues, many such values are read by nothing but their
// copies: the x·A product that the B product and, in the backward, the B
// gradient's product read (a copy each: they are far apart), the gated
// MLP's gradients and the query and key gradients that the scale Muls used
// to read. Each is written in fp32 and read back once per copy. Its
// kernel's bf16 twin (`<kernel>ToBf16`) stores it in bf16 once instead,
// and the copies' readers read that. The pass runs after the fusions, which
// match fp32 kernels (kern-fuse-residual-norm's Add of a norm's dX).
//
// A twin rounds its fp32 result to bf16 (nearest even) as it stores it,
// which is what toBf16 did with the stored fp32 value, so every bit stays
// (KernelList.def's rule for the twins; the CPU kernels, which define them:
// matmulBf16ToBf16 runs matmulBf16 into a zeroed fp32 temporary and stores
// it through floatToBf16Bits, toBf16's rounding; gatedActBackwardToBf16 and
// rmsNormRotaryBackwardBf16ToBf16 run their fp32 kernel into fp32
// temporaries and store them the same way). On the GPU the element-wise
// twins store exactly the rounding of their fp32 kernel's values; cuBLAS
// may pick another GEMM kernel for matmulBf16ToBf16's bf16 result, whose
// fp32 sums may then differ in their last bits (Bf16StorageTest). No more
// memory is held at any point: the bf16 result lives from the producer to
// the last copy's last reader, where the fp32 value lived to the last copy
// and each copy to its readers.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Kern/Transforms/Passes.h"

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/Kern/Transforms/Bf16Twins.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::kern;

namespace rondo::kern {
#define GEN_PASS_DEF_KERNFOLDBF16COPIESPASS
#include "Dialect/Kern/Transforms/Passes.h.inc"
} // namespace rondo::kern

namespace {

/// Whether `op` is a toBf16 copy of `v` (the same shape in bf16).
bool isCopyOf(Operation *op, Value v) {
  auto call = dyn_cast<CallOp>(op);
  return call && call.getKernel() == "toBf16" && call.getInputs().size() == 1 &&
         call.getInits().empty() && call->getNumResults() == 1 &&
         call.getResult(0).getType() == asBf16(v.getType());
}

/// Replaces `producer` by its bf16 twin when every result the twin stores in
/// bf16 is read by toBf16 copies alone (or by nothing) and one at least is
/// copied: each copy's readers read the twin's result, the copies go, and
/// the results the twin keeps in fp32 keep their readers.
void foldCopies(CallOp producer) {
  std::optional<Bf16ResultTwin> twin = bf16ResultTwin(producer);
  if (!twin)
    return;
  bool copied = false;
  for (auto [k, r] : llvm::enumerate(producer->getResults())) {
    if (!twin->bf16[k])
      continue;
    if (!llvm::all_of(r.getUsers(),
                      [r = r](Operation *user) { return isCopyOf(user, r); }))
      return;
    copied |= !r.use_empty();
  }
  if (!copied)
    return;
  CallOp stored = createBf16ResultTwin(producer, *twin);
  for (auto [k, r] : llvm::enumerate(producer->getResults())) {
    if (!twin->bf16[k]) {
      r.replaceAllUsesWith(stored.getResult(k));
      continue;
    }
    for (Operation *copy : llvm::make_early_inc_range(r.getUsers())) {
      copy->getResult(0).replaceAllUsesWith(stored.getResult(k));
      copy->erase();
    }
  }
  producer.erase();
}

struct KernFoldBf16CopiesPass
    : kern::impl::KernFoldBf16CopiesPassBase<KernFoldBf16CopiesPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn->hasAttr(exec::kStageAttr))
      return;
    // The candidates first: a fold erases calls (the copies, never another
    // candidate: toBf16 has no twin).
    SmallVector<CallOp> producers;
    fn.walk([&](CallOp call) {
      if (call.getKernel() != "toBf16")
        producers.push_back(call);
    });
    for (CallOp producer : producers)
      foldCopies(producer);
  }
};

} // namespace
