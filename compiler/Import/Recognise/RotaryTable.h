//===- RotaryTable.h - Recognising rotary tables ----------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Rotary cos/sin tables fold like any data-independent value, but a folded
// table is T x head_dim floats baked into the trainer. A table that the
// runtime's formula (rondo/runtime/RotaryTable.h) reproduces exactly becomes
// tg.rotary_table instead, computed at start-up.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_RECOGNISE_ROTARYTABLE_H
#define RONDO_LIB_IMPORT_RECOGNISE_ROTARYTABLE_H

#include "Import/Val.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

namespace onnx {
class NodeProto;
} // namespace onnx

namespace rondo::import {

/// The rotary table a folded node's result may be (see RotarySource):
/// Cos/Sin of a phase whose position-1 row gives the frequencies, or a
/// layout op, cast or scalar scaling of such a table.
std::optional<RotarySource> rotarySourceOf(const onnx::NodeProto &node,
                                           llvm::ArrayRef<const Val *> inputs,
                                           const HostTensor &result);

/// Whether a value's folded data is the rotary table it claims to be, by
/// value: every layer's q and k materialise the same tables.
using RotaryChecks = llvm::DenseMap<const Val *, bool>;

/// tg.rotary_table for a folded table that `v.rotary` describes and whose
/// every element rotaryTableValue reproduces exactly; null if not.
mlir::Value rotaryTable(mlir::OpBuilder &builder, mlir::Location loc,
                        const Val &v, RotaryChecks &checked);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_RECOGNISE_ROTARYTABLE_H
