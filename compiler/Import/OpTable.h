//===- OpTable.h - The ONNX ops the importer knows --------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One row per ONNX op type (default domain): how to fold it on HostTensors
// (exactly, in double precision) when its inputs are data-independent, and
// how to convert it to tg when they are not. Folding and conversion of an op
// sit next to each other in the file of its family (Ops/*.cpp), so that a
// rule the two share (a result shape, an attribute default) is written once.
// An op type with no row is an unsupported operator.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_OPTABLE_H
#define RONDO_LIB_IMPORT_OPTABLE_H

#include "Recognise/CausalMask.h"
#include "Val.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringMap.h"

#include <functional>

namespace onnx {
class NodeProto;
} // namespace onnx

namespace rondo::import {

/// One node to fold. Absent inputs (optional ONNX inputs left empty) are
/// null; `maxElements` bounds the size of any output computed with data, a
/// larger output becomes shape-only.
struct Fold {
  const onnx::NodeProto &node;
  int64_t opset;
  llvm::ArrayRef<const HostTensor *> in;
  int64_t maxElements;

  /// Input `k`, or an error saying that it is required.
  llvm::Expected<const HostTensor *> need(size_t k) const;
};
using Folded = llvm::Expected<std::vector<HostTensor>>;

/// The importer as conversion functions see it.
class ImportContext {
public:
  virtual ~ImportContext();
  /// An error that names the node, its op, domain and opset.
  virtual mlir::InFlightDiagnostic nodeError(const onnx::NodeProto &node) = 0;
  /// The tg value of `v`: its dynamic value, or its folded value built as a
  /// constant or a recognised table (an error if it is too large for both).
  virtual mlir::FailureOr<mlir::Value>
  materialize(const Val &v, const onnx::NodeProto &node) = 0;
  /// Whether the folded value `name` is the causal mask, and its window.
  virtual MaskClass classifyMask(llvm::StringRef name, const HostTensor &t) = 0;
  /// tg.causal_mask for a mask of `shape` with a sliding `window` (0: none).
  virtual mlir::Value causalMask(llvm::ArrayRef<int64_t> shape,
                                 int64_t window) = 0;
  /// The node that produces the value `name` (null for inputs and
  /// initializers), and the value itself once imported (null before).
  virtual const onnx::NodeProto *producerOf(llvm::StringRef name) = 0;
  virtual const Val *valueOf(llvm::StringRef name) = 0;
  /// The nodes that read the value `name`; `graphOutput` says whether the
  /// graph returns it too. For conversions that only accept a value whose
  /// uses they can see (ReduceMax as a softmax's max shift).
  virtual llvm::SmallVector<const onnx::NodeProto *>
  consumers(llvm::StringRef name, bool &graphOutput) = 0;
};

/// One node to convert: an input is dynamic or folded (null when absent).
struct Conversion {
  const onnx::NodeProto &node;
  llvm::ArrayRef<const Val *> in;
  int64_t opset;
  mlir::OpBuilder &builder;
  mlir::Location loc;
  ImportContext &importer;

  mlir::InFlightDiagnostic error() const { return importer.nodeError(node); }
  /// Input `k` as a tg value, or an error saying that it is required.
  mlir::FailureOr<mlir::Value> need(size_t k) const;
  /// An error unless `v` holds floating-point data.
  mlir::LogicalResult requireFloat(mlir::Value v) const;
  /// Shape of a shape-changing op's result, computed by its folding
  /// function on shape-only inputs so the ONNX rules live in one place.
  mlir::FailureOr<llvm::SmallVector<int64_t>> foldedShape() const;
};
using Converted = mlir::FailureOr<llvm::SmallVector<Val>>;

/// The one dynamic result `v`.
llvm::SmallVector<Val> wrap(mlir::Value v);

using FoldFn = std::function<Folded(const Fold &)>;
using ConvertFn = std::function<Converted(const Conversion &)>;

struct OpRow {
  std::string opType;
  /// The first default-domain opset the row applies to; a later row of the
  /// same op type takes over from its own.
  int64_t sinceOpset;
  FoldFn fold;       ///< null: never folded
  ConvertFn convert; ///< null: only supported on data-independent values
};

class OpTable {
public:
  void add(llvm::StringRef opType, FoldFn fold, ConvertFn convert,
           int64_t sinceOpset = 1);
  /// The row of `opType` at `opset`; null for an unsupported operator.
  const OpRow *lookup(llvm::StringRef opType, int64_t opset) const;

  /// Every family's rows.
  static const OpTable &get();

private:
  llvm::StringMap<llvm::SmallVector<OpRow, 1>> rows;
};

/// The op families' rows, one function per file of compiler/Import/Ops.
namespace ops {
void registerElementwiseOps(OpTable &table);
void registerShapeOps(OpTable &table);
void registerIndexingOps(OpTable &table);
void registerGeneratorOps(OpTable &table);
void registerMatMulOps(OpTable &table);
void registerReductionOps(OpTable &table);
void registerNormalizationOps(OpTable &table);
} // namespace ops

/// Folds one ONNX node with its row's folding function and checks the
/// results' shapes. Errors explain which input or attribute is wrong.
Folded evaluateNode(const onnx::NodeProto &node, int64_t opset,
                    llvm::ArrayRef<const HostTensor *> inputs,
                    int64_t maxElements);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_OPTABLE_H
