//===- ImportFuzzer.cpp - libFuzzer harness for the ONNX importer ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Feeds arbitrary bytes to rondo::importOnnxBuffer, the entry point of
// `rondo-translate --import-onnx` and `rondo-compile`. The importer itself
// tells the two formats apart (ONNX text starts with '<' after '#' comment
// lines, anything else is parsed as a binary ModelProto), so seeds of both
// kinds steer the fuzzer into both paths.
//
// Every input must end in one of two ways:
//  - the import fails and at least one error diagnostic was emitted, or
//  - it succeeds and the module verifies.
// Anything else (a crash, a sanitizer report, a failure without a
// diagnostic, an invalid module) aborts, and libFuzzer saves the input.
//
//===----------------------------------------------------------------------===//

#include "Import/OnnxImporter.h"

#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
bool verbose() {
  static bool v = std::getenv("RONDO_FUZZ_VERBOSE") != nullptr;
  return v;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::DialectRegistry registry;
  registry.insert<rondo::tg::TGDialect, mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx.loadDialect<rondo::tg::TGDialect, mlir::func::FuncDialect>();

  int errors = 0;
  std::string firstError;
  ctx.getDiagEngine().registerHandler([&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error) {
      if (errors++ == 0)
        firstError = diag.str();
    }
    if (verbose())
      llvm::errs() << "diagnostic: " << diag << "\n";
    return mlir::success();
  });

  // Small, fixed specialisation of the dynamic token dims; the buffer name
  // lives in a scratch directory so external data can never resolve.
  rondo::ImportOptions opts;
  opts.batch = 2;
  opts.seqLen = 3;
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  auto module =
      rondo::importOnnxBuffer(&ctx, bytes, "/nonexistent/fuzz.onnx", opts);
  if (!module) {
    if (errors == 0) {
      llvm::errs() << "import failed without an error diagnostic\n";
      std::abort();
    }
    return 0;
  }
  if (mlir::failed(mlir::verify(*module))) {
    llvm::errs() << "the imported module does not verify";
    if (errors)
      llvm::errs() << ": " << firstError;
    llvm::errs() << "\n";
    std::abort();
  }
  return 0;
}
