//===- Interpreter.cpp - Run a tg function on the CPU -----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Every tg op is executed by the kernel call the trainer emitter would print
// for it, so a result computed here is what a compiled trainer computes. The
// kernels are fp32-only; the layout ops also move i64 ids and i1 masks, which
// get the small strided loops below (the emitter's sliceInts plays the same
// role). Kernels abort on malformed input, as they have no error channel, so
// everything that depends on data (ids, labels) is checked here first and
// reported as a diagnostic instead.
//
// Values live in shared storage: a reshape aliases its operand's buffer, and
// a buffer is released after its last use, as in the emitted program.
//
//===----------------------------------------------------------------------===//

#include "rondo/Interpreter/Interpreter.h"

#include "Kernels.h"
#include "TG/IR/TGOps.h"
#include "rondo/runtime/RotaryTable.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>
#include <memory>
#include <unordered_map>

using namespace mlir;
using namespace rondo;
using llvm::ArrayRef;
using llvm::SmallVector;

//===----------------------------------------------------------------------===//
// HostBuffer
//===----------------------------------------------------------------------===//

const char *rondo::elementKindName(ElementKind kind) {
  switch (kind) {
  case ElementKind::F32:
    return "f32";
  case ElementKind::I64:
    return "i64";
  case ElementKind::I1:
    return "i1";
  }
  return "?";
}

int64_t HostBuffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string HostBuffer::describe() const {
  std::string s = elementKindName(kind);
  s += "[";
  for (auto [k, d] : llvm::enumerate(shape))
    s += (k ? ", " : "") + std::to_string(d);
  return s + "]";
}

HostBuffer HostBuffer::floats(ArrayRef<int64_t> shape,
                              std::vector<float> data) {
  HostBuffer b;
  b.kind = ElementKind::F32;
  b.shape.assign(shape.begin(), shape.end());
  b.f = std::move(data);
  return b;
}

HostBuffer HostBuffer::ints(ArrayRef<int64_t> shape,
                            std::vector<int64_t> data) {
  HostBuffer b;
  b.kind = ElementKind::I64;
  b.shape.assign(shape.begin(), shape.end());
  b.i = std::move(data);
  return b;
}

HostBuffer HostBuffer::bools(ArrayRef<int64_t> shape,
                             std::vector<int64_t> data) {
  HostBuffer b = ints(shape, std::move(data));
  b.kind = ElementKind::I1;
  return b;
}

FailureOr<ElementKind> rondo::elementKindOf(RankedTensorType type) {
  Type e = type.getElementType();
  if (e.isF32())
    return ElementKind::F32;
  if (e.isInteger(64))
    return ElementKind::I64;
  if (e.isInteger(1))
    return ElementKind::I1;
  return failure();
}

std::string rondo::argumentName(func::FuncOp func, unsigned index) {
  if (auto name = func.getArgAttrOfType<StringAttr>(index, tg::kParamAttr))
    return name.str();
  if (auto name = func.getArgAttrOfType<StringAttr>(index, tg::kInputAttr))
    return name.str();
  if (func.getArgAttr(index, tg::kLabelsAttr))
    return "labels";
  if (func.getArgAttr(index, tg::kLossScaleAttr))
    return "loss_scale";
  return "arg" + std::to_string(index);
}

std::string rondo::resultName(func::FuncOp func, unsigned index) {
  if (auto name =
          func.getResultAttrOfType<StringAttr>(index, tg::kResultNameAttr))
    return name.str();
  if (auto of = func.getResultAttrOfType<StringAttr>(index, "tg.grad_of"))
    return of.str() + ".grad";
  return "result" + std::to_string(index);
}

//===----------------------------------------------------------------------===//
// The interpreter
//===----------------------------------------------------------------------===//

namespace {

/// A value during execution: like HostBuffer, but the storage is shared so
/// that reshapes alias it.
struct Tensor {
  ElementKind kind = ElementKind::F32;
  SmallVector<int64_t> shape;
  std::shared_ptr<std::vector<float>> f;
  std::shared_ptr<std::vector<int64_t>> i;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

Tensor allocate(RankedTensorType type, ElementKind kind) {
  Tensor t;
  t.kind = kind;
  t.shape.assign(type.getShape().begin(), type.getShape().end());
  if (kind == ElementKind::F32)
    t.f = std::make_shared<std::vector<float>>(t.numel());
  else
    t.i = std::make_shared<std::vector<int64_t>>(t.numel());
  return t;
}

cpu::Shape shapeOf(ArrayRef<int64_t> dims) {
  return cpu::Shape(dims.data(), int(dims.size()));
}
cpu::CFView cview(const Tensor &t) { return {t.f->data(), shapeOf(t.shape)}; }
cpu::FView view(Tensor &t) { return {t.f->data(), shapeOf(t.shape)}; }
cpu::IView iview(const Tensor &t) { return {t.i->data(), shapeOf(t.shape)}; }
/// A view whose data is null: the kernels' "skip this output" marker.
cpu::FView noView() { return {nullptr, cpu::Shape()}; }

SmallVector<int64_t> contiguousStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// out[k] = x[base + sum_d idx_d(k) * strides[d]] over the contiguous index
/// space of `outShape`: the integer counterpart of the kernels' strided copy,
/// for transpose, slice and broadcast of ids and masks.
void stridedGather(const int64_t *x, int64_t base, ArrayRef<int64_t> strides,
                   ArrayRef<int64_t> outShape, int64_t *out) {
  int64_t n = 1;
  for (int64_t d : outShape)
    n *= d;
  int rank = int(outShape.size());
  for (int64_t k = 0; k < n; ++k) {
    int64_t rem = k, src = base;
    for (int d = rank - 1; d >= 0; --d) {
      src += (rem % outShape[d]) * strides[d];
      rem /= outShape[d];
    }
    out[k] = x[src];
  }
}

/// Strides of `shape` read as if broadcast to `outShape` (NumPy rules):
/// 0 along broadcast dimensions.
SmallVector<int64_t> broadcastStrides(ArrayRef<int64_t> shape,
                                      ArrayRef<int64_t> outShape) {
  SmallVector<int64_t> own = contiguousStrides(shape);
  SmallVector<int64_t> s(outShape.size(), 0);
  int64_t shift = int64_t(outShape.size()) - int64_t(shape.size());
  for (int64_t d = 0; d < int64_t(shape.size()); ++d)
    if (shape[d] != 1)
      s[d + shift] = own[d];
  return s;
}

cpu::UnaryKind unaryKind(tg::UnaryKind k) {
  switch (k) {
  case tg::UnaryKind::neg:
    return cpu::UnaryKind::Neg;
  case tg::UnaryKind::exp:
    return cpu::UnaryKind::Exp;
  case tg::UnaryKind::log:
    return cpu::UnaryKind::Log;
  case tg::UnaryKind::sqrt:
    return cpu::UnaryKind::Sqrt;
  case tg::UnaryKind::rsqrt:
    return cpu::UnaryKind::Rsqrt;
  case tg::UnaryKind::reciprocal:
    return cpu::UnaryKind::Reciprocal;
  case tg::UnaryKind::sigmoid:
    return cpu::UnaryKind::Sigmoid;
  case tg::UnaryKind::tanh:
    return cpu::UnaryKind::Tanh;
  case tg::UnaryKind::relu:
    return cpu::UnaryKind::Relu;
  case tg::UnaryKind::silu:
    return cpu::UnaryKind::Silu;
  case tg::UnaryKind::gelu_tanh:
    return cpu::UnaryKind::GeluTanh;
  case tg::UnaryKind::gelu_erf:
    return cpu::UnaryKind::GeluErf;
  case tg::UnaryKind::abs:
    return cpu::UnaryKind::Abs;
  case tg::UnaryKind::sin:
    return cpu::UnaryKind::Sin;
  case tg::UnaryKind::cos:
    return cpu::UnaryKind::Cos;
  }
  llvm_unreachable("unknown tg unary kind");
}

cpu::BinaryKind binaryKind(tg::BinaryKind k) {
  switch (k) {
  case tg::BinaryKind::add:
    return cpu::BinaryKind::Add;
  case tg::BinaryKind::sub:
    return cpu::BinaryKind::Sub;
  case tg::BinaryKind::mul:
    return cpu::BinaryKind::Mul;
  case tg::BinaryKind::div:
    return cpu::BinaryKind::Div;
  case tg::BinaryKind::pow:
    return cpu::BinaryKind::Pow;
  case tg::BinaryKind::max:
    return cpu::BinaryKind::Max;
  case tg::BinaryKind::min:
    return cpu::BinaryKind::Min;
  }
  llvm_unreachable("unknown tg binary kind");
}

class Interpreter {
public:
  explicit Interpreter(func::FuncOp func) : func(func) {}
  FailureOr<std::vector<HostBuffer>> run(ArrayRef<HostBuffer> args);

private:
  LogicalResult execute(Operation *op);
  LogicalResult checkTypes(Operation *op);
  LogicalResult checkIds(Operation *op, const Tensor &ids, int64_t rows);

  const Tensor &get(Value v) { return env.find(v)->second; }
  /// A fresh buffer for result `k` of `op`.
  Tensor &result(Operation *op, unsigned k = 0) {
    auto type = cast<RankedTensorType>(op->getResult(k).getType());
    return env[op->getResult(k)] = allocate(type, *elementKindOf(type));
  }

  struct ValueHash {
    size_t operator()(Value v) const { return hash_value(v); }
  };
  func::FuncOp func;
  /// Node-based, so that references to operands stay valid while results
  /// are inserted.
  std::unordered_map<Value, Tensor, ValueHash> env;
};

FailureOr<std::vector<HostBuffer>> Interpreter::run(ArrayRef<HostBuffer> args) {
  if (!func.getBody().hasOneBlock())
    return func.emitError("rondo-run executes functions of one block"),
           failure();
  Block &block = func.getBody().front();
  if (args.size() != block.getNumArguments())
    return func.emitError("@")
               << func.getSymName() << " takes " << block.getNumArguments()
               << " arguments, " << args.size() << " given",
           failure();
  for (auto [k, arg] : llvm::enumerate(block.getArguments())) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    FailureOr<ElementKind> kind =
        type ? elementKindOf(type) : FailureOr<ElementKind>(failure());
    if (failed(kind))
      return func.emitError("argument '")
                 << argumentName(func, k) << "' has type " << arg.getType()
                 << ", which the interpreter does not execute (f32, i64 "
                    "and i1 tensors only)",
             failure();
    const HostBuffer &given = args[k];
    if (given.kind != *kind ||
        ArrayRef<int64_t>(given.shape) != type.getShape()) {
      HostBuffer expected;
      expected.kind = *kind;
      expected.shape.assign(type.getShape().begin(), type.getShape().end());
      return func.emitError("argument '")
                 << argumentName(func, k) << "' expects " << expected.describe()
                 << ", got " << given.describe(),
             failure();
    }
    size_t have =
        given.kind == ElementKind::F32 ? given.f.size() : given.i.size();
    if (int64_t(have) != given.numel())
      return func.emitError("argument '")
                 << argumentName(func, k) << "' holds " << have
                 << " elements, its shape " << given.describe() << " needs "
                 << given.numel(),
             failure();
    Tensor t;
    t.kind = given.kind;
    t.shape = given.shape;
    if (given.kind == ElementKind::F32)
      t.f = std::make_shared<std::vector<float>>(given.f);
    else
      t.i = std::make_shared<std::vector<int64_t>>(given.i);
    env[arg] = std::move(t);
  }

  // Remaining uses of each value, to release buffers as the emitter does.
  llvm::DenseMap<Value, unsigned> uses;
  for (Operation &op : block)
    for (Value v : op.getOperands())
      ++uses[v];

  for (Operation &op : block) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      std::vector<HostBuffer> results;
      for (Value v : ret.getOperands()) {
        const Tensor &t = get(v);
        HostBuffer b;
        b.kind = t.kind;
        b.shape = t.shape;
        if (t.kind == ElementKind::F32)
          b.f = *t.f;
        else
          b.i = *t.i;
        results.push_back(std::move(b));
      }
      return results;
    }
    if (failed(checkTypes(&op)) || failed(execute(&op)))
      return failure();
    for (Value v : op.getOperands())
      if (--uses[v] == 0)
        env.erase(v);
  }
  return func.emitError("@") << func.getSymName() << " has no func.return",
         failure();
}

/// Every operand and result must be a ranked tensor of a kind the
/// interpreter stores, with a rank the kernels accept.
LogicalResult Interpreter::checkTypes(Operation *op) {
  for (Type t :
       llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes())) {
    auto type = dyn_cast<RankedTensorType>(t);
    if (!type || failed(elementKindOf(type)))
      return op->emitError("the interpreter does not execute values of type ")
             << t << " (f32, i64 and i1 tensors only)";
    if (type.getRank() > cpu::kMaxRank)
      return op->emitError("rank ")
             << type.getRank() << " exceeds the kernels' maximum of "
             << cpu::kMaxRank;
  }
  return success();
}

LogicalResult Interpreter::checkIds(Operation *op, const Tensor &ids,
                                    int64_t rows) {
  for (int64_t k = 0, n = ids.numel(); k < n; ++k) {
    int64_t id = (*ids.i)[k];
    if (id < -rows || id >= rows)
      return op->emitError("index ")
             << id << " (element " << k << " of the indices) is out of range "
             << "for a table of " << rows << " rows";
  }
  return success();
}

LogicalResult Interpreter::execute(Operation *op) {
  // An op whose results are all empty has nothing to compute (ONNX allows
  // zero-sized tensors; the kernels need not see them).
  if (op->getNumResults() > 0 && llvm::all_of(op->getResultTypes(), [](Type t) {
        return cast<RankedTensorType>(t).getNumElements() == 0;
      })) {
    for (unsigned k = 0; k < op->getNumResults(); ++k)
      result(op, k);
    return success();
  }

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](tg::ConstantOp c) -> LogicalResult {
        auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
        if (!dense)
          return c.emitError("the interpreter needs dense constants, got ")
                 << c.getValue();
        Tensor &out = result(c);
        if (out.kind == ElementKind::F32)
          llvm::copy(dense.getValues<float>(), out.f->begin());
        else if (out.kind == ElementKind::I64)
          llvm::copy(dense.getValues<int64_t>(), out.i->begin());
        else
          for (auto [k, b] : llvm::enumerate(dense.getValues<bool>()))
            (*out.i)[k] = b;
        return success();
      })
      .Case([&](tg::ReshapeOp r) -> LogicalResult {
        // Same elements, new shape: alias the operand's storage.
        Tensor t = get(r.getX());
        auto type = cast<RankedTensorType>(r.getType());
        t.shape.assign(type.getShape().begin(), type.getShape().end());
        env[r] = std::move(t);
        return success();
      })
      .Case([&](tg::UnaryOp u) -> LogicalResult {
        cpu::unary(unaryKind(u.getKind()), cview(get(u.getX())),
                   view(result(u)));
        return success();
      })
      .Case([&](tg::GatedActOp g) -> LogicalResult {
        // The emitter's two calls: act(gate) into a temporary, then * up.
        const Tensor &gate = get(g.getGate());
        std::vector<float> act(gate.numel());
        cpu::FView actView{act.data(), shapeOf(gate.shape)};
        cpu::unary(unaryKind(g.getAct()), cview(gate), actView);
        cpu::binary(cpu::BinaryKind::Mul, {act.data(), actView.shape},
                    cview(get(g.getUp())), view(result(g)));
        return success();
      })
      .Case([&](tg::BinaryOp b) -> LogicalResult {
        cpu::binary(binaryKind(b.getKind()), cview(get(b.getLhs())),
                    cview(get(b.getRhs())), view(result(b)));
        return success();
      })
      .Case([&](tg::MatmulOp m) -> LogicalResult {
        cpu::matmul(cview(get(m.getA())), cview(get(m.getB())), view(result(m)),
                    m.getTransposeA(), m.getTransposeB());
        return success();
      })
      .Case([&](tg::ReduceOp r) -> LogicalResult {
        // sumToShape onto the operand's shape with the reduced axes kept as
        // 1 (the layout of the keepdims and the dropped-dims result is the
        // same), then 1/count for the mean: the emitter's two calls.
        const Tensor &x = get(r.getX());
        SmallVector<int64_t> kept(x.shape);
        double count = 1;
        for (int64_t a : r.getAxes()) {
          int64_t axis = a < 0 ? a + int64_t(kept.size()) : a;
          count *= double(kept[axis]);
          kept[axis] = 1;
        }
        Tensor &out = result(r);
        cpu::FView keptView{out.f->data(), shapeOf(kept)};
        cpu::sumToShape(cview(x), keptView);
        if (r.getKind() == tg::ReduceKind::mean)
          cpu::scale({out.f->data(), keptView.shape}, float(1.0 / count),
                     keptView);
        return success();
      })
      .Case([&](tg::SelectOp s) -> LogicalResult {
        // No kernel: a broadcasting loop (tg.select appears in the
        // exporter's NaN guard, which attention recognition removes).
        const Tensor &c = get(s.getCond()), &a = get(s.getA()),
                     &b = get(s.getB());
        Tensor &out = result(s);
        auto cs = broadcastStrides(c.shape, out.shape),
             as = broadcastStrides(a.shape, out.shape),
             bs = broadcastStrides(b.shape, out.shape);
        int rank = int(out.shape.size());
        for (int64_t k = 0, n = out.numel(); k < n; ++k) {
          int64_t rem = k, co = 0, ao = 0, bo = 0;
          for (int d = rank - 1; d >= 0; --d) {
            int64_t idx = rem % out.shape[d];
            rem /= out.shape[d];
            co += idx * cs[d];
            ao += idx * as[d];
            bo += idx * bs[d];
          }
          (*out.f)[k] = (*c.i)[co] ? (*a.f)[ao] : (*b.f)[bo];
        }
        return success();
      })
      .Case([&](tg::IsNanOp n) -> LogicalResult {
        const Tensor &x = get(n.getX());
        Tensor &out = result(n);
        for (int64_t k = 0, e = x.numel(); k < e; ++k)
          (*out.i)[k] = std::isnan((*x.f)[k]) ? 1 : 0;
        return success();
      })
      .Case([&](tg::TransposeOp t) -> LogicalResult {
        const Tensor &x = get(t.getX());
        Tensor &out = result(t);
        if (x.kind == ElementKind::F32) {
          cpu::transpose(cview(x), t.getPerm().data(), view(out));
          return success();
        }
        SmallVector<int64_t> xs = contiguousStrides(x.shape), strides;
        for (int64_t p : t.getPerm())
          strides.push_back(xs[p]);
        stridedGather(x.i->data(), 0, strides, out.shape, out.i->data());
        return success();
      })
      .Case([&](tg::BroadcastOp b) -> LogicalResult {
        const Tensor &x = get(b.getX());
        Tensor &out = result(b);
        if (x.kind == ElementKind::F32) {
          cpu::broadcastTo(cview(x), view(out));
          return success();
        }
        stridedGather(x.i->data(), 0, broadcastStrides(x.shape, out.shape),
                      out.shape, out.i->data());
        return success();
      })
      .Case([&](tg::SumToShapeOp s) -> LogicalResult {
        cpu::sumToShape(cview(get(s.getX())), view(result(s)));
        return success();
      })
      .Case([&](tg::SliceOp s) -> LogicalResult {
        const Tensor &x = get(s.getX());
        Tensor &out = result(s);
        if (x.kind == ElementKind::F32) {
          cpu::slice(cview(x), s.getStarts().data(), s.getSteps().data(),
                     view(out));
          return success();
        }
        SmallVector<int64_t> xs = contiguousStrides(x.shape), strides;
        int64_t base = 0;
        for (auto [d, start] : llvm::enumerate(s.getStarts())) {
          base += start * xs[d];
          strides.push_back(s.getSteps()[d] * xs[d]);
        }
        stridedGather(x.i->data(), base, strides, out.shape, out.i->data());
        return success();
      })
      .Case([&](tg::SliceGradOp s) -> LogicalResult {
        cpu::sliceBackward(cview(get(s.getDy())), s.getStarts().data(),
                           s.getSteps().data(), view(result(s)));
        return success();
      })
      .Case([&](tg::ConcatOp c) -> LogicalResult {
        Tensor &out = result(c);
        int64_t rank = int64_t(out.shape.size());
        int64_t axis = c.getAxis();
        if (axis < 0)
          axis += rank;
        if (out.kind == ElementKind::F32) {
          SmallVector<cpu::CFView> inputs;
          for (Value v : c.getInputs())
            if (get(v).numel() > 0) // empty pieces contribute nothing
              inputs.push_back(cview(get(v)));
          cpu::concat(inputs.data(), int(inputs.size()), int(axis), view(out));
          return success();
        }
        int64_t outer = 1, inner = 1;
        for (int64_t d = 0; d < axis; ++d)
          outer *= out.shape[d];
        for (int64_t d = axis + 1; d < rank; ++d)
          inner *= out.shape[d];
        int64_t *dst = out.i->data();
        for (int64_t o = 0; o < outer; ++o)
          for (Value v : c.getInputs()) {
            const Tensor &x = get(v);
            int64_t chunk = x.shape[axis] * inner;
            dst = std::copy_n(x.i->data() + o * chunk, chunk, dst);
          }
        return success();
      })
      .Case([&](tg::GatherOp g) -> LogicalResult {
        const Tensor &table = get(g.getTable()), &ids = get(g.getIds());
        if (failed(checkIds(g, ids, table.shape[0])))
          return failure();
        cpu::gatherRows(cview(table), iview(ids), view(result(g)));
        return success();
      })
      .Case([&](tg::GatherGradOp g) -> LogicalResult {
        const Tensor &ids = get(g.getIds());
        Tensor &out = result(g);
        if (failed(checkIds(g, ids, out.shape[0])))
          return failure();
        cpu::fill(view(out), 0.0f);
        cpu::gatherRowsBackward(iview(ids), cview(get(g.getDy())), view(out));
        return success();
      })
      .Case([&](tg::SoftmaxOp s) -> LogicalResult {
        cpu::softmax(cview(get(s.getX())), view(result(s)));
        return success();
      })
      .Case([&](tg::SoftmaxGradOp s) -> LogicalResult {
        cpu::softmaxBackward(cview(get(s.getY())), cview(get(s.getDy())),
                             view(result(s)));
        return success();
      })
      .Case([&](tg::RotaryTableOp r) -> LogicalResult {
        Tensor &out = result(r);
        ArrayRef<float> freqs = r.getFreqs();
        rt::fillRotaryTable(out.f->data(), out.numel(),
                            out.shape[out.shape.size() - 2], freqs.size(),
                            freqs.data(), r.getKind() == tg::UnaryKind::sin,
                            r.getScale().convertToFloat());
        return success();
      })
      .Case([&](tg::CausalMaskOp m) -> LogicalResult {
        // 0 where key j <= i + (cols - rows), -inf elsewhere: the diagonal
        // is aligned to the bottom-right corner, as for attention with a
        // longer key sequence.
        Tensor &out = result(m);
        int64_t rank = int64_t(out.shape.size());
        int64_t rows = out.shape[rank - 2], cols = out.shape[rank - 1];
        int64_t outer = out.numel() / (rows * cols);
        float *p = out.f->data();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
              *p++ = j <= i + (cols - rows)
                         ? 0.0f
                         : -std::numeric_limits<float>::infinity();
        return success();
      })
      .Case([&](tg::RmsNormOp n) -> LogicalResult {
        cpu::rmsNorm(cview(get(n.getX())), cview(get(n.getW())),
                     n.getEps().convertToFloat(), view(result(n)));
        return success();
      })
      .Case([&](tg::RmsNormGradOp n) -> LogicalResult {
        Tensor &dx = result(n, 0), &dw = result(n, 1);
        cpu::rmsNormBackward(cview(get(n.getX())), cview(get(n.getW())),
                             n.getEps().convertToFloat(), cview(get(n.getDy())),
                             view(dx), view(dw));
        return success();
      })
      .Case([&](tg::LayerNormOp n) -> LogicalResult {
        cpu::layerNorm(cview(get(n.getX())), cview(get(n.getW())),
                       cview(get(n.getB())), n.getEps().convertToFloat(),
                       view(result(n)));
        return success();
      })
      .Case([&](tg::LayerNormGradOp n) -> LogicalResult {
        Tensor &dx = result(n, 0), &dw = result(n, 1), &db = result(n, 2);
        cpu::layerNormBackward(cview(get(n.getX())), cview(get(n.getW())),
                               n.getEps().convertToFloat(),
                               cview(get(n.getDy())), view(dx), view(dw),
                               view(db));
        return success();
      })
      .Case([&](tg::RotaryOp r) -> LogicalResult {
        cpu::rotary(cview(get(r.getX())), cview(get(r.getCos())),
                    cview(get(r.getSin())), view(result(r)));
        return success();
      })
      .Case([&](tg::RotaryGradOp r) -> LogicalResult {
        cpu::rotaryBackward(cview(get(r.getDy())), cview(get(r.getCos())),
                            cview(get(r.getSin())), view(result(r)));
        return success();
      })
      .Case([&](tg::AttentionOp a) -> LogicalResult {
        Tensor &o = result(a, 0), &lse = result(a, 1);
        cpu::attention(cview(get(a.getQ())), cview(get(a.getK())),
                       cview(get(a.getV())), a.getCausal(),
                       a.getScale().convertToFloat(), view(o), view(lse));
        return success();
      })
      .Case([&](tg::AttentionGradOp a) -> LogicalResult {
        Tensor &dq = result(a, 0), &dk = result(a, 1), &dv = result(a, 2);
        cpu::attentionBackward(cview(get(a.getQ())), cview(get(a.getK())),
                               cview(get(a.getV())), cview(get(a.getOut())),
                               cview(get(a.getLse())), cview(get(a.getDout())),
                               a.getCausal(), a.getScale().convertToFloat(),
                               view(dq), view(dk), view(dv));
        return success();
      })
      .Case([&](tg::CrossEntropyOp c) -> LogicalResult {
        double sum = 0;
        int64_t count = 0;
        if (!cpu::crossEntropy(cview(get(c.getLogits())),
                               iview(get(c.getLabels())), c.getIgnoreIndex(),
                               &sum, &count))
          return c.emitError("a label is outside the vocabulary of ")
                 << get(c.getLogits()).shape.back() << " (and is not the "
                 << "ignore index " << c.getIgnoreIndex() << ")";
        (*result(c).f)[0] = float(sum);
        return success();
      })
      .Case([&](tg::CrossEntropyGradOp c) -> LogicalResult {
        cpu::crossEntropyBackward(cview(get(c.getLogits())),
                                  iview(get(c.getLabels())), c.getIgnoreIndex(),
                                  (*get(c.getDloss()).f)[0], view(result(c)));
        return success();
      })
      .Case([&](tg::LinearCrossEntropyOp c) -> LogicalResult {
        double sum = 0;
        int64_t count = 0;
        if (!cpu::linearCrossEntropy(
                cview(get(c.getH())), cview(get(c.getW())), c.getTransposeW(),
                iview(get(c.getLabels())), c.getIgnoreIndex(), c.getChunkRows(),
                &sum, &count))
          return c.emitError("a label is outside the vocabulary (and is not "
                             "the ignore index ")
                 << c.getIgnoreIndex() << ")";
        (*result(c).f)[0] = float(sum);
        return success();
      })
      .Case([&](tg::LinearCrossEntropyGradOp c) -> LogicalResult {
        Tensor &dh = result(c, 0), &dw = result(c, 1);
        cpu::linearCrossEntropyBackward(
            cview(get(c.getH())), cview(get(c.getW())), c.getTransposeW(),
            iview(get(c.getLabels())), c.getIgnoreIndex(), c.getChunkRows(),
            (*get(c.getDloss()).f)[0], view(dh), view(dw));
        return success();
      })
      .Case([&](tg::UnaryGradOp u) -> LogicalResult {
        cpu::unaryBackward(unaryKind(u.getKind()), cview(get(u.getX())),
                           cview(get(u.getDy())), view(result(u)));
        return success();
      })
      .Case([&](tg::BinaryGradOp b) -> LogicalResult {
        Tensor &dl = result(b, 0), &dr = result(b, 1);
        // An empty operand gradient is skipped (null data), which the
        // kernel documents.
        cpu::binaryBackward(binaryKind(b.getKind()), cview(get(b.getLhs())),
                            cview(get(b.getRhs())), cview(get(b.getDy())),
                            dl.numel() ? view(dl) : noView(),
                            dr.numel() ? view(dr) : noView());
        return success();
      })
      .Default([&](Operation *op) -> LogicalResult {
        return op->emitError("the interpreter has no kernel for '")
               << op->getName() << "'";
      });
}

} // namespace

FailureOr<std::vector<HostBuffer>>
rondo::runFunction(func::FuncOp func, ArrayRef<HostBuffer> args) {
  Interpreter interpreter(func);
  return interpreter.run(args);
}
