//===- ExecOps.cpp - exec ops and their local invariants --------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Verifiers here check what a program can see without ordering: refs name
// existing buffers and stay inside them, jobs name stages, host and worker
// refs use the right job. Ordering and hazards (no read before the write
// completes, no overwrite before the readers finish, statelessness) are
// whole-program properties proven by the exec-verify pass.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Exec/IR/ExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace rondo::exec;

#include "Dialect/Exec/IR/ExecDialect.cpp.inc"
#include "Dialect/Exec/IR/ExecEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "Dialect/Exec/IR/ExecTypes.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "Dialect/Exec/IR/ExecAttrs.cpp.inc"

void ExecDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Dialect/Exec/IR/ExecOps.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "Dialect/Exec/IR/ExecTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "Dialect/Exec/IR/ExecAttrs.cpp.inc"
      >();
}

/// An `exec.role` among `roles`, and else the error that names them.
static LogicalResult verifyRole(Operation *op, NamedAttribute attr,
                                ArrayRef<llvm::StringLiteral> roles,
                                StringRef place) {
  auto role = dyn_cast<StringAttr>(attr.getValue());
  if (role && llvm::is_contained(roles, role.getValue()))
    return success();
  InFlightDiagnostic diag = op->emitError()
                            << "'" << kRoleAttr << "' of a function " << place
                            << " must be one of ";
  llvm::interleaveComma(roles, diag,
                        [&](StringRef r) { diag << "\"" << r << "\""; });
  return diag;
}

LogicalResult ExecDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                    unsigned,
                                                    NamedAttribute attr) {
  if (attr.getName() == kRoleAttr)
    return verifyRole(op, attr, kArgumentRoles, "argument");
  if (attr.getName() == kLayerAttr || attr.getName() == kStageAttr)
    return op->emitError() << "'" << attr.getName().strref()
                           << "' does not belong on a function argument";
  return op->emitError() << "unknown attribute '" << attr.getName().strref()
                         << "'";
}

LogicalResult ExecDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned,
                                                       NamedAttribute attr) {
  if (attr.getName() == kRoleAttr)
    return verifyRole(op, attr, kResultRoles, "result");
  if (attr.getName() == kLayerAttr) {
    auto layer = dyn_cast<IntegerAttr>(attr.getValue());
    if (!layer || !layer.getType().isSignlessInteger(64) || layer.getInt() < 0)
      return op->emitError()
             << "'" << kLayerAttr << "' must be a non-negative i64";
    return success();
  }
  if (attr.getName() == kStageAttr)
    return op->emitError() << "'" << kStageAttr
                           << "' does not belong on a function result";
  return op->emitError() << "unknown attribute '" << attr.getName().strref()
                         << "'";
}

LogicalResult ExecDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == kStageAttr) {
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << kStageAttr << "' belongs on a function";
    if (!isa<SymbolRefAttr, UnitAttr>(attr.getValue()))
      return op->emitError()
             << "'" << kStageAttr
             << "' must be a symbol reference (@plan::@stage) or unit";
    return success();
  }
  if (attr.getName() == kRoleAttr || attr.getName() == kLayerAttr)
    return op->emitError() << "'" << attr.getName().strref()
                           << "' belongs on a function argument or result";
  return op->emitError() << "unknown attribute '" << attr.getName().strref()
                         << "'";
}

#define GET_OP_CLASSES
#include "Dialect/Exec/IR/ExecOps.cpp.inc"

//===----------------------------------------------------------------------===//
// ProgramOp
//===----------------------------------------------------------------------===//

RegionKind ProgramOp::getRegionKind(unsigned) { return RegionKind::Graph; }

StageOp ProgramOp::getJobStage(int64_t job) {
  auto ref = cast<FlatSymbolRefAttr>(getJobs()[job]);
  return dyn_cast_or_null<StageOp>(lookupSymbol(ref.getAttr()));
}

BufferOp ProgramOp::lookupBuffer(RefAttr ref) {
  return dyn_cast_or_null<BufferOp>(lookupSymbol(ref.getBuffer().getAttr()));
}

LogicalResult ProgramOp::verify() {
  Block &body = getBody().front();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end with exec.yield");
  if (yield.getEvents().size() != body.getNumArguments())
    return emitOpError("yields ")
           << yield.getEvents().size() << " event(s) for "
           << body.getNumArguments()
           << " block argument(s); argument k is operand k of the previous "
              "step's yield";
  for (BlockArgument arg : body.getArguments())
    if (!isa<EventType>(arg.getType()))
      return emitOpError("block arguments must be !exec.event");
  for (int64_t n = 0; n < getNumJobs(); ++n)
    if (!getJobStage(n))
      return emitOpError("job ") << n << " names " << getJobs()[n]
                                 << ", which is not an exec.stage of it";

  const int64_t numJobs = getNumJobs();
  auto checkRef = [&](Operation *op, RefAttr ref,
                      StringRef role) -> LogicalResult {
    BufferOp buffer = lookupBuffer(ref);
    if (!buffer)
      return op->emitOpError()
             << role << " names unknown buffer " << ref.getBuffer();
    bool host = buffer.getSpace() == Space::host;
    if (host ? ref.getJob() != -1
             : (ref.getJob() < 0 || ref.getJob() >= numJobs))
      return op->emitOpError() << role << " " << ref.getBuffer() << " uses job "
                               << ref.getJob() << "; "
                               << (host ? "host buffers take job -1"
                                        : "worker buffers take a job in [0, " +
                                              std::to_string(numJobs) + ")");
    if (ref.getSlot() < 0 || ref.getSlot() >= buffer.getSlots())
      return op->emitOpError()
             << role << " " << ref.getBuffer() << " slot " << ref.getSlot()
             << " is outside its " << buffer.getSlots() << " slot(s)";
    if (ref.getOffset() < 0 || ref.getBytes() < 0 ||
        ref.getOffset() + ref.getBytes() > buffer.getBytes())
      return op->emitOpError()
             << role << " " << ref.getBuffer() << " bytes [" << ref.getOffset()
             << ", " << ref.getOffset() + ref.getBytes()
             << ") exceed its slot of " << buffer.getBytes() << " bytes";
    return success();
  };
  StringRef mode = getOptimizer();
  if (mode != "sync" && mode != "overlap" && mode != "stale")
    return emitOpError("optimizer '")
           << mode << "' is none of sync, overlap and stale";
  int stashes = 0, staleUpdates = 0;
  for (Operation &op : body) {
    LogicalResult result =
        TypeSwitch<Operation *, LogicalResult>(&op)
            .Case([&](CopyOp c) -> LogicalResult {
              if (failed(checkRef(c, c.getSrc(), "source")) ||
                  failed(checkRef(c, c.getDst(), "destination")))
                return failure();
              if (c.getJob() < 0 || c.getJob() >= numJobs)
                return c.emitOpError("job ") << c.getJob() << " out of range";
              return success();
            })
            .Case([&](FillZeroOp f) -> LogicalResult {
              return checkRef(f, f.getDst(), "dst");
            })
            .Case([&](LaunchOp l) -> LogicalResult {
              auto stage = dyn_cast_or_null<StageOp>(
                  lookupSymbol(l.getStageAttr().getAttr()));
              if (!stage)
                return l.emitOpError("names unknown stage ")
                       << l.getStageAttr();
              if (l.getJob() < 0 || l.getJob() >= numJobs ||
                  getJobStage(l.getJob()) != stage)
                return l.emitOpError("job ")
                       << l.getJob() << " does not run stage "
                       << l.getStageAttr();
              for (auto list :
                   {l.getInputs(), l.getOutputs(), l.getAccumulate()})
                for (Attribute a : list)
                  if (failed(checkRef(l, cast<RefAttr>(a), "operand")))
                    return failure();
              return success();
            })
            .Case([&](HostTaskOp h) -> LogicalResult {
              if (h.getStageAttr() && !dyn_cast_or_null<StageOp>(lookupSymbol(
                                          h.getStageAttr().getAttr())))
                return h.emitOpError("names unknown stage ")
                       << h.getStageAttr();
              const HostTaskKind kind = h.getKind();
              if (kind == HostTaskKind::stash_grads ||
                  kind == HostTaskKind::stale_optimizer) {
                if (getOptimizer() != "stale")
                  return h.emitOpError("a ")
                         << stringifyHostTaskKind(kind)
                         << " task belongs to a stale program, not a "
                         << getOptimizer() << " one";
                if (h.getStageAttr())
                  return h.emitOpError("a ")
                         << stringifyHostTaskKind(kind)
                         << " task serves every stage; it takes no stage";
                if (!lookupSymbol(kGradStashBuffer))
                  return h.emitOpError("needs the @")
                         << kGradStashBuffer << " buffer";
                ++(kind == HostTaskKind::stash_grads ? stashes : staleUpdates);
              } else if (kind == HostTaskKind::optimizer &&
                         getOptimizer() == "stale") {
                return h.emitOpError("a stale program updates the weights "
                                     "with its stale_optimizer task only");
              }
              return success();
            })
            .Default([](Operation *) { return success(); });
    if (failed(result))
      return failure();
  }
  if (mode == "stale" && (stashes != 1 || staleUpdates != 1))
    return emitOpError("a stale program has one stash_grads and one "
                       "stale_optimizer task per step, not ")
           << stashes << " and " << staleUpdates;
  return success();
}

//===----------------------------------------------------------------------===//
// StageOp, CopyOp
//===----------------------------------------------------------------------===//

LogicalResult StageOp::verify() {
  if (getFirstLayer() < 0 || getEndLayer() <= getFirstLayer())
    return emitOpError("layers ")
           << getFirstLayer() << " to " << getEndLayer() << " are empty";
  if (getParams().size() != getParamOffsets().size() ||
      getParams().size() != getParamSizes().size())
    return emitOpError("params, param_offsets and param_sizes differ in "
                       "length");
  if (getGrads().size() != getGradOffsets().size() ||
      getGrads().size() != getGradSizes().size())
    return emitOpError("grads, grad_offsets and grad_sizes differ in length");
  if (ArrayAttr bf16 = getBf16ParamsAttr())
    for (Attribute name : bf16)
      if (!llvm::is_contained(getParams(), name))
        return emitOpError("holds ")
               << name << " in bf16 (bf16_params) but not in its image";
  // The pieces [offset, offset + size) lie in order, apart, within `bytes`.
  auto checkPieces = [&](ArrayRef<int64_t> offsets, ArrayRef<int64_t> sizes,
                         int64_t bytes, StringRef what,
                         StringRef bytesName) -> LogicalResult {
    int64_t end = 0;
    for (auto [offset, size] : llvm::zip(offsets, sizes)) {
      if (offset < end)
        return emitOpError(what) << " overlap or are out of order";
      end = offset + size;
    }
    if (end > bytes)
      return emitOpError(what)
             << " end at " << end << ", past " << bytesName << " " << bytes;
    return success();
  };
  if (failed(checkPieces(getParamOffsets(), getParamSizes(), getParamBytes(),
                         "parameter pieces", "param_bytes")) ||
      failed(checkPieces(getGradOffsets(), getGradSizes(), getGradBytes(),
                         "gradient parts", "grad_bytes")))
    return failure();
  if (getKind() == StageKind::forward && !getGrads().empty())
    return emitOpError("a forward stage produces no gradients");
  size_t residentGrads = getResidentGrads() ? getResidentGrads()->size() : 0;
  if (residentGrads !=
          (getResidentGradOffsets() ? getResidentGradOffsets()->size() : 0) ||
      residentGrads !=
          (getResidentGradSizes() ? getResidentGradSizes()->size() : 0))
    return emitOpError("resident_grads, resident_grad_offsets and "
                       "resident_grad_sizes differ in length");
  if (getKind() == StageKind::forward && residentGrads)
    return emitOpError("a forward stage produces no gradients");
  return success();
}

LogicalResult ResidentOp::verify() {
  // I64Attr reads back unsigned; -1 means "none".
  const int64_t weights = getWeights(), expAvg = getExpAvg(),
                expAvgSq = getExpAvgSq(), sum = getSum(),
                normSum = getNormSum();
  for (int64_t offset : {weights, expAvg, expAvgSq, sum, normSum})
    if (offset < -1)
      return emitOpError("has offset ") << offset << "; -1 means none";
  // Held in bf16 alone: a frozen weight, read through its bf16 copy.
  if (weights < 0 && (!getBf16() || expAvg >= 0))
    return emitOpError("has no fp32 weights but ")
           << (expAvg >= 0 ? "trains" : "no bf16 copy either");
  if ((expAvg < 0) != (expAvgSq < 0))
    return emitOpError("has one AdamW moment without the other");
  if ((sum < 0) != (normSum < 0))
    return emitOpError("has one gradient sum without the other");
  if (expAvg < 0 && sum >= 0)
    return emitOpError("sums the gradient of a parameter without moments");
  return success();
}

LogicalResult CopyOp::verify() {
  if (getSrc().getBytes() != getDst().getBytes())
    return emitOpError("copies ")
           << getSrc().getBytes() << " bytes into a range of "
           << getDst().getBytes();
  Stream expected = Stream::act_upload;
  switch (getKind()) {
  case CopyKind::param_upload:
    expected = Stream::param_upload;
    break;
  case CopyKind::handoff:
    // Device to device, or the host-staged legs: download, then upload.
    if (getStream() == Stream::download)
      return success();
    expected = Stream::act_upload;
    break;
  case CopyKind::input_upload:
  case CopyKind::reload:
    expected = Stream::act_upload;
    break;
  case CopyKind::checkpoint:
  case CopyKind::grad_download:
  case CopyKind::loss_download:
    expected = Stream::download;
    break;
  }
  if (getStream() != expected)
    return emitOpError("a ")
           << stringifyCopyKind(getKind()) << " copy runs on the "
           << stringifyStream(expected) << " stream, not "
           << stringifyStream(getStream());
  return success();
}

//===----------------------------------------------------------------------===//
// Accesses
//===----------------------------------------------------------------------===//

namespace rondo::exec {

std::optional<Queue> getQueue(Operation *op) {
  if (auto c = dyn_cast<CopyOp>(op))
    return Queue{c.getJob(), static_cast<int>(c.getStream())};
  if (auto f = dyn_cast<FillZeroOp>(op))
    return Queue{f.getJob(), static_cast<int>(Stream::compute)};
  if (auto l = dyn_cast<LaunchOp>(op))
    return Queue{l.getJob(), static_cast<int>(Stream::compute)};
  if (auto h = dyn_cast<HostTaskOp>(op))
    return Queue{-1, static_cast<int>(Stream::host) +
                         (h.getKind() == HostTaskKind::load_batch ? 0 : 1)};
  return std::nullopt;
}

SmallVector<StringAttr> finalisedParams(ProgramOp program, StageOp stage) {
  llvm::MapVector<StringAttr, StageOp> last;
  for (int64_t n = 0; n < program.getNumJobs(); ++n) {
    StageOp s = program.getJobStage(n);
    for (Attribute g : s.getGrads())
      last[cast<StringAttr>(g)] = s;
    if (ArrayAttr resident = s.getResidentGradsAttr())
      for (Attribute g : resident)
        last[cast<StringAttr>(g)] = s;
  }
  SmallVector<StringAttr> params;
  for (auto &[name, s] : last)
    if (!stage || s == stage)
      params.push_back(name);
  return params;
}

static void paramAccesses(ProgramOp program, RefAttr ref, bool write,
                          SmallVectorImpl<Access> &out) {
  // The slot of @params is a stage: translate the image range into ranges of
  // the parameters it covers.
  StageOp stage;
  int64_t k = 0;
  for (StageOp s : program.getBody().getOps<StageOp>())
    if (k++ == ref.getSlot())
      stage = s;
  if (!stage)
    return;
  int64_t lo = ref.getOffset(), hi = ref.getOffset() + ref.getBytes();
  for (auto [name, offset, size] : llvm::zip(
           stage.getParams(), stage.getParamOffsets(), stage.getParamSizes())) {
    int64_t a = std::max(lo, offset), b = std::min(hi, offset + size);
    if (a >= b)
      continue;
    Access acc;
    acc.buffer = StringAttr::get(program.getContext(), kParamsBuffer);
    acc.param = cast<StringAttr>(name);
    acc.offset = a - offset;
    acc.bytes = b - a;
    acc.write = write;
    out.push_back(acc);
  }
}

void collectAccesses(ProgramOp program, Operation *op,
                     SmallVectorImpl<Access> &out) {
  auto add = [&](RefAttr ref, bool write) {
    if (ref.getBuffer().getValue() == kParamsBuffer)
      return paramAccesses(program, ref, write, out);
    Access acc;
    acc.buffer = ref.getBuffer().getAttr();
    acc.job = ref.getJob();
    acc.slot = ref.getSlot();
    acc.offset = ref.getOffset();
    acc.bytes = ref.getBytes();
    acc.write = write;
    out.push_back(acc);
  };
  auto wholeBuffer = [&](StringRef name, bool write) {
    auto buffer = dyn_cast_or_null<BufferOp>(
        program.lookupSymbol(StringAttr::get(program.getContext(), name)));
    if (!buffer)
      return;
    for (int64_t s = 0; s < buffer.getSlots(); ++s) {
      Access acc;
      acc.buffer = buffer.getSymNameAttr();
      acc.slot = s;
      acc.bytes = buffer.getBytes();
      acc.write = write;
      out.push_back(acc);
    }
  };
  if (auto c = dyn_cast<CopyOp>(op)) {
    add(c.getSrc(), false);
    add(c.getDst(), true);
  } else if (auto f = dyn_cast<FillZeroOp>(op)) {
    add(f.getDst(), true);
  } else if (auto l = dyn_cast<LaunchOp>(op)) {
    for (Attribute a : l.getInputs())
      add(cast<RefAttr>(a), false);
    for (Attribute a : l.getOutputs())
      add(cast<RefAttr>(a), true);
    for (Attribute a : l.getAccumulate()) {
      add(cast<RefAttr>(a), false);
      add(cast<RefAttr>(a), true);
    }
  } else if (auto h = dyn_cast<HostTaskOp>(op)) {
    if (h.getKind() == HostTaskKind::load_batch) {
      wholeBuffer(kHostIdsBuffer, true);
      wholeBuffer(kHostLabelsBuffer, true);
      return;
    }
    if (h.getKind() == HostTaskKind::stash_grads) {
      wholeBuffer(kHostGradsBuffer, false);
      wholeBuffer(kGradStashBuffer, true);
      return;
    }
    StageOp only;
    if (h.getStageAttr())
      only = dyn_cast_or_null<StageOp>(
          program.lookupSymbol(h.getStageAttr().getAttr()));
    SmallVector<StringAttr> params = finalisedParams(program, only);
    llvm::SmallDenseSet<StringAttr> mine(params.begin(), params.end());
    // The stale update reads the previous step's gradients, set aside.
    auto hostGrads = StringAttr::get(
        program.getContext(), h.getKind() == HostTaskKind::stale_optimizer
                                  ? kGradStashBuffer
                                  : kHostGradsBuffer);
    for (StageOp s : program.getBody().getOps<StageOp>())
      for (auto [name, offset, size] :
           llvm::zip(s.getGrads(), s.getGradOffsets(), s.getGradSizes()))
        if (mine.count(cast<StringAttr>(name))) {
          Access acc;
          acc.buffer = hostGrads;
          acc.offset = s.getHostGradOffset() + offset;
          acc.bytes = size;
          out.push_back(acc);
        }
    // Resident parameters: the task reads their gradient parts on the
    // worker and writes their weights, moments and sums there.
    auto residentGrads =
        StringAttr::get(program.getContext(), kResidentGradsBuffer);
    int64_t job = 0;
    for (int64_t n = 0; n < program.getNumJobs(); ++n) {
      StageOp s = program.getJobStage(n);
      if (!s || !s.getResidentGradsAttr())
        continue;
      for (auto [name, offset, size] :
           llvm::zip(s.getResidentGradsAttr(), *s.getResidentGradOffsets(),
                     *s.getResidentGradSizes()))
        if (mine.count(cast<StringAttr>(name))) {
          Access acc;
          acc.buffer = residentGrads;
          acc.job = n;
          acc.offset = offset;
          acc.bytes = size;
          out.push_back(acc);
          job = n;
        }
    }
    auto resident = StringAttr::get(program.getContext(), kResidentBuffer);
    for (ResidentOp r : program.getBody().getOps<ResidentOp>()) {
      if (!mine.count(r.getParamAttr()))
        continue;
      // The update also rewrites the weights' bf16 copy (half the bytes).
      const int64_t bytes = r.getBytes();
      for (auto [offset, size] :
           {std::pair{int64_t(r.getWeights()), bytes},
            {int64_t(r.getExpAvg()), bytes},
            {int64_t(r.getExpAvgSq()), bytes},
            {int64_t(r.getSum()), bytes},
            {int64_t(r.getNormSum()), bytes},
            {int64_t(r.getBf16().value_or(-1)), bytes / 2}}) {
        if (offset < 0)
          continue;
        out.push_back({resident, job, /*slot=*/0, offset, size,
                       /*param=*/{}, /*write=*/true});
      }
    }
    // Every stage image holding the parameter has the same bytes; take
    // the parameter's size from the first.
    llvm::SmallDenseSet<StringAttr> seen;
    for (StageOp s : program.getBody().getOps<StageOp>())
      for (auto [name, size] : llvm::zip(s.getParams(), s.getParamSizes())) {
        auto n = cast<StringAttr>(name);
        if (!mine.count(n) || !seen.insert(n).second)
          continue;
        Access acc;
        acc.buffer = StringAttr::get(program.getContext(), kParamsBuffer);
        acc.param = n;
        acc.bytes = size;
        acc.write = true;
        out.push_back(acc);
      }
  }
}

} // namespace rondo::exec
