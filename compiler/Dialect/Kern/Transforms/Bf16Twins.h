//===- Bf16Twins.h - Kernels that store their results in bf16 ---*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// KernelList.def's naming rule for the kernels that compute what another
// kernel computes and round some of its results to bf16 as they store them
// (`<kernel>ToBf16`), shared by the passes that replace a call by that twin:
// kern-bf16-storage (a value only products read) and kern-fold-bf16-copies
// (a value only toBf16 copies read).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_KERN_TRANSFORMS_BF16TWINS_H
#define RONDO_DIALECTS_KERN_TRANSFORMS_BF16TWINS_H

#include "Dialect/Kern/IR/KernOps.h"
#include "Dialect/Kern/IR/KernelTable.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>
#include <string>

namespace rondo::kern {

inline bool isF32(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType())
      .getElementType()
      .isF32();
}

inline mlir::RankedTensorType asBf16(mlir::Type t) {
  auto r = mlir::cast<mlir::RankedTensorType>(t);
  return mlir::RankedTensorType::get(r.getShape(),
                                     mlir::BFloat16Type::get(t.getContext()));
}

/// The kernel that computes what `kernel` computes and stores it in bf16:
/// by KernelList.def's naming rule, `<kernel>ToBf16`, when the list has it
/// ("" otherwise).
inline std::string bf16Twin(llvm::StringRef kernel) {
  std::string twin = (kernel + "ToBf16").str();
  return lookupKernel(twin) ? twin : std::string();
}

/// Which results of kernel `twin` it stores in bf16 (its BView results, in
/// order): a twin may keep some in fp32, as a norm's backward keeps its
/// weight gradient.
inline llvm::SmallVector<bool> bf16Results(llvm::StringRef twin) {
  llvm::SmallVector<bool> bf16;
  for (const KernelParam &p : lookupKernel(twin)->params)
    if (p.kind == ParamKind::Output || p.kind == ParamKind::Bf16Output)
      bf16.push_back(p.kind == ParamKind::Bf16Output);
  return bf16;
}

/// A call's bf16-result twin and which of its results the twin stores in
/// bf16.
struct Bf16ResultTwin {
  std::string kernel;
  llvm::SmallVector<bool> bf16;
};

/// The twin that may replace `producer` with the same operands and `args`,
/// if any: `<kernel>ToBf16` exists and takes the same parameters, by name
/// and kind, except fp32 results (FView) it stores in bf16 (BView)
/// (attentionBackwardBf16ToBf16, which also reads out and dO in bf16, does
/// not); every result is an FView or BView one; and `producer` has nothing
/// to add into (no inits: an accumulating product's sum keeps fp32).
inline std::optional<Bf16ResultTwin> bf16ResultTwin(CallOp producer) {
  std::string twin = bf16Twin(producer.getKernel());
  const KernelInfo *from = lookupKernel(producer.getKernel());
  if (twin.empty() || !from || !producer.getInits().empty())
    return std::nullopt;
  const KernelInfo *to = lookupKernel(twin);
  if (from->params.size() != to->params.size())
    return std::nullopt;
  for (auto [p, q] : llvm::zip(from->params, to->params))
    if (p.name != q.name ||
        (p.kind != q.kind &&
         !(p.kind == ParamKind::Output && q.kind == ParamKind::Bf16Output)))
      return std::nullopt;
  llvm::SmallVector<bool> bf16 = bf16Results(twin);
  if (bf16.size() != producer->getNumResults())
    return std::nullopt;
  return Bf16ResultTwin{std::move(twin), std::move(bf16)};
}

/// `twin` of `producer`'s operands, `args` and `skip`, built in front of it;
/// the results `twin` stores in bf16 have bf16 types. The caller moves the
/// readers and erases `producer`.
inline CallOp createBf16ResultTwin(CallOp producer,
                                   const Bf16ResultTwin &twin) {
  llvm::SmallVector<mlir::Type> types;
  for (auto [k, r] : llvm::enumerate(producer->getResults()))
    types.push_back(twin.bf16[k] ? asBf16(r.getType()) : r.getType());
  mlir::OpBuilder b(producer);
  return CallOp::create(
      b, producer.getLoc(), types,
      mlir::FlatSymbolRefAttr::get(producer.getContext(), twin.kernel),
      producer.getInputs(), mlir::ValueRange{}, producer.getArgsAttr(),
      producer.getSkipAttr());
}

} // namespace rondo::kern

#endif // RONDO_DIALECTS_KERN_TRANSFORMS_BF16TWINS_H
