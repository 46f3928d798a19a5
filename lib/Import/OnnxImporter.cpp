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
// by HostTensor's folder; dynamic nodes become tg ops. So the tg function only
// holds computation that depends on data, as ARCHITECTURE.md asks.
//
// Two structures need care:
// - Rotary frequency tables are float initializers, but they are buffers in
//   PyTorch: an initializer whose every path into the data flow passes
//   through Cos/Sin is a constant, not a parameter.
// - The causal mask ([B, 1, T, T]) is too large to fold at real sizes. When a
//   large data-independent tensor meets data (Add to attention scores, or a
//   Where), the importer proves that it is the causal mask by importing the
//   same graph at two small probe shapes, where the mask is small enough to
//   evaluate, and checking it elementwise. It then becomes tg.causal_mask.
//   This relies on the mask being a function of the shapes only, which
//   holds for every value the folder can compute (graph inputs that carry
//   data, like attention_mask, are specialised to constants first).
//
//===----------------------------------------------------------------------===//

#include "rondo/Import/OnnxImporter.h"

#include "HostTensor.h"
#include "TG/IR/TGOps.h"
#include "rondo/runtime/RotaryTable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/unknown_field_set.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace rondo;
using namespace rondo::import;
using llvm::ArrayRef;
using llvm::SmallVector;
using llvm::StringRef;

namespace {

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

/// What a folded value may be: a rotary table, `scale * sin|cos(phase)` with
/// `phase[..., p, j] = p * freqs[j]`, reached from Cos/Sin through layout
/// ops. A hint only: materialize checks every element before using it.
struct RotarySource {
  bool sine = false;
  SmallVector<float> freqs;
  float scale = 1.0f;
};

/// One imported ONNX value.
struct Val {
  bool isConst = false;
  HostTensor host; ///< when isConst (data may be absent when too large)
  Value value;     ///< when dynamic
  std::optional<RotarySource> rotary; ///< when isConst
};

class Importer {
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
  /// fold at any length, masks that grow with its square ([B, 1, T, T])
  /// must not: the limit grows with the sequence, by 512 per position.
  int64_t foldLimit() const {
    const int64_t seq = std::clamp<int64_t>(opts.seqLen, 0, int64_t(1) << 40);
    return std::max(opts.maxFoldElements, 512 * seq);
  }

  // Diagnostics.
  Location nodeLoc(const onnx::NodeProto &node);
  InFlightDiagnostic nodeError(const onnx::NodeProto &node);

  // Values.
  FailureOr<Value> materialize(const Val &v, const onnx::NodeProto &node,
                               Type floatType = {});
  Value constant(const HostTensor &t);
  /// tg.rotary_table for a folded table that `v.rotary` describes and
  /// whose every element rotaryTableValue reproduces exactly; null if not.
  Value rotaryTable(const Val &v);
  FailureOr<SmallVector<Val>> convertDynamic(const onnx::NodeProto &node,
                                             ArrayRef<const Val *> inputs);
  /// Whether a constant is the causal mask: additive (0 / -inf) or boolean
  /// (true = attend).
  enum class MaskKind { None, Additive, Boolean };
  MaskKind classifyMask(StringRef name, const HostTensor &t);
  static MaskKind checkMaskData(const HostTensor &t);
  Value causalMask(ArrayRef<int64_t> shape);

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
  llvm::StringMap<MaskKind> maskCache;
  /// Whether a value's folded data is the rotary table it claims to be.
  llvm::DenseMap<const Val *, bool> rotaryChecked;
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
          (node.op_type() == "MatMul" ||
           (node.op_type() == "Gemm" && !transB)))
        torchTransposed.insert(p);
      if (StringRef(p).contains('.'))
        addName(p, p); // already a PyTorch name (norms, embeddings)
      if (md.modulePath.empty() || md.torchParamArgs.size() != 1)
        continue;
      std::string prefix = "p_" + md.modulePath + "_";
      std::replace(prefix.begin(), prefix.end(), '.', '_');
      StringRef arg = md.torchParamArgs.front();
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
  for (const auto &in : graph.input()) {
    if (initializers.count(in.name()))
      continue;
    const auto &tt = in.type().tensor_type();
    StringRef name = in.name();
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
      return emitError(loc)
             << "input '" << name << "' of shape ["
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
                                       const onnx::NodeProto &node,
                                       Type floatType) {
  if (!v.isConst)
    return v.value;
  if (!v.host.hasData)
    return nodeError(node)
               << "a data-independent tensor of shape ["
               << llvm::make_range(v.host.shape.begin(), v.host.shape.end())
               << "] (" << v.host.numel()
               << " elements) meets the data flow here, and it is too large to "
                  "build and not a recognised structure (causal mask)",
           failure();
  if (Value table = rotaryTable(v))
    return table;
  return constant(v.host);
}

Value Importer::rotaryTable(const Val &v) {
  const HostTensor &t = v.host;
  if (!v.rotary || !t.hasData || t.dtype != DType::F32 || t.shape.size() < 2)
    return {};
  const RotarySource &src = *v.rotary;
  int64_t positions = t.shape[t.shape.size() - 2], dim = t.shape.back();
  if (positions < 1 || dim != int64_t(src.freqs.size()))
    return {};
  // Leading dimensions must repeat one [T, D] table; the check compares
  // every element, so a table that differs anywhere stays a constant. Once
  // per value: every layer's q and k materialise the same tables.
  auto [checked, first] = rotaryChecked.try_emplace(&v, false);
  if (first) {
    bool same = true;
    for (int64_t k = 0, n = t.numel(); k < n && same; ++k)
      same =
          t.f[k] == double(rt::rotaryTableValue(src.sine, (k / dim) % positions,
                                                src.freqs[k % dim], src.scale));
    checked->second = same;
  }
  if (!checked->second)
    return {};
  SmallVector<int64_t> shape(t.shape.size(), 1);
  shape[shape.size() - 2] = positions;
  shape.back() = dim;
  Value table = tg::RotaryTableOp::create(
      builder, loc, RankedTensorType::get(shape, builder.getF32Type()),
      src.sine ? tg::UnaryKind::sin : tg::UnaryKind::cos, src.freqs,
      llvm::APFloat(src.scale));
  if (shape != ArrayRef<int64_t>(t.shape))
    table = tg::BroadcastOp::create(
        builder, loc, RankedTensorType::get(t.shape, builder.getF32Type()),
        table);
  return table;
}

/// The rotary table a folded node's result may be (see RotarySource):
/// Cos/Sin of a phase whose position-1 row gives the frequencies, or a
/// layout op, cast or scalar scaling of such a table.
std::optional<RotarySource> rotarySourceOf(const onnx::NodeProto &node,
                                           ArrayRef<const Val *> inputs,
                                           const HostTensor &result) {
  StringRef op = node.op_type();
  const Val *x = inputs.empty() ? nullptr : inputs[0];
  if (!x || !x->isConst || result.dtype != DType::F32 ||
      result.shape.size() < 2)
    return std::nullopt;
  if (op == "Cos" || op == "Sin") {
    const HostTensor &phase = x->host;
    if (!phase.hasData || phase.dtype != DType::F32 || phase.shape.size() < 2 ||
        phase.shape[phase.shape.size() - 2] < 2)
      return std::nullopt;
    // Position 1's phase is 1 * freq, exactly.
    int64_t dim = phase.shape.back();
    RotarySource src;
    src.sine = op == "Sin";
    for (int64_t j = 0; j < dim; ++j)
      src.freqs.push_back(float(phase.f[dim + j]));
    return src;
  }
  if (op == "Concat") {
    // Tables of half the head dimension, concatenated along the last axis
    // (cat(freqs, freqs) taken after the Cos rather than before).
    int64_t rank = int64_t(result.shape.size());
    int64_t axis = 0;
    for (const auto &a : node.attribute())
      if (a.name() == "axis")
        axis = a.i();
    if (axis != -1 && axis != rank - 1)
      return std::nullopt;
    RotarySource src;
    for (auto [k, in] : llvm::enumerate(inputs)) {
      if (!in || !in->rotary ||
          (k &&
           (in->rotary->sine != src.sine || in->rotary->scale != src.scale)))
        return std::nullopt;
      src.sine = in->rotary->sine;
      src.scale = in->rotary->scale;
      llvm::append_range(src.freqs, in->rotary->freqs);
    }
    return src;
  }
  if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" ||
      op == "Identity" || op == "Expand" || op == "Slice" || op == "Cast")
    return x->rotary; // Casts to bf16/f16 fold as f32, like the training.
  if (op == "Mul" && inputs.size() == 2) {
    // attention_scaling * table, in either order.
    const Val *table = x, *scale = inputs[1];
    if (scale && scale->rotary)
      std::swap(table, scale);
    if (!table->rotary || table->rotary->scale != 1.0f || !scale ||
        !scale->isConst || !scale->host.hasData || scale->host.numel() != 1 ||
        !isFloat(scale->host.dtype))
      return std::nullopt;
    RotarySource src = *table->rotary;
    src.scale = float(scale->host.getF(0));
    return src;
  }
  return std::nullopt;
}

Importer::MaskKind Importer::checkMaskData(const HostTensor &t) {
  if (t.shape.size() < 2 || !t.hasData)
    return MaskKind::None;
  int64_t rows = t.shape[t.shape.size() - 2], cols = t.shape.back();
  if (rows < 2 || cols < rows)
    return MaskKind::None;
  bool boolean = t.dtype == DType::Bool;
  if (!boolean && !isFloat(t.dtype))
    return MaskKind::None;
  for (int64_t k = 0, n = t.numel(); k < n; ++k) {
    int64_t i = (k / cols) % rows, j = k % cols;
    bool attend = j <= i + (cols - rows);
    if (boolean) {
      if ((t.i[k] != 0) != attend)
        return MaskKind::None;
    } else if (attend ? t.f[k] != 0.0 : !(t.f[k] <= -1e30)) {
      return MaskKind::None;
    }
  }
  return boolean ? MaskKind::Boolean : MaskKind::Additive;
}

Importer::MaskKind Importer::classifyMask(StringRef name, const HostTensor &t) {
  if (t.hasData)
    return checkMaskData(t);
  if (probe)
    return MaskKind::None;
  auto cached = maskCache.find(name);
  if (cached != maskCache.end())
    return cached->second;
  // Import the graph again at two small shapes and check the mask there.
  MaskKind kind = MaskKind::None;
  for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 5}, {3, 7}}) {
    ImportOptions probeOpts;
    probeOpts.batch = b;
    probeOpts.seqLen = s;
    MLIRContext probeCtx;
    probeCtx.loadDialect<tg::TGDialect, func::FuncDialect>();
    probeCtx.getDiagEngine().registerHandler(
        [](Diagnostic &) { return success(); });
    Importer probeImporter(&probeCtx, model, bufferName, probeOpts,
                           /*probe=*/true);
    if (!probeImporter.run())
      return maskCache[name] = MaskKind::None;
    const HostTensor *small = probeImporter.constantValue(name);
    MaskKind k = small ? checkMaskData(*small) : MaskKind::None;
    if (k == MaskKind::None || (kind != MaskKind::None && k != kind))
      return maskCache[name] = MaskKind::None;
    kind = k;
  }
  return maskCache[name] = kind;
}

Value Importer::causalMask(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  s[s.size() - 2] = shape[shape.size() - 2];
  s.back() = shape.back();
  return tg::CausalMaskOp::create(
      builder, loc, RankedTensorType::get(s, builder.getF32Type()));
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
  }
  // Shape queries of dynamic values are constants too: shapes are static.
  bool shapeQuery = node.op_type() == "Shape" || node.op_type() == "Size";
  if ((allConst || shapeQuery) && canEvaluate(node.op_type())) {
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
  auto results = convertDynamic(node, inputs);
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
    results.push_back(it->second.value);
    resultTypes.push_back(it->second.value.getType());
  }
  func::ReturnOp::create(builder, loc, results);
  func.setFunctionType(builder.getFunctionType(argTypes, resultTypes));
  for (auto [k, out] : llvm::enumerate(graph.output()))
    func.setResultAttr(k, tg::kResultNameAttr,
                       builder.getStringAttr(out.name()));
  module->getOperation()->setAttr("tg.source",
                                  builder.getStringAttr(bufferName));
  return module;
}

} // namespace

namespace {
const onnx::AttributeProto *findAttr(const onnx::NodeProto &n, StringRef name) {
  for (const auto &a : n.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}
int64_t attrInt(const onnx::NodeProto &n, StringRef name, int64_t dflt) {
  auto *a = findAttr(n, name);
  return a ? a->i() : dflt;
}
float attrFloat(const onnx::NodeProto &n, StringRef name, float dflt) {
  auto *a = findAttr(n, name);
  return a ? a->f() : dflt;
}
RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// Constant integer list from an input (axes, shapes, splits).
FailureOr<SmallVector<int64_t>> constInts(const Val *v) {
  if (!v || !v->isConst || !v->host.hasData)
    return failure();
  SmallVector<int64_t> r;
  for (int64_t k = 0; k < v->host.numel(); ++k)
    r.push_back(v->host.getI(k));
  return r;
}
} // namespace

namespace {
FailureOr<SmallVector<Val>>
Importer::convertDynamic(const onnx::NodeProto &node,
                         ArrayRef<const Val *> in) {
  StringRef op = node.op_type();
  auto dyn = [&](Val v) { return Val{false, {}, v.value}; };
  auto wrap = [&](Value v) { return SmallVector<Val>{Val{false, {}, v}}; };
  auto need = [&](size_t k) -> FailureOr<Value> {
    if (k >= in.size() || !in[k])
      return nodeError(node) << "input " << k << " is required", failure();
    return materialize(*in[k], node);
  };
  auto requireFloat = [&](Value v) -> LogicalResult {
    if (!isa<FloatType>(typeOf(v).getElementType()))
      return nodeError(node) << "this op is only supported on floating-point "
                                "data here, got "
                             << v.getType(),
             failure();
    return success();
  };
  // Shape of a shape-changing op's result, computed by the folder on
  // shape-only inputs so the ONNX rules live in one place.
  auto foldedShape = [&]() -> FailureOr<SmallVector<int64_t>> {
    SmallVector<HostTensor> shapeOnly;
    shapeOnly.reserve(in.size());
    SmallVector<const HostTensor *> hosts;
    for (const Val *v : in) {
      if (!v)
        hosts.push_back(nullptr);
      else if (v->isConst)
        hosts.push_back(&v->host);
      else {
        shapeOnly.push_back(
            HostTensor::shapeOnly(DType::F32, typeOf(v->value).getShape()));
        hosts.push_back(&shapeOnly.back());
      }
    }
    auto r = evaluateNode(node, opset, hosts, 0);
    if (!r)
      return nodeError(node) << llvm::toString(r.takeError()), failure();
    return SmallVector<int64_t>((*r)[0].shape);
  };

  static const llvm::StringMap<tg::BinaryKind> binaryKinds = {
      {"Add", tg::BinaryKind::add}, {"Sub", tg::BinaryKind::sub},
      {"Mul", tg::BinaryKind::mul}, {"Div", tg::BinaryKind::div},
      {"Pow", tg::BinaryKind::pow}, {"Max", tg::BinaryKind::max},
      {"Min", tg::BinaryKind::min}};
  static const llvm::StringMap<tg::UnaryKind> unaryKinds = {
      {"Neg", tg::UnaryKind::neg},
      {"Exp", tg::UnaryKind::exp},
      {"Log", tg::UnaryKind::log},
      {"Sqrt", tg::UnaryKind::sqrt},
      {"Reciprocal", tg::UnaryKind::reciprocal},
      {"Sigmoid", tg::UnaryKind::sigmoid},
      {"Tanh", tg::UnaryKind::tanh},
      {"Relu", tg::UnaryKind::relu},
      {"Abs", tg::UnaryKind::abs},
      {"Sin", tg::UnaryKind::sin},
      {"Cos", tg::UnaryKind::cos}};

  if (auto it = binaryKinds.find(op); it != binaryKinds.end()) {
    if (in.size() != 2 || !in[0] || !in[1])
      return nodeError(node) << "expects exactly two inputs", failure();
    // A data-independent operand that is the causal mask stays symbolic.
    if (op == "Add")
      for (int k = 0; k < 2; ++k)
        if (in[k]->isConst && !in[1 - k]->isConst &&
            classifyMask(node.input(k), in[k]->host) == MaskKind::Additive) {
          Value x = in[1 - k]->value;
          if (failed(requireFloat(x)))
            return failure();
          Value m = causalMask(in[k]->host.shape);
          if (failed(tg::broadcastShapes(typeOf(x).getShape(),
                                         typeOf(m).getShape())))
            return nodeError(node) << "the causal mask " << m.getType()
                                   << " does not broadcast with " << x.getType(),
                   failure();
          return wrap(
              tg::BinaryOp::create(builder, loc, tg::BinaryKind::add, x, m));
        }
    auto a = need(0), b = need(1);
    if (failed(a) || failed(b) || failed(requireFloat(*a)) ||
        failed(requireFloat(*b)))
      return failure();
    auto shape = broadcastShape(typeOf(*a).getShape(), typeOf(*b).getShape());
    if (!shape)
      return nodeError(node) << llvm::toString(shape.takeError()), failure();
    return wrap(tg::BinaryOp::create(builder, loc, it->second, *a, *b));
  }
  if (auto it = unaryKinds.find(op); it != unaryKinds.end()) {
    auto x = need(0);
    if (failed(x) || failed(requireFloat(*x)))
      return failure();
    return wrap(tg::UnaryOp::create(builder, loc, it->second, *x));
  }
  if (op == "Gelu") {
    auto x = need(0);
    if (failed(x) || failed(requireFloat(*x)))
      return failure();
    auto *a = findAttr(node, "approximate");
    bool tanhApprox = a && a->s() == "tanh";
    return wrap(tg::UnaryOp::create(
        builder, loc,
        tanhApprox ? tg::UnaryKind::gelu_tanh : tg::UnaryKind::gelu_erf, *x));
  }
  if (op == "Identity" || op == "Dropout") {
    if (in.empty() || !in[0])
      return nodeError(node) << "input 0 is required", failure();
    if (op == "Dropout" && node.input_size() > 2 && !node.input(2).empty()) {
      auto mode = constInts(in[2]);
      if (failed(mode) || mode->size() != 1 || (*mode)[0] != 0)
        return nodeError(node) << "dropout in training mode is not supported",
               failure();
    }
    if (op == "Dropout" && node.output_size() > 1 && !node.output(1).empty())
      return nodeError(node) << "the dropout mask output is not supported",
             failure();
    return SmallVector<Val>{dyn(*in[0])};
  }
  if (op == "Cast") {
    auto x = need(0);
    if (failed(x))
      return failure();
    int to = attrInt(node, "to", 0);
    bool toFloat =
        to == onnx::TensorProto::FLOAT || to == onnx::TensorProto::FLOAT16 ||
        to == onnx::TensorProto::BFLOAT16 || to == onnx::TensorProto::DOUBLE;
    bool toInt =
        to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
    Type elem = typeOf(*x).getElementType();
    // Host compute is fp32 everywhere: casts between float types, and
    // between integer types, are the identity here.
    if ((toFloat && isa<FloatType>(elem)) || (toInt && elem.isInteger(64)))
      return wrap(*x);
    return nodeError(node) << "cast of data from " << elem << " to ONNX type "
                           << to << " is not supported",
           failure();
  }
  if (op == "MatMul" || op == "Gemm") {
    auto a = need(0), b = need(1);
    if (failed(a) || failed(b) || failed(requireFloat(*a)) ||
        failed(requireFloat(*b)))
      return failure();
    bool ta = op == "Gemm" && attrInt(node, "transA", 0);
    bool tb = op == "Gemm" && attrInt(node, "transB", 0);
    Value x = *a, w = *b;
    auto xt = typeOf(x), wt = typeOf(w);
    if (op == "Gemm" && (xt.getRank() != 2 || wt.getRank() != 2))
      return nodeError(node) << "Gemm needs rank-2 operands", failure();
    if (xt.getRank() == 0 || wt.getRank() == 0)
      return nodeError(node) << "MatMul operands must have rank >= 1, got "
                             << xt << " and " << wt,
           failure();
    // Rank-1 operands follow NumPy: promote, multiply, drop the added dim.
    bool vecA = xt.getRank() == 1, vecB = wt.getRank() == 1;
    if (vecA)
      x = tg::ReshapeOp::create(
          builder, loc,
          RankedTensorType::get({1, xt.getDimSize(0)}, xt.getElementType()), x);
    if (vecB)
      w = tg::ReshapeOp::create(
          builder, loc,
          RankedTensorType::get({wt.getDimSize(0), 1}, wt.getElementType()), w);
    auto xs = typeOf(x).getShape(), ws = typeOf(w).getShape();
    int64_t ka = ta ? xs[xs.size() - 2] : xs.back(),
            kb = tb ? ws.back() : ws[ws.size() - 2];
    if (ka != kb)
      return nodeError(node)
                 << "contraction sizes differ: " << xt << " and " << wt,
             failure();
    if (failed(tg::broadcastShapes(xs.drop_back(2), ws.drop_back(2))))
      return nodeError(node) << "batch dimensions do not broadcast: " << xt
                             << " and " << wt,
             failure();
    Value y = tg::MatmulOp::create(builder, loc, x, w, ta, tb);
    if (vecA || vecB) {
      SmallVector<int64_t> shape(typeOf(y).getShape());
      if (vecB)
        shape.pop_back();
      if (vecA)
        shape.erase(shape.end() - (vecB ? 1 : 2));
      y = tg::ReshapeOp::create(
          builder, loc,
          RankedTensorType::get(shape, typeOf(y).getElementType()), y);
    }
    if (op == "Gemm") {
      float alpha = attrFloat(node, "alpha", 1.0f),
            beta = attrFloat(node, "beta", 1.0f);
      auto scalar = [&](float v) {
        return tg::ConstantOp::create(
            builder, loc,
            DenseElementsAttr::get(
                RankedTensorType::get({}, builder.getF32Type()), v));
      };
      if (alpha != 1.0f)
        y = tg::BinaryOp::create(builder, loc, tg::BinaryKind::mul, y,
                                 scalar(alpha));
      if (in.size() > 2 && in[2]) {
        auto c = need(2);
        if (failed(c))
          return failure();
        Value bias = *c;
        if (failed(requireFloat(bias)))
          return failure();
        if (failed(tg::broadcastShapes(typeOf(bias).getShape(),
                                       typeOf(y).getShape())))
          return nodeError(node) << "bias " << bias.getType()
                                 << " does not broadcast to " << y.getType(),
                 failure();
        if (beta != 1.0f)
          bias = tg::BinaryOp::create(builder, loc, tg::BinaryKind::mul, bias,
                                      scalar(beta));
        y = tg::BinaryOp::create(builder, loc, tg::BinaryKind::add, y, bias);
      }
    }
    return wrap(y);
  }
  if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Flatten") {
    auto x = need(0);
    auto shape = foldedShape();
    if (failed(x) || failed(shape))
      return failure();
    return wrap(tg::ReshapeOp::create(
        builder, loc,
        RankedTensorType::get(*shape, typeOf(*x).getElementType()), *x));
  }
  if (op == "Expand") {
    auto x = need(0);
    auto shape = foldedShape();
    if (failed(x) || failed(shape))
      return failure();
    return wrap(tg::BroadcastOp::create(
        builder, loc,
        RankedTensorType::get(*shape, typeOf(*x).getElementType()), *x));
  }
  if (op == "Transpose") {
    auto x = need(0);
    if (failed(x))
      return failure();
    int64_t rank = typeOf(*x).getRank();
    SmallVector<int64_t> perm;
    if (auto *a = findAttr(node, "perm"))
      perm.assign(a->ints().begin(), a->ints().end());
    else
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    if ((int64_t)perm.size() != rank)
      return nodeError(node)
                 << "perm has " << perm.size() << " entries for rank " << rank,
             failure();
    SmallVector<bool> seen(rank, false);
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || seen[p])
        return nodeError(node) << "perm entry " << p
                               << " is out of range or repeated for rank "
                               << rank,
               failure();
      seen[p] = true;
    }
    return wrap(tg::TransposeOp::create(builder, loc, *x,
                                        builder.getDenseI64ArrayAttr(perm)));
  }
  if (op == "Slice") {
    auto x = need(0);
    if (failed(x))
      return failure();
    SmallVector<const HostTensor *> hosts{nullptr};
    for (size_t k = 1; k < in.size(); ++k)
      hosts.push_back(in[k] && in[k]->isConst ? &in[k]->host : nullptr);
    auto p = sliceParams(node, opset, hosts, typeOf(*x).getShape());
    if (!p)
      return nodeError(node) << llvm::toString(p.takeError()), failure();
    return wrap(tg::SliceOp::create(
        builder, loc,
        RankedTensorType::get(p->shape, typeOf(*x).getElementType()), *x,
        builder.getDenseI64ArrayAttr(p->starts),
        builder.getDenseI64ArrayAttr(p->steps)));
  }
  if (op == "Split") {
    auto x = need(0);
    if (failed(x))
      return failure();
    auto xt = typeOf(*x);
    int64_t axis = attrInt(node, "axis", 0);
    if (axis < 0)
      axis += xt.getRank();
    if (axis < 0 || axis >= xt.getRank())
      return nodeError(node) << "axis out of range", failure();
    int64_t dim = xt.getDimSize(axis), n = node.output_size();
    SmallVector<int64_t> sizes;
    if (in.size() > 1 && in[1]) {
      auto s = constInts(in[1]);
      if (failed(s))
        return nodeError(node) << "split sizes must be compile-time constants",
               failure();
      sizes = *s;
    } else if (auto *a = findAttr(node, "split")) {
      sizes.assign(a->ints().begin(), a->ints().end());
    } else {
      int64_t parts = opset >= 18 ? attrInt(node, "num_outputs", n) : n;
      if (parts <= 0 || parts != n)
        return nodeError(node) << "splits into " << parts << " parts but has "
                               << n << " outputs",
               failure();
      int64_t chunk = (dim + parts - 1) / parts;
      for (int64_t k = 0; k < parts; ++k)
        sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - k * chunk)));
    }
    int64_t total = 0;
    for (int64_t size : sizes)
      if (size < 0 || __builtin_add_overflow(total, size, &total))
        return nodeError(node) << "split size " << size << " is invalid",
               failure();
    if ((int64_t)sizes.size() != n || total != dim)
      return nodeError(node)
                 << "split sizes do not add up to dimension " << dim,
             failure();
    SmallVector<Val> outs;
    int64_t offset = 0;
    for (int64_t size : sizes) {
      SmallVector<int64_t> starts(xt.getRank(), 0), steps(xt.getRank(), 1),
          shape(xt.getShape());
      starts[axis] = offset;
      shape[axis] = size;
      outs.push_back(Val{
          false,
          {},
          tg::SliceOp::create(builder, loc,
                              RankedTensorType::get(shape, xt.getElementType()),
                              *x, builder.getDenseI64ArrayAttr(starts),
                              builder.getDenseI64ArrayAttr(steps))});
      offset += size;
    }
    return outs;
  }
  if (op == "Concat") {
    SmallVector<Value> xs;
    for (size_t k = 0; k < in.size(); ++k) {
      auto x = need(k);
      if (failed(x))
        return failure();
      xs.push_back(*x);
    }
    if (xs.empty())
      return nodeError(node) << "needs at least one input", failure();
    auto first = typeOf(xs.front());
    int64_t rank = first.getRank(), axis = attrInt(node, "axis", 0);
    if (axis < -rank || axis >= rank)
      return nodeError(node) << "axis " << axis << " is out of range for rank "
                             << rank,
             failure();
    if (axis < 0)
      axis += rank;
    for (Value x : xs) {
      auto t = typeOf(x);
      bool same = t.getRank() == rank &&
                  t.getElementType() == first.getElementType();
      for (int64_t d = 0; same && d < rank; ++d)
        same = d == axis || t.getDimSize(d) == first.getDimSize(d);
      if (!same)
        return nodeError(node) << "inputs " << first << " and " << t
                               << " do not concatenate along axis " << axis,
               failure();
    }
    return wrap(tg::ConcatOp::create(builder, loc, xs, axis));
  }
  if (op == "Gather") {
    int64_t axis = attrInt(node, "axis", 0);
    if (in.size() < 2 || !in[0] || !in[1])
      return nodeError(node) << "expects two inputs", failure();
    if (!in[1]->isConst) {
      // Embedding lookup: a table indexed by token data.
      auto table = need(0), ids = need(1);
      if (failed(table) || failed(ids))
        return failure();
      if (typeOf(*table).getRank() != 2 || (axis != 0 && axis != -2))
        return nodeError(node)
                   << "a data-dependent Gather must index the rows of a rank-2 "
                      "table (an embedding), got "
                   << typeOf(*table) << " axis " << axis,
               failure();
      if (!typeOf(*ids).getElementType().isInteger(64))
        return nodeError(node) << "Gather indices must be integers, got "
                               << typeOf(*ids),
               failure();
      return wrap(tg::GatherOp::create(builder, loc, *table, *ids));
    }
    // Constant indices into data: a slice (a single index also drops the
    // axis), or a row lookup with constant ids (learned positions).
    auto x = need(0);
    auto idx = constInts(in[1]);
    if (failed(x) || failed(idx))
      return failure();
    auto xt = typeOf(*x);
    if (axis < -xt.getRank() || axis >= xt.getRank())
      return nodeError(node) << "axis " << axis << " is out of range for rank "
                             << xt.getRank(),
             failure();
    if (axis < 0)
      axis += xt.getRank();
    if (isFloat(in[1]->host.dtype))
      return nodeError(node) << "Gather indices must be integers", failure();
    int64_t dim = xt.getDimSize(axis);
    SmallVector<int64_t> ids;
    for (int64_t v : *idx)
      ids.push_back(v < 0 ? v + dim : v);
    bool arithmetic = !ids.empty() && ids[0] >= 0 && ids[0] < dim;
    int64_t step = ids.size() > 1 ? ids[1] - ids[0] : 1;
    for (size_t k = 1; k < ids.size() && arithmetic; ++k)
      arithmetic = ids[k] - ids[k - 1] == step && step != 0 && ids[k] >= 0 &&
                   ids[k] < dim;
    for (int64_t v : ids)
      if (v < 0 || v >= dim)
        return nodeError(node) << "Gather index " << v
                               << " is out of range for dimension " << dim,
               failure();
    bool rowLookup = xt.getRank() == 2 && axis == 0;
    if (rowLookup && (!arithmetic || in[1]->host.shape.size() > 1)) {
      auto ids = need(1);
      if (failed(ids))
        return failure();
      return wrap(tg::GatherOp::create(builder, loc, *x, *ids));
    }
    if (!arithmetic)
      return nodeError(node)
                 << "constant Gather indices must be an arithmetic sequence in "
                    "range",
             failure();
    SmallVector<int64_t> starts(xt.getRank(), 0), steps(xt.getRank(), 1),
        shape(xt.getShape());
    starts[axis] = ids[0];
    steps[axis] = step;
    shape[axis] = ids.size();
    Value s = tg::SliceOp::create(
        builder, loc, RankedTensorType::get(shape, xt.getElementType()), *x,
        builder.getDenseI64ArrayAttr(starts),
        builder.getDenseI64ArrayAttr(steps));
    auto outShape = foldedShape();
    if (failed(outShape))
      return failure();
    return wrap(tg::ReshapeOp::create(
        builder, loc, RankedTensorType::get(*outShape, xt.getElementType()),
        s));
  }
  if (op == "Softmax") {
    auto x = need(0);
    if (failed(x) || failed(requireFloat(*x)))
      return failure();
    int64_t rank = typeOf(*x).getRank();
    int64_t axis = attrInt(node, "axis", -1);
    if (axis < 0)
      axis += rank;
    if (axis != rank - 1)
      return nodeError(node) << "softmax over axis " << axis << " of " << rank
                             << " dimensions is not supported (only the last)",
             failure();
    return wrap(tg::SoftmaxOp::create(builder, loc, *x));
  }
  if (op == "ReduceMean" || op == "ReduceSum") {
    auto x = need(0);
    if (failed(x) || failed(requireFloat(*x)))
      return failure();
    bool axesAsInput = op == "ReduceSum" ? opset >= 13 : opset >= 18;
    SmallVector<int64_t> axes;
    if (axesAsInput) {
      if (in.size() > 1 && in[1]) {
        auto a = constInts(in[1]);
        if (failed(a))
          return nodeError(node) << "axes must be compile-time constants",
                 failure();
        axes = *a;
      }
    } else if (auto *a = findAttr(node, "axes")) {
      axes.assign(a->ints().begin(), a->ints().end());
    }
    int64_t rank = typeOf(*x).getRank();
    if (axes.empty()) {
      if (attrInt(node, "noop_with_empty_axes", 0))
        return wrap(*x);
      for (int64_t d = 0; d < rank; ++d)
        axes.push_back(d);
      if (axes.empty()) // reducing a scalar over all (no) axes
        return wrap(*x);
    }
    for (int64_t &a : axes) {
      if (a < -rank || a >= rank)
        return nodeError(node)
                   << "axis " << a << " out of range for rank " << rank,
               failure();
      if (a < 0)
        a += rank;
    }
    for (size_t k = 0; k < axes.size(); ++k)
      for (size_t j = 0; j < k; ++j)
        if (axes[j] == axes[k])
          return nodeError(node) << "axis " << axes[k] << " is repeated",
                 failure();
    return wrap(tg::ReduceOp::create(
        builder, loc,
        op == "ReduceMean" ? tg::ReduceKind::mean : tg::ReduceKind::sum, *x,
        builder.getDenseI64ArrayAttr(axes), attrInt(node, "keepdims", 1) != 0));
  }
  if (op == "LayerNormalization") {
    auto x = need(0), w = need(1);
    if (failed(x) || failed(w) || failed(requireFloat(*x)))
      return failure();
    int64_t rank = typeOf(*x).getRank(), axis = attrInt(node, "axis", -1);
    if (axis < 0)
      axis += rank;
    if (axis != rank - 1)
      return nodeError(node)
                 << "layer normalisation over more than the last axis is not "
                    "supported",
             failure();
    for (int k = 1; k < node.output_size(); ++k)
      if (!node.output(k).empty())
        return nodeError(node)
                   << "the mean and inverse-std outputs are not supported",
               failure();
    Value bias;
    if (in.size() > 2 && in[2]) {
      auto b = need(2);
      if (failed(b))
        return failure();
      bias = *b;
    } else {
      bias = tg::ConstantOp::create(
          builder, loc,
          DenseElementsAttr::get(typeOf(*w), builder.getF32FloatAttr(0)));
    }
    for (Value v : {*w, bias})
      if (typeOf(*x).getRank() < 1 || typeOf(v).getRank() != 1 ||
          typeOf(v).getDimSize(0) != typeOf(*x).getShape().back() ||
          typeOf(v).getElementType() != typeOf(*x).getElementType())
        return nodeError(node)
                   << "scale and bias must be rank 1 of the last dimension of "
                   << x->getType() << ", got " << v.getType(),
               failure();
    return wrap(tg::LayerNormOp::create(
        builder, loc, x->getType(), *x, *w, bias,
        builder.getF32FloatAttr(attrFloat(node, "epsilon", 1e-5f))));
  }
  if (op == "Where") {
    // The exporter's masked attention: Where(causal, scores, -inf).
    if (in.size() == 3 && in[0] && in[0]->isConst &&
        classifyMask(node.input(0), in[0]->host) == MaskKind::Boolean &&
        in[1] && !in[1]->isConst && in[2] && in[2]->isConst &&
        in[2]->host.hasData && in[2]->host.numel() == 1 &&
        in[2]->host.getF(0) <= -1e30) {
      Value m = causalMask(in[0]->host.shape);
      if (failed(requireFloat(in[1]->value)))
        return failure();
      if (failed(tg::broadcastShapes(typeOf(in[1]->value).getShape(),
                                     typeOf(m).getShape())))
        return nodeError(node) << "the causal mask " << m.getType()
                               << " does not broadcast with "
                               << in[1]->value.getType(),
               failure();
      return wrap(tg::BinaryOp::create(builder, loc, tg::BinaryKind::add,
                                       in[1]->value, m));
    }
    auto c = need(0), a = need(1), b = need(2);
    if (failed(c) || failed(a) || failed(b) || failed(requireFloat(*a)) ||
        failed(requireFloat(*b)))
      return failure();
    if (!typeOf(*c).getElementType().isInteger(1))
      return nodeError(node) << "condition must be boolean", failure();
    auto ab = tg::broadcastShapes(typeOf(*a).getShape(), typeOf(*b).getShape());
    if (failed(ab) ||
        failed(tg::broadcastShapes(*ab, typeOf(*c).getShape())))
      return nodeError(node) << "shapes " << c->getType() << ", "
                             << a->getType() << " and " << b->getType()
                             << " do not broadcast",
             failure();
    return wrap(tg::SelectOp::create(builder, loc, *c, *a, *b));
  }
  if (op == "IsNaN") {
    auto x = need(0);
    if (failed(x) || failed(requireFloat(*x)))
      return failure();
    return wrap(tg::IsNanOp::create(
        builder, loc,
        RankedTensorType::get(typeOf(*x).getShape(), builder.getI1Type()), *x));
  }
  if (op == "TopK" || op == "NonZero" || op == "ScatterND" ||
      op == "ScatterElements")
    return nodeError(node)
               << "data-dependent routing (" << op
               << " on activations, as in a mixture-of-experts router) is "
                  "recognised but not supported",
           failure();
  if (canEvaluate(op))
    return nodeError(node) << "this op is only supported on data-independent "
                              "values (shapes, "
                              "positions, masks), not on activations",
           failure();
  return nodeError(node) << "unsupported operator", failure();
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

namespace {
/// Protobuf's parser's complaints go to the log, not to the caller; while a
/// LogCapture is alive on this thread they are kept for the diagnostic.
thread_local std::string *protobufLogSink = nullptr;

void protobufLogHandler(google::protobuf::LogLevel level, const char *file,
                        int line, const std::string &message) {
  if (protobufLogSink) {
    if (!protobufLogSink->empty())
      *protobufLogSink += "; ";
    *protobufLogSink += message;
    return;
  }
  static const char *names[] = {"INFO", "WARNING", "ERROR", "FATAL"};
  llvm::errs() << "[libprotobuf " << names[std::clamp<int>(level, 0, 3)] << " "
               << file << ":" << line << "] " << message << "\n";
}

struct LogCapture {
  std::string text;
  LogCapture() {
    static bool installed =
        (google::protobuf::SetLogHandler(protobufLogHandler), true);
    (void)installed;
    protobufLogSink = &text;
  }
  ~LogCapture() { protobufLogSink = nullptr; }
};

/// Protobuf's hard limit on a serialized message (it counts sizes in int).
constexpr uint64_t kMaxProtobufBytes = uint64_t(std::numeric_limits<int>::max());
/// Subgraphs (If/Loop/Scan bodies) nested deeper than this are rejected; the
/// importer supports no control flow, but walking deeper graphs must not
/// exhaust the stack.
constexpr int kMaxGraphDepth = 32;
/// Brackets nested deeper than this in ONNX text are rejected before ONNX's
/// recursive-descent parser sees them.
constexpr int kMaxTextNesting = 128;

std::string describeNode(const onnx::NodeProto &node) {
  std::string who = !node.name().empty() ? "node '" + node.name() + "'"
                    : node.output_size() > 0
                        ? "node producing '" + node.output(0) + "'"
                        : "unnamed node";
  return who + " (op '" + node.op_type() + "')";
}

/// Finds the first subgraph nested deeper than kMaxGraphDepth; `outer` and
/// `inner` name the outermost and the too-deep node holding it.
bool graphTooDeep(const onnx::GraphProto &graph, int depth, std::string &outer,
                  std::string &inner) {
  for (const auto &node : graph.node())
    for (const auto &attr : node.attribute()) {
      SmallVector<const onnx::GraphProto *> subgraphs;
      if (attr.has_g())
        subgraphs.push_back(&attr.g());
      for (const auto &g : attr.graphs())
        subgraphs.push_back(&g);
      for (const onnx::GraphProto *g : subgraphs) {
        std::string here = describeNode(node) + " attribute '" + attr.name() + "'";
        if (depth + 1 > kMaxGraphDepth) {
          inner = here;
          outer = here;
          return true;
        }
        if (graphTooDeep(*g, depth + 1, outer, inner)) {
          outer = here;
          return true;
        }
      }
    }
  return false;
}

/// The deepest bracket nesting of ONNX text, outside string literals and
/// comments, or -1 once it exceeds kMaxTextNesting.
int textNesting(StringRef text) {
  int depth = 0, deepest = 0;
  for (size_t k = 0; k < text.size(); ++k) {
    char c = text[k];
    if (c == '"') {
      for (++k; k < text.size() && text[k] != '"'; ++k)
        if (text[k] == '\\')
          ++k;
    } else if (c == '#') {
      while (k < text.size() && text[k] != '\n')
        ++k;
    } else if (c == '{' || c == '(' || c == '[' || c == '<') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxTextNesting)
        return -1;
    } else if (c == '}' || c == ')' || c == ']' || c == '>') {
      depth = std::max(depth - 1, 0);
    }
  }
  return deepest;
}
} // namespace

OwningOpRef<ModuleOp> rondo::importOnnxBuffer(MLIRContext *ctx,
                                              StringRef contents,
                                              StringRef bufferName,
                                              const ImportOptions &opts) {
  ctx->loadDialect<tg::TGDialect, func::FuncDialect>();
  Location fileLoc = FileLineColLoc::get(ctx, bufferName, 0, 0);
  if (contents.size() > kMaxProtobufBytes) {
    emitError(fileLoc) << "the model is " << contents.size()
                       << " bytes, over protobuf's 2 GB limit ("
                       << kMaxProtobufBytes
                       << " bytes); store the weights as external data";
    return nullptr;
  }
  onnx::ModelProto model;
  // ONNX text starts with '<' (the model header), after '#' comment lines.
  StringRef head = contents.ltrim();
  while (head.starts_with("#"))
    head = head.drop_until([](char c) { return c == '\n'; }).ltrim();
  if (head.starts_with("<")) {
    if (textNesting(contents) < 0) {
      emitError(fileLoc) << "malformed ONNX text: brackets nest more than "
                         << kMaxTextNesting
                         << " levels deep (graph recursion limit)";
      return nullptr;
    }
    LogCapture log;
    std::string text = contents.str();
    onnx::Status status;
    try {
      status = onnx::OnnxParser::Parse(model, text.c_str());
    } catch (const std::exception &e) {
      emitError(fileLoc) << "malformed ONNX text: " << e.what();
      return nullptr;
    } catch (...) {
      emitError(fileLoc) << "malformed ONNX text";
      return nullptr;
    }
    if (!status.IsOK()) {
      emitError(fileLoc) << "malformed ONNX text: " << status.ErrorMessage();
      return nullptr;
    }
  } else {
    LogCapture log;
    google::protobuf::io::ArrayInputStream raw(contents.data(),
                                               int(contents.size()));
    google::protobuf::io::CodedInputStream coded(&raw);
    coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
    // Deep enough for kMaxGraphDepth subgraph levels (three messages each),
    // so that the graph walk below reports them by name.
    coded.SetRecursionLimit(3 * kMaxGraphDepth + 40);
    if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
      auto diag = emitError(fileLoc)
                  << "not a valid ONNX model (protobuf parse failed; the file "
                     "is truncated or not ONNX)";
      if (!log.text.empty())
        diag << ": " << log.text;
      return nullptr;
    }
  }
  if (!model.has_graph() || model.graph().node_size() == 0) {
    emitError(fileLoc) << "the ONNX model has no graph nodes";
    return nullptr;
  }
  std::string outer, inner;
  if (graphTooDeep(model.graph(), 0, outer, inner)) {
    emitError(fileLoc) << "subgraphs nest more than " << kMaxGraphDepth
                       << " levels deep (graph recursion limit): " << outer
                       << " holds a subgraph whose level-" << kMaxGraphDepth
                       << " " << inner << " nests deeper";
    return nullptr;
  }
  Importer importer(ctx, model, bufferName, opts);
  return importer.run();
}

OwningOpRef<ModuleOp> rondo::importOnnxFile(MLIRContext *ctx, StringRef path,
                                            const ImportOptions &opts) {
  uint64_t size;
  if (!llvm::sys::fs::file_size(path, size) && size > kMaxProtobufBytes) {
    emitError(FileLineColLoc::get(ctx, path, 0, 0))
        << "the model is " << size << " bytes, over protobuf's 2 GB limit ("
        << kMaxProtobufBytes << " bytes); store the weights as external data";
    return nullptr;
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(UnknownLoc::get(ctx))
        << "cannot read '" << path << "': " << buffer.getError().message();
    return nullptr;
  }
  return importOnnxBuffer(ctx, (*buffer)->getBuffer(), path, opts);
}
