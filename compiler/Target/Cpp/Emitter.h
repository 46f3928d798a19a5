//===- Emitter.h - The trainer emitter's state, shared by its parts -*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One Emitter prints one module: StageFunctions.cpp prints the stage
// functions (kernel calls, buffers, constants), Programs.cpp the exec programs
// and their tables, TrainerEmitter.cpp the model tables and `main`.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_TARGET_CPP_EMITTER_H
#define RONDO_LIB_TARGET_CPP_EMITTER_H

#include "Target/Cpp/TrainerEmitter.h"
#include "Target/Target.h"

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/Kern/IR/KernOps.h"
#include "Dialect/TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include <map>

namespace rondo::cpp_emit {

using namespace mlir;
using namespace rondo::tg;

std::string shapeList(ArrayRef<int64_t> shape);
std::string floatLiteral(float f);
/// A C identifier for a symbol name.
std::string cIdent(StringRef name);
/// `text` as a C++ string literal, quotes included. Every string the
/// emitter prints (file, parameter, symbol names) goes through it: a name
/// can then neither end the literal, nor form an escape of its own (`\x41`),
/// nor start a new line, so it reaches the trainer as the same bytes.
std::string cString(StringRef text);

class Emitter {
public:
  Emitter(ModuleOp module, raw_ostream &os, const TrainerEmitOptions &opts)
      : module(module), os(os), opts(opts) {}
  LogicalResult run();

private:
  LogicalResult emitStageFunction(func::FuncOp fn, StringRef cName);
  LogicalResult emitProgram(exec::ProgramOp program,
                            const llvm::StringMap<unsigned> &paramIndex);
  LogicalResult emitOp(Operation *op);
  std::string ptr(Value v) { return exprs.lookup(v); }
  std::string view(Value v, bool mut = false) {
    auto t = cast<RankedTensorType>(v.getType());
    bool ints = t.getElementType().isInteger();
    bool bf16 = t.getElementType().isBF16();
    const char *kind = ints   ? (mut ? "MIView" : "IView")
                       : bf16 ? (mut ? "BView" : "CBView")
                       : mut  ? "FView"
                              : "CFView";
    return llvm::formatv("{0}{{{1}, {2}}", kind, ptr(v),
                         shapeList(t.getShape()))
        .str();
  }
  /// A scalar operand read on the host: the loss-gradient seed is the loss
  /// scale, which stage functions receive by value.
  std::string scalar(Value v) {
    if (exprs.lookup(v) == "lossScaleValue")
      return "lossScale";
    return ptr(v) + "[0]";
  }
  std::string newBuffer(Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    std::string name = "v" + std::to_string(counter++);
    const char *elem = storageType(t);
    body << llvm::formatv("  Buf<{0}> {1}({2});\n", elem, name,
                          t.getNumElements());
    exprs[v] = name + ".data()";
    roots[v] = name;
    return name;
  }
  std::string ints(ArrayRef<int64_t> v) {
    std::string name = "k" + std::to_string(counter++);
    body << "  static const int64_t " << name << "[] = {";
    for (auto [k, x] : llvm::enumerate(v))
      body << (k ? ", " : "") << x;
    if (v.empty())
      body << "0";
    body << "};\n";
    return name;
  }

  /// Integer tensors (ids, labels, masks) are stored as int64.
  /// bf16 tensors (kern-bf16-storage) are 16-bit words, the bits of
  /// KernelList.def's BView.
  static const char *storageType(RankedTensorType t) {
    if (t.getElementType().isInteger())
      return "int64_t";
    return t.getElementType().isBF16() ? "uint16_t" : "float";
  }
  LogicalResult emitCall(kern::CallOp call);

  ModuleOp module;
  raw_ostream &os;
  TrainerEmitOptions opts;
  std::string globals;
  llvm::raw_string_ostream globalsOs{globals};
  std::string bodyText;
  llvm::raw_string_ostream body{bodyText};
  std::string functions, tables, issueText, programsText;
  llvm::raw_string_ostream functionsOs{functions}, tablesOs{tables},
      issueOs{issueText}, programsOs{programsText};
  llvm::DenseMap<Value, std::string> exprs;
  llvm::DenseMap<Value, std::string> roots; ///< owning buffer of a value
  /// Parameter-gradient results a matmul adds straight into their io slot
  /// (GPU stage functions; see emitStageFunction).
  llvm::DenseMap<Value, unsigned> accumulateInto;
  /// The zero fills those accumulating calls no longer need (not emitted).
  llvm::DenseSet<Operation *> fillsNotEmitted;
  unsigned counter = 0;
  /// Constants are shared by content, so that stage functions computing the
  /// same thing print the same text and are emitted once.
  std::map<std::string, std::string> constantNames;
  std::map<std::string, std::string> functionsByBody;
  std::string globalConstant(StringRef elem, const std::string &values) {
    std::string key = elem.str() + ":" + values;
    auto it = constantNames.find(key);
    if (it != constantNames.end())
      return it->second;
    std::string name = "c" + std::to_string(constantNames.size());
    globalsOs << "static const " << elem << " " << name << "[] = {" << values
              << "};\n";
    return constantNames[key] = onDevice(elem, name);
  }

  /// A large constant as raw bytes in `opts.blobDir`, embedded by the
  /// assembler; deduplicated by content like the literal ones.
  FailureOr<std::string> blobConstant(Operation *op, StringRef elem,
                                      ArrayRef<char> bytes) {
    std::string key =
        elem.str() + ":blob:" +
        llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(
            StringRef(bytes.data(), bytes.size()))));
    auto it = constantNames.find(key);
    if (it != constantNames.end())
      return it->second;
    std::string name = "rondo_blob_" + std::to_string(constantNames.size());
    llvm::SmallString<256> path(opts.blobDir);
    llvm::sys::path::append(path, name + ".bin");
    if (path.str().find_first_of("\"\\\n") != StringRef::npos)
      return op->emitError("the directory for constant data, '")
             << opts.blobDir << "', has a quote or backslash in its name";
    std::error_code ec;
    llvm::raw_fd_ostream file(path, ec);
    if (!ec) {
      file.write(bytes.data(), bytes.size());
      file.close();
      ec = file.error();
    }
    if (ec)
      return op->emitError("cannot write the constant's data to '")
             << path << "': " << ec.message();
    globalsOs << "__asm__(\".section .rodata\\n.balign 64\\n.globl " << name
              << "\\n.hidden " << name << "\\n"
              << name << ":\\n.incbin \\\"" << path << "\\\"\\n.previous\");\n"
              << "extern \"C\" const " << elem << " " << name << "["
              << bytes.size() / (elem == "float" ? 4 : 8) << "];\n";
    return constantNames[key] = onDevice(elem, name);
  }

  /// A rotary table, filled on first use (rondo/runtime/RotaryTable.h):
  /// long-sequence tables are too large to embed.
  std::string rotaryTable(RotaryTableOp r) {
    auto t = cast<RankedTensorType>(r.getType());
    int64_t count = t.getNumElements(),
            positions = t.getDimSize(t.getRank() - 2);
    std::string freqs;
    for (auto [k, f] : llvm::enumerate(r.getFreqs()))
      freqs += (k ? ", " : "") + floatLiteral(f);
    std::string args = llvm::formatv(
        "{0}, {1}, {2}, freqs, {3}, {4}", count, positions, r.getFreqs().size(),
        r.getKind() == UnaryKind::sin ? "true" : "false",
        floatLiteral(r.getScale().convertToFloat()));
    std::string key = "rotary:" + args + ":" + freqs;
    auto it = constantNames.find(key);
    if (it != constantNames.end())
      return it->second;
    std::string name = "rotaryTable" + std::to_string(constantNames.size());
    globalsOs << "const float *" << name << "() {\n"
              << "  static const float freqs[] = {" << freqs << "};\n"
              << "  static const std::vector<float> table = [] {\n"
              << "    std::vector<float> t(" << count << ");\n"
              << "    rondo::rt::fillRotaryTable(t.data(), " << args << ");\n"
              << "    return t;\n  }();\n  return table.data();\n}\n";
    std::string expr = name + "()";
    if (opts.target == "cuda")
      expr = llvm::formatv("static_cast<const float *>(constantOnDevice({0}, "
                           "{1} * sizeof(float)))",
                           expr, count)
                 .str();
    return constantNames[key] = expr;
  }

  /// On GPUs a constant lives in each device's memory, uploaded on first
  /// use.
  std::string onDevice(StringRef elem, const std::string &name) {
    if (opts.target != "cuda")
      return name;
    return llvm::formatv("static_cast<const {0} *>(constantOnDevice({1}, "
                         "sizeof({1})))",
                         elem, name)
        .str();
  }
};

} // namespace rondo::cpp_emit

#endif // RONDO_LIB_TARGET_CPP_EMITTER_H
