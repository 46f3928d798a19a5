//===- Experts.h - Recognising a mixture of experts -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// PyTorch's exporter writes a mixture-of-experts layer (transformers'
// `batched_mm` experts) as: router logits -> TopK -> routing weights; each
// (token, slot) row gathers its expert's matrices with GatherND(experts
// [E, A, B], ids [N, 1]) and multiplies them with a batched MatMul; the
// slot outputs are weighted and summed. Taken literally that builds N copies
// of expert matrices. The importer keeps the gathered matrices symbolic
// (Val::experts) and turns the MatMul that uses them into tg.expert_matmul,
// a grouped GEMM over the rows sorted by expert. Everything around it (the
// router, the activation, biases gathered as rows, the weighted sum) stays
// ordinary tg ops. Any other use of the gathered matrices is an error that
// names the structure and the node.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_RECOGNISE_EXPERTS_H
#define RONDO_LIB_IMPORT_RECOGNISE_EXPERTS_H

#include "Import/OpTable.h"

namespace rondo::import {

/// GatherND on data: rows of a rank-2 table (a per-expert bias) become
/// tg.gather; the matrices of a rank-3 table (expert weights) a symbolic
/// ExpertGather.
Converted convertRoutedGather(const Conversion &c);

/// A MatMul with gathered expert matrices as one operand: tg.expert_matmul.
Converted convertExpertMatmul(const Conversion &c);

/// The error for any other use of gathered expert matrices by `user`.
mlir::LogicalResult rejectExpertUse(ImportContext &importer,
                                    const onnx::NodeProto &user,
                                    const ExpertGather &g);

/// Clip of integer data into [lo, hi]: only the routing ids of a TopK
/// (through layout ops), which it cannot change when [lo, hi] covers the
/// positions TopK chooses from, is supported; it is then the identity.
Converted convertIndexClip(const Conversion &c, double lo, double hi);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_RECOGNISE_EXPERTS_H
