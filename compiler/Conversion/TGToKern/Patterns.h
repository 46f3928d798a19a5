//===- Patterns.h - Shared by the TG -> kern pattern files ------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_KERN_CONVERSION_TGTOKERN_PATTERNS_H
#define RONDO_DIALECTS_KERN_CONVERSION_TGTOKERN_PATTERNS_H

#include "Conversion/TGToKern/Passes.h"
#include "Dialect/TG/IR/TGOps.h"

#include "mlir/IR/PatternMatch.h"

namespace rondo::kern::detail {

/// A kern.call of `kernel` with scalar `args` (name, attribute) pairs.
inline CallOp call(mlir::PatternRewriter &rw, mlir::Location loc,
                   llvm::StringRef kernel, mlir::TypeRange results,
                   mlir::ValueRange inputs,
                   llvm::ArrayRef<mlir::NamedAttribute> args = {},
                   mlir::ValueRange inits = {},
                   llvm::ArrayRef<int64_t> skip = {}) {
  mlir::MLIRContext *ctx = rw.getContext();
  return CallOp::create(
      rw, loc, results, mlir::FlatSymbolRefAttr::get(ctx, kernel), inputs,
      inits, args.empty() ? nullptr : rw.getDictionaryAttr(args),
      skip.empty() ? nullptr : rw.getDenseI64ArrayAttr(skip));
}

inline mlir::NamedAttribute arg(mlir::PatternRewriter &rw, llvm::StringRef name,
                                mlir::Attribute value) {
  return rw.getNamedAttr(name, value);
}

inline bool isInteger(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType())
      .getElementType()
      .isInteger();
}

/// The indices of `op`'s results that nothing reads, among `skippable`: the
/// kernel skips them (a frozen parameter's gradient).
inline llvm::SmallVector<int64_t> unusedResults(mlir::Operation *op,
                                                llvm::ArrayRef<int> skippable) {
  llvm::SmallVector<int64_t> unused;
  for (int k : skippable)
    if (op->getResult(k).use_empty())
      unused.push_back(k);
  return unused;
}

/// A pattern that replaces one tg op by what `lower` builds.
template <class Op> struct Lowering : mlir::OpRewritePattern<Op> {
  using Fn = mlir::LogicalResult (*)(Op, mlir::PatternRewriter &);
  Lowering(mlir::MLIRContext *ctx, Fn lower)
      : mlir::OpRewritePattern<Op>(ctx), lower(lower) {}
  mlir::LogicalResult
  matchAndRewrite(Op op, mlir::PatternRewriter &rw) const override {
    return lower(op, rw);
  }
  Fn lower;
};

template <class Op>
void add(mlir::RewritePatternSet &patterns, typename Lowering<Op>::Fn lower) {
  patterns.add<Lowering<Op>>(patterns.getContext(), lower);
}

} // namespace rondo::kern::detail

#endif // RONDO_DIALECTS_KERN_CONVERSION_TGTOKERN_PATTERNS_H
