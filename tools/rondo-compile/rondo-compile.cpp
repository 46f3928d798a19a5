//===- rondo-compile.cpp - The Rondo compiler driver ------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// rondo-compile MODEL.onnx [-o OUT] --batch B --seq-len T
// --emit=tg|train|pipe|exec|cpp|exe --workers N[,N...] --device=...
// --explain[=DIR]
//
// The flags are declared in compiler/Driver/Options.cpp and the compilation is
// rondo::compile (compiler/Driver/Driver.cpp); this file only parses.
//
//===----------------------------------------------------------------------===//

#include "Driver/Driver.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerPassManagerCLOptions();
  mlir::registerDefaultTimingManagerCLOptions();
  llvm::cl::OptionCategory category("rondo-compile options");
  rondo::CompileOptions options;
  rondo::CompileFlags flags(options, category);
  // LLVM's backends register hundreds of options in the general category;
  // --help shows Rondo's own, --help-hidden everything (MLIR's IR printing
  // included).
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::ParseCommandLineOptions(
      argc, argv, "Rondo: ONNX to a standalone training program\n");
  if (!flags.finish())
    return 2;
  return rondo::compile(std::move(options));
}
