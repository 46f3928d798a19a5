//===- VerifyExec.cpp - Whole-program race freedom --------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Proves, for every exec.program, what the runtime relies on:
//   - every await names an event recorded by an op issued before it;
//   - no range is read before the op that writes it completes (RAW);
//   - no range is overwritten before its readers and its previous writer
//     complete (WAR, WAW);
//   - a worker is stateless between stage-jobs: a job reads worker memory
//     only if the same stage-job wrote it (copies count for the job that
//     receives the data), except the device-resident state (@resident),
//     which the optimizer tasks update in place from step to step;
//   - a stale program's update is the previous step's: its stale_optimizer
//     task is issued before its stash_grads task, so that it reads the
//     gradients the previous step set aside, not this step's (the race
//     rules alone would accept either order, and the other one is a
//     synchronous update).
// "Before" is happens-before: stream order on each worker queue, awaits,
// carried events from the previous step, and barriers. The worker of a job
// changes from step to step (job n of step s runs on worker
// (c0 + s*K + n) mod N), so the pass unrolls as many steps as it takes for
// every alignment of jobs to workers to occur, plus one, and checks them
// all; the program is the same every step, so that covers every step.
//
//===----------------------------------------------------------------------===//

#include "Dialect/Exec/IR/ExecOps.h"
#include "Dialect/Exec/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringMap.h"

#include <numeric>

namespace rondo::exec {
#define GEN_PASS_DEF_EXECVERIFYPASS
#include "Dialect/Exec/Transforms/Passes.h.inc"
} // namespace rondo::exec

using namespace mlir;
using namespace rondo::exec;

namespace {

struct Instance {
  Operation *op;
  int64_t step, job;
  llvm::BitVector before; ///< Instances that happen before this one.
};

struct Record {
  unsigned instance;
  int64_t offset, bytes;
  bool write;
};

LogicalResult verifyProgram(ProgramOp program) {
  const int64_t N = program.getWorkers(), K = program.getNumJobs();
  const int64_t c0 = program.getFirstWorker();
  const int64_t steps = N / std::gcd(K, N) + 1;
  Block &body = program.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());

  SmallVector<Operation *> issueOrder;
  DenseMap<Operation *, unsigned> position;
  for (Operation &op : body)
    if (getQueue(&op) || isa<BarrierOp>(op)) {
      position[&op] = issueOrder.size();
      issueOrder.push_back(&op);
    }
  if (program.getOptimizer() == "stale") {
    HostTaskOp update, stash;
    for (Operation *op : issueOrder)
      if (auto task = dyn_cast<HostTaskOp>(op)) {
        if (task.getKind() == HostTaskKind::stale_optimizer)
          update = task;
        else if (task.getKind() == HostTaskKind::stash_grads && !stash)
          stash = task;
      }
    if (update && stash && position[stash] < position[update])
      return update
                 .emitOpError(
                     "is issued after the stash_grads task of its step, so it "
                     "would apply this step's gradients; the stale update "
                     "applies the previous step's, and comes first")
                 .attachNote(stash.getLoc())
             << "the stash_grads task";
  }
  // Issue order: an op may only await what was issued before it.
  for (Operation *op : issueOrder)
    for (Value awaited : op->getOperands()) {
      Operation *def = awaited.getDefiningOp();
      if (def && (!position.count(def) || position[def] >= position[op]))
        return op->emitOpError("waits for an event before the op that records "
                               "it is issued (")
               << def->getName() << " comes later in issue order)";
    }

  std::vector<Instance> instances;
  DenseMap<std::pair<Operation *, int64_t>, unsigned> instanceOf;
  llvm::StringMap<unsigned> lastOnQueue;
  llvm::StringMap<SmallVector<Record>> history;
  llvm::BitVector barrierReach;
  auto workerOf = [&](int64_t step, int64_t job) {
    return (c0 + step * K + job) % N;
  };

  for (int64_t s = 0; s < steps; ++s) {
    for (Operation *op : issueOrder) {
      if (isa<BarrierOp>(op)) {
        // Everything issued to workers so far happens before what follows.
        for (auto [i, inst] : llvm::enumerate(instances))
          if (getQueue(inst.op)->job >= 0) {
            barrierReach.resize(instances.size());
            barrierReach |= inst.before;
            barrierReach.set(i);
          }
        continue;
      }
      Queue q = *getQueue(op);
      unsigned id = instances.size();
      Instance inst{op, s, q.job, llvm::BitVector(id + 1)};
      auto addPred = [&](unsigned p) {
        llvm::BitVector r = instances[p].before;
        r.resize(id + 1);
        inst.before |= r;
        inst.before.set(p);
      };
      llvm::BitVector fence = barrierReach;
      fence.resize(id + 1);
      inst.before |= fence;
      std::string queue =
          (q.job < 0 ? std::string("host")
                     : "w" + std::to_string(workerOf(s, q.job))) +
          "/" + std::to_string(q.stream);
      if (auto it = lastOnQueue.find(queue); it != lastOnQueue.end())
        addPred(it->second);
      lastOnQueue[queue] = id;
      for (Value awaited : op->getOperands()) {
        if (auto arg = dyn_cast<BlockArgument>(awaited)) {
          if (s == 0)
            continue; // The previous step's events: complete in step 0.
          Operation *def = yield.getOperand(arg.getArgNumber()).getDefiningOp();
          if (def)
            addPred(instanceOf.lookup({def, s - 1}));
          continue;
        }
        addPred(instanceOf.lookup({awaited.getDefiningOp(), s}));
      }
      instances.push_back(std::move(inst));
      instanceOf[{op, s}] = id;

      SmallVector<Access> accesses;
      collectAccesses(program, op, accesses);
      // Reads first: an accumulate reads and writes the same range.
      llvm::stable_sort(accesses, [](const Access &a, const Access &b) {
        return !a.write && b.write;
      });
      for (const Access &a : accesses) {
        int64_t worker = a.job < 0 ? -1 : workerOf(s, a.job);
        std::string key = a.buffer.str() + "/" + std::to_string(worker) + "/" +
                          std::to_string(a.slot) + "/" +
                          (a.param ? a.param.str() : "");
        auto &list = history[key];
        auto where = [&]() {
          std::string text = "@" + a.buffer.str();
          if (a.param)
            text += " (" + a.param.str() + ")";
          else
            text += " slot " + std::to_string(a.slot);
          if (worker >= 0)
            text += " on worker " + std::to_string(worker);
          return text + " in step " + std::to_string(s);
        };
        // Device-resident state lives on its worker for the whole run: the
        // trainer writes it before the first step, the optimizer tasks
        // update it. Only the race rules apply to it.
        const bool persistent = a.buffer.getValue() == kResidentBuffer;
        bool written = false;
        for (const Record &r : list) {
          if (!(a.offset < r.offset + r.bytes && r.offset < a.offset + a.bytes))
            continue;
          if (r.write && !a.write && worker >= 0 && !persistent) {
            written = true;
            const Instance &writer = instances[r.instance];
            // A kernel reads only what its own stage-job produced; a copy
            // is the explicit transfer, reading what its source job wrote.
            int64_t reader = isa<LaunchOp, FillZeroOp>(op) ? q.job : a.job;
            if (writer.step != s || writer.job != reader)
              return op->emitOpError("job ")
                     << reader << " reads " << where() << ", written by job "
                     << writer.job << " of step " << writer.step
                     << ": workers are stateless, so data may only cross "
                        "stage-jobs through an explicit transfer";
          }
          if (!a.write && !r.write)
            continue;
          if (r.instance == id || instances[id].before.test(r.instance))
            continue;
          Operation *other = instances[r.instance].op;
          InFlightDiagnostic diag = op->emitOpError();
          if (!a.write)
            diag << "reads " << where()
                 << " before the op that writes it completes";
          else if (r.write)
            diag << "overwrites " << where()
                 << " before the previous write completes";
          else
            diag << "overwrites " << where() << " before its reader finishes";
          diag.attachNote(other->getLoc())
              << "the conflicting " << other->getName() << " (step "
              << instances[r.instance].step << ")";
          return failure();
        }
        if (!a.write && worker >= 0 && !written && !persistent)
          return op->emitOpError("reads ")
                 << where() << ", which nothing in this stage-job wrote";
        if (a.write)
          hideWrittenBytes(list, a.offset, a.bytes);
        list.push_back({id, a.offset, a.bytes, a.write});
      }
    }
  }
  return success();
}

struct ExecVerifyPass : rondo::exec::impl::ExecVerifyPassBase<ExecVerifyPass> {
  void runOnOperation() override {
    for (ProgramOp program : getOperation().getOps<ProgramOp>())
      if (failed(verifyProgram(program)))
        return signalPassFailure();
  }
};

} // namespace
