//===- rondo-run.cpp - Run an imported graph on the CPU ---------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// rondo-run MODEL.onnx|MODEL.onnxtxt|MODEL.mlir
//     [--batch B --seq-len T --input-shape NAME=d0,...]
//     [--input NAME=FILE.npy ...] [--weights-from-model[=MODEL.onnx]]
//     [--pipeline=none|tg|train] [--output-dir DIR] [--print]
//
// Imports the model (or parses tg IR), runs a phase pipeline, and executes
// @main with the CPU reference kernels (rondo/Interpreter/Interpreter.h).
// Arguments are named as rondo::argumentName says: parameters and inputs by
// their ONNX names, and "labels"/"loss_scale" after --pipeline=train, where
// they default to the token input and 1 / (number of predicted targets).
// Each result is written to DIR/<name>.npy or printed. Any error names the
// argument or file at fault and exits with status 1.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/IR/TGOps.h"
#include "Import/OnnxImporter.h"
#include "Interpreter/Interpreter.h"
#include "Pipelines/Pipelines.h"
#include "rondo/runtime/Data.h"
#include "rondo/runtime/Error.h"
#include "rondo/runtime/FloatConv.h"
#include "rondo/runtime/OnnxWeights.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>

using namespace mlir;
using namespace rondo;
namespace cl = llvm::cl;
using llvm::SmallVector;
using llvm::StringRef;

static cl::OptionCategory category("rondo-run options");
static cl::opt<std::string> inputFile(cl::Positional,
                                      cl::desc("<model.onnx|model.mlir>"),
                                      cl::Required, cl::cat(category));
static cl::opt<int64_t>
    batch("batch", cl::desc("rows (the dynamic batch dimension of ids)"),
          cl::init(-1), cl::cat(category));
static cl::opt<int64_t>
    seqLen("seq-len", cl::desc("tokens per row (the dynamic sequence dim)"),
           cl::init(-1), cl::cat(category));
static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("NAME=d0,d1,...: the shape of a graph input"),
                cl::cat(category));
static cl::list<std::string>
    inputs("input", cl::desc("NAME=FILE.npy: the value of argument NAME"),
           cl::cat(category));
static cl::opt<std::string> weightsFromModel(
    "weights-from-model",
    cl::desc("fill parameters from the ONNX initializers (of the model run, "
             "of its tg.source for .mlir, or of the model given)"),
    cl::value_desc("model.onnx"), cl::ValueOptional, cl::cat(category));
enum class Pipeline { None, TG, Train };
static cl::opt<Pipeline> pipeline(
    "pipeline", cl::desc("the passes to run before executing"),
    cl::init(Pipeline::TG),
    cl::values(clEnumValN(Pipeline::None, "none", "execute the IR as given"),
               clEnumValN(Pipeline::TG, "tg", "rondo-tg-pipeline (default)"),
               clEnumValN(Pipeline::Train, "train",
                          "rondo-tg-pipeline, then rondo-train-pipeline: "
                          "computes the loss and the gradients")),
    cl::cat(category));
static cl::opt<std::string> loss("loss",
                                 cl::desc("with --pipeline=train: causal-lm "
                                          "or output:NAME"),
                                 cl::init("causal-lm"), cl::cat(category));
static cl::opt<std::string>
    outputDir("output-dir", cl::desc("write each result to DIR/<name>.npy"),
              cl::value_desc("dir"), cl::cat(category));
static cl::opt<bool>
    printResults("print",
                 cl::desc("print the results (the default without "
                          "--output-dir)"),
                 cl::init(false), cl::cat(category));

namespace {

/// Reports an error as the diagnostic handler in run() prints them.
LogicalResult fail(const llvm::Twine &message) {
  llvm::errs() << "rondo-run: error: " << message << "\n";
  return failure();
}

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [k, d] : llvm::enumerate(shape))
    s += (k ? ", " : "") + std::to_string(d);
  return s + "]";
}

//===----------------------------------------------------------------------===//
// .npy files
//===----------------------------------------------------------------------===//

/// Reads a C-order .npy file as the kind an argument needs. Floats of any
/// width become f32 (fp32 is tg's compute type); integers become i64; i1
/// takes booleans or integers (non-zero is true).
FailureOr<HostBuffer> readNpy(StringRef path, ElementKind want) {
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false);
  if (!file)
    return fail("cannot read '" + path + "': " + file.getError().message());
  auto bytes =
      reinterpret_cast<const unsigned char *>((*file)->getBufferStart());
  size_t size = (*file)->getBufferSize();
  rt::NpyHeader header;
  try {
    header = rt::parseNpyHeader(bytes, size, path.str());
  } catch (const rt::Error &e) {
    return fail(e.what());
  }
  if (header.fortranOrder)
    return fail(path + ": Fortran-order arrays are not supported; save a "
                       "C-order array (np.ascontiguousarray)");
  StringRef descr = header.descr;
  // One-byte types carry '|'; on this little-endian host '=' is '<'.
  if (descr.size() == 3 && (descr[0] == '|' || descr[0] == '='))
    descr = descr.drop_front();
  else if (!descr.consume_front("<"))
    return fail(path + ": dtype '" + header.descr +
                "' is not little-endian; save with dtype.newbyteorder('<')");
  HostBuffer b;
  b.kind = want;
  b.shape.assign(header.shape.begin(), header.shape.end());
  int64_t n = b.numel();
  size_t width = descr.size() >= 2 ? size_t(descr[1] - '0') : 0;
  bool isFloat = descr == "f2" || descr == "f4" || descr == "f8";
  bool isInt = descr == "i1" || descr == "i2" || descr == "i4" ||
               descr == "i8" || descr == "u1" || descr == "u2" || descr == "u4";
  bool isBool = descr == "b1";
  bool ok = want == ElementKind::F32   ? isFloat
            : want == ElementKind::I64 ? isInt
                                       : isBool || isInt;
  if (!ok)
    return fail(path + ": dtype '" + header.descr + "' cannot be read as " +
                elementKindName(want) + " (" +
                (want == ElementKind::F32   ? "give float32, float64 or float16"
                 : want == ElementKind::I64 ? "give an integer array"
                                            : "give a bool array") +
                ")");
  if (size - header.dataOffset < size_t(n) * width)
    return fail(path + ": truncated: the header promises " + std::to_string(n) +
                " values of '" + header.descr + "', the file holds " +
                std::to_string(size - header.dataOffset) + " data bytes");
  const unsigned char *p = bytes + header.dataOffset;
  auto load = [&](auto v, int64_t k) {
    std::memcpy(&v, p + k * sizeof(v), sizeof(v));
    return v;
  };
  if (want == ElementKind::F32) {
    b.f.resize(n);
    for (int64_t k = 0; k < n; ++k)
      b.f[k] = descr == "f4"   ? load(float(), k)
               : descr == "f8" ? float(load(double(), k))
                               : rt::halfToFloat(load(uint16_t(), k));
    return b;
  }
  b.i.resize(n);
  for (int64_t k = 0; k < n; ++k) {
    int64_t v = descr == "i8"   ? load(int64_t(), k)
                : descr == "i4" ? load(int32_t(), k)
                : descr == "i2" ? load(int16_t(), k)
                : descr == "i1" ? load(int8_t(), k)
                : descr == "u4" ? load(uint32_t(), k)
                : descr == "u2" ? load(uint16_t(), k)
                                : load(uint8_t(), k); // u1, b1
    if (want == ElementKind::I1)
      v = v != 0;
    b.i[k] = v;
  }
  return b;
}

/// Writes `b` as a .npy (format 1.0): <f4, <i8 or |b1.
LogicalResult writeNpy(StringRef path, const HostBuffer &b) {
  const char *descr = b.kind == ElementKind::F32   ? "<f4"
                      : b.kind == ElementKind::I64 ? "<i8"
                                                   : "|b1";
  std::string shape = "(";
  for (auto [k, d] : llvm::enumerate(b.shape))
    shape += (k ? ", " : "") + std::to_string(d);
  shape += b.shape.size() == 1 ? ",)" : ")";
  std::string dict = std::string("{'descr': '") + descr +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so that the data starts at a multiple of 64 bytes, '\n' last.
  size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += char(dict.size() & 0xff);
  out += char(dict.size() >> 8);
  out += dict;
  if (b.kind == ElementKind::F32) {
    out.append(reinterpret_cast<const char *>(b.f.data()), b.f.size() * 4);
  } else if (b.kind == ElementKind::I64) {
    out.append(reinterpret_cast<const char *>(b.i.data()), b.i.size() * 8);
  } else {
    for (int64_t v : b.i)
      out += char(v != 0);
  }
  std::string error;
  auto file = openOutputFile(path, &error);
  if (!file)
    return fail(error);
  file->os() << out;
  file->keep();
  return success();
}

void printBuffer(llvm::raw_ostream &os, StringRef name, const HostBuffer &b) {
  os << name << ": " << b.describe() << "\n";
  auto element = [&](int64_t k) {
    if (b.kind == ElementKind::F32)
      os << llvm::format("%g", double(b.f[k]));
    else if (b.kind == ElementKind::I64)
      os << b.i[k];
    else
      os << (b.i[k] ? "true" : "false");
  };
  // NumPy-like nesting, one innermost row per line.
  std::function<void(size_t, int64_t)> rec = [&](size_t dim, int64_t base) {
    if (dim == b.shape.size()) {
      element(base);
      return;
    }
    int64_t stride = 1;
    for (size_t d = dim + 1; d < b.shape.size(); ++d)
      stride *= b.shape[d];
    os << "[";
    for (int64_t k = 0; k < b.shape[dim]; ++k) {
      if (k) {
        os << ",";
        if (dim + 1 == b.shape.size())
          os << " ";
        else
          os << "\n" << std::string(dim + 1, ' ');
      }
      rec(dim + 1, base + k * stride);
    }
    os << "]";
  };
  rec(0, 0);
  os << "\n";
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

/// Float data of one initializer of an ONNX text model (which has no
/// external data): the runtime's loader reads binary protobuf only.
FailureOr<std::vector<float>> textInitializer(const onnx::TensorProto &t,
                                              StringRef path) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    n *= d;
  std::vector<float> data(n);
  const std::string &raw = t.raw_data();
  bool hasRaw = t.has_raw_data();
  auto check = [&](int64_t have) -> LogicalResult {
    if (have != n)
      return fail(
          path + ": initializer '" + t.name() + "' holds " +
          std::to_string(have) + " values for shape " +
          shapeString(SmallVector<int64_t>(t.dims().begin(), t.dims().end())));
    return success();
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    if (failed(check(hasRaw ? int64_t(raw.size() / 4) : t.float_data_size())))
      return failure();
    for (int64_t k = 0; k < n; ++k)
      if (hasRaw)
        std::memcpy(&data[k], raw.data() + 4 * k, 4);
      else
        data[k] = t.float_data(k);
    return data;
  case onnx::TensorProto::DOUBLE:
    if (failed(check(hasRaw ? int64_t(raw.size() / 8) : t.double_data_size())))
      return failure();
    for (int64_t k = 0; k < n; ++k) {
      double d;
      if (hasRaw)
        std::memcpy(&d, raw.data() + 8 * k, 8);
      else
        d = t.double_data(k);
      data[k] = float(d);
    }
    return data;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16: {
    if (failed(check(hasRaw ? int64_t(raw.size() / 2) : t.int32_data_size())))
      return failure();
    for (int64_t k = 0; k < n; ++k) {
      uint16_t h;
      if (hasRaw)
        std::memcpy(&h, raw.data() + 2 * k, 2);
      else
        h = uint16_t(t.int32_data(k));
      data[k] = t.data_type() == onnx::TensorProto::FLOAT16
                    ? rt::halfToFloat(h)
                    : rt::bf16ToFloat(h);
    }
    return data;
  }
  default:
    return fail(path + ": initializer '" + t.name() +
                "' is not a floating-point tensor");
  }
}

/// Every floating-point initializer of the ONNX model at `path`, by name.
FailureOr<llvm::StringMap<rt::FloatTensor>> readWeights(StringRef path) {
  llvm::StringMap<rt::FloatTensor> weights;
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                          /*RequiresNullTerminator=*/false);
  if (!file)
    return fail("--weights-from-model: cannot read '" + path +
                "': " + file.getError().message());
  if (!(*file)->getBuffer().ltrim().starts_with("<")) {
    try {
      for (rt::FloatTensor &t : rt::readOnnxFloatInitializers(path.str()))
        weights[t.name] = std::move(t);
    } catch (const rt::Error &e) {
      return fail(llvm::Twine("--weights-from-model: ") + e.what());
    }
    return weights;
  }
  onnx::ModelProto model;
  std::string text = (*file)->getBuffer().str();
  onnx::Status status;
  try {
    status = onnx::OnnxParser::Parse(model, text.c_str());
  } catch (const std::exception &e) {
    return fail(path + ": malformed ONNX text: " + e.what());
  }
  if (!status.IsOK())
    return fail(path + ": malformed ONNX text: " + status.ErrorMessage());
  for (const onnx::TensorProto &t : model.graph().initializer()) {
    int type = t.data_type();
    if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::DOUBLE &&
        type != onnx::TensorProto::FLOAT16 &&
        type != onnx::TensorProto::BFLOAT16)
      continue;
    auto data = textInitializer(t, path);
    if (failed(data))
      return failure();
    rt::FloatTensor w;
    w.name = t.name();
    w.dims.assign(t.dims().begin(), t.dims().end());
    w.data = std::move(*data);
    weights[t.name()] = std::move(w);
  }
  return weights;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult parseInputShapes(ImportOptions &opts) {
  for (const std::string &spec : inputShapes)
    if (llvm::Error err = rondo::addInputShape(opts, spec))
      return fail(llvm::toString(std::move(err)));
  return success();
}

/// Reads the module: ONNX (binary or text) through the importer, or tg IR.
/// Where a diagnostic points, for a reader of the model: "file:line:col" in
/// tg IR, the ONNX file for whole-model errors, and the ONNX node an op came
/// from (the importer's NameLoc) for errors while running.
std::string describeLocation(Location loc) {
  std::string position, file, node;
  loc->walk([&](Location l) {
    if (auto f = dyn_cast<FileLineColLoc>(l)) {
      if (f.getLine() > 0 && position.empty())
        position = llvm::formatv("{0}:{1}:{2}", f.getFilename(), f.getLine(),
                                 f.getColumn())
                       .str();
      else if (file.empty())
        file = f.getFilename().str();
    } else if (auto n = dyn_cast<NameLoc>(l)) {
      // The importer nests the node name inside its PyTorch module path.
      if (!isa<NameLoc>(n.getChildLoc()) && node.empty())
        node = n.getName().str();
    }
    return WalkResult::advance();
  });
  if (!position.empty())
    return position + ": ";
  if (!node.empty())
    return "node '" + node + "': ";
  if (!file.empty())
    return file + ": ";
  return "";
}

/// Only the file a location is in, for the importer's self-describing
/// messages.
std::string describeFile(Location loc) {
  std::string file;
  loc->walk([&](Location l) {
    if (auto f = dyn_cast<FileLineColLoc>(l))
      if (file.empty())
        file = f.getFilename().str();
    return WalkResult::advance();
  });
  return file.empty() ? "" : file + ": ";
}

OwningOpRef<ModuleOp> loadModule(MLIRContext &ctx, llvm::SourceMgr &sourceMgr) {
  bool isMlir = StringRef(inputFile).ends_with(".mlir");
  if (!isMlir) {
    ImportOptions opts;
    opts.batch = batch;
    opts.seqLen = seqLen;
    if (failed(parseInputShapes(opts)))
      return nullptr;
    return importOnnxFile(&ctx, inputFile, opts);
  }
  if (batch > 0 || seqLen > 0 || !inputShapes.empty()) {
    (void)fail("--batch, --seq-len and --input-shape specialise ONNX "
               "imports; '" +
               inputFile + "' is tg IR with static shapes already");
    return nullptr;
  }
  std::string error;
  auto file = openInputFile(inputFile, &error);
  if (!file) {
    (void)fail(error);
    return nullptr;
  }
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  // Syntax errors are best shown with the offending line.
  SourceMgrDiagnosticHandler parseDiagnostics(sourceMgr, &ctx);
  return parseSourceFile<ModuleOp>(sourceMgr, &ctx);
}

/// The value of every argument of `func`, from --input files, the model's
/// initializers, or (for training arguments) their defaults.
FailureOr<std::vector<HostBuffer>> buildArguments(ModuleOp module,
                                                  func::FuncOp func) {
  llvm::StringMap<std::string> files;
  for (const std::string &spec : inputs) {
    auto [name, path] = StringRef(spec).split('=');
    if (name.empty() || path.empty())
      return fail("--input '" + spec + "' is not NAME=FILE.npy");
    if (!files.try_emplace(name, path.str()).second)
      return fail("--input " + name + " is given twice");
  }
  unsigned numArgs = func.getNumArguments();
  llvm::StringSet<> names;
  for (unsigned k = 0; k < numArgs; ++k)
    names.insert(argumentName(func, k));
  for (auto &entry : files)
    if (!names.contains(entry.getKey())) {
      std::string known;
      for (unsigned k = 0; k < numArgs; ++k)
        known += (k ? ", " : "") + argumentName(func, k);
      return fail("--input " + entry.getKey() +
                  ": @main has no argument of that name (it takes: " + known +
                  ")");
    }

  llvm::StringMap<rt::FloatTensor> weights;
  std::string weightsPath;
  if (weightsFromModel.getNumOccurrences()) {
    weightsPath = weightsFromModel;
    if (weightsPath.empty()) {
      weightsPath = inputFile;
      if (StringRef(inputFile).ends_with(".mlir")) {
        auto source = module->getAttrOfType<StringAttr>(tg::kSourceAttr);
        if (!source)
          return fail("--weights-from-model: '" + inputFile +
                      "' does not record its ONNX model (tg.source); give "
                      "--weights-from-model=MODEL.onnx");
        weightsPath = source.str();
      }
    }
    auto w = readWeights(weightsPath);
    if (failed(w))
      return failure();
    weights = std::move(*w);
  }

  std::vector<HostBuffer> args(numArgs);
  int tokenArg = -1, labelsArg = -1, lossScaleArg = -1;
  // Training arguments left to their defaults, filled in after the loop.
  bool defaultLabels = false, defaultLossScale = false;
  for (unsigned k = 0; k < numArgs; ++k) {
    auto type = dyn_cast<RankedTensorType>(func.getArgument(k).getType());
    std::string name = argumentName(func, k);
    if (!type || failed(elementKindOf(type)))
      return fail("argument '" + name + "' has a type rondo-run cannot " +
                  "supply (f32, i64 and i1 tensors only)");
    ElementKind kind = *elementKindOf(type);
    HostBuffer expected;
    expected.kind = kind;
    expected.shape.assign(type.getShape().begin(), type.getShape().end());
    bool isParam = func.getArgAttr(k, tg::kParamAttr) != nullptr;
    if (func.getArgAttr(k, tg::kInputAttr) && kind == ElementKind::I64 &&
        type.getRank() == 2)
      tokenArg = k;
    if (func.getArgAttr(k, tg::kLabelsAttr))
      labelsArg = k;
    if (func.getArgAttr(k, tg::kLossScaleAttr))
      lossScaleArg = k;

    auto file = files.find(name);
    if (file != files.end()) {
      auto b = readNpy(file->second, kind);
      if (failed(b))
        return failure();
      if (b->shape != expected.shape)
        return fail("--input " + name + "=" + file->second + ": the file " +
                    "holds " + b->describe() + ", the argument is " +
                    expected.describe());
      args[k] = std::move(*b);
      continue;
    }
    if (isParam && !weightsPath.empty()) {
      auto w = weights.find(name);
      if (w == weights.end())
        return fail("parameter '" + name + "' is not a floating-point " +
                    "initializer of " + weightsPath);
      if (llvm::ArrayRef<int64_t>(w->second.dims) != type.getShape())
        return fail("parameter '" + name + "' of " + weightsPath + " has " +
                    "shape " + shapeString(w->second.dims) +
                    ", the function expects " + expected.describe());
      args[k] = HostBuffer::floats(type.getShape(), std::move(w->second.data));
      continue;
    }
    if (int(k) == labelsArg) {
      defaultLabels = true;
      continue;
    }
    if (int(k) == lossScaleArg) {
      defaultLossScale = true;
      continue;
    }
    return fail("no value for argument '" + name + "' (" + expected.describe() +
                "): give --input " + name + "=FILE.npy" +
                (isParam ? " or --weights-from-model" : std::string()));
  }

  // Training arguments: labels default to the tokens (the loss shifts them),
  // the loss scale to 1 / (number of counted targets), as the trainer does.
  if (defaultLabels) {
    auto labelsType =
        cast<RankedTensorType>(func.getArgument(labelsArg).getType());
    if (tokenArg < 0 ||
        llvm::ArrayRef<int64_t>(args[tokenArg].shape) != labelsType.getShape())
      return fail("no value for argument 'labels': give --input "
                  "labels=FILE.npy");
    args[labelsArg] = args[tokenArg];
  }
  if (defaultLossScale) {
    auto kind = module->getAttrOfType<StringAttr>(tg::kLossAttr);
    double count = 1;
    if ((!kind || kind.getValue() == "causal-lm") && labelsArg >= 0) {
      const HostBuffer &labels = args[labelsArg];
      int64_t rows = labels.shape[0], cols = labels.shape[1];
      count = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 1; c < cols; ++c)
          count += labels.i[r * cols + c] != -100;
    }
    args[lossScaleArg] =
        HostBuffer::floats({}, {count > 0 ? float(1.0 / count) : 0.0f});
  }
  return args;
}

/// A file name for a result: ONNX names may hold '/' and ':'.
std::string fileNameFor(StringRef name) {
  std::string s;
  for (char c : name)
    s += llvm::isAlnum(c) || c == '.' || c == '_' || c == '-' ? c : '_';
  if (s.empty() || s[0] == '.')
    s = "_" + s;
  return s;
}

LogicalResult run() {
  DialectRegistry registry;
  registry.insert<tg::TGDialect, func::FuncDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  llvm::SourceMgr sourceMgr;
  // The op that failed is named by its location; printing it too would only
  // repeat the IR.
  ctx.printOpOnDiagnostic(false);
  // The importer's messages name their node themselves; later ones get the
  // node from the op's location.
  bool importing = true;
  ScopedDiagnosticHandler diagnostics(&ctx, [&](Diagnostic &diag) {
    const char *severity =
        diag.getSeverity() == DiagnosticSeverity::Error     ? "error"
        : diag.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                                                            : "note";
    auto where = [&](Location loc) {
      return importing ? describeFile(loc) : describeLocation(loc);
    };
    llvm::errs() << "rondo-run: " << severity << ": "
                 << where(diag.getLocation()) << diag << "\n";
    for (const Diagnostic &note : diag.getNotes())
      llvm::errs() << "rondo-run: note: " << where(note.getLocation()) << note
                   << "\n";
    return success();
  });

  OwningOpRef<ModuleOp> module = loadModule(ctx, sourceMgr);
  if (!module)
    return failure();
  importing = false;
  if (failed(verify(*module)))
    return failure();
  if (pipeline != Pipeline::None) {
    PassManager pm(&ctx);
    if (failed(applyPassManagerCLOptions(pm)))
      return failure();
    buildTGPipeline(pm);
    if (pipeline == Pipeline::Train) {
      TrainPipelineOptions trainOpts;
      trainOpts.loss = loss;
      buildTrainPipeline(pm, trainOpts);
    }
    if (failed(pm.run(*module)))
      return failure();
  }
  auto func = module->lookupSymbol<func::FuncOp>("main");
  if (!func)
    return fail("'" + inputFile + "' has no func.func @main");

  auto args = buildArguments(*module, func);
  if (failed(args))
    return failure();
  auto results = runFunction(func, *args);
  if (failed(results))
    return failure();

  llvm::StringSet<> written;
  for (auto [k, b] : llvm::enumerate(*results)) {
    std::string name = resultName(func, k);
    if (!outputDir.empty()) {
      std::string file = fileNameFor(name);
      if (!written.insert(file).second)
        file += "." + std::to_string(k);
      if (std::error_code ec = llvm::sys::fs::create_directories(outputDir))
        return fail("cannot create '" + outputDir + "': " + ec.message());
      SmallVector<char> path(outputDir.begin(), outputDir.end());
      llvm::sys::path::append(path, file + ".npy");
      if (failed(writeNpy(StringRef(path.data(), path.size()), b)))
        return failure();
    }
    if (printResults || outputDir.empty())
      printBuffer(llvm::outs(), name, b);
  }
  return success();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  // LLVM's backends register hundreds of options in the general category;
  // --help shows Rondo's own, --help-hidden everything (MLIR's IR printing
  // included).
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv, "Rondo: run a model's tg function on the CPU kernels\n");
  return failed(run()) ? 1 : 0;
}
