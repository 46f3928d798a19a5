//===- Link.cpp - Compile and link a generated trainer ----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The link line of a generated trainer: the runtime, the kernels and their
// libraries, found where this build put them (compiler/Driver/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//

#include "Driver/Driver.h"

#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

bool rondo::canLink(StringRef backend) {
#ifdef RONDO_CUDA_KERNELS_LIB
  return true;
#else
  return backend != "cuda";
#endif
}

LogicalResult rondo::buildExecutable(StringRef cppPath, StringRef exePath,
                                     StringRef backend) {
  // The generated file names its target; so does the link line below.
  auto cxx = llvm::sys::findProgramByName(RONDO_CXX);
  if (!cxx) {
    cxx = llvm::sys::findProgramByName("c++");
    if (!cxx) {
      llvm::errs() << "error: no C++ compiler found (looked for " << RONDO_CXX
                   << " and c++)\n";
      return failure();
    }
  }
  // The generated code is straight-line calls into the optimised kernel
  // library and the runtime; optimising it saves nothing measurable and
  // costs five times the compile time on a model with many stages.
  llvm::SmallVector<llvm::StringRef> args = {*cxx,
                                             "-std=c++17",
                                             "-O0",
                                             "-fopenmp",
                                             "-I",
                                             RONDO_RUNTIME_INCLUDE_DIR,
                                             "-I",
                                             RONDO_KERNELS_INCLUDE_DIR,
                                             cppPath,
                                             "-o",
                                             exePath,
                                             RONDO_RUNTIME_LIB,
                                             RONDO_KERNELS_LIB,
                                             RONDO_ONNX_PROTO_LIB,
                                             "-lprotobuf",
                                             "-lopenblas",
                                             "-lpthread"};
  llvm::SmallVector<llvm::StringRef> extra;
  llvm::StringRef(RONDO_TRAINER_FLAGS).split(extra, ' ', -1, false);
  args.append(extra.begin(), extra.end());
  llvm::SmallVector<llvm::StringRef> libs;
  llvm::StringRef(RONDO_TRAINER_LIBS).split(libs, ' ', -1, false);
  args.append(libs.begin(), libs.end());
#ifdef RONDO_CUDA_KERNELS_LIB
  // GPU trainers: the device ops and CUDA kernels come before the runtime
  // that calls into them; cuBLAS and the CUDA runtime last, then libdl
  // (the attention opens libcudnn.so.9 with dlopen; part of libc from glibc
  // 2.34 on, its own library before).
  if (backend == "cuda") {
    auto runtimeLib = llvm::find(args, llvm::StringRef(RONDO_RUNTIME_LIB));
    args.insert(runtimeLib, {RONDO_RUNTIME_CUDA_LIB, RONDO_CUDA_KERNELS_LIB});
    args.insert(args.begin() + 1,
                {"-DRONDO_TARGET_CUDA", "-I", RONDO_CUDA_KERNELS_INCLUDE_DIR,
                 "-I", RONDO_CUDA_INCLUDE_DIR});
    args.append({RONDO_CUDA_KERNELS_LIB, "-L", RONDO_CUDA_LIB_DIR, "-lcublasLt",
                 "-lcublas", "-lnccl", "-lcudart", "-ldl",
                 "-Wl,-rpath," RONDO_CUDA_LIB_DIR});
  }
#endif
  std::string message;
  int rc =
      llvm::sys::ExecuteAndWait(*cxx, args, std::nullopt, {}, 0, 0, &message);
  if (rc != 0) {
    llvm::errs() << "error: compiling the generated trainer failed (" << *cxx
                 << " exited with " << rc
                 << (message.empty() ? "" : ": " + message) << ")\n";
    return failure();
  }
  return success();
}
