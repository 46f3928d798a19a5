//===- StageFunctions.cpp - stage functions as kernel calls ---===//
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

#include "Emitter.h"

#include <cmath>

namespace rondo::cpp_emit {

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

/// The fused LM head kernels whose weight gradient has an adding twin
/// (`<kernel>Add` in KernelList.def).
static bool isFusedHeadWithGrad(StringRef kernel) {
  return kernel == "linearCrossEntropyWithGrad" ||
         kernel == "linearCrossEntropyWithGradBf16W";
}

/// The zero `fill` that `call`, a gatherRowsBackward, scatters into, when
/// nothing else reads it (null otherwise).
static kern::CallOp zeroFillInit(kern::CallOp call) {
  if (!call || call.getKernel() != "gatherRowsBackward" ||
      call.getInits().size() != 1)
    return {};
  Value init = call.getInits()[0];
  auto fill = init.getDefiningOp<kern::CallOp>();
  if (!fill || fill.getKernel() != "fill" || !init.hasOneUse() ||
      !fill.getInputs().empty() || !fill.getArgs())
    return {};
  auto value = dyn_cast_or_null<FloatAttr>(fill.getArgsAttr().get("value"));
  return value && value.getValueAsDouble() == 0.0 &&
                 !std::signbit(value.getValueAsDouble())
             ? fill
             : kern::CallOp();
}

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
  // Results computed in their init's buffer alias it (unless they go
  // straight into their gradient slot).
  for (auto [k, init] : llvm::enumerate(call.getInits())) {
    Value r = call.getResult(k);
    if (accumulateInto.count(r))
      continue;
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
    case kern::ParamKind::Bf16Input:
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
    case kern::ParamKind::Bf16Output:
    case kern::ParamKind::IntOutput: {
      Value r = call.getResult(b.result);
      if (auto into = accumulateInto.find(r); into != accumulateInto.end()) {
        exprs[r] =
            llvm::formatv("static_cast<float *>(io[{0}])", into->second).str();
        add(view(r, /*mut=*/true));
        break;
      }
      if (b.skipped) {
        add(llvm::formatv(
                "{0}{{nullptr, {1}}",
                b.param->kind == kern::ParamKind::Bf16Output ? "BView"
                                                             : "FView",
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
      if (b.param->name == "accumulate" && call->getNumResults() == 1 &&
          accumulateInto.count(call.getResult(0))) {
        add("true");
        break;
      }
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
  // An embedding gradient scattered into a zero fill and then added to its
  // slot is added where it lands instead (the same bits).
  std::string kernel = call.getKernel().str();
  if ((kernel == "gatherRowsBackward" &&
       accumulateInto.count(call.getResult(0))) ||
      (isFusedHeadWithGrad(kernel) &&
       accumulateInto.count(call->getResult(call->getNumResults() - 1))))
    kernel += "Add";
  body << "  K::" << kernel << "(" << args << ");\n";
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
    auto role = fn.getArgAttrOfType<StringAttr>(k, exec::kRoleAttr);
    if (role && role.getValue() == "loss_scale") {
      exprs[arg] = "lossScaleValue";
      continue;
    }
    // No launch binds it: an io slot for it would shift every later one.
    if (role && role.getValue() == "param_unbound")
      return fn.emitOpError("still takes the fp32 form of '")
             << fn.getArgAttrOfType<StringAttr>(k, kParamAttr).getValue()
             << "', which the plan holds in bf16 alone; kern-bf16-storage "
                "removes it";
    exprs[arg] = llvm::formatv(
                     "static_cast<{0} *>(io[{1}])",
                     storageType(cast<RankedTensorType>(arg.getType())), slot++)
                     .str();
  }
  Block &block = fn.getBody().front();
  auto ret = cast<func::ReturnOp>(block.getTerminator());
  // On GPUs a weight gradient that one matmul produces is added by that
  // matmul into the gradient buffer (cuBLAS's beta = 1: one fp32 add in its
  // epilogue) rather than written to a temporary that a second kernel adds:
  // the same sum without the extra fp32 pass over every weight gradient of
  // every microbatch. The host keeps the separate add, whose bits the CPU
  // references were taken with (OpenBLAS adds into C per block of K).
  accumulateInto.clear();
  fillsNotEmitted.clear();
  if (opts.target == "cuda") {
    unsigned resultSlot = slot, numPlain = 0;
    for (unsigned k = 0; k < fn.getNumResults(); ++k) {
      auto role = fn.getResultAttrOfType<StringAttr>(k, exec::kRoleAttr);
      numPlain += !(role && role.getValue() == "param_grad");
    }
    unsigned gradSlot = resultSlot + numPlain;
    for (unsigned k = 0; k < fn.getNumResults(); ++k) {
      auto role = fn.getResultAttrOfType<StringAttr>(k, exec::kRoleAttr);
      if (!(role && role.getValue() == "param_grad"))
        continue;
      Value v = ret.getOperand(k);
      auto call = v.getDefiningOp<kern::CallOp>();
      auto accumulate =
          call && call.getArgs()
              ? dyn_cast_or_null<BoolAttr>(call.getArgsAttr().get("accumulate"))
              : BoolAttr();
      if (call &&
          (call.getKernel() == "matmul" || call.getKernel() == "matmulBf16") &&
          call.getInits().empty() && call->getNumResults() == 1 &&
          v.hasOneUse() && accumulate && !accumulate.getValue())
        accumulateInto[v] = gradSlot;
      // The fused LM head's weight gradient (its last result) is added by
      // its products into the slot as well (linearCrossEntropyWithGrad*Add:
      // the first one's beta is 1 too), where a temporary and an accumulate
      // pass moved 3 x 1.24 GB a microbatch at W1's [151936, 2048] head.
      if (call && isFusedHeadWithGrad(call.getKernel()) &&
          call.getInits().empty() &&
          v == call->getResult(call->getNumResults() - 1) && v.hasOneUse())
        accumulateInto[v] = gradSlot;
      // gatherRowsBackward into a zero fill nothing else reads: the
      // scatter adds each touched row's sum to the slot
      // (gatherRowsBackwardAdd), without the fill and the pass over the
      // whole table that would add it.
      if (kern::CallOp fill = zeroFillInit(call);
          fill && v.hasOneUse() && call->getNumResults() == 1) {
        accumulateInto[v] = gradSlot;
        fillsNotEmitted.insert(fill);
      }
      ++gradSlot;
    }
  }
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (fillsNotEmitted.contains(op))
      continue;
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
    auto role = fn.getResultAttrOfType<StringAttr>(k, exec::kRoleAttr);
    (role && role.getValue() == "param_grad" ? grads : plain).push_back(k);
  }
  for (unsigned k : plain) {
    Value v = ret.getOperand(k);
    auto t = cast<RankedTensorType>(v.getType());
    int64_t bytes = t.getNumElements() * (t.getElementType().isInteger() ? 8
                                          : t.getElementType().isBF16()  ? 2
                                                                         : 4);
    body << llvm::formatv("  copyOut(io[{0}], {1}, {2});\n", slot++, ptr(v),
                          bytes);
  }
  for (unsigned k : grads) {
    Value v = ret.getOperand(k);
    if (accumulateInto.count(v)) { // its matmul added it already
      ++slot;
      continue;
    }
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

} // namespace rondo::cpp_emit
