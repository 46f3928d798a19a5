//===- rondo-translate.cpp - Rondo's translations ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// --import-onnx: ONNX (binary or text) -> tg.
// --export-trainer-cpp: a differentiated tg module -> the trainer's C++.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/IR/TGOps.h"
#include "Driver/HelpOptions.h"
#include "Import/OnnxImporter.h"
#include "Target/Cpp/TrainerEmitter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"

// A category of their own, which hideLLVMOptions leaves in --help.
static llvm::cl::OptionCategory
    importCategory("ONNX import options (--import-onnx)");

static llvm::cl::opt<int64_t>
    batch("batch",
          llvm::cl::desc("rows per step (the dynamic batch dimension); needed "
                         "unless the model fixes it or --input-shape gives it"),
          llvm::cl::init(-1), llvm::cl::cat(importCategory));
static llvm::cl::opt<int64_t> seqLen(
    "seq-len",
    llvm::cl::desc("tokens per row (the dynamic sequence dimension); needed "
                   "unless the model fixes it or --input-shape gives it"),
    llvm::cl::init(-1), llvm::cl::cat(importCategory));

static llvm::cl::opt<int64_t> maxFoldElements(
    "max-fold-elements",
    llvm::cl::desc(
        "largest data-independent tensor the importer builds (testing aid)"),
    llvm::cl::init(int64_t(1) << 24), llvm::cl::cat(importCategory));
static llvm::cl::list<std::string>
    inputShapes("input-shape",
                llvm::cl::desc("NAME=d0,d1,...: the shape of a graph input"),
                llvm::cl::cat(importCategory));

int main(int argc, char **argv) {
  rondo::hideLLVMOptions({&importCategory});
  mlir::TranslateToMLIRRegistration importOnnx(
      "import-onnx", "import an ONNX model (binary or text) into tg",
      [](llvm::SourceMgr &sourceMgr,
         mlir::MLIRContext *ctx) -> mlir::OwningOpRef<mlir::Operation *> {
        const llvm::MemoryBuffer *buffer =
            sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
        rondo::ImportOptions opts;
        opts.batch = batch;
        opts.seqLen = seqLen;
        opts.maxFoldElements = maxFoldElements;
        for (const std::string &spec : inputShapes)
          if (llvm::Error err = rondo::addInputShape(opts, spec)) {
            mlir::emitError(mlir::UnknownLoc::get(ctx))
                << llvm::toString(std::move(err));
            return nullptr;
          }
        auto module = rondo::importOnnxBuffer(
            ctx, buffer->getBuffer(), buffer->getBufferIdentifier(), opts);
        return mlir::OwningOpRef<mlir::Operation *>(module.release());
      },
      [](mlir::DialectRegistry &registry) {
        registry.insert<rondo::tg::TGDialect, mlir::func::FuncDialect>();
      });
  mlir::TranslateFromMLIRRegistration exportCpp(
      "export-trainer-cpp",
      "print a differentiated tg module as the trainer's C++",
      [](mlir::Operation *op, llvm::raw_ostream &os) {
        return rondo::emitTrainerCpp(llvm::cast<mlir::ModuleOp>(op), os,
                                     rondo::TrainerEmitOptions{"model.onnx"});
      },
      [](mlir::DialectRegistry &registry) {
        registry.insert<rondo::tg::TGDialect, mlir::func::FuncDialect>();
      });
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "Rondo translations"));
}
