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

#include "Conversion/PipeToExec/Passes.h"
#include "Conversion/TGToKern/Passes.h"
#include "Dialect/Exec/Transforms/Passes.h"
#include "Dialect/Kern/Transforms/Passes.h"
#include "Dialect/Pipe/Transforms/Passes.h"
#include "Dialect/TG/IR/TGOps.h"
#include "Dialect/TG/Transforms/Passes.h"
#include "Driver/HelpOptions.h"
#include "Pipelines/Pipelines.h"

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
  rondo::kern::registerTGToKernPasses();
  rondo::exec::registerPipeToExecPasses();
  rondo::kern::registerKernTransformsPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  rondo::registerPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Rondo optimizer driver\n", registry));
}
