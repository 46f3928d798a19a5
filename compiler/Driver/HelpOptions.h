//===- HelpOptions.h - Rondo's options first in --help ----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Debian's shared libLLVM registers hundreds of code-generation options
// (--aarch64-*, --amdgpu-*, --polly-*, ...) when it loads;
// without this, rondo-opt's and rondo-translate's --help bury Rondo's passes
// and flags among them (issue 24, item 15).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_TOOLS_HELPOPTIONS_H
#define RONDO_TOOLS_HELPOPTIONS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/CommandLine.h"

namespace rondo {

/// Moves every option registered so far from --help to --help-hidden (they
/// still parse), except --help and --version themselves and the options in
/// `keep`. Call it first in main: before main, only libLLVM's options and a
/// tool's own static ones exist; the options MlirOptMain and
/// mlirTranslateMain register later (the pass and translation lists,
/// --split-input-file, --mlir-print-*) stay listed.
inline void
hideLLVMOptions(llvm::ArrayRef<const llvm::cl::OptionCategory *> keep = {}) {
  auto &options = llvm::cl::getRegisteredOptions();
  llvm::SmallVector<const llvm::cl::OptionCategory *> kept(keep);
  // LLVM's generic category (--help, --version) has no accessor of its own.
  if (auto help = options.find("help"); help != options.end())
    kept.append(help->second->Categories.begin(),
                help->second->Categories.end());
  for (auto &entry : options) {
    llvm::cl::Option *option = entry.second;
    if (option->getOptionHiddenFlag() == llvm::cl::NotHidden &&
        llvm::none_of(option->Categories, [&](llvm::cl::OptionCategory *c) {
          return llvm::is_contained(kept, c);
        }))
      option->setHiddenFlag(llvm::cl::Hidden);
  }
}

} // namespace rondo

#endif // RONDO_TOOLS_HELPOPTIONS_H
