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

#include <optional>

namespace rondo::import {

/// What a folded value may be: a rotary table, `scale * sin|cos(phase)` with
/// `phase[..., p, j] = p * freqs[j]`, reached from Cos/Sin through layout
/// ops. A hint only: materialize checks every element before using it.
struct RotarySource {
  bool sine = false;
  llvm::SmallVector<float> freqs;
  float scale = 1.0f;
};

/// One imported ONNX value.
struct Val {
  bool isConst = false;
  HostTensor host;   ///< when isConst (data may be absent when too large)
  mlir::Value value; ///< when dynamic
  std::optional<RotarySource> rotary; ///< when isConst
};

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_VAL_H
