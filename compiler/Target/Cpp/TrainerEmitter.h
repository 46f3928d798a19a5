//===- TrainerEmitter.h - tg training function to C++ -----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Prints the differentiated @main of a module as a C++ translation unit that
// calls one runtime kernel per tg op, plus the model description the
// runtime's trainerMain needs (runtime/include/rondo/runtime/Trainer.h).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TARGET_CPP_TRAINEREMITTER_H
#define RONDO_TARGET_CPP_TRAINEREMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace rondo {

struct TrainerEmitOptions {
  /// The ONNX file initial weights are read from (made absolute).
  std::string modelPath;
  /// "host": stage functions call runtime/kernels/cpu on host memory;
  /// "cuda": runtime/kernels/cuda on device memory (temporaries from the
  /// stream-ordered allocator, constants uploaded once per device).
  std::string target = "host";
  /// "fp32" or "bf16": how the CUDA kernels compute their matrix products
  /// (rondo::cuda::Precision), for modules without a `rondo.target` (whose
  /// precision wins: the plans were costed at it). The host target computes
  /// in fp32.
  std::string precision = "fp32";
  /// When set, constants of more than `blobElements` elements (rotary tables
  /// at long sequences: 2 x T x head_dim floats) are written into this
  /// directory as raw little-endian files and embedded with the assembler's
  /// .incbin, not printed as C++ literals that the compiler would take
  /// minutes and gigabytes to parse. The files must exist until the C++ is
  /// compiled.
  std::string blobDir;
  int64_t blobElements = int64_t(1) << 16;
};

mlir::LogicalResult emitTrainerCpp(mlir::ModuleOp module, llvm::raw_ostream &os,
                                   const TrainerEmitOptions &options);

} // namespace rondo

#endif // RONDO_TARGET_CPP_TRAINEREMITTER_H
