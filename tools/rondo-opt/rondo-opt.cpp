//===- rondo-opt.cpp - Rondo's pass driver ----------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// MlirOptMain with only the dialects and passes Rondo uses; the workhorse of
// the lit tests.
//
//===----------------------------------------------------------------------===//

#include "Exec/Transforms/Passes.h"
#include "Kern/Conversion/Passes.h"
#include "Kern/Transforms/Passes.h"
#include "Pipe/Transforms/Passes.h"
#include "TG/IR/TGOps.h"
#include "TG/Transforms/Passes.h"
#include "rondo/Pipelines/Pipelines.h"
#include "rondo/Tools/HelpOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  rondo::hideLLVMOptions();
  mlir::DialectRegistry registry;
  registry.insert<rondo::tg::TGDialect, rondo::pipe::PipeDialect,
                  rondo::exec::ExecDialect, rondo::kern::KernDialect,
                  mlir::func::FuncDialect>();
  rondo::tg::registerTGPasses();
  rondo::pipe::registerPipePasses();
  rondo::exec::registerExecPasses();
  rondo::kern::registerKernConversionPasses();
  rondo::kern::registerKernTransformsPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  rondo::registerPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Rondo optimizer driver\n", registry));
}
