//===- TrainerEmitter.cpp - tg training function to C++ ---------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// A direct printer: every tg op becomes exactly one call into
// runtime/kernels/cpu/Kernels.h, so the generated step can be read side by
// side with `--emit=train`. Buffers are std::vectors freed after their last
// use; reshapes alias their operand's buffer.
//
//===----------------------------------------------------------------------===//

#include "rondo/Target/Cpp/TrainerEmitter.h"

#include "TG/IR/TGOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace rondo;
using namespace rondo::tg;

namespace {

const char *unaryName(UnaryKind k) {
  switch (k) {
  case UnaryKind::neg:
    return "Neg";
  case UnaryKind::exp:
    return "Exp";
  case UnaryKind::log:
    return "Log";
  case UnaryKind::sqrt:
    return "Sqrt";
  case UnaryKind::rsqrt:
    return "Rsqrt";
  case UnaryKind::reciprocal:
    return "Reciprocal";
  case UnaryKind::sigmoid:
    return "Sigmoid";
  case UnaryKind::tanh:
    return "Tanh";
  case UnaryKind::relu:
    return "Relu";
  case UnaryKind::silu:
    return "Silu";
  case UnaryKind::gelu_tanh:
    return "GeluTanh";
  case UnaryKind::gelu_erf:
    return "GeluErf";
  case UnaryKind::abs:
    return "Abs";
  case UnaryKind::sin:
    return "Sin";
  case UnaryKind::cos:
    return "Cos";
  }
  return "?";
}

const char *binaryName(BinaryKind k) {
  switch (k) {
  case BinaryKind::add:
    return "Add";
  case BinaryKind::sub:
    return "Sub";
  case BinaryKind::mul:
    return "Mul";
  case BinaryKind::div:
    return "Div";
  case BinaryKind::pow:
    return "Pow";
  case BinaryKind::max:
    return "Max";
  case BinaryKind::min:
    return "Min";
  }
  return "?";
}

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
  LogicalResult emitOp(Operation *op);
  std::string ptr(Value v) { return exprs.lookup(v); }
  std::string view(Value v, bool mut = false) {
    auto t = cast<RankedTensorType>(v.getType());
    const char *kind = t.getElementType().isInteger(64) ? "IView"
                       : mut                            ? "FView"
                                                        : "CFView";
    return llvm::formatv("{0}{{{1}, {2}}", kind, ptr(v),
                         shapeList(t.getShape()))
        .str();
  }
  std::string newBuffer(Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    std::string name = "v" + std::to_string(counter++);
    const char *elem = t.getElementType().isInteger(64) ? "int64_t" : "float";
    body << llvm::formatv("  std::vector<{0}> {1}({2});\n", elem, name,
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

  ModuleOp module;
  raw_ostream &os;
  TrainerEmitOptions opts;
  std::string globals;
  llvm::raw_string_ostream globalsOs{globals};
  std::string bodyText;
  llvm::raw_string_ostream body{bodyText};
  llvm::DenseMap<Value, std::string> exprs;
  llvm::DenseMap<Value, std::string> roots; ///< owning buffer of a value
  unsigned counter = 0;
};

LogicalResult Emitter::emitOp(Operation *op) {
  auto out = [&](unsigned k = 0) {
    newBuffer(op->getResult(k));
    return view(op->getResult(k), /*mut=*/true);
  };
  if (auto c = dyn_cast<ConstantOp>(op)) {
    auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
    auto t = cast<RankedTensorType>(c.getType());
    if (!dense)
      return op->emitError("the C++ emitter needs dense constants");
    if (t.getElementType().isF32()) {
      if (dense.isSplat()) {
        std::string name = newBuffer(c);
        body << llvm::formatv("  std::fill({0}.begin(), {0}.end(), {1});\n",
                              name, floatLiteral(dense.getSplatValue<float>()));
        return success();
      }
      std::string name = "c" + std::to_string(counter++);
      globalsOs << "static const float " << name << "[] = {";
      for (auto [k, f] : llvm::enumerate(dense.getValues<float>()))
        globalsOs << (k ? "," : "") << (k % 8 == 0 ? "\n    " : " ")
                  << floatLiteral(f);
      globalsOs << "};\n";
      exprs[c] = name;
      return success();
    }
    if (t.getElementType().isInteger(64)) {
      std::string name = "c" + std::to_string(counter++);
      globalsOs << "static const int64_t " << name << "[] = {";
      for (auto [k, v] : llvm::enumerate(dense.getValues<int64_t>()))
        globalsOs << (k ? ", " : "") << v;
      globalsOs << "};\n";
      exprs[c] = name;
      return success();
    }
    return op->emitError(
               "the C++ emitter has no storage for constants of type ")
           << t;
  }
  if (auto r = dyn_cast<ReshapeOp>(op)) {
    exprs[r] = ptr(r.getX());
    if (roots.count(r.getX()))
      roots[r] = roots[r.getX()];
    return success();
  }
  if (auto u = dyn_cast<UnaryOp>(op)) {
    body << llvm::formatv("  unary(UnaryKind::{0}, {1}, {2});\n",
                          unaryName(u.getKind()), view(u.getX()), out());
    return success();
  }
  if (auto g = dyn_cast<GatedActOp>(op)) {
    auto t = cast<RankedTensorType>(g.getType());
    std::string o = out();
    body << llvm::formatv(
        "  {{ std::vector<float> act({0});\n"
        "    unary(UnaryKind::{1}, {2}, FView{{act.data(), {3}});\n"
        "    binary(BinaryKind::Mul, CFView{{act.data(), {3}}, {4}, {5}); }\n",
        t.getNumElements(), unaryName(g.getAct()), view(g.getGate()),
        shapeList(t.getShape()), view(g.getUp()), o);
    return success();
  }
  if (auto b = dyn_cast<BinaryOp>(op)) {
    body << llvm::formatv("  binary(BinaryKind::{0}, {1}, {2}, {3});\n",
                          binaryName(b.getKind()), view(b.getLhs()),
                          view(b.getRhs()), out());
    return success();
  }
  if (auto m = dyn_cast<MatmulOp>(op)) {
    body << llvm::formatv("  matmul({0}, {1}, {2}, {3}, {4});\n",
                          view(m.getA()), view(m.getB()), out(),
                          m.getTransposeA() ? "true" : "false",
                          m.getTransposeB() ? "true" : "false");
    return success();
  }
  if (auto r = dyn_cast<ReduceOp>(op)) {
    auto xt = cast<RankedTensorType>(r.getX().getType());
    SmallVector<int64_t> kept(xt.getShape());
    double count = 1;
    for (int64_t a : r.getAxes()) {
      int64_t axis = a < 0 ? a + xt.getRank() : a;
      count *= kept[axis];
      kept[axis] = 1;
    }
    newBuffer(r);
    std::string keptView =
        llvm::formatv("FView{{{0}, {1}}", ptr(r), shapeList(kept)).str();
    body << llvm::formatv("  sumToShape({0}, {1});\n", view(r.getX()),
                          keptView);
    if (r.getKind() == ReduceKind::mean)
      body << llvm::formatv("  scale(CFView{{{0}, {1}}, {2}, {3});\n", ptr(r),
                            shapeList(kept), floatLiteral(float(1.0 / count)),
                            keptView);
    return success();
  }
  if (auto t = dyn_cast<TransposeOp>(op)) {
    std::string perm = ints(t.getPerm());
    body << llvm::formatv("  transpose({0}, {1}, {2});\n", view(t.getX()), perm,
                          out());
    return success();
  }
  if (auto b = dyn_cast<BroadcastOp>(op)) {
    body << llvm::formatv("  broadcastTo({0}, {1});\n", view(b.getX()), out());
    return success();
  }
  if (auto s = dyn_cast<SumToShapeOp>(op)) {
    body << llvm::formatv("  sumToShape({0}, {1});\n", view(s.getX()), out());
    return success();
  }
  if (auto s = dyn_cast<SliceOp>(op)) {
    std::string st = ints(s.getStarts()), sp = ints(s.getSteps());
    if (cast<RankedTensorType>(s.getType()).getElementType().isInteger(64)) {
      // Integer slices (labels) are strided copies done inline.
      auto xt = cast<RankedTensorType>(s.getX().getType());
      auto rt = cast<RankedTensorType>(s.getType());
      newBuffer(s);
      body << llvm::formatv("  sliceInts({0}, {1}, {2}, {3}, {4}, {5}, {6});\n",
                            ptr(s.getX()), ints(xt.getShape()), ptr(s),
                            ints(rt.getShape()), xt.getRank(), st, sp);
      return success();
    }
    body << llvm::formatv("  slice({0}, {1}, {2}, {3});\n", view(s.getX()), st,
                          sp, out());
    return success();
  }
  if (auto s = dyn_cast<SliceGradOp>(op)) {
    std::string st = ints(s.getStarts()), sp = ints(s.getSteps());
    body << llvm::formatv("  sliceBackward({0}, {1}, {2}, {3});\n",
                          view(s.getDy()), st, sp, out());
    return success();
  }
  if (auto c = dyn_cast<ConcatOp>(op)) {
    std::string arr = "in" + std::to_string(counter++);
    body << "  CFView " << arr << "[] = {";
    for (auto [k, v] : llvm::enumerate(c.getInputs()))
      body << (k ? ", " : "") << view(v);
    int64_t rank = cast<RankedTensorType>(c.getType()).getRank();
    int64_t axis = static_cast<int64_t>(c.getAxis());
    body << "};\n";
    body << llvm::formatv("  concat({0}, {1}, {2}, {3});\n", arr,
                          c.getInputs().size(), axis < 0 ? axis + rank : axis,
                          out());
    return success();
  }
  if (auto g = dyn_cast<GatherOp>(op)) {
    body << llvm::formatv("  gatherRows({0}, {1}, {2});\n", view(g.getTable()),
                          view(g.getIds()), out());
    return success();
  }
  if (auto g = dyn_cast<GatherGradOp>(op)) {
    std::string o = out();
    body << llvm::formatv(
        "  fill({0}, 0.0f);\n  gatherRowsBackward({1}, {2}, {0});\n", o,
        view(g.getIds()), view(g.getDy()));
    return success();
  }
  if (auto s = dyn_cast<SoftmaxOp>(op)) {
    body << llvm::formatv("  softmax({0}, {1});\n", view(s.getX()), out());
    return success();
  }
  if (auto s = dyn_cast<SoftmaxGradOp>(op)) {
    body << llvm::formatv("  softmaxBackward({0}, {1}, {2});\n", view(s.getY()),
                          view(s.getDy()), out());
    return success();
  }
  if (auto m = dyn_cast<CausalMaskOp>(op)) {
    auto t = cast<RankedTensorType>(m.getType());
    std::string name = newBuffer(m);
    int64_t rows = t.getShape()[t.getRank() - 2], cols = t.getShape().back();
    body << llvm::formatv("  causalMask({0}.data(), {1}, {2}, {3});\n", name,
                          t.getNumElements() / (rows * cols), rows, cols);
    return success();
  }
  if (auto n = dyn_cast<RmsNormOp>(op)) {
    body << llvm::formatv("  rmsNorm({0}, {1}, {2}, {3});\n", view(n.getX()),
                          view(n.getW()),
                          floatLiteral(n.getEps().convertToFloat()), out());
    return success();
  }
  if (auto n = dyn_cast<RmsNormGradOp>(op)) {
    std::string dx = out(0), dw = out(1);
    body << llvm::formatv("  rmsNormBackward({0}, {1}, {2}, {3}, {4}, {5});\n",
                          view(n.getX()), view(n.getW()),
                          floatLiteral(n.getEps().convertToFloat()),
                          view(n.getDy()), dx, dw);
    return success();
  }
  if (auto n = dyn_cast<LayerNormOp>(op)) {
    body << llvm::formatv("  layerNorm({0}, {1}, {2}, {3}, {4});\n",
                          view(n.getX()), view(n.getW()), view(n.getB()),
                          floatLiteral(n.getEps().convertToFloat()), out());
    return success();
  }
  if (auto n = dyn_cast<LayerNormGradOp>(op)) {
    std::string dx = out(0), dw = out(1), db = out(2);
    body << llvm::formatv(
        "  layerNormBackward({0}, {1}, {2}, {3}, {4}, {5}, {6});\n",
        view(n.getX()), view(n.getW()),
        floatLiteral(n.getEps().convertToFloat()), view(n.getDy()), dx, dw, db);
    return success();
  }
  if (auto r = dyn_cast<RotaryOp>(op)) {
    body << llvm::formatv("  rotary({0}, {1}, {2}, {3});\n", view(r.getX()),
                          view(r.getCos()), view(r.getSin()), out());
    return success();
  }
  if (auto r = dyn_cast<RotaryGradOp>(op)) {
    body << llvm::formatv("  rotaryBackward({0}, {1}, {2}, {3});\n",
                          view(r.getDy()), view(r.getCos()), view(r.getSin()),
                          out());
    return success();
  }
  if (auto a = dyn_cast<AttentionOp>(op)) {
    std::string o = out(0), lse = out(1);
    body << llvm::formatv("  attention({0}, {1}, {2}, {3}, {4}, {5}, {6});\n",
                          view(a.getQ()), view(a.getK()), view(a.getV()),
                          a.getCausal() ? "true" : "false",
                          floatLiteral(a.getScale().convertToFloat()), o, lse);
    return success();
  }
  if (auto a = dyn_cast<AttentionGradOp>(op)) {
    std::string dq = out(0), dk = out(1), dv = out(2);
    body << llvm::formatv(
        "  attentionBackward({0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, "
        "{10});\n",
        view(a.getQ()), view(a.getK()), view(a.getV()), view(a.getOut()),
        view(a.getLse()), view(a.getDout()), a.getCausal() ? "true" : "false",
        floatLiteral(a.getScale().convertToFloat()), dq, dk, dv);
    return success();
  }
  if (auto c = dyn_cast<CrossEntropyOp>(op)) {
    std::string name = newBuffer(c);
    body << llvm::formatv(
        "  {{ double sum = 0; int64_t count = 0;\n"
        "    if (!crossEntropy({0}, {1}, {2}, &sum, &count)) labelError();\n"
        "    {3}[0] = float(sum); }\n",
        view(c.getLogits()), view(c.getLabels()),
        static_cast<int64_t>(c.getIgnoreIndex()), name);
    return success();
  }
  if (auto c = dyn_cast<CrossEntropyGradOp>(op)) {
    body << llvm::formatv(
        "  crossEntropyBackward({0}, {1}, {2}, {3}[0], {4});\n",
        view(c.getLogits()), view(c.getLabels()),
        static_cast<int64_t>(c.getIgnoreIndex()), ptr(c.getDloss()), out());
    return success();
  }
  if (auto c = dyn_cast<LinearCrossEntropyOp>(op)) {
    std::string name = newBuffer(c);
    body << llvm::formatv(
        "  {{ double sum = 0; int64_t count = 0;\n"
        "    if (!linearCrossEntropy({0}, {1}, {2}, {3}, {4}, {5}, &sum, "
        "&count)) labelError();\n"
        "    {6}[0] = float(sum); }\n",
        view(c.getH()), view(c.getW()), c.getTransposeW() ? "true" : "false",
        view(c.getLabels()), static_cast<int64_t>(c.getIgnoreIndex()),
        static_cast<int64_t>(c.getChunkRows()), name);
    return success();
  }
  if (auto c = dyn_cast<LinearCrossEntropyGradOp>(op)) {
    std::string dh = out(0), dw = out(1);
    body << llvm::formatv(
        "  linearCrossEntropyBackward({0}, {1}, {2}, {3}, {4}, {5}, {6}[0], "
        "{7}, {8});\n",
        view(c.getH()), view(c.getW()), c.getTransposeW() ? "true" : "false",
        view(c.getLabels()), static_cast<int64_t>(c.getIgnoreIndex()),
        static_cast<int64_t>(c.getChunkRows()), ptr(c.getDloss()), dh, dw);
    return success();
  }
  if (auto u = dyn_cast<UnaryGradOp>(op)) {
    body << llvm::formatv("  unaryBackward(UnaryKind::{0}, {1}, {2}, {3});\n",
                          unaryName(u.getKind()), view(u.getX()),
                          view(u.getDy()), out());
    return success();
  }
  if (auto b = dyn_cast<BinaryGradOp>(op)) {
    std::string dl = out(0), dr = out(1);
    body << llvm::formatv(
        "  binaryBackward(BinaryKind::{0}, {1}, {2}, {3}, {4}, {5});\n",
        binaryName(b.getKind()), view(b.getLhs()), view(b.getRhs()),
        view(b.getDy()), dl, dr);
    return success();
  }
  return op->emitError("the host C++ emitter has no kernel for '")
         << op->getName() << "'; it should have been rewritten away";
}

LogicalResult Emitter::run() {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    return module.emitError("no @main function to emit");
  if (func.getNumResults() == 0 || !func.getResultAttr(0, kResultNameAttr))
    return func.emitError(
        "emit a differentiated training function (run the train phase)");
  Block &block = func.getBody().front();

  // Arguments: parameters, token ids, labels, loss scale.
  struct ParamInfo {
    std::string name, torchName;
    SmallVector<int64_t> dims;
    bool trainable;
  };
  SmallVector<ParamInfo> params;
  llvm::StringMap<unsigned> paramSlot;
  std::string inputName;
  int64_t batch = 0, seq = 0, vocab = 0;
  for (unsigned k = 0; k < func.getNumArguments(); ++k) {
    Value arg = func.getArgument(k);
    auto t = cast<RankedTensorType>(arg.getType());
    if (auto name = func.getArgAttrOfType<StringAttr>(k, kParamAttr)) {
      auto torch = func.getArgAttrOfType<StringAttr>(k, kTorchNameAttr);
      paramSlot[name.getValue()] = params.size();
      exprs[arg] = llvm::formatv("args.params[{0}]", params.size()).str();
      params.push_back({name.str(), torch ? torch.str() : "",
                        SmallVector<int64_t>(t.getShape()),
                        func.getArgAttr(k, kTrainableAttr) != nullptr});
    } else if (auto in = func.getArgAttrOfType<StringAttr>(k, kInputAttr)) {
      if (!t.getElementType().isInteger(64) || t.getRank() != 2)
        return func.emitError(
                   "the trainer takes one int64 [batch, seq] token input; '")
               << in.getValue() << "' is " << t;
      inputName = in.str();
      batch = t.getDimSize(0);
      seq = t.getDimSize(1);
      exprs[arg] = "args.inputIds";
    } else if (func.getArgAttr(k, kLabelsAttr)) {
      exprs[arg] = "args.labels";
    } else if (func.getArgAttr(k, kLossScaleAttr)) {
      exprs[arg] = "lossScale";
    } else {
      return func.emitError("argument ")
             << k << " has no role the trainer can supply";
    }
  }
  if (inputName.empty())
    return func.emitError("the training function has no token input");
  func.walk([&](GatherOp g) {
    if (exprs.lookup(g.getIds()) == "args.inputIds")
      vocab = cast<RankedTensorType>(g.getTable().getType()).getDimSize(0);
  });

  // Last use of each buffer, to free activations as soon as possible.
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (failed(emitOp(op)))
      return failure();
    // Free buffers whose values have no later user.
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
        body << "  std::vector<"
             << (cast<RankedTensorType>(operand.getType())
                         .getElementType()
                         .isInteger(64)
                     ? "int64_t"
                     : "float")
             << ">().swap(" << name << ");\n";
        for (auto &entry : roots)
          if (entry.second == name)
            entry.second.clear();
      }
    }
  }
  for (unsigned k = 1; k < ret.getNumOperands(); ++k) {
    auto of = func.getResultAttrOfType<StringAttr>(k, "tg.grad_of");
    if (!of || !paramSlot.count(of.getValue()))
      return func.emitError("result ")
             << k << " is not the gradient of a parameter";
    Value g = ret.getOperand(k);
    auto t = cast<RankedTensorType>(g.getType());
    body << llvm::formatv("  accumulate({0}, FView{{args.grads[{1}], {2}});\n",
                          view(g), paramSlot[of.getValue()],
                          shapeList(t.getShape()));
  }
  auto lossKind = module->getAttrOfType<StringAttr>("tg.loss");
  bool causal = !lossKind || lossKind.getValue() == "causal-lm";

  os << "// Generated by rondo-compile from " << opts.modelPath
     << ". Do not edit.\n"
     << "// One call per tg op of the training function (rondo-compile "
        "--emit=train).\n"
     << "#include \"Kernels.h\"\n#include \"rondo/runtime/Trainer.h\"\n\n"
     << "#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include "
        "<cstdlib>\n"
     << "#include <vector>\n\n"
     << "namespace {\nusing namespace rondo::cpu;\n\n"
     << "[[noreturn]] void labelError() {\n"
     << "  std::fprintf(stderr, \"error: a label is outside the "
        "vocabulary\\n\");\n"
     << "  std::exit(1);\n}\n\n"
     << "void causalMask(float *out, int64_t outer, int64_t rows, int64_t "
        "cols) {\n"
     << "  for (int64_t o = 0; o < outer; ++o)\n"
     << "    for (int64_t i = 0; i < rows; ++i)\n"
     << "      for (int64_t j = 0; j < cols; ++j)\n"
     << "        out[(o * rows + i) * cols + j] = j <= i + (cols - rows) ? "
        "0.0f : -INFINITY;\n"
     << "}\n\n"
     << "void sliceInts(const int64_t *x, const int64_t *xShape, int64_t "
        "*out,\n"
     << "               const int64_t *outShape, int rank, const int64_t "
        "*starts,\n"
     << "               const int64_t *steps) {\n"
     << "  int64_t n = 1;\n  for (int d = 0; d < rank; ++d) n *= outShape[d];\n"
     << "  for (int64_t k = 0; k < n; ++k) {\n"
     << "    int64_t rem = k, src = 0, stride = 1;\n"
     << "    for (int d = rank - 1; d >= 0; --d) {\n"
     << "      int64_t idx = rem % outShape[d];\n      rem /= outShape[d];\n"
     << "      src += (starts[d] + idx * steps[d]) * stride;\n      stride *= "
        "xShape[d];\n"
     << "    }\n    out[k] = x[src];\n  }\n}\n\n"
     << globals << "\n"
     << "rondo::rt::StepResult step(const rondo::rt::StepArgs &args) {\n"
     << "  const float lossScale[1] = {args.lossScale};\n"
     << bodyText << "  rondo::rt::StepResult result;\n"
     << "  result.lossSum = " << ptr(ret.getOperand(0)) << "[0];\n";
  if (causal)
    os << "  result.lossCount = 0;\n"
       << llvm::formatv(
              "  for (int64_t b = 0; b < {0}; ++b)\n"
              "    for (int64_t t = 1; t < {1}; ++t)\n"
              "      result.lossCount += args.labels[b * {1} + t] != -100;\n",
              batch, seq);
  else
    os << "  result.lossCount = 1;\n";
  os << "  return result;\n}\n\n";
  os << "const rondo::rt::ParamSpec kParams[] = {\n";
  for (const ParamInfo &p : params) {
    os << "    {\"" << p.name << "\", \"" << p.torchName << "\", "
       << p.dims.size() << ", {";
    for (auto [k, d] : llvm::enumerate(p.dims))
      os << (k ? ", " : "") << d;
    os << "}, " << (p.trainable ? "true" : "false") << "},\n";
  }
  os << "};\n\n";
  std::string modelPath = opts.modelPath;
  os << "const rondo::rt::ModelSpec kModel = {\n"
     << "    \"" << llvm::StringRef(modelPath) << "\", \"" << inputName
     << "\", " << batch << ", " << seq << ", " << vocab << ",\n"
     << "    rondo::rt::LossKind::" << (causal ? "CausalLM" : "GraphOutput")
     << ", kParams, " << params.size() << "};\n"
     << "} // namespace\n\n"
     << "int main(int argc, char **argv) {\n"
     << "  return rondo::rt::trainerMain(argc, argv, kModel, step);\n}\n";
  return success();
}
} // namespace

LogicalResult rondo::emitTrainerCpp(ModuleOp module, raw_ostream &os,
                                    const TrainerEmitOptions &options) {
  Emitter emitter(module, os, options);
  return emitter.run();
}
