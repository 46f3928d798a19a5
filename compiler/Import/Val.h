//===- Val.h - One imported ONNX value --------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// What the importer knows of each ONNX value: a folded HostTensor when it is
// data-independent, a tg value when it depends on data.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_VAL_H
#define RONDO_LIB_IMPORT_VAL_H

#include "HostTensor.h"

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <memory>
#include <optional>
#include <string>

namespace rondo::import {

/// What a folded value may be: a rotary table, `scale * sin|cos(phase)` with
/// `phase[..., p, j] = p * freqs[j]`, reached from Cos/Sin through layout
/// ops. A hint only: materialize checks every element before using it.
struct RotarySource {
  bool sine = false;
  llvm::SmallVector<float> freqs;
  float scale = 1.0f;
};

/// Expert matrices selected row by row by routing ids: what the exporter
/// writes as GatherND(experts [E, A, B], ids) in a mixture of experts. It is
/// kept symbolic, never built as [N, A, B] (Recognise/Experts.cpp): only a
/// batched MatMul may use it, which becomes tg.expert_matmul.
struct ExpertGather {
  mlir::Value table;  ///< [E, A, B]
  mlir::Value ids;    ///< [N] i64
  std::string source; ///< "node 'X'" (the GatherND), for messages
};

/// One imported ONNX value.
struct Val {
  bool isConst = false;
  HostTensor host;   ///< when isConst (data may be absent when too large)
  mlir::Value value; ///< when dynamic (null for `experts`)
  std::optional<RotarySource> rotary; ///< when isConst
  /// When dynamic: symbolic gathered expert matrices (shared: a Val is
  /// copied around and must stay small).
  std::shared_ptr<const ExpertGather> experts;
};

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_VAL_H
