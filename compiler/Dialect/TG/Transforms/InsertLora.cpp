//===- InsertLora.cpp - tg-insert-lora --------------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// LoRA (Hu et al., 2021) as a rewrite of the training function: every
// targeted linear `y = x·W` becomes `y = x·W + (alpha/r)·((x·A)·B)` with two
// new parameter arguments, A [in, r] and B [r, out], and from then on only
// adapters are trainable (tg-select-trainable). The rewrite runs before
// tg-autodiff, so a frozen base weight costs no gradient work: the backward
// of `x·W` builds only dx, and nothing downloads or updates W.
//
// A and B are defined on the product as the graph computes it (`in` is the
// contraction dimension), whatever layout the weight is stored in: the
// fixtures' exporter pre-transposes linear weights to [in, out], a tied head
// reads [out, in] through `transpose_b`. `tg.lora_base_transposed` on the
// adapters records the second case, which only matters when merging.
//
// The fused LM head (tg.linear_cross_entropy) never materialises its
// output, so there the adapter is merged into the weight it reads,
// `W + (alpha/r)·A·B`: the same function and the same gradients, at the cost
// of one [in, out] product per stage call instead of two thin ones per row.
//
// Mixture-of-experts weights W [E, d1, d2] (read by tg.expert_matmul) get
// one adapter pair per expert, stacked: A [E, d1, r] and B [E, r, d2], with
// W_e + (alpha/r)·A_e·B_e defined on the stored layout as PEFT's ParamWrapper
// defines it (its `target_parameters`). The low-rank path runs through the
// routed rows themselves, two more tg.expert_matmul with the same routing
// ids, so no per-expert merged weight and no per-row copy of one exists.
//
//===----------------------------------------------------------------------===//

#include "Dialect/TG/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Regex.h"

#include <cmath>

namespace rondo::tg {
#define GEN_PASS_DEF_TGINSERTLORAPASS
#include "Dialect/TG/Transforms/Passes.h.inc"
} // namespace rondo::tg

using namespace mlir;
using namespace rondo::tg;

namespace {

/// The roles a linear plays in a decoder block, found from the graph, so
/// that targets do not depend on how the exporter named the weights.
enum Role : unsigned {
  kQ = 1u << 0,
  kK = 1u << 1,
  kV = 1u << 2,
  kO = 1u << 3,
  kGate = 1u << 4,
  kUp = 1u << 5,
  kDown = 1u << 6,
  /// Every expert projection of a mixture of experts (its gate/up or down
  /// role as well), and the router's linear.
  kExperts = 1u << 7,
  kRouter = 1u << 8,
  kAttn = kQ | kK | kV | kO,
  kMlp = kGate | kUp | kDown,
  kAllLinear = kAttn | kMlp,
};

struct RoleName {
  llvm::StringLiteral name;
  unsigned roles;
};
constexpr RoleName kRoleNames[] = {
    {"q", kQ},
    {"k", kK},
    {"v", kV},
    {"o", kO},
    {"gate", kGate},
    {"up", kUp},
    {"down", kDown},
    {"attn", kAttn},
    {"mlp", kMlp},
    {"all-linear", kAllLinear},
    {"experts", kExperts},
    {"router", kRouter},
};

/// `targets` as roles joined by '+' (q+v, attn+down, all-linear); nullopt
/// when it is not such a list, i.e. a regular expression.
std::optional<unsigned> parseRoles(StringRef targets) {
  SmallVector<StringRef> items;
  targets.split(items, '+');
  unsigned roles = 0;
  for (StringRef item : items) {
    const RoleName *it = llvm::find_if(
        kRoleNames, [&](const RoleName &r) { return r.name == item; });
    if (it == std::end(kRoleNames))
      return std::nullopt;
    roles |= it->roles;
  }
  return roles;
}

std::string describeRoles(unsigned roles) {
  std::string s;
  for (const RoleName &r : kRoleNames)
    if (llvm::has_single_bit(r.roles) && (roles & r.roles))
      s += (s.empty() ? "" : "+") + r.name.str();
  return s;
}

bool isActivation(UnaryOp op) {
  switch (op.getKind()) {
  case UnaryKind::relu:
  case UnaryKind::silu:
  case UnaryKind::gelu_tanh:
  case UnaryKind::gelu_erf:
    return true;
  default:
    return false;
  }
}

/// Whether `v` is a parameter, possibly reshaped or broadcast (a bias).
bool isParameterLike(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<ReshapeOp, BroadcastOp>(def))
      return false;
    v = def->getOperand(0);
  }
  auto arg = cast<BlockArgument>(v);
  auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
  return func && func.getArgAttr(arg.getArgNumber(), kParamAttr);
}

/// `v` before any reshape or transpose.
Value throughLayout(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<ReshapeOp, TransposeOp>(def))
      break;
    v = def->getOperand(0);
  }
  return v;
}

/// Whether `v` (through reshapes and transposes) is the left operand of a
/// matmul: an activation between two linears.
bool feedsLinear(Value v) {
  SmallVector<Value> work{v};
  while (!work.empty()) {
    Value cur = work.pop_back_val();
    for (OpOperand &use : cur.getUses()) {
      Operation *user = use.getOwner();
      if (isa<MatmulOp>(user) && use.getOperandNumber() == 0)
        return true;
      if (isa<ReshapeOp, TransposeOp>(user))
        work.push_back(user->getResult(0));
    }
  }
  return false;
}

/// Whether `v` is `x * table` with a rotary cos/sin table.
bool isRotaryProduct(Value v) {
  auto mul = v.getDefiningOp<BinaryOp>();
  return mul && mul.getKind() == BinaryKind::mul &&
         (mul.getLhs().getDefiningOp<RotaryTableOp>() ||
          mul.getRhs().getDefiningOp<RotaryTableOp>());
}

/// Whether operand `n` of `op` is part of a rotary embedding left unfused
/// (GPT-OSS's): a product with a cos/sin table, or the sum or difference of
/// two such products, which the halves are concatenated from afterwards.
bool isUnfusedRotary(Operation *op, unsigned n) {
  auto bin = dyn_cast<BinaryOp>(op);
  if (!bin)
    return false;
  if (bin.getKind() == BinaryKind::mul)
    return isRotaryProduct(bin.getResult());
  return (bin.getKind() == BinaryKind::add ||
          bin.getKind() == BinaryKind::sub) &&
         isRotaryProduct(op->getOperand(n)) &&
         isRotaryProduct(op->getOperand(1 - n));
}

/// The roles of the linear whose output is `result`: where the output goes
/// (attention q/k/v, the gate or up input of a gated MLP, an activation
/// before another linear) through ops that only move, split, normalise or
/// rotate it, or add a bias.
unsigned outputRoles(Value result) {
  unsigned roles = 0;
  SmallVector<Value> work{result};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      unsigned n = use.getOperandNumber();
      if (isa<AttentionOp>(user)) {
        // Operand 3, the sinks, is no projection's output.
        roles |= n == 0 ? kQ : n == 1 ? kK : n == 2 ? kV : 0u;
      } else if (isa<GatedActOp>(user)) {
        roles |= n == 0 ? kGate : kUp;
      } else if (isa<TopKOp>(user)) {
        // A router: its logits (or their softmax) choose the experts.
        roles |= kRouter;
      } else if (isa<SoftmaxOp>(user)) {
        work.push_back(user->getResult(0));
      } else if (auto u = dyn_cast<UnaryOp>(user)) {
        if (isActivation(u) && feedsLinear(u.getResult()))
          roles |= kUp;
      } else if (isa<ReshapeOp, TransposeOp, SliceOp, BroadcastOp>(user) ||
                 (isa<RmsNormOp, LayerNormOp, RotaryOp>(user) && n == 0)) {
        work.push_back(user->getResult(0));
      } else if (isa<ConcatOp>(user) || isUnfusedRotary(user, n)) {
        work.push_back(user->getResult(0));
      } else if (auto add = dyn_cast<BinaryOp>(user)) {
        if (add.getKind() == BinaryKind::add &&
            isParameterLike(user->getOperand(1 - n)))
          work.push_back(add.getResult());
      }
    }
  }
  return roles;
}

/// The roles of a linear reading `input`: the attention output (o), or the
/// gated or plain activation of an MLP (down).
unsigned inputRoles(Value input) {
  Value v = throughLayout(input);
  if (auto attn = v.getDefiningOp<AttentionOp>())
    return v == attn.getOut() ? unsigned(kO) : 0u;
  if (v.getDefiningOp<GatedActOp>())
    return kDown;
  if (auto u = v.getDefiningOp<UnaryOp>()) {
    Value x = u.getX();
    if (auto add = x.getDefiningOp<BinaryOp>())
      if (add.getKind() == BinaryKind::add)
        x = isParameterLike(add.getRhs()) ? add.getLhs() : add.getRhs();
    if (isActivation(u) && throughLayout(x).getDefiningOp<MatmulOp>())
      return kDown;
  }
  return 0;
}

/// The roles of an expert projection: down when its rows are computed from
/// another product with the same routing (the expert's activation), else
/// gate/up (it reads the routed hidden state). The walk back from the input
/// stops at ops before the block's first product of these ids, so it stays
/// inside one mixture-of-experts block.
unsigned expertRoles(ExpertMatmulOp mm) {
  SmallVector<ExpertMatmulOp> same;
  for (Operation *user : mm.getIds().getUsers())
    if (auto other = dyn_cast<ExpertMatmulOp>(user);
        other && other != mm && other.getIds() == mm.getIds())
      same.push_back(other);
  Operation *first = mm;
  for (ExpertMatmulOp other : same)
    if (other->getBlock() == first->getBlock() && other->isBeforeInBlock(first))
      first = other;
  SmallVector<Value> work{mm.getX()};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || def->getBlock() != first->getBlock() ||
        def->isBeforeInBlock(first) || !seen.insert(def).second)
      continue;
    if (llvm::is_contained(same, dyn_cast<ExpertMatmulOp>(def)))
      return kExperts | kDown;
    llvm::append_range(work, def->getOperands());
  }
  return kExperts | kGate | kUp;
}

/// One place a parameter is read as the weight of a linear.
struct LinearUse {
  Operation *op;    ///< tg.matmul, tg.linear_cross_entropy, tg.expert_matmul.
  int64_t in, out;  ///< Of the product the op computes.
  bool storedOutIn; ///< The parameter itself is [out, in] ([E, out, in]).
  bool experts = false; ///< A routed product (tg.expert_matmul).
};

/// The linear uses of `param`, directly or through a 2-D transpose; the
/// first other use goes to `other`.
SmallVector<LinearUse> linearUses(BlockArgument param, Operation *&other) {
  SmallVector<LinearUse> uses;
  other = nullptr;
  auto visit = [&](Value w, bool flipped, auto &self) -> void {
    for (OpOperand &use : w.getUses()) {
      Operation *user = use.getOwner();
      auto wt = cast<RankedTensorType>(w.getType());
      if (auto mm = dyn_cast<MatmulOp>(user);
          mm && use.getOperandNumber() == 1 && wt.getRank() == 2) {
        bool tb = mm.getTransposeB();
        uses.push_back({user, wt.getDimSize(tb ? 1 : 0),
                        wt.getDimSize(tb ? 0 : 1), tb != flipped});
      } else if (auto em = dyn_cast<ExpertMatmulOp>(user);
                 em && use.getOperandNumber() == 1 && wt.getRank() == 3 &&
                 !flipped) {
        bool tw = em.getTransposeW();
        uses.push_back({user, wt.getDimSize(tw ? 2 : 1),
                        wt.getDimSize(tw ? 1 : 2), tw, true});
      } else if (auto lce = dyn_cast<LinearCrossEntropyOp>(user);
                 lce && use.getOperandNumber() == 1) {
        bool tw = lce.getTransposeW();
        uses.push_back({user, wt.getDimSize(tw ? 1 : 0),
                        wt.getDimSize(tw ? 0 : 1), tw != flipped});
      } else if (auto tr = dyn_cast<TransposeOp>(user);
                 tr && !flipped && wt.getRank() == 2) {
        self(tr.getResult(), true, self);
      } else if (!other) {
        other = user;
      }
    }
  };
  visit(param, false, visit);
  return uses;
}

struct Target {
  unsigned index; ///< Argument number of the base weight.
  SmallVector<LinearUse> uses;
  std::string module; ///< Stem of the adapter names.
  StringAttr torchName;
  /// PEFT adapts the base as an nn.Parameter (`target_parameters`, its
  /// ParamWrapper), not as an nn.Linear: stacked experts and routers, which
  /// Hugging Face models hold as bare parameters.
  bool parameter = false;
  std::string fullName; ///< The PyTorch name, else the initializer name.
  Operation *firstUse = nullptr; ///< In program order.
};

/// The module that holds the parameter `torchName` and the parameter's own
/// name ("model.layers.0.mlp.experts", "gate_up_proj").
std::pair<StringRef, StringRef> ownerOf(StringRef torchName) {
  auto [owner, param] = torchName.rsplit('.');
  return param.empty() ? std::make_pair(torchName, StringRef())
                       : std::make_pair(owner, param);
}

/// The adapter stems of parameter targets, as PEFT names them: it wraps
/// each targeted parameter of one module in a ParamWrapper around the
/// previous wrapper, in the order the module registered them (for the
/// Hugging Face MoE families, gate_up_proj before down_proj: forward order,
/// which is how they are found here), so the last one's adapters are
/// `<module>.lora_A.weight`, the one before it `<module>.base_layer.lora_A
/// .weight`, and so on.
void nameParameterTargets(MutableArrayRef<Target> chosen) {
  llvm::StringMap<SmallVector<Target *>> byOwner;
  for (Target &t : chosen)
    if (t.parameter)
      byOwner[ownerOf(t.fullName).first].push_back(&t);
  for (auto &[owner, targets] : byOwner) {
    llvm::stable_sort(targets, [](Target *a, Target *b) {
      return a->firstUse->isBeforeInBlock(b->firstUse);
    });
    for (auto [k, t] : llvm::enumerate(targets)) {
      t->module = owner.str();
      for (size_t n = k + 1; n < targets.size(); ++n)
        t->module += ".base_layer";
    }
  }
}

struct TGInsertLoraPass
    : rondo::tg::impl::TGInsertLoraPassBase<TGInsertLoraPass> {
  using Base::Base;

  void runOnOperation() override {
    scales.clear();
    ModuleOp module = getOperation();
    auto func = lookupMain(module, "tg-insert-lora");
    if (!func)
      return signalPassFailure();
    if (rank < 1) {
      func.emitError("--lora: rank=")
          << static_cast<int64_t>(rank) << " must be positive";
      return signalPassFailure();
    }
    if (!(alpha > 0) || !std::isfinite(alpha)) {
      func.emitError("--lora: alpha=")
          << static_cast<double>(alpha) << " must be positive";
      return signalPassFailure();
    }
    if (dropout != 0) {
      // A mask drawn in the forward must be drawn again, identically, when a
      // backward stage recomputes that forward; the compiled step has no
      // random stream for that yet.
      func.emitError("--lora: dropout=")
          << static_cast<double>(dropout)
          << ": LoRA dropout is not supported (the compiled step draws no "
             "random numbers); use dropout=0";
      return signalPassFailure();
    }
    std::optional<unsigned> roles = parseRoles(targets);
    llvm::Regex re(targets);
    std::string error;
    if (!roles && !re.isValid(error)) {
      func.emitError("--lora: targets: invalid regular expression '")
          << targets << "': " << error;
      return signalPassFailure();
    }

    // Which parameters get adapters.
    llvm::StringSet<> names;
    for (unsigned k = 0; k < func.getNumArguments(); ++k)
      if (auto name = func.getArgAttrOfType<StringAttr>(k, kParamAttr))
        names.insert(name.getValue());
    SmallVector<Target> chosen;
    unsigned rolesInGraph = 0;
    for (unsigned k = 0; k < func.getNumArguments(); ++k) {
      auto name = func.getArgAttrOfType<StringAttr>(k, kParamAttr);
      if (!name)
        continue;
      if (func.getArgAttr(k, kLoraOfAttr)) {
        func.emitError("tg-insert-lora: the function already has LoRA "
                       "adapters ('")
            << name.getValue() << "')";
        return signalPassFailure();
      }
      BlockArgument arg = func.getArgument(k);
      auto type = cast<RankedTensorType>(arg.getType());
      if ((type.getRank() != 2 && type.getRank() != 3) ||
          !isa<FloatType>(type.getElementType()))
        continue;
      Operation *other = nullptr;
      SmallVector<LinearUse> uses = linearUses(arg, other);
      if (uses.empty())
        continue;
      auto torch = func.getArgAttrOfType<StringAttr>(k, kTorchNameAttr);
      unsigned found = 0;
      for (const LinearUse &u : uses) {
        if (auto mm = dyn_cast<MatmulOp>(u.op))
          found |= outputRoles(mm.getResult()) | inputRoles(mm.getA());
        else if (auto em = dyn_cast<ExpertMatmulOp>(u.op))
          found |= expertRoles(em);
      }
      rolesInGraph |= found;
      bool match;
      if (roles) {
        match = (found & *roles) != 0;
      } else {
        match =
            re.match(name.getValue()) || (torch && re.match(torch.getValue()));
      }
      if (!match)
        continue;
      std::string shown = name.str();
      if (torch)
        shown += " (" + torch.str() + ")";
      if (other && uses[0].experts) {
        // At the reader, so the message carries its node's location.
        other->emitError("--lora: targets match the experts' weights '")
            << shown << "', which this '" << other->getName()
            << "' also reads, not only the routed products "
               "(tg.expert_matmul); LoRA adapts those only: narrow targets";
        return signalPassFailure();
      }
      if (other) {
        // A tied embedding: an adapter on the head alone would change the
        // function in a way no merged weight can express.
        func.emitError("--lora: targets match '")
            << shown << "', which is also read by '" << other->getName()
            << "', not only as a linear weight (a tied embedding?); LoRA "
               "adapts linear weights only: narrow targets";
        return signalPassFailure();
      }
      for (const LinearUse &u : uses)
        if (u.in != uses[0].in || u.out != uses[0].out ||
            u.storedOutIn != uses[0].storedOutIn) {
          func.emitError("--lora: '")
              << shown << "' is used as linear weights of different shapes";
          return signalPassFailure();
        }
      Target t{k, uses, "", torch};
      StringRef stem = torch ? torch.getValue() : name.getValue();
      stem.consume_back(".weight");
      t.module = stem.str();
      t.parameter = uses[0].experts || (found & kRouter);
      t.fullName = (torch ? torch : name).str();
      for (const LinearUse &u : uses)
        if (!t.firstUse || u.op->isBeforeInBlock(t.firstUse))
          t.firstUse = u.op;
      chosen.push_back(std::move(t));
    }
    nameParameterTargets(chosen);
    for (const Target &t : chosen)
      for (const char *factor : {".lora_A.weight", ".lora_B.weight"})
        if (!names.insert(t.module + factor).second) {
          func.emitError("--lora: the adapter name '")
              << t.module + factor << "' of '"
              << func.getArgAttrOfType<StringAttr>(t.index, kParamAttr)
                     .getValue()
              << "' is already taken by another parameter";
          return signalPassFailure();
        }
    if (chosen.empty()) {
      func.emitError("--lora: targets=")
          << targets
          << " matches no linear weight (targets is one regular expression "
             "on initializer or PyTorch names, e.g. q_proj|v_proj, or roles "
             "joined by '+': q, k, v, o, gate, up, down, attn, mlp, "
             "all-linear, experts, router); roles found in this graph: "
          << (rolesInGraph ? describeRoles(rolesInGraph) : "none");
      return signalPassFailure();
    }

    // New arguments after their base weight; from the last one down, so
    // the indices of the others stay valid.
    MLIRContext *ctx = &getContext();
    Builder attrs(ctx);
    for (Target &t : llvm::reverse(chosen)) {
      BlockArgument base = func.getArgument(t.index);
      auto type = cast<RankedTensorType>(base.getType());
      const LinearUse &u = t.uses.front();
      auto baseName = func.getArgAttrOfType<StringAttr>(t.index, kParamAttr);
      auto adapter = [&](StringRef factor, ArrayRef<int64_t> shape) {
        std::string name = t.module + ".lora_" + factor.str() + ".weight";
        SmallVector<NamedAttribute> list{
            attrs.getNamedAttr(kParamAttr, attrs.getStringAttr(name)),
            attrs.getNamedAttr(kLoraOfAttr, baseName),
            attrs.getNamedAttr(kLoraFactorAttr, attrs.getStringAttr(factor))};
        if (t.torchName)
          list.push_back(
              attrs.getNamedAttr(kTorchNameAttr, attrs.getStringAttr(name)));
        // Expert adapters follow the stored layout (ParamWrapper's), so only
        // a 2-D base can be transposed relative to its adapters.
        if (u.storedOutIn && !u.experts)
          list.push_back(
              attrs.getNamedAttr(kLoraBaseTransposedAttr, attrs.getUnitAttr()));
        if (t.parameter)
          list.push_back(
              attrs.getNamedAttr(kLoraParameterAttr, attrs.getUnitAttr()));
        return std::make_tuple(
            Type(RankedTensorType::get(shape, type.getElementType())),
            attrs.getDictionaryAttr(list));
      };
      // Experts: A [E, d1, r] and B [E, r, d2] for a base [E, d1, d2].
      SmallVector<int64_t> aShape{u.in, rank}, bShape{rank, u.out};
      if (u.experts) {
        int64_t e = type.getDimSize(0), d1 = type.getDimSize(1),
                d2 = type.getDimSize(2);
        aShape = {e, d1, rank};
        bShape = {e, rank, d2};
      }
      auto [bType, bAttrs] = adapter("B", bShape);
      auto [aType, aAttrs] = adapter("A", aShape);
      if (failed(
              func.insertArgument(t.index + 1, bType, bAttrs, base.getLoc())) ||
          failed(
              func.insertArgument(t.index + 1, aType, aAttrs, base.getLoc()))) {
        func.emitError("tg-insert-lora: cannot add the adapters of '")
            << baseName.getValue() << "'";
        return signalPassFailure();
      }
      Value a = func.getArgument(t.index + 1),
            b = func.getArgument(t.index + 2);
      for (const LinearUse &use : t.uses)
        rewrite(func, use, a, b);
    }
    module->setAttr(kLoraConfigAttr,
                    LoraAttr::get(module.getContext(), rank,
                                  attrs.getF64FloatAttr(alpha),
                                  attrs.getF64FloatAttr(dropout), targets));
  }

  /// The scalar alpha / r of element type `elem`, one per function.
  Value scaleOf(func::FuncOp func, Type elem) {
    Value &scale = scales[elem];
    if (!scale) {
      auto builder = OpBuilder::atBlockBegin(&func.getBody().front());
      scale = ConstantOp::create(
          builder, func.getLoc(),
          DenseElementsAttr::get(
              RankedTensorType::get({}, elem),
              ArrayRef<Attribute>(builder.getFloatAttr(elem, alpha / rank))));
    }
    return scale;
  }

  /// The scaled low-rank term of one linear use.
  void rewrite(func::FuncOp func, const LinearUse &use, Value a, Value b) {
    OpBuilder builder(use.op);
    Location loc = use.op->getLoc();
    Value scale =
        scaleOf(func, cast<RankedTensorType>(a.getType()).getElementType());
    if (auto mm = dyn_cast<MatmulOp>(use.op)) {
      // PEFT's order: lora_B(lora_A(x)) * scaling, added to the base output.
      builder.setInsertionPointAfter(mm);
      Value xa = MatmulOp::create(builder, loc, mm.getA(), a,
                                  mm.getTransposeA(), false);
      Value xab = MatmulOp::create(builder, loc, xa, b, false, false);
      addScaled(builder, loc, mm.getResult(), xab, scale);
      return;
    }
    if (auto em = dyn_cast<ExpertMatmulOp>(use.op)) {
      // Each row through its own expert's adapters, with the routing of
      // the base product. A base read transposed, x·W_e^T, gets the
      // transposed delta: (x·B_e^T)·A_e^T.
      builder.setInsertionPointAfter(em);
      bool tw = em.getTransposeW();
      Value first = tw ? b : a, second = tw ? a : b;
      Value low = ExpertMatmulOp::create(builder, loc, em.getX(), first,
                                         em.getIds(), tw);
      Value delta =
          ExpertMatmulOp::create(builder, loc, low, second, em.getIds(), tw);
      addScaled(builder, loc, em.getResult(), delta, scale);
      return;
    }
    // The fused head reads the merged weight in the layout it expects.
    auto lce = cast<LinearCrossEntropyOp>(use.op);
    Value delta = lce.getTransposeW()
                      ? MatmulOp::create(builder, loc, b, a, true, true)
                      : MatmulOp::create(builder, loc, a, b, false, false);
    Value scaled =
        BinaryOp::create(builder, loc, BinaryKind::mul, delta, scale);
    Value merged =
        BinaryOp::create(builder, loc, BinaryKind::add, lce.getW(), scaled);
    lce.getWMutable().set(merged);
  }

  /// base + delta * scale in place of base for every reader of base.
  static void addScaled(OpBuilder &builder, Location loc, Value base,
                        Value delta, Value scale) {
    Value scaled =
        BinaryOp::create(builder, loc, BinaryKind::mul, delta, scale);
    Value sum = BinaryOp::create(builder, loc, BinaryKind::add, base, scaled);
    base.replaceAllUsesExcept(sum, sum.getDefiningOp());
  }

  llvm::DenseMap<Type, Value> scales;
};

} // namespace
