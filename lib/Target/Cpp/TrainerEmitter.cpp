//===- TrainerEmitter.cpp - tg training function to C++ ---------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A printer that decides nothing about kernels: every `kern.call` of a stage
// function (convert-tg-to-kern) becomes exactly one call of its kernel, the
// arguments in the order of runtime/kernels/cpu/KernelList.def, so the
// generated step reads side by side with `--emit=exec`. Buffers are
// std::vectors (device buffers on GPUs) freed after their last use; reshapes
// and accumulating results alias their operand's buffer.
//
//===----------------------------------------------------------------------===//

#include "rondo/Target/Cpp/TrainerEmitter.h"
#include "rondo/Driver/Target.h"

#include "Exec/IR/ExecOps.h"
#include "Kern/IR/KernOps.h"
#include "TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include <map>

using namespace mlir;
using namespace rondo;
using namespace rondo::tg;

namespace {

std::string shapeList(ArrayRef<int64_t> shape) {
  std::string s = "Shape{";
  for (auto [k, d] : llvm::enumerate(shape))
    s += (k ? ", " : "") + std::to_string(d);
  return s + "}";
}

std::string floatLiteral(float f) {
  if (std::isinf(f))
    return f > 0 ? "INFINITY" : "-INFINITY";
  if (std::isnan(f))
    return "NAN";
  return llvm::formatv("{0:e9}f", f).str();
}

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
    const char *kind = ints  ? (mut ? "MIView" : "IView")
                       : mut ? "FView"
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
  static const char *storageType(RankedTensorType t) {
    return t.getElementType().isInteger() ? "int64_t" : "float";
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
    std::string key = elem.str() + ":blob:" +
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
              << "\\n.hidden " << name << "\\n" << name << ":\\n.incbin \\\""
              << path << "\\\"\\n.previous\");\n"
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

LogicalResult Emitter::emitOp(Operation *op) {
  if (auto call = dyn_cast<kern::CallOp>(op))
    return emitCall(call);
  if (auto c = dyn_cast<ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    auto t = cast<RankedTensorType>(c.getType());
    if (!dense)
      return op->emitError("the C++ emitter needs dense constants");
    if (t.getElementType().isF32()) {
      if (dense.isSplat()) {
        std::string name = newBuffer(c);
        body << llvm::formatv("  K::fill(FView{{{0}.data(), {1}}, {2});\n",
                              name, shapeList(t.getShape()),
                              floatLiteral(dense.getSplatValue<float>()));
        return success();
      }
      if (!opts.blobDir.empty() && dense.getNumElements() > opts.blobElements) {
        // The host's byte order: the trainer is compiled for this machine.
        FailureOr<std::string> name =
            blobConstant(op, "float", dense.getRawData());
        if (failed(name))
          return failure();
        exprs[c] = *name;
        return success();
      }
      std::string values;
      llvm::raw_string_ostream vos(values);
      for (auto [k, f] : llvm::enumerate(dense.getValues<float>()))
        vos << (k ? "," : "") << (k % 8 == 0 ? "\n    " : " ")
            << floatLiteral(f);
      exprs[c] = globalConstant("float", values);
      return success();
    }
    if (t.getElementType().isInteger()) {
      // Stored as int64 like every integer tensor (i1 masks: 0 and 1).
      std::string values;
      llvm::raw_string_ostream vos(values);
      for (auto [k, v] : llvm::enumerate(dense.getValues<APInt>()))
        vos << (k ? ", " : "")
            << (v.getBitWidth() == 1 ? int64_t(v.getBoolValue())
                                     : v.getSExtValue());
      exprs[c] = globalConstant("int64_t", values);
      return success();
    }
    return op->emitError(
               "the C++ emitter has no storage for constants of type ")
           << t;
  }
  if (auto r = dyn_cast<RotaryTableOp>(op)) {
    exprs[r] = rotaryTable(r);
    return success();
  }
  if (auto r = dyn_cast<ReshapeOp>(op)) {
    exprs[r] = ptr(r.getX());
    // Copy the root's name before inserting: DenseMap::operator[] may grow
    // the table and leave a reference to another entry dangling (the
    // sanitizer suite caught an early free from exactly that).
    if (auto root = roots.find(r.getX()); root != roots.end()) {
      std::string name = root->second;
      roots[r] = std::move(name);
    }
    return success();
  }
  return op->emitError("the C++ emitter prints kernel calls, not '")
         << op->getName() << "' (run convert-tg-to-kern first)";
}

/// One call, its arguments in the kernel's parameter order (KernelTable.h).
LogicalResult Emitter::emitCall(kern::CallOp call) {
  std::string error;
  FailureOr<SmallVector<kern::BoundParam>> bound =
      kern::bindParams(call, error);
  if (failed(bound))
    return call.emitOpError(error);
  // Results computed in their init's buffer alias it.
  for (auto [k, init] : llvm::enumerate(call.getInits())) {
    Value r = call.getResult(k);
    exprs[r] = ptr(init);
    if (auto root = roots.find(init); root != roots.end()) {
      std::string name = root->second;
      roots[r] = std::move(name);
    }
  }
  auto input = [&](int k) { return call.getInputs()[k]; };
  std::string args;
  auto add = [&](const std::string &a) {
    args += (args.empty() ? "" : ", ") + a;
  };
  for (const kern::BoundParam &b : *bound) {
    switch (b.param->kind) {
    case kern::ParamKind::Input:
    case kern::ParamKind::IntInput:
      add(view(input(b.operand)));
      break;
    case kern::ParamKind::InputList:
    case kern::ParamKind::IntInputList: {
      std::string arr = "in" + std::to_string(counter++);
      body << "  "
           << (b.param->kind == kern::ParamKind::InputList ? "CFView" : "IView")
           << " " << arr << "[] = {";
      for (int k = 0; k < b.count; ++k)
        body << (k ? ", " : "") << view(input(b.operand + k));
      body << "};\n";
      add(arr);
      break;
    }
    case kern::ParamKind::ListSize:
      add(std::to_string(b.count));
      break;
    case kern::ParamKind::Output:
    case kern::ParamKind::IntOutput: {
      Value r = call.getResult(b.result);
      if (b.skipped) {
        add(llvm::formatv(
                "FView{{nullptr, {0}}",
                shapeList(cast<RankedTensorType>(r.getType()).getShape()))
                .str());
        break;
      }
      if (unsigned(b.result) >= call.getInits().size())
        newBuffer(r);
      add(view(r, /*mut=*/true));
      break;
    }
    case kern::ParamKind::LossOutput:
      add(newBuffer(call.getResult(b.result)) + ".data()");
      break;
    case kern::ParamKind::ErrorFlag:
      add("nullptr");
      break;
    case kern::ParamKind::F32:
      add(b.attr ? floatLiteral(cast<FloatAttr>(b.attr).getValueAsDouble())
                 : scalar(input(b.operand)));
      break;
    case kern::ParamKind::Bool:
      add(cast<BoolAttr>(b.attr).getValue() ? "true" : "false");
      break;
    case kern::ParamKind::I32:
    case kern::ParamKind::I64:
      add(std::to_string(cast<IntegerAttr>(b.attr).getInt()));
      break;
    case kern::ParamKind::I64Array:
      add(ints(cast<DenseI64ArrayAttr>(b.attr).asArrayRef()));
      break;
    case kern::ParamKind::UnaryKind:
      add("UnaryKind::" + cast<StringAttr>(b.attr).str());
      break;
    case kern::ParamKind::BinaryKind:
      add("BinaryKind::" + cast<StringAttr>(b.attr).str());
      break;
    }
  }
  // Qualified (K:: is rondo::cpu or rondo::cuda): both libraries take the
  // same view types, so an unqualified call would find the other library's
  // overloads by argument-dependent lookup.
  body << "  K::" << call.getKernel() << "(" << args << ");\n";
  return success();
}

LogicalResult Emitter::emitStageFunction(func::FuncOp fn, StringRef cName) {
  exprs.clear();
  roots.clear();
  bodyText.clear();
  counter = 0;
  // io: arguments (the loss scale is passed by value), then plain results,
  // then parameter-gradient results, which are added into their buffers.
  unsigned slot = 0;
  for (unsigned k = 0; k < fn.getNumArguments(); ++k) {
    Value arg = fn.getArgument(k);
    auto role = fn.getArgAttrOfType<StringAttr>(k, "exec.role");
    if (role && role.getValue() == "loss_scale") {
      exprs[arg] = "lossScaleValue";
      continue;
    }
    exprs[arg] = llvm::formatv(
                     "static_cast<{0} *>(io[{1}])",
                     storageType(cast<RankedTensorType>(arg.getType())), slot++)
                     .str();
  }
  Block &block = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (failed(emitOp(op)))
      return failure();
    for (Value operand : op->getOperands()) {
      auto root = roots.find(operand);
      if (root == roots.end() || root->second.empty())
        continue;
      std::string name = root->second;
      bool usedLater = false;
      for (Operation *later :
           llvm::ArrayRef<Operation *>(ops).drop_front(i + 1)) {
        for (Value v : later->getOperands())
          usedLater |= roots.lookup(v) == name;
        if (usedLater)
          break;
      }
      for (Value v : ret.getOperands())
        usedLater |= roots.lookup(v) == name;
      if (!usedLater) {
        body << "  Buf<"
             << storageType(cast<RankedTensorType>(operand.getType()))
             << ">().swap(" << name << ");\n";
        for (auto &entry : roots)
          if (entry.second == name)
            entry.second.clear();
      }
    }
  }
  SmallVector<unsigned> plain, grads;
  for (unsigned k = 0; k < fn.getNumResults(); ++k) {
    auto role = fn.getResultAttrOfType<StringAttr>(k, "exec.role");
    (role && role.getValue() == "param_grad" ? grads : plain).push_back(k);
  }
  for (unsigned k : plain) {
    Value v = ret.getOperand(k);
    auto t = cast<RankedTensorType>(v.getType());
    int64_t bytes =
        t.getNumElements() * (t.getElementType().isInteger() ? 8 : 4);
    body << llvm::formatv("  copyOut(io[{0}], {1}, {2});\n", slot++, ptr(v),
                          bytes);
  }
  for (unsigned k : grads) {
    Value v = ret.getOperand(k);
    auto t = cast<RankedTensorType>(v.getType());
    body << llvm::formatv(
        "  K::accumulate({0}, FView{{static_cast<float *>(io[{1}]), {2}});\n",
        view(v), slot++, shapeList(t.getShape()));
  }
  // Stages with the same layers' code (block layers differ only in their
  // parameters, which are arguments) share one function.
  auto [it, fresh] = functionsByBody.try_emplace(bodyText, cName.str());
  if (!fresh) {
    functionsOs << "// " << fn.getSymName() << ": same code as " << it->second
                << "\n"
                << "void " << cName << "(void *const *io, float lossScale) { "
                << it->second << "(io, lossScale); }\n\n";
    return success();
  }
  functionsOs << "// " << fn.getSymName() << "\n"
              << "void " << cName << "(void *const *io, float lossScale) {\n"
              << "  const float lossScaleValue[1] = {lossScale};\n"
              << "  (void)lossScaleValue;\n"
              << bodyText << "}\n\n";
  return success();
}

namespace {
const char *copyKindName(exec::CopyKind k) {
  switch (k) {
  case exec::CopyKind::param_upload:
    return "RONDO_COPY_PARAM_UPLOAD";
  case exec::CopyKind::input_upload:
    return "RONDO_COPY_INPUT_UPLOAD";
  case exec::CopyKind::handoff:
    return "RONDO_COPY_HANDOFF";
  case exec::CopyKind::checkpoint:
    return "RONDO_COPY_CHECKPOINT";
  case exec::CopyKind::reload:
    return "RONDO_COPY_RELOAD";
  case exec::CopyKind::grad_download:
    return "RONDO_COPY_GRAD_DOWNLOAD";
  case exec::CopyKind::loss_download:
    return "RONDO_COPY_LOSS_DOWNLOAD";
  }
  return "?";
}
const char *streamName(exec::Stream s) {
  switch (s) {
  case exec::Stream::compute:
    return "RONDO_STREAM_COMPUTE";
  case exec::Stream::param_upload:
    return "RONDO_STREAM_PARAM_UPLOAD";
  case exec::Stream::act_upload:
    return "RONDO_STREAM_ACT_UPLOAD";
  case exec::Stream::download:
    return "RONDO_STREAM_DOWNLOAD";
  case exec::Stream::host:
    return "RONDO_STREAM_HOST";
  }
  return "?";
}
std::string cIdent(StringRef name) {
  std::string out;
  for (char c : name)
    out += llvm::isAlnum(c) ? c : '_';
  return out;
}
} // namespace

LogicalResult
Emitter::emitProgram(exec::ProgramOp program,
                     const llvm::StringMap<unsigned> &paramIndex) {
  std::string id = cIdent(program.getSymName());
  Block &block = program.getBody().front();
  // Buffers: the master weights are the trainer's, not the runtime's.
  llvm::StringMap<int> bufferIndex;
  std::string buffers;
  llvm::raw_string_ostream bos(buffers);
  int numBuffers = 0;
  for (auto buf : block.getOps<exec::BufferOp>()) {
    if (buf.getSymName() == exec::kParamsBuffer) {
      bufferIndex[buf.getSymName()] = -1;
      continue;
    }
    bufferIndex[buf.getSymName()] = numBuffers++;
    bos << llvm::formatv(
        "    {{\"{0}\", {1}, {2}, {3}, {4}},\n", buf.getSymName(),
        buf.getSpace() == exec::Space::worker ? "RONDO_SPACE_WORKER"
                                              : "RONDO_SPACE_HOST",
        buf.getSlots(), buf.getBytes(), buf.getOffset());
  }
  tablesOs << "const rondo_buffer_desc " << id << "_buffers[] = {\n"
           << buffers << "};\n";

  // Stages, their parameter pieces, and the gradient parts in the order
  // the host sums them: by parameter, then by job.
  llvm::StringMap<int> stageIndex;
  SmallVector<exec::StageOp> stages(block.getOps<exec::StageOp>());
  struct Part {
    unsigned param;
    int stage;
    int64_t offset;
  };
  SmallVector<Part> parts;
  for (auto [k, st] : llvm::enumerate(stages)) {
    stageIndex[st.getSymName()] = k;
    tablesOs << "const rondo_param_piece " << id << "_pieces" << k << "[] = {";
    for (auto [name, off, size] :
         llvm::zip(st.getParams(), st.getParamOffsets(), st.getParamSizes())) {
      auto it = paramIndex.find(cast<StringAttr>(name).getValue());
      if (it == paramIndex.end())
        return st.emitOpError("reads parameter ")
               << name << ", which @main does not have";
      tablesOs << llvm::formatv("{{{0}, {1}, {2}}, ", it->second, off, size);
    }
    tablesOs << "{-1, 0, 0}};\n";
    for (auto [name, off] : llvm::zip(st.getGrads(), st.getGradOffsets()))
      parts.push_back({paramIndex.lookup(cast<StringAttr>(name).getValue()),
                       int(k), st.getHostGradOffset() + off});
  }
  llvm::stable_sort(
      parts, [](const Part &a, const Part &b) { return a.param < b.param; });
  tablesOs << "const rondo_stage_desc " << id << "_stages[] = {\n";
  for (auto [k, st] : llvm::enumerate(stages))
    tablesOs << llvm::formatv(
        "    {{\"{0}\", {1}, {2}, {3}, {4}_pieces{5}, {6}, {7}, {8}, {9}, "
        "{10}},\n",
        st.getSymName(),
        st.getKind() == exec::StageKind::forward ? "RONDO_STAGE_FORWARD"
        : st.getKind() == exec::StageKind::tail  ? "RONDO_STAGE_TAIL"
                                                 : "RONDO_STAGE_BACKWARD",
        st.getFirstLayer(), st.getEndLayer(), id, k, st.getParams().size(),
        st.getParamBytes(), st.getGradBytes(), st.getHostGradOffset(),
        llvm::formatv("{0:e6}", st.getPredictedJobSeconds().convertToDouble()));
  tablesOs << "};\n";
  tablesOs << "const rondo_grad_part " << id << "_grads[] = {";
  for (const Part &p : parts)
    tablesOs << llvm::formatv("{{{0}, {1}, {2}}, ", p.param, p.stage, p.offset);
  tablesOs << "{-1, -1, 0}};\n";
  tablesOs << "const int32_t " << id << "_jobs[] = {";
  for (auto [n, job] : llvm::enumerate(program.getJobs()))
    tablesOs << (n ? ", " : "")
             << stageIndex.lookup(cast<FlatSymbolRefAttr>(job).getValue());
  tablesOs << "};\n";

  // The issue function: one runtime call per op.
  llvm::DenseMap<Value, int> eventId;
  int numEvents = 0;
  for (Operation &op : block)
    if (op.getNumResults() == 1 &&
        isa<exec::EventType>(op.getResult(0).getType()))
      eventId[op.getResult(0)] = numEvents++;
  auto yield = cast<exec::YieldOp>(block.getTerminator());
  auto awaits = [&](ValueRange events) -> std::string {
    if (events.empty())
      return "nullptr, 0";
    std::string list;
    for (Value e : events) {
      int idValue, previous = 0;
      if (auto arg = dyn_cast<BlockArgument>(e)) {
        idValue = eventId.lookup(yield.getOperand(arg.getArgNumber()));
        previous = 1;
      } else {
        idValue = eventId.lookup(e);
      }
      list += llvm::formatv("{{{0}, {1}}, ", idValue, previous).str();
    }
    std::string name = "aw" + std::to_string(counter++);
    issueOs << "  static const rondo_await " << name << "[] = {" << list
            << "};\n";
    return name + ", " + std::to_string(events.size());
  };
  auto refText = [&](exec::RefAttr r) {
    return llvm::formatv("rondo_ref{{{0}, {1}, {2}, {3}}",
                         bufferIndex.lookup(r.getBuffer().getValue()),
                         r.getJob(), r.getSlot(), r.getOffset())
        .str();
  };
  issueOs << "// " << program.getSymName() << ": one call per exec op.\n"
          << "void " << id << "_issue(rondo_exec *x) {\n";
  for (Operation &op : block) {
    if (auto c = dyn_cast<exec::CopyOp>(op)) {
      std::string aw = awaits(c.getAwaits());
      issueOs << llvm::formatv("  rondo_exec_copy(x, {0}, {1}, {2}, {3}, {4}, "
                               "{5}, {6}, {7}, {8});\n",
                               eventId[c.getEvent()], copyKindName(c.getKind()),
                               streamName(c.getStream()), int64_t(c.getJob()),
                               int64_t(c.getMb()), refText(c.getSrc()),
                               refText(c.getDst()), c.getSrc().getBytes(), aw);
    } else if (auto f = dyn_cast<exec::FillZeroOp>(op)) {
      std::string aw = awaits(f.getAwaits());
      issueOs << llvm::formatv("  rondo_exec_fill_zero(x, {0}, {1}, {2}, {3}, "
                               "{4});\n",
                               eventId[f.getEvent()], int64_t(f.getJob()),
                               refText(f.getDst()), f.getDst().getBytes(), aw);
    } else if (auto l = dyn_cast<exec::LaunchOp>(op)) {
      std::string aw = awaits(l.getAwaits());
      auto stage =
          cast<exec::StageOp>(program.lookupSymbol(l.getStageAttr().getAttr()));
      std::string io = "io" + std::to_string(counter++);
      issueOs << "  static const rondo_ref " << io << "[] = {";
      unsigned count = 0;
      for (auto list : {l.getInputs(), l.getOutputs(), l.getAccumulate()})
        for (Attribute a : list) {
          issueOs << (count ? ", " : "") << refText(cast<exec::RefAttr>(a));
          ++count;
        }
      issueOs << "};\n";
      issueOs << llvm::formatv(
          "  rondo_exec_launch(x, {0}, {1}, {2}, {3}, {4}, {5}, {6});\n",
          eventId[l.getEvent()], int64_t(l.getJob()), int64_t(l.getMb()),
          cIdent(stage.getFunction()), io, count, aw);
    } else if (auto h = dyn_cast<exec::HostTaskOp>(op)) {
      std::string aw = awaits(h.getAwaits());
      issueOs << llvm::formatv(
          "  rondo_exec_host_task(x, {0}, {1}, {2}, {3});\n",
          eventId[h.getEvent()],
          h.getKind() == exec::HostTaskKind::load_batch
              ? "RONDO_TASK_LOAD_BATCH"
              : "RONDO_TASK_OPTIMIZER",
          h.getStageAttr() ? stageIndex.lookup(h.getStageAttr().getValue())
                           : -1,
          aw);
    } else if (isa<exec::BarrierOp>(op)) {
      issueOs << "  rondo_exec_barrier(x);\n";
    }
  }
  issueOs << "}\n\n";

  auto bufferOr = [&](StringRef name) {
    auto it = bufferIndex.find(name);
    return it == bufferIndex.end() ? -1 : it->second;
  };
  programsOs << llvm::formatv(
      "    {{\"{0}\", \"{1}\", {2}, {3}, {4}, {5}, {6}, {7}_jobs, {7}_stages, "
      "{8}, {7}_buffers, {9}, {10}, {11}, {7}_grads, {12}, {13}, {14}, {15}, "
      "{16}, {17}, {18}, {19}, {7}_issue},\n",
      program.getSymName(), program.getOptimizer(), program.getWorkers(),
      program.getMicrobatches(), program.getRowsPerMicrobatch(),
      program.getFirstWorker(), program.getNumJobs(), id, stages.size(),
      numBuffers,
      program->getAttrOfType<IntegerAttr>("worker_arena_bytes").getInt(),
      program->getAttrOfType<IntegerAttr>("host_pool_bytes").getInt(),
      parts.size(), bufferOr(exec::kHostIdsBuffer),
      bufferOr(exec::kHostLabelsBuffer), bufferOr(exec::kHostLossBuffer),
      bufferOr(exec::kHostGradsBuffer), numEvents,
      llvm::formatv("{0:e6}",
                    program.getPredictedStepSeconds().convertToDouble()),
      llvm::formatv("{0:e6}",
                    program.getStaleStepSeconds()
                        ? program.getStaleStepSeconds()->convertToDouble()
                        : 0.0));
  return success();
}

LogicalResult Emitter::run() {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no @main function to emit");
  if (func.getNumResults() == 0 || !func.getResultAttr(0, kResultNameAttr))
    return func.emitError(
        "emit a differentiated training function (run the train phase)");
  SmallVector<exec::ProgramOp> programs(module.getOps<exec::ProgramOp>());
  if (programs.empty())
    return module.emitError("no exec.program to emit: plan the model "
                            "(--workers) and lower it (--emit=exec) first");

  // The parameter table, in @main's order.
  struct ParamInfo {
    std::string name, torchName;
    SmallVector<int64_t> dims;
    bool trainable;
    std::string loraFactor, loraBase; ///< Empty unless a LoRA adapter.
    bool loraBaseTransposed = false;
    std::string torchAliases; ///< Comma-separated, when there are several.
    bool torchTransposed = false;
  };
  SmallVector<ParamInfo> params;
  llvm::StringMap<unsigned> paramIndex;
  std::string inputName;
  int64_t seq = 0, vocab = 0;
  Value ids;
  for (unsigned k = 0; k < func.getNumArguments(); ++k) {
    Value arg = func.getArgument(k);
    auto t = cast<RankedTensorType>(arg.getType());
    if (auto name = func.getArgAttrOfType<StringAttr>(k, kParamAttr)) {
      auto torch = func.getArgAttrOfType<StringAttr>(k, kTorchNameAttr);
      paramIndex[name.getValue()] = params.size();
      params.push_back({name.str(), torch ? torch.str() : "",
                        SmallVector<int64_t>(t.getShape()),
                        func.getArgAttr(k, kTrainableAttr) != nullptr});
      if (auto aliases = func.getArgAttrOfType<ArrayAttr>(k, kTorchAliasesAttr))
        for (Attribute a : aliases)
          params.back().torchAliases +=
              (params.back().torchAliases.empty() ? "" : ",") +
              cast<StringAttr>(a).str();
      params.back().torchTransposed =
          func.getArgAttr(k, kTorchTransposedAttr) != nullptr;
      if (auto base = func.getArgAttrOfType<StringAttr>(k, kLoraOfAttr)) {
        auto factor = func.getArgAttrOfType<StringAttr>(k, kLoraFactorAttr);
        if (!factor || (factor.getValue() != "A" && factor.getValue() != "B"))
          return func.emitError("LoRA adapter '")
                 << name.getValue() << "' has no factor A or B";
        params.back().loraFactor = factor.str();
        params.back().loraBase = base.str();
        params.back().loraBaseTransposed =
            func.getArgAttr(k, kLoraBaseTransposedAttr) != nullptr;
      }
    } else if (auto in = func.getArgAttrOfType<StringAttr>(k, kInputAttr)) {
      if (!t.getElementType().isInteger(64) || t.getRank() != 2)
        return func.emitError(
                   "the trainer takes one int64 [batch, seq] token input; '")
               << in.getValue() << "' is " << t;
      inputName = in.str();
      seq = t.getDimSize(1);
      ids = arg;
    } else if (!func.getArgAttr(k, kLabelsAttr) &&
               !func.getArgAttr(k, kLossScaleAttr)) {
      return func.emitError("argument ")
             << k << " has no role the trainer can supply";
    }
  }
  if (inputName.empty())
    return func.emitError("the training function has no token input");
  func.walk([&](GatherOp g) {
    if (g.getIds() == ids)
      vocab = cast<RankedTensorType>(g.getTable().getType()).getDimSize(0);
  });
  int64_t globalBatch = programs.front().getMicrobatches() *
                        programs.front().getRowsPerMicrobatch();
  for (exec::ProgramOp p : programs)
    if (p.getMicrobatches() * p.getRowsPerMicrobatch() != globalBatch)
      return p.emitOpError("runs ")
             << p.getMicrobatches() * p.getRowsPerMicrobatch()
             << " rows per step, another program " << globalBatch;

  llvm::StringSet<> emitted;
  for (exec::ProgramOp p : programs)
    for (auto st : p.getBody().getOps<exec::StageOp>()) {
      StringRef fnName = st.getFunction();
      if (!emitted.insert(fnName).second)
        continue;
      auto fn = module.lookupSymbol<func::FuncOp>(fnName);
      if (!fn)
        return st.emitOpError("names missing function @") << fnName;
      if (failed(emitStageFunction(fn, cIdent(fnName))))
        return failure();
    }
  for (exec::ProgramOp p : programs)
    if (failed(emitProgram(p, paramIndex)))
      return failure();

  auto lossKind = module->getAttrOfType<StringAttr>("tg.loss");
  bool causal = !lossKind || lossKind.getValue() == "causal-lm";
  os << "// Generated by rondo-compile from " << opts.modelPath
     << ". Do not edit.\n"
     << "// Stage functions call the kernels of KernelList.def (one call per "
        "kern.call of the stage);\n"
     << "// issue functions make one runtime call per exec op "
        "(rondo-compile --emit=exec).\n"
     << "#include \"rondo/runtime/Exec.h\"\n"
     << "#include \"rondo/runtime/RotaryTable.h\"\n"
     << "#include \"rondo/runtime/Trainer.h\"\n\n"
     << "#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include "
        "<cstdlib>\n#include <cstring>\n"
     << "#include <vector>\n\n";
  if (opts.target == "cuda") {
    // Device kernels; Buf is the stream-ordered device buffer, and the
    // helpers below come from the CUDA library.
    os << "#include \"CudaKernels.h\"\n#include \"GeneratedSupport.h\"\n"
       << "#include \"rondo/runtime/DeviceOps.h\"\n\n"
       << "namespace {\nnamespace K = rondo::cuda;\n"
       << "using namespace rondo::cuda;\n"
       << "template <class T> using Buf = rondo::cuda::DeviceBuffer<T>;\n\n"
       << globals << "\n"
       << functions << tables << "\n"
       << issueText;
  } else {
    os << "#include \"Kernels.h\"\n\n"
       << "namespace {\nnamespace K = rondo::cpu;\n"
       << "using namespace rondo::cpu;\n"
       << "template <class T> using Buf = std::vector<T>;\n\n"
       << "void copyOut(void *dst, const void *src, size_t bytes) {\n"
       << "  std::memcpy(dst, src, bytes);\n}\n\n"
       << globals << "\n"
       << functions << tables << "\n"
       << issueText;
  }
  os << "const rondo::rt::ParamSpec kParams[] = {\n";
  for (const ParamInfo &p : params) {
    os << "    {\"" << p.name << "\", \"" << p.torchName << "\", "
       << p.dims.size() << ", {";
    for (auto [k, d] : llvm::enumerate(p.dims))
      os << (k ? ", " : "") << d;
    os << "}, " << (p.trainable ? "true" : "false");
    if (!p.loraFactor.empty() || !p.torchAliases.empty() || p.torchTransposed) {
      os << ", rondo::rt::LoraFactor::"
         << (p.loraFactor.empty() ? "None" : p.loraFactor) << ", ";
      if (p.loraBase.empty())
        os << "nullptr";
      else
        os << "\"" << p.loraBase << "\"";
      os << ", " << (p.loraBaseTransposed ? "true" : "false") << ", \""
         << p.torchAliases << "\", " << (p.torchTransposed ? "true" : "false");
    }
    os << "},\n";
  }
  os << "};\n\n";
  // The adapter configuration, for the trainer's initialisation, messages
  // and PEFT's adapter_config.json.
  std::string loraSpec = "nullptr";
  if (auto lora = module->getAttrOfType<DictionaryAttr>(kLoraConfigAttr)) {
    auto rank = lora.getAs<IntegerAttr>("rank");
    auto alpha = lora.getAs<FloatAttr>("alpha");
    auto dropout = lora.getAs<FloatAttr>("dropout");
    auto targets = lora.getAs<StringAttr>("targets");
    if (!rank || !alpha || !dropout || !targets)
      return module.emitError("malformed tg.lora attribute");
    std::string escaped;
    for (char c : targets.getValue()) {
      if (c == '"' || c == '\\')
        escaped += '\\';
      escaped += c;
    }
    os << llvm::formatv("const rondo::rt::LoraSpec kLora = {{{0}, {1:e17}, "
                        "{2:e17}, \"{3}\"};\n\n",
                        rank.getInt(), alpha.getValueAsDouble(),
                        dropout.getValueAsDouble(), escaped);
    loraSpec = "&kLora";
  }
  std::string modelPath = opts.modelPath;
  // The resolved target the plans were costed for decides (rondo.target,
  // include/rondo/Driver/Target.h); a module without one takes the option.
  FailureOr<std::optional<TargetConfig>> resolved = getModuleTarget(module);
  if (failed(resolved))
    return failure();
  const std::string precision =
      *resolved ? (*resolved)->precision : opts.precision;
  if (opts.target != "cuda" && precision != "fp32")
    return module.emitError("the host kernels compute in fp32, not ")
           << precision;
  os << "const rondo::rt::ModelSpec kModel = {\n"
     << "    \"" << llvm::StringRef(modelPath) << "\", \"" << inputName
     << "\", " << globalBatch << ", " << seq << ", " << vocab << ",\n"
     << "    rondo::rt::LossKind::" << (causal ? "CausalLM" : "GraphOutput")
     << ", kParams, " << params.size() << ", \"" << precision << "\", "
     << loraSpec << "};\n\n"
     << "const rondo_program kPrograms[] = {\n"
     << programsText << "};\n"
     << "} // namespace\n\n"
     << "int main(int argc, char **argv) {\n";
  if (precision == "bf16")
    os << "  rondo::cuda::setPrecision(rondo::cuda::Precision::Bf16);\n";
  os << "  return rondo::rt::trainerMain(argc, argv, kModel, kPrograms, "
     << programs.size()
     << (opts.target == "cuda" ? ", rondo::rt::makeCudaDeviceOps" : "")
     << ");\n}\n";
  return success();
}
} // namespace

LogicalResult rondo::emitTrainerCpp(ModuleOp module, raw_ostream &os,
                                    const TrainerEmitOptions &options) {
  Emitter emitter(module, os, options);
  return emitter.run();
}
