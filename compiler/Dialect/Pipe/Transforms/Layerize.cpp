//===- Layerize.cpp - pipe-layerize -----------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Layers are found structurally, not from the exporter's module names, so
// any exporter's graph of a residual network gets the same cut: the hidden
// state is the only activation alive between two blocks.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Pipe/Transforms/Passes.h"
#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"

namespace rondo::pipe {
#define GEN_PASS_DEF_PIPELAYERIZEPASS
#include "Dialect/Pipe/Transforms/Passes.h.inc"
} // namespace rondo::pipe

using namespace mlir;
using namespace rondo;
using namespace rondo::pipe;

namespace {

/// Structural hash of an op: what it computes, not which values it reads.
llvm::hash_code opSignature(Operation *op) {
  llvm::hash_code h = llvm::hash_value(op->getName().getAsOpaquePointer());
  for (NamedAttribute attr : op->getAttrs())
    if (attr.getName() != kLayerAttr)
      h = llvm::hash_combine(h, attr.getName().getAsOpaquePointer(),
                             attr.getValue().getAsOpaquePointer());
  for (Type t : op->getOperandTypes())
    h = llvm::hash_combine(h, t.getAsOpaquePointer());
  for (Type t : op->getResultTypes())
    h = llvm::hash_combine(h, t.getAsOpaquePointer());
  return h;
}

/// The longest run of segments that repeats with a period of P segments:
/// returns {start, period, count}; count < 2 means no repetition.
struct Repetition {
  size_t start = 0, period = 1, count = 0;
};

Repetition findRepetition(ArrayRef<llvm::hash_code> sigs) {
  Repetition best;
  size_t n = sigs.size();
  for (size_t period = 1; period <= std::min<size_t>(8, n / 2); ++period) {
    size_t k = 0;
    while (k + period < n) {
      if (sigs[k] != sigs[k + period]) {
        ++k;
        continue;
      }
      size_t start = k;
      while (k + period < n && sigs[k] == sigs[k + period])
        ++k;
      size_t count = (k + period - start) / period;
      // More segments covered wins; on a tie the shorter period, then the
      // earlier start (loop order).
      if (count >= 2 && count * period > best.count * best.period)
        best = {start, period, count};
    }
  }
  return best;
}

struct PipeLayerizePass
    : rondo::pipe::impl::PipeLayerizePassBase<PipeLayerizePass> {
  using Base::Base;

  void runOnOperation() override {
    auto func = tg::lookupMain(getOperation(), "pipe-layerize");
    if (!func)
      return signalPassFailure();
    Block &body = func.getBody().front();
    Operation *terminator = body.getTerminator();

    // Classify values by what they depend on.
    llvm::DenseSet<Value> onParams, onData;
    for (BlockArgument arg : func.getArguments()) {
      if (func.getArgAttr(arg.getArgNumber(), tg::kParamAttr))
        onParams.insert(arg);
      else
        onData.insert(arg);
    }
    SmallVector<Operation *> activationOps;
    llvm::DenseMap<Operation *, size_t> position;
    for (Operation &op : body.without_terminator()) {
      bool p = llvm::any_of(op.getOperands(),
                            [&](Value v) { return onParams.contains(v); });
      bool d = llvm::any_of(op.getOperands(),
                            [&](Value v) { return onData.contains(v); });
      for (Value r : op.getResults()) {
        if (p)
          onParams.insert(r);
        if (d)
          onData.insert(r);
      }
      if (p && d) {
        position[&op] = activationOps.size();
        activationOps.push_back(&op);
      }
    }
    size_t n = activationOps.size();
    Builder b(&getContext());
    if (n == 0) {
      // Nothing mixes parameters with data (a loss on the parameters alone,
      // or no parameters): one layer holds whatever there is.
      for (Operation &op : body.without_terminator())
        if (op.getNumResults() && onParams.contains(op.getResult(0)))
          op.setAttr(kLayerAttr, b.getI64IntegerAttr(0));
      func->setAttr(kLayerKindsAttr, b.getStrArrayAttr({"tail"}));
      return;
    }

    // crossing[c]: activations alive across the cut after activationOps[c].
    SmallVector<int> delta(n + 1, 0);
    for (auto [i, op] : llvm::enumerate(activationOps))
      for (Value r : op->getResults()) {
        size_t last = i;
        for (Operation *user : r.getUsers()) {
          if (user == terminator)
            last = n;
          else if (auto it = position.find(user); it != position.end())
            last = std::max(last, it->second);
        }
        if (last > i) {
          delta[i] += 1;
          delta[last] -= 1;
        }
      }
    SmallVector<size_t> segmentStarts{0};
    int alive = 0;
    for (size_t c = 0; c + 1 < n; ++c) {
      alive += delta[c];
      if (alive == 1)
        segmentStarts.push_back(c + 1);
    }
    size_t numSegments = segmentStarts.size();
    SmallVector<llvm::hash_code> sigs;
    for (size_t s = 0; s < numSegments; ++s) {
      size_t end = s + 1 < numSegments ? segmentStarts[s + 1] : n;
      llvm::hash_code h = llvm::hash_value(end - segmentStarts[s]);
      for (size_t i = segmentStarts[s]; i < end; ++i)
        h = llvm::hash_combine(h, opSignature(activationOps[i]));
      sigs.push_back(h);
    }

    // Segments -> layers.
    SmallVector<int64_t> layerOfSegment(numSegments);
    SmallVector<StringRef> kinds;
    Repetition rep = findRepetition(sigs);
    if (rep.count >= 2) {
      size_t runEnd = rep.start + rep.count * rep.period;
      for (size_t s = 0; s < numSegments; ++s) {
        if (s < rep.start) {
          layerOfSegment[s] = 0;
        } else if (s < runEnd) {
          layerOfSegment[s] =
              (rep.start > 0 ? 1 : 0) + (s - rep.start) / rep.period;
        } else {
          layerOfSegment[s] =
              (rep.start > 0 ? 1 : 0) + static_cast<int64_t>(rep.count);
        }
      }
      if (rep.start > 0)
        kinds.push_back("prefix");
      for (size_t k = 0; k < rep.count; ++k)
        kinds.push_back("block");
      if (runEnd < numSegments)
        kinds.push_back("tail");
      else
        kinds.back() = "tail";
    } else {
      // No repeated structure: every segment is a layer of its own.
      for (size_t s = 0; s < numSegments; ++s) {
        layerOfSegment[s] = s;
        kinds.push_back(s == 0 && numSegments > 1 ? "prefix" : "block");
      }
      kinds.back() = "tail";
    }

    for (size_t s = 0; s < numSegments; ++s) {
      size_t end = s + 1 < numSegments ? segmentStarts[s + 1] : n;
      for (size_t i = segmentStarts[s]; i < end; ++i)
        activationOps[i]->setAttr(kLayerAttr,
                                  b.getI64IntegerAttr(layerOfSegment[s]));
    }
    // Weight-side ops (parameters only) travel with their first user.
    for (Operation &op : llvm::reverse(body.without_terminator())) {
      if (position.count(&op) || op.getNumResults() == 0 ||
          !onParams.contains(op.getResult(0)))
        continue;
      std::optional<int64_t> layer;
      for (Operation *user : op.getUsers())
        if (auto tag = user->getAttrOfType<IntegerAttr>(kLayerAttr))
          layer = std::min(layer.value_or(tag.getInt()), tag.getInt());
      if (layer)
        op.setAttr(kLayerAttr, b.getI64IntegerAttr(*layer));
    }
    func->setAttr(kLayerKindsAttr, b.getStrArrayAttr(kinds));
  }
};
} // namespace
