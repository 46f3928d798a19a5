//===- OnnxImporter.cpp - ONNX to tg ----------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The importer walks the ONNX graph once in topological order. Every value is
// either *constant* (its data is known at compile time because it depends
// only on shapes and on initializers that are not parameters) or *dynamic*
// (it depends on token data or on a parameter). Constant nodes are evaluated
// with their op's folding function, dynamic nodes become tg ops with its
// conversion function (OpTable.h; the rows are in Ops/*.cpp by op family). So
// the tg function only holds computation that depends on data.
//
// Two structures need care:
// - Rotary frequency tables are float initializers, but they are buffers in
//   PyTorch: an initializer whose every path into the data flow passes
//   through Cos/Sin is a constant, not a parameter.
// - The causal mask ([B, 1, T, T]) is too large to fold at real sizes. When a
//   large data-independent tensor meets data (Add to attention scores, or a
//   Where), the importer proves that it is the causal mask by importing the
//   same graph at two small probe shapes, where the mask is small enough to
//   evaluate, and checking it elementwise (Recognise/CausalMask.cpp). It
//   then becomes tg.causal_mask.
//
//===----------------------------------------------------------------------===//

#include "Import/OnnxImporter.h"

#include "Dialect/TG/IR/TGOps.h"
#include "HostTensor.h"
#include "ModelReader.h"
#include "OpTable.h"
#include "Recognise/CausalMask.h"
#include "Recognise/Experts.h"
#include "Recognise/RotaryTable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "onnx/onnx_pb.h"

#include "google/protobuf/unknown_field_set.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace rondo;
using namespace rondo::import;

namespace {

/// The most elements any data-independent value folds to, whatever
/// --seq-len is: 512 MiB as folded (8 bytes an element), so an absurd
/// --seq-len fails at the first table instead of exhausting memory. Rotary
/// tables (128 per position) fit up to 524288 positions, past the longest
/// rows trained (287K tokens, docs/Performance.md).
constexpr int64_t kMaxFoldElements = int64_t(1) << 26;

/// Per-node PyTorch provenance from the exporter's metadata_props (field 9,
/// which libonnx 1.12 does not know and keeps as an unknown field).
struct NodeMetadata {
  std::string modulePath; ///< e.g. model.layers.0.self_attn.q_proj
  SmallVector<std::string> torchParamArgs; ///< p_model_layers_0_..._weight
};

NodeMetadata readMetadata(const onnx::NodeProto &node) {
  NodeMetadata md;
  const auto &unknown = node.GetReflection()->GetUnknownFields(node);
  for (int k = 0; k < unknown.field_count(); ++k) {
    const auto &field = unknown.field(k);
    if (field.number() != 9 ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (!entry.ParseFromString(field.length_delimited()))
      continue;
    if (entry.key() == "pkg.torch.onnx.name_scopes") {
      // "['', 'model', 'model.layers.0', ..., 'linear']": the module path is
      // the entry before the node's own name.
      SmallVector<StringRef> parts;
      StringRef list = StringRef(entry.value()).trim("[] ");
      list.split(parts, ", ");
      if (parts.size() >= 2)
        md.modulePath = parts[parts.size() - 2].trim("'").str();
    } else if (entry.key() == "pkg.torch.onnx.fx_node") {
      StringRef text = entry.value();
      size_t pos = 0;
      while ((pos = text.find("%p_", pos)) != StringRef::npos) {
        size_t end = text.find_first_of(",) ", pos);
        md.torchParamArgs.push_back(text.slice(pos + 1, end).str());
        pos = end;
      }
    }
  }
  return md;
}

/// Hugging Face exports may also take attention_mask and position_ids:
/// unpadded causal training fixes them to ones and 0..T-1, so they are
/// constants rather than data.
bool isSpecialisedInput(const onnx::ValueInfoProto &in) {
  int et = in.type().tensor_type().elem_type();
  bool isInt = et == onnx::TensorProto::INT64 || et == onnx::TensorProto::INT32;
  return isInt &&
         (in.name() == "attention_mask" || in.name() == "position_ids");
}

class Importer : public ImportContext {
public:
  Importer(MLIRContext *ctx, const onnx::ModelProto &model,
           StringRef bufferName, const ImportOptions &opts, bool probe = false)
      : ctx(ctx), model(model), bufferName(bufferName.str()), opts(opts),
        probe(probe), builder(ctx) {}

  OwningOpRef<ModuleOp> run();

  /// After a successful run: the folded value of `name`, if constant.
  const HostTensor *constantValue(StringRef name) const {
    auto it = values.find(name);
    return it != values.end() && it->second.isConst ? &it->second.host
                                                    : nullptr;
  }

private:
  // Graph-level steps.
  LogicalResult readOpsets();
  LogicalResult classifyInitializers();
  LogicalResult declareInputs(SmallVectorImpl<Type> &argTypes,
                              SmallVectorImpl<NamedAttrList> &argAttrs,
                              SmallVectorImpl<std::string> &argNames);
  LogicalResult convertNode(const onnx::NodeProto &node);
  void recoverTorchNames();
  /// The largest data-independent tensor folded to a constant. Tables that
  /// grow linearly with the sequence (rotary cos/sin: T x head_dim) must
  /// fold at the lengths trained, masks that grow with its square
  /// ([B, 1, T, T]) must not: the limit grows with the sequence, by 512 per
  /// position, up to kMaxFoldElements. Folding holds each element as 8 bytes,
  /// so without that cap an absurd --seq-len folds tables until memory runs
  /// out.
  int64_t foldLimit() const {
    const int64_t seq = std::clamp<int64_t>(opts.seqLen, 0, int64_t(1) << 40);
    return std::min(std::max(opts.maxFoldElements, 512 * seq),
                    kMaxFoldElements);
  }
  /// How foldLimit() came about, naming the flag that sets it.
  std::string foldLimitReason() const {
    if (foldLimit() == kMaxFoldElements && opts.seqLen > 0)
      return llvm::formatv("the cap, reached at --seq-len {0} and above; "
                           "--seq-len is {1}",
                           kMaxFoldElements / 512, opts.seqLen)
          .str();
    if (foldLimit() > opts.maxFoldElements)
      return llvm::formatv("512 per position of --seq-len {0}", opts.seqLen)
          .str();
    return "the importer's limit for values that do not grow with the "
           "sequence";
  }

  // Diagnostics.
  Location nodeLoc(const onnx::NodeProto &node);
  InFlightDiagnostic nodeError(const onnx::NodeProto &node) override;

  // Values.
  FailureOr<Value> materialize(const Val &v,
                               const onnx::NodeProto &node) override;
  Value constant(const HostTensor &t);
  /// Whether a folded value is the causal mask; a shape-only one is checked
  /// at small probe shapes, once per name.
  MaskClass classifyMask(StringRef name, const HostTensor &t) override;
  Value causalMask(ArrayRef<int64_t> shape, int64_t window) override;
  const onnx::NodeProto *producerOf(StringRef name) override {
    return producers.lookup(name);
  }
  const Val *valueOf(StringRef name) override {
    auto it = values.find(name);
    return it == values.end() ? nullptr : &it->second;
  }
  SmallVector<const onnx::NodeProto *> consumers(StringRef name,
                                                 bool &graphOutput) override;

  MLIRContext *ctx;
  const onnx::ModelProto &model;
  std::string bufferName;
  ImportOptions opts;
  bool probe;
  OpBuilder builder;
  Location loc = FileLineColLoc::get(ctx, bufferName, 0, 0);
  int64_t opset = 0;
  llvm::StringMap<int64_t> domainOpsets;
  llvm::StringMap<Val> values;
  llvm::StringMap<const onnx::TensorProto *> initializers;
  llvm::StringSet<> params;
  llvm::StringMap<std::string> torchNames;
  llvm::StringMap<SmallVector<std::string, 1>> torchAliases;
  llvm::StringSet<> torchTransposed;
  llvm::StringSet<> lookupTies; ///< Names an embedding lookup ties in.
  llvm::StringMap<MaskClass> maskCache;
  llvm::StringMap<const onnx::NodeProto *> producers;
  RotaryChecks rotaryChecked;
  Operation *funcOp = nullptr;
};

Location Importer::nodeLoc(const onnx::NodeProto &node) {
  std::string name = node.name().empty() ? node.op_type() : node.name();
  Location inner = NameLoc::get(StringAttr::get(ctx, name),
                                FileLineColLoc::get(ctx, bufferName, 0, 0));
  NodeMetadata md = readMetadata(node);
  if (md.modulePath.empty())
    return inner;
  return NameLoc::get(StringAttr::get(ctx, md.modulePath), inner);
}

InFlightDiagnostic Importer::nodeError(const onnx::NodeProto &node) {
  StringRef domain = node.domain();
  int64_t version = domainOpsets.lookup(domain.empty() ? "" : domain);
  std::string who = !node.name().empty() ? "node '" + node.name() + "'"
                    : node.output_size() > 0
                        ? "node producing '" + node.output(0) + "'"
                        : "unnamed node";
  return emitError(nodeLoc(node))
         << who << " (op '" << node.op_type() << "', domain '" << domain
         << "', opset " << version << "): ";
}

LogicalResult Importer::readOpsets() {
  for (const auto &o : model.opset_import()) {
    std::string domain = o.domain() == "ai.onnx" ? "" : o.domain();
    domainOpsets[domain] = o.version();
  }
  opset = domainOpsets.lookup("");
  if (opset == 0)
    return emitError(loc) << "the model imports no default-domain opset";
  if (opset < 13 || opset > 20)
    return emitError(loc) << "default-domain opset " << opset
                          << " is not supported (supported: 13 to 20)";
  return success();
}

/// Decides which initializers are parameters. A floating-point initializer
/// of rank >= 1 is a parameter unless all its paths into the data flow pass
/// through Cos or Sin (a rotary frequency table, a PyTorch buffer).
LogicalResult Importer::classifyInitializers() {
  const auto &graph = model.graph();
  for (const auto &init : graph.initializer())
    initializers[init.name()] = &init;

  // Values that depend on token data (inputs), not counting shape queries.
  llvm::StringSet<> dataDependent;
  for (const auto &in : graph.input())
    if (!initializers.count(in.name()) && !isSpecialisedInput(in))
      dataDependent.insert(in.name());
  llvm::StringMap<SmallVector<const onnx::NodeProto *>> users;
  for (const auto &node : graph.node())
    for (const auto &in : node.input())
      users[in].push_back(&node);
  auto isShapeQuery = [](const onnx::NodeProto &n) {
    return n.op_type() == "Shape" || n.op_type() == "Size";
  };
  for (const auto &node : graph.node()) {
    if (isShapeQuery(node))
      continue;
    if (llvm::any_of(node.input(), [&](const std::string &in) {
          return dataDependent.count(in);
        }))
      for (const auto &out : node.output())
        dataDependent.insert(out);
  }

  for (const auto &init : graph.initializer()) {
    int t = init.data_type();
    bool isFloatInit =
        t == onnx::TensorProto::FLOAT || t == onnx::TensorProto::FLOAT16 ||
        t == onnx::TensorProto::BFLOAT16 || t == onnx::TensorProto::DOUBLE;
    if (!isFloatInit || init.dims_size() == 0)
      continue;
    // Forward walk from the initializer, stopping at Cos/Sin and shape queries.
    bool reachesData = false, reachesTrig = false;
    SmallVector<std::string> work{init.name()};
    llvm::StringSet<> seen;
    while (!work.empty() && !reachesData) {
      std::string v = work.pop_back_val();
      if (!seen.insert(v).second)
        continue;
      if (llvm::any_of(graph.output(),
                       [&](const auto &o) { return o.name() == v; }))
        reachesData = true;
      for (const onnx::NodeProto *user : users.lookup(v)) {
        if (isShapeQuery(*user))
          continue;
        if (user->op_type() == "Cos" || user->op_type() == "Sin") {
          reachesTrig = true;
          continue;
        }
        if (llvm::any_of(user->input(), [&](const std::string &in) {
              return dataDependent.count(in);
            })) {
          reachesData = true;
          break;
        }
        for (const auto &out : user->output())
          work.push_back(out);
      }
    }
    if (reachesData || !reachesTrig)
      params.insert(init.name());
  }
  return success();
}

void Importer::recoverTorchNames() {
  auto addName = [&](const std::string &p, const std::string &name,
                     bool lookupTie = false) {
    if (lookupTie)
      lookupTies.insert(name);
    if (!torchNames.count(p))
      torchNames[p] = name;
    auto &names = torchAliases[p];
    if (!llvm::is_contained(names, name))
      names.push_back(name);
  };
  for (const auto &node : model.graph().node()) {
    SmallVector<std::pair<int, std::string>> uses;
    for (auto [k, in] : llvm::enumerate(node.input()))
      if (params.count(in))
        uses.push_back({int(k), in});
    if (uses.empty())
      continue;
    NodeMetadata md = readMetadata(node);
    for (const auto &[index, p] : uses) {
      // A weight that feeds MatMul's right operand directly is [in, out]:
      // the exporter stored nn.Linear's [out, in] weight transposed.
      bool transB = false;
      for (const auto &a : node.attribute())
        if (a.name() == "transB")
          transB = a.i() != 0;
      if (index == 1 && initializers.lookup(p)->dims_size() == 2 &&
          (node.op_type() == "MatMul" || (node.op_type() == "Gemm" && !transB)))
        torchTransposed.insert(p);
      if (StringRef(p).contains('.'))
        addName(p, p); // already a PyTorch name (norms, embeddings)
      if (md.modulePath.empty() || md.torchParamArgs.empty())
        continue;
      std::string prefix = "p_" + md.modulePath + "_";
      std::replace(prefix.begin(), prefix.end(), '.', '_');
      StringRef arg;
      if (md.torchParamArgs.size() == 1) {
        arg = md.torchParamArgs.front();
      } else if (index == 1 && initializers.lookup(p)->dims_size() == 2 &&
                 (node.op_type() == "MatMul" || node.op_type() == "Gemm")) {
        // F.linear(x, weight, bias) exports as MatMul + Add (GPT-OSS's
        // attention), each carrying the call with both parameters: the
        // product's right operand is the weight.
        for (StringRef candidate : md.torchParamArgs)
          if (candidate == prefix + "weight")
            arg = candidate;
      }
      if (arg.empty())
        continue;
      if (arg.starts_with(prefix))
        addName(p, md.modulePath + "." + arg.drop_front(prefix.size()).str());
      else if (node.op_type() == "Gather" && arg.ends_with("_weight"))
        // A tied embedding: the module looks up another module's weight
        // (p_lm_head_weight in model.embed_tokens); it is also its own.
        addName(p, md.modulePath + ".weight", /*lookupTie=*/true);
    }
  }
}

LogicalResult Importer::declareInputs(SmallVectorImpl<Type> &argTypes,
                                      SmallVectorImpl<NamedAttrList> &argAttrs,
                                      SmallVectorImpl<std::string> &argNames) {
  const auto &graph = model.graph();
  Type f32 = builder.getF32Type();
  // Parameters first, in initializer order: they are the trainer's state.
  for (const auto &init : graph.initializer()) {
    if (!params.count(init.name()))
      continue;
    SmallVector<int64_t> shape(init.dims().begin(), init.dims().end());
    for (int64_t d : shape)
      if (d <= 0)
        return emitError(loc)
               << "initializer '" << init.name() << "' (a parameter) has "
               << (d < 0 ? "negative" : "zero") << " dimension " << d
               << "; empty parameters are not supported";
    argTypes.push_back(RankedTensorType::get(shape, f32));
    NamedAttrList attrs;
    attrs.set(tg::kParamAttr, builder.getStringAttr(init.name()));
    if (init.data_type() == onnx::TensorProto::FLOAT &&
        init.data_location() == onnx::TensorProto::EXTERNAL)
      attrs.set(tg::kExternalF32Attr, builder.getUnitAttr());
    auto torch = torchNames.find(init.name());
    if (torch != torchNames.end() && torch->second != init.name())
      attrs.set(tg::kTorchNameAttr, builder.getStringAttr(torch->second));
    auto aliases = torchAliases.find(init.name());
    if (aliases != torchAliases.end() && aliases->second.size() > 1) {
      SmallVector<Attribute> names;
      for (const std::string &n : aliases->second)
        names.push_back(builder.getStringAttr(n));
      attrs.set(tg::kTorchAliasesAttr, builder.getArrayAttr(names));
      // An embedding tied to the LM head is one parameter in PyTorch too;
      // anything else was several parameters that happened to be equal.
      SmallVector<StringRef> merged;
      for (const std::string &n : aliases->second)
        if (!lookupTies.contains(n))
          merged.push_back(n);
      if (merged.size() > 1)
        emitWarning(loc) << "initializer '" << init.name() << "' stands for "
                         << merged.size() << " PyTorch parameters ("
                         << llvm::join(merged, ", ")
                         << "): the exporter merged byte-identical weights, "
                            "so they train as one parameter";
    }
    // Only a named weight can be written in PyTorch's layout.
    if (torchTransposed.contains(init.name()) && torchNames.count(init.name()))
      attrs.set(tg::kTorchTransposedAttr, builder.getUnitAttr());
    argAttrs.push_back(attrs);
    argNames.push_back(init.name());
  }
  for (const auto &entry : opts.inputShapes)
    if (!llvm::any_of(graph.input(), [&](const auto &in) {
          return in.name() == entry.getKey();
        })) {
      std::string names;
      for (const auto &in : graph.input())
        if (!initializers.count(in.name()))
          names += (names.empty() ? "'" : ", '") + in.name() + "'";
      return emitError(loc)
             << "--input-shape names '" << entry.getKey()
             << "', which is not a graph input (inputs: " << names << ")";
    }
  for (int index = 0; index < graph.input_size(); ++index) {
    const auto &in = graph.input(index);
    if (initializers.count(in.name()))
      continue;
    const auto &tt = in.type().tensor_type();
    StringRef name = in.name();
    // Inputs are bound by name (trainer data, --input-shape): an unnamed
    // one could never be given.
    if (name.empty())
      return emitError(loc) << "graph input #" << index << " has no name";
    if (name.starts_with("past_key_values") || name.starts_with("past."))
      return emitError(loc)
             << "input '" << name
             << "' is a key/value cache; export the model without cache "
                "(use_cache=False) for training";
    int et = tt.elem_type();
    bool isInt =
        et == onnx::TensorProto::INT64 || et == onnx::TensorProto::INT32;
    SmallVector<int64_t> shape;
    auto given = opts.inputShapes.find(name);
    if (given != opts.inputShapes.end()) {
      shape = given->second;
      if ((int)shape.size() != tt.shape().dim_size())
        return emitError(loc)
               << "--input-shape " << name << " has rank " << shape.size()
               << " but the model's input has rank " << tt.shape().dim_size();
    } else {
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto &dim = tt.shape().dim(d);
        if (dim.has_dim_value()) {
          if (dim.dim_value() <= 0)
            return emitError(loc)
                   << "input '" << name << "' dimension " << d << " has size "
                   << dim.dim_value() << "; empty tensors are not supported";
          shape.push_back(dim.dim_value());
          continue;
        }
        int64_t v = -1;
        const char *flag = "--input-shape";
        if (isInt && tt.shape().dim_size() == 2) {
          v = d == 0 ? opts.batch : opts.seqLen;
          flag = d == 0 ? "--batch" : "--seq-len";
        }
        if (v <= 0)
          return emitError(loc)
                 << "input '" << name << "' dimension " << d << " ('"
                 << dim.dim_param() << "') is dynamic; give " << flag
                 << (StringRef(flag) == "--input-shape"
                         ? (" " + name + "=d0,d1,...").str()
                         : std::string())
                 << " to specialise it";
        shape.push_back(v);
      }
    }
    for (int64_t d : shape)
      if (d <= 0)
        return emitError(loc)
               << "input '" << name << "' gets non-positive dimension " << d;
    if (llvm::Error e = checkShape(shape, "input '" + name + "'"))
      return emitError(loc) << llvm::toString(std::move(e));
    if (isSpecialisedInput(in) && checkedNumel(shape) > opts.maxFoldElements)
      return emitError(loc) << "input '" << name << "' of shape ["
                            << llvm::make_range(shape.begin(), shape.end())
                            << "] is too large to specialise to a constant ("
                            << checkedNumel(shape) << " elements, limit "
                            << opts.maxFoldElements << ")";
    if (isSpecialisedInput(in)) {
      HostTensor t = HostTensor::zeros(DType::I64, shape);
      int64_t last = shape.empty() ? 1 : shape.back();
      for (int64_t k = 0; k < t.numel(); ++k)
        t.i[k] = name == "attention_mask" ? 1 : k % last;
      values[name] = Val{true, std::move(t), {}};
      continue;
    }
    Type elem;
    if (isInt)
      elem = builder.getI64Type();
    else if (et == onnx::TensorProto::FLOAT ||
             et == onnx::TensorProto::FLOAT16 ||
             et == onnx::TensorProto::BFLOAT16)
      elem = f32;
    else
      return emitError(loc)
             << "input '" << name << "' has unsupported ONNX data type " << et;
    argTypes.push_back(RankedTensorType::get(shape, elem));
    NamedAttrList attrs;
    attrs.set(tg::kInputAttr, builder.getStringAttr(name));
    argAttrs.push_back(attrs);
    argNames.push_back(name.str());
  }
  return success();
}

Value Importer::constant(const HostTensor &t) {
  // Store the smallest tensor that broadcasts to t: positions and rotary
  // tables are repeated over the batch.
  SmallVector<int64_t> shape(t.shape);
  auto strides = [&](ArrayRef<int64_t> s) {
    SmallVector<int64_t> st(s.size(), 1);
    for (int64_t d = int64_t(s.size()) - 2; d >= 0; --d)
      st[d] = st[d + 1] * s[d + 1];
    return st;
  };
  auto fullStrides = strides(t.shape);
  SmallVector<bool> keep(shape.size(), true);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] <= 1)
      continue;
    bool same = true;
    for (int64_t k = 0, n = t.numel(); k < n && same; ++k) {
      int64_t idx = (k / fullStrides[d]) % shape[d];
      if (idx == 0)
        continue;
      int64_t base = k - idx * fullStrides[d];
      same = isFloat(t.dtype) ? t.f[k] == t.f[base] : t.i[k] == t.i[base];
    }
    keep[d] = !same;
  }
  SmallVector<int64_t> small;
  for (size_t d = 0; d < shape.size(); ++d)
    small.push_back(keep[d] ? shape[d] : 1);
  auto smallStrides = strides(small);
  int64_t n = 1;
  for (int64_t d : small)
    n *= d;
  auto fullIndex = [&](int64_t k) {
    int64_t off = 0;
    for (size_t d = 0; d < small.size(); ++d)
      off += ((k / smallStrides[d]) % small[d]) * fullStrides[d];
    return off;
  };
  DenseElementsAttr attr;
  if (isFloat(t.dtype)) {
    SmallVector<float> data(n);
    for (int64_t k = 0; k < n; ++k)
      data[k] = float(t.f[fullIndex(k)]);
    attr = DenseElementsAttr::get(
        RankedTensorType::get(small, builder.getF32Type()),
        ArrayRef<float>(data));
  } else if (t.dtype == DType::Bool) {
    SmallVector<bool> data(n);
    for (int64_t k = 0; k < n; ++k)
      data[k] = t.i[fullIndex(k)] != 0;
    attr = DenseElementsAttr::get(
        RankedTensorType::get(small, builder.getI1Type()),
        ArrayRef<bool>(data));
  } else {
    SmallVector<int64_t> data(n);
    for (int64_t k = 0; k < n; ++k)
      data[k] = t.i[fullIndex(k)];
    attr = DenseElementsAttr::get(
        RankedTensorType::get(small, builder.getI64Type()),
        ArrayRef<int64_t>(data));
  }
  Value c = tg::ConstantOp::create(builder, loc, attr);
  if (small != ArrayRef<int64_t>(t.shape))
    c = tg::BroadcastOp::create(
        builder, loc, RankedTensorType::get(t.shape, attr.getElementType()), c);
  return c;
}

FailureOr<Value> Importer::materialize(const Val &v,
                                       const onnx::NodeProto &node) {
  if (v.experts)
    return rejectExpertUse(*this, node, *v.experts), failure();
  if (!v.isConst)
    return v.value;
  if (!v.host.hasData)
    return nodeError(node)
               << "a data-independent tensor of shape ["
               << llvm::make_range(v.host.shape.begin(), v.host.shape.end())
               << "] (" << v.host.numel()
               << " elements) meets the data flow here, and it is over the "
                  "folding limit of "
               << foldLimit() << " elements (" << foldLimitReason()
               << ") and not a recognised structure (causal mask)",
           failure();
  if (Value table = rotaryTable(builder, loc, v, rotaryChecked))
    return table;
  return constant(v.host);
}

MaskClass Importer::classifyMask(StringRef name, const HostTensor &t) {
  if (!t.hasData) {
    if (probe)
      return {};
    auto cached = maskCache.find(name);
    if (cached != maskCache.end())
      return cached->second;
  }
  // Import the graph again at small shapes and take the value there.
  MaskClass kind = import::classifyMask(
      t, [&](int64_t batch, int64_t seq) -> std::optional<HostTensor> {
        ImportOptions probeOpts;
        probeOpts.batch = batch;
        probeOpts.seqLen = seq;
        MLIRContext probeCtx;
        probeCtx.loadDialect<tg::TGDialect, func::FuncDialect>();
        probeCtx.getDiagEngine().registerHandler(
            [](Diagnostic &) { return success(); });
        Importer probeImporter(&probeCtx, model, bufferName, probeOpts,
                               /*probe=*/true);
        if (!probeImporter.run())
          return std::nullopt;
        const HostTensor *small = probeImporter.constantValue(name);
        if (!small)
          return std::nullopt;
        return *small;
      });
  if (!t.hasData)
    maskCache[name] = kind;
  return kind;
}

Value Importer::causalMask(ArrayRef<int64_t> shape, int64_t window) {
  SmallVector<int64_t> s(shape.size(), 1);
  s[s.size() - 2] = shape[shape.size() - 2];
  s.back() = shape.back();
  return tg::CausalMaskOp::create(
      builder, loc, RankedTensorType::get(s, builder.getF32Type()),
      window ? builder.getI64IntegerAttr(window) : IntegerAttr());
}

SmallVector<const onnx::NodeProto *> Importer::consumers(StringRef name,
                                                         bool &graphOutput) {
  SmallVector<const onnx::NodeProto *> users;
  for (const onnx::NodeProto &n : model.graph().node())
    if (llvm::is_contained(n.input(), name))
      users.push_back(&n);
  graphOutput = llvm::any_of(model.graph().output(),
                             [&](const auto &o) { return o.name() == name; });
  return users;
}

LogicalResult Importer::convertNode(const onnx::NodeProto &node) {
  StringRef domain = node.domain();
  if (!domain.empty() && domain != "ai.onnx")
    return nodeError(node) << "operators of domain '" << domain
                           << "' are not supported";
  loc = nodeLoc(node);
  builder.setInsertionPointToEnd(
      &cast<func::FuncOp>(*funcOp).getBody().front());

  SmallVector<const Val *> inputs;
  bool allConst = true;
  for (const auto &name : node.input()) {
    if (name.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    auto it = values.find(name);
    if (it == values.end())
      return nodeError(node)
             << "input '" << name << "' is not produced by any earlier node, "
             << "initializer or graph input";
    inputs.push_back(&it->second);
    allConst &= it->second.isConst;
    // Gathered expert matrices are symbolic: only a MatMul takes them.
    if (it->second.experts && node.op_type() != "MatMul")
      return rejectExpertUse(*this, node, *it->second.experts);
  }
  // Shape queries of dynamic values are constants too: shapes are static.
  bool shapeQuery = node.op_type() == "Shape" || node.op_type() == "Size";
  const OpRow *row = OpTable::get().lookup(node.op_type(), opset);
  if ((allConst || shapeQuery) && row && row->fold) {
    SmallVector<HostTensor> shapeOnly;
    shapeOnly.reserve(inputs.size());
    SmallVector<const HostTensor *> hosts;
    for (const Val *v : inputs) {
      if (!v) {
        hosts.push_back(nullptr);
      } else if (v->isConst) {
        hosts.push_back(&v->host);
      } else {
        auto type = cast<RankedTensorType>(v->value.getType());
        shapeOnly.push_back(HostTensor::shapeOnly(DType::F32, type.getShape()));
        hosts.push_back(&shapeOnly.back());
      }
    }
    auto results = evaluateNode(node, opset, hosts, foldLimit());
    if (!results)
      return nodeError(node) << llvm::toString(results.takeError());
    for (auto [name, t] : llvm::zip(node.output(), *results)) {
      std::optional<RotarySource> rotary = rotarySourceOf(node, inputs, t);
      values[name] = Val{true, std::move(t), {}, std::move(rotary)};
    }
    return success();
  }
  if (!row)
    return nodeError(node) << "unsupported operator";
  if (!row->convert)
    return nodeError(node) << "this op is only supported on data-independent "
                              "values (shapes, positions, masks), not on "
                              "activations";
  auto results =
      row->convert(Conversion{node, inputs, opset, builder, loc, *this});
  if (failed(results))
    return failure();
  for (auto [name, v] : llvm::zip(node.output(), *results))
    if (!name.empty())
      values[name] = std::move(v);
  return success();
}

OwningOpRef<ModuleOp> Importer::run() {
  if (failed(readOpsets()))
    return nullptr;
  const auto &graph = model.graph();
  // Every initializer's header against its data (and external data paths)
  // before any of them is read.
  for (const auto &init : graph.initializer())
    if (llvm::Error e =
            checkTensorProto(init, "initializer '" + init.name() + "'")) {
      emitError(loc) << llvm::toString(std::move(e));
      return nullptr;
    }
  if (failed(classifyInitializers()))
    return nullptr;
  recoverTorchNames();
  // Every ONNX operator has a first output: conversions name it, and look
  // at the outputs of the nodes that read theirs, before reaching them.
  for (const auto &node : graph.node()) {
    if (node.output_size() == 0 || node.output(0).empty()) {
      nodeError(node) << "has no output";
      return nullptr;
    }
    for (const auto &out : node.output())
      producers[out] = &node;
  }

  // Non-parameter initializers are constants.
  for (const auto &init : graph.initializer()) {
    if (params.count(init.name()))
      continue;
    auto t = hostTensorFromProto(init, "initializer '" + init.name() + "'");
    if (!t) {
      emitError(loc) << "" << llvm::toString(t.takeError());
      return nullptr;
    }
    values[init.name()] = Val{true, std::move(*t), {}};
  }

  SmallVector<Type> argTypes;
  SmallVector<NamedAttrList> argAttrs;
  SmallVector<std::string> argNames;
  if (failed(declareInputs(argTypes, argAttrs, argNames)))
    return nullptr;

  OwningOpRef<ModuleOp> module =
      ModuleOp::create(FileLineColLoc::get(ctx, bufferName, 0, 0));
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, loc, "main",
                                   builder.getFunctionType(argTypes, {}));
  funcOp = func;
  Block *entry = func.addEntryBlock();
  for (auto [k, attrs] : llvm::enumerate(argAttrs)) {
    func.setArgAttrs(k, attrs.getDictionary(ctx));
    values[argNames[k]] = Val{false, {}, entry->getArgument(k)};
  }

  for (const auto &node : graph.node())
    if (failed(convertNode(node)))
      return nullptr;
  loc = FileLineColLoc::get(ctx, bufferName, 0, 0);

  builder.setInsertionPointToEnd(entry);
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const auto &out : graph.output()) {
    auto it = values.find(out.name());
    if (it == values.end()) {
      emitError(loc) << "graph output '" << out.name() << "' is never produced";
      return nullptr;
    }
    if (it->second.isConst) {
      emitError(loc) << "graph output '" << out.name()
                     << "' does not depend on the input data";
      return nullptr;
    }
    // Gathered expert matrices stay symbolic: a batched MatMul is their
    // only use, and there is no tensor to return.
    if (it->second.experts) {
      emitError(loc) << "graph output '" << out.name()
                     << "' is the expert matrices gathered by "
                     << it->second.experts->source
                     << ", which may only be an operand of a batched MatMul "
                        "(they are never built as one copy per row)";
      return nullptr;
    }
    results.push_back(it->second.value);
    resultTypes.push_back(it->second.value.getType());
  }
  func::ReturnOp::create(builder, loc, results);
  func.setFunctionType(builder.getFunctionType(argTypes, resultTypes));
  for (auto [k, out] : llvm::enumerate(graph.output()))
    func.setResultAttr(k, tg::kResultNameAttr,
                       builder.getStringAttr(out.name()));
  module->getOperation()->setAttr(tg::kSourceAttr,
                                  builder.getStringAttr(bufferName));
  return module;
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

llvm::Error rondo::addInputShape(ImportOptions &options, StringRef spec) {
  auto [name, dims] = spec.split('=');
  if (name.empty() || !spec.contains('='))
    return llvm::createStringError("--input-shape '" + spec +
                                   "' is not NAME=d0,d1,...");
  SmallVector<int64_t> shape;
  if (!dims.trim().empty()) {
    SmallVector<StringRef> parts;
    dims.split(parts, ',');
    for (StringRef p : parts) {
      int64_t v;
      if (p.trim().getAsInteger(10, v) || v <= 0)
        return llvm::createStringError("--input-shape '" + spec + "': '" + p +
                                       "' is not a positive integer");
      shape.push_back(v);
    }
  }
  options.inputShapes[name] = shape;
  return llvm::Error::success();
}

OwningOpRef<ModuleOp> rondo::importOnnxBuffer(MLIRContext *ctx,
                                              StringRef contents,
                                              StringRef bufferName,
                                              const ImportOptions &opts) {
  ctx->loadDialect<tg::TGDialect, func::FuncDialect>();
  onnx::ModelProto model;
  if (failed(readOnnxModel(FileLineColLoc::get(ctx, bufferName, 0, 0), contents,
                           model)))
    return nullptr;
  Importer importer(ctx, model, bufferName, opts);
  return importer.run();
}

OwningOpRef<ModuleOp> rondo::importOnnxFile(MLIRContext *ctx, StringRef path,
                                            const ImportOptions &opts) {
  std::unique_ptr<llvm::MemoryBuffer> contents = readModelFile(ctx, path);
  if (!contents)
    return nullptr;
  return importOnnxBuffer(ctx, contents->getBuffer(), path, opts);
}
