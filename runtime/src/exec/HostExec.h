//===- HostExec.h - The host backend of the exec C API ----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// `rondo_exec` is an abstract backend: the C entry points of Exec.h forward
// to its virtual functions, so the CUDA backend can slot in later without
// touching generated code. HostExec runs a program on CPU threads:
//
//   * every worker has an arena (one 64-byte aligned allocation) and four
//     stream threads (compute, param upload, activation upload, download);
//   * the host has a data thread (LOAD_BATCH) and an optimizer thread
//     (OPTIMIZER). Exec.h's single host stream is split by task kind so that
//     the next step's batch load does not queue behind this step's
//     optimizer tasks; the tasks share no memory, and awaits order the rest;
//   * every stream is a FIFO: an op starts when the previous op of its stream
//     has finished and its awaits are satisfied;
//   * events are generation counters (the seq of the step that last
//     completed them), guarded by one mutex and condition variable.
//
// Besides the compiler's awaits, HostExec adds the hazards it can derive
// from the tables alone, so a missing await costs speed, never results:
// a task that reads the host gradients (an OPTIMIZER task, a stale
// program's STASH_GRADS task) waits for this step's gradient downloads of
// the stages it reads; a parameter upload waits for the previous step's
// tasks that update any of its pieces (OPTIMIZER, STALE_OPTIMIZER); a
// gradient download waits for the previous step's tasks that read the
// host gradients.
//
// Every program runs the same way: a stale program (one-step-stale
// updates) says in its own ops that its STALE_OPTIMIZER task applies the
// previous step's gradients, which its STASH_GRADS task copied to the
// program's gradStashBuffer, and which events they wait for
// (convert-pipe-to-exec; exec-verify proves it).
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_EXEC_HOSTEXEC_H
#define RONDO_RUNTIME_SRC_EXEC_HOSTEXEC_H

#include "rondo/runtime/DeviceOps.h"
#include "rondo/runtime/Exec.h"
#include "rondo/runtime/Model.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

/// The backend behind the C API (see the file comment).
struct rondo_exec {
  virtual ~rondo_exec() = default;
  virtual void copy(int32_t event, int32_t kind, int32_t stream, int32_t job,
                    int32_t microbatch, rondo_ref src, rondo_ref dst,
                    int64_t bytes, const rondo_await *awaits,
                    int32_t numAwaits) = 0;
  virtual void fillZero(int32_t event, int32_t job, rondo_ref dst,
                        int64_t bytes, const rondo_await *awaits,
                        int32_t numAwaits) = 0;
  virtual void launch(int32_t event, int32_t job, int32_t microbatch,
                      rondo_stage_fn fn, const rondo_ref *io, int32_t numIo,
                      const rondo_await *awaits, int32_t numAwaits) = 0;
  virtual void hostTask(int32_t event, int32_t kind, int32_t stage,
                        const rondo_await *awaits, int32_t numAwaits) = 0;
  virtual void barrier() = 0;
};

namespace rondo::rt {

/// Page-locked host memory on the CUDA backend, aligned malloc here. The
/// pool is allocated once per executor, so the interface is minimal.
class PinnedPool {
public:
  virtual ~PinnedPool() = default;
  /// `bytes` zeroed bytes, 64-byte aligned; throws rt::Error.
  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *ptr) = 0;
};

std::unique_ptr<PinnedPool> makeHostPinnedPool();

/// "param_upload", "handoff", ... for a rondo_copy_kind.
const char *copyKindName(int32_t kind);

/// Which issued step an op belongs to.
struct StepTag {
  int64_t seq = 0;   ///< Issue counter of this executor, from 0.
  int64_t step = 0;  ///< Training step (for eval batches: steps done).
  bool eval = false; ///< An evaluation batch: no update.
  float lossScale = 1.0f;
  /// --grad-accum: this is program step `pass` of the `passes` whose
  /// gradients one update sums (rows pass * batch .. of the step's).
  int32_t pass = 0, passes = 1;
};

/// The trainer's side of host tasks; called on the host threads.
class ExecClient {
public:
  virtual ~ExecClient() = default;
  /// Fills the program's ids and labels host buffers for `tag`.
  virtual void loadBatch(const StepTag &tag) = 0;
  /// AdamW for `stage` (-1: all parameters).
  virtual void optimize(const StepTag &tag, int32_t stage) = 0;
  /// A stale program's STALE_OPTIMIZER task of the step `tag`: AdamW with
  /// the gradients the previous step stashed. Returns the step whose
  /// update it applied (the trace shows the task under it), or -1 when
  /// there was none to apply.
  virtual int64_t optimizeStashed(const StepTag &tag) = 0;
};

/// The derived facts about a program that the executor and the trainer
/// share: gradient parts per parameter and who finalises what.
struct ProgramInfo {
  /// Per model parameter: indices into program.gradParts, in table order.
  std::vector<std::vector<int32_t>> partsOf;
  /// Per model parameter: the stage whose OPTIMIZER task updates it in
  /// overlap mode (the stage of its part that comes last in job order), or
  /// -1 without parts.
  std::vector<int32_t> finalStage;
  /// Per stage: the parameters it finalises, in table order.
  std::vector<std::vector<int32_t>> finalises;
  /// Per stage X: the stages whose gradient images X's task reads.
  std::vector<std::vector<int32_t>> readsGradsOf;
  /// Per stage Y: the stages whose tasks update a parameter of Y's pieces.
  std::vector<std::vector<int32_t>> updatedBy;
  /// Per model parameter: its entry in program.residentParams, or -1 when
  /// it streams.
  std::vector<int32_t> residentOf;
};

/// Checks the program against the model (throws rt::Error naming the
/// program and the table entry) and derives ProgramInfo.
ProgramInfo analyseProgram(const rondo_program &program,
                           const ModelSpec &model);

/// One executed op, for --trace.
struct TraceRecord {
  enum Op : uint8_t { Copy, Fill, Launch, Task };
  Op op = Copy;
  int8_t copyKind = -1; ///< rondo_copy_kind for copies.
  int8_t taskKind = -1; ///< rondo_host_task_kind for tasks.
  int8_t stream = 0;    ///< rondo_stream.
  bool eval = false;
  int32_t worker = -1; ///< -1: host.
  int32_t job = -1;
  int32_t stage = -1;
  int32_t microbatch = -1;
  int64_t step = 0;
  int64_t bytes = 0;
  double startUs = 0, endUs = 0; ///< Steady clock, from the executor's start.
};

class HostExec final : public rondo_exec {
public:
  /// The device's peak-memory lines ("" on the host).
  std::string memoryReport() const { return device->memoryReport(); }
  /// `params` are the trainer's master weights as it holds them, one per
  /// model parameter (fp32, or bf16 where its ParamSpec says so, as the
  /// images carry them); they are read by parameter uploads.
  /// `device` decides what a worker is (host threads' memory or a GPU);
  /// null: the host.
  HostExec(const rondo_program &program, const ModelSpec &model,
           const ProgramInfo &info, const void *const *params,
           ExecClient &client, bool recordTrace, int64_t firstRotation,
           std::unique_ptr<DeviceOps> device = nullptr,
           std::vector<bool> pageable = {});
  ~HostExec() override;

  /// "host" or "cuda".
  const char *backendName() const { return device->name(); }

  /// Starts the next step (program step `pass` of `passes` of training
  /// step `step`); ops issued until the next call belong to it.
  void beginStep(int64_t step, bool eval, float lossScale, int32_t pass = 0,
                 int32_t passes = 1);
  const StepTag &currentTag() const { return tag; }

  void copy(int32_t event, int32_t kind, int32_t stream, int32_t job,
            int32_t microbatch, rondo_ref src, rondo_ref dst, int64_t bytes,
            const rondo_await *awaits, int32_t numAwaits) override;
  void fillZero(int32_t event, int32_t job, rondo_ref dst, int64_t bytes,
                const rondo_await *awaits, int32_t numAwaits) override;
  void launch(int32_t event, int32_t job, int32_t microbatch, rondo_stage_fn fn,
              const rondo_ref *io, int32_t numIo, const rondo_await *awaits,
              int32_t numAwaits) override;
  void hostTask(int32_t event, int32_t kind, int32_t stage,
                const rondo_await *awaits, int32_t numAwaits) override;
  void barrier() override;

  /// Waits until the host threads are idle too.
  void drainHost();
  /// Waits until the data thread is idle (before refilling batch inputs).
  void drainData();
  /// Waits until the current step's task that updates every parameter
  /// (OPTIMIZER of stage -1, or STALE_OPTIMIZER) has run.
  void waitForUpdate();
  /// Throws rt::Error with the first failure of any stream, if any.
  void checkError();
  /// Records a failure (e.g. of the issuing thread) and stops every stream.
  void fail(const std::string &message);
  /// Waits (barrier, drains) fail, naming the op that has not finished,
  /// when no op completes for `seconds` while some op runs or is queued
  /// (0: never).
  void setWatchdog(double seconds) { watchdogSeconds = seconds; }
  /// Whether the watchdog fired: a thread is stuck in an op and cannot be
  /// joined, so the executor must not be destroyed (the trainer exits).
  bool hung() const {
    std::lock_guard<std::mutex> lock(mu);
    return watchdogFired;
  }

  /// Base of a host buffer in the pool.
  char *hostBuffer(int32_t buffer) const;
  /// Base of a worker buffer in `worker`'s arena (device-resident state).
  char *workerBuffer(int32_t worker, int32_t buffer) const {
    return arenas[size_t(worker)] + program.buffers[buffer].offset;
  }
  /// What a worker is: the trainer updates device-resident state through it.
  DeviceOps &deviceOps() const { return *device; }
  /// The worker that runs `job` of the current step.
  int32_t workerOf(int32_t job) const;
  /// Every recorded op, by start time.
  std::vector<TraceRecord> takeTrace();

private:
  struct Wait {
    int32_t event;
    int64_t generation;
  };
  struct Op {
    TraceRecord::Op op = TraceRecord::Copy;
    int32_t event = -1;
    int32_t copyKind = -1;
    int32_t taskKind = -1;
    int32_t job = -1, stage = -1, microbatch = -1, worker = -1;
    StepTag tag;
    char *dst = nullptr;
    const char *src = nullptr;
    int32_t paramStage = -1; ///< >= 0: src is the stage's parameter image.
    int64_t srcOffset = 0;
    int64_t bytes = 0;
    rondo_stage_fn fn = nullptr;
    /// Recorded in the trace (a stale update that applied nothing is not).
    bool traced = true;
    std::vector<void *> io;
    std::vector<Wait> waits;
  };
  struct Server;
  struct Stream {
    int32_t worker = -1; ///< -1: host.
    int32_t role = 0;    ///< rondo_stream, or kDataRole / kOptimizerRole.
    std::deque<Op> queue;
    bool busy = false;
    const Op *running = nullptr; ///< While busy.
    std::chrono::steady_clock::time_point startedAt;
    std::vector<TraceRecord> trace;
    Server *server = nullptr;
  };
  /// A thread that runs the ops of one or more streams, each stream's in
  /// order, whichever front is ready first (its streams in priority
  /// order). A GPU worker's streams each get their own, since each thread
  /// waits for its CUDA stream; a host worker's four share one
  /// (DeviceOps::streamsShareCores): its copies are memcpy on the same
  /// cores as its kernels, and a thread per stream made every hand-off a
  /// wake-up on oversubscribed cores (a 2-worker step of a small model on
  /// 2 cores: 25% idle between stage-jobs).
  struct Server {
    std::vector<Stream *> streams;
    /// Signalled when a front op of its streams may have become ready (or
    /// on stop/failure): a completion wakes only the servers it can
    /// unblock, not every thread.
    std::condition_variable wake;
    std::thread thread;
  };

  /// Where an issued op comes from, for errors; text only on failure, so
  /// issuing builds no strings.
  struct Site {
    const HostExec *exec;
    const char *op;
    int32_t job, microbatch;
    const char *detail = nullptr;
    int32_t operandIndex = -1;
    std::string text() const;
    Site part(const char *d) const {
      Site s = *this;
      s.detail = d;
      return s;
    }
    Site operand(int32_t i) const {
      Site s = *this;
      s.operandIndex = i;
      return s;
    }
  };

  /// The checks every issuing call makes: inside a step, a known event, a
  /// known job (-1, the host, where `hostAllowed`).
  void checkIssue(const Site &what, int32_t event) const;
  void checkJob(const Site &what, int32_t job, bool hostAllowed) const;
  Stream &streamOf(int32_t worker, int32_t role);
  void enqueue(Stream &stream, Op op);
  void run(Server &server);
  /// With `mu` held: wakes every idle stream whose front op is ready.
  void wakeReadyStreams();
  /// With or without `mu`: wakes every stream and the issuing thread (stop,
  /// failure).
  void wakeEveryone();
  void addAwaits(Op &op, const rondo_await *awaits, int32_t numAwaits,
                 const Site &what);
  char *resolve(const rondo_ref &ref, int64_t bytes, bool exact,
                const Site &what);
  std::string describe(const char *op, int32_t job, int32_t microbatch) const;
  void execute(Op &op);
  void gatherParams(int32_t worker, int32_t stage, int64_t offset,
                    int64_t bytes, char *dst) const;
  bool ready(const Op &op) const;
  std::string describeOp(const Op &op) const;
  /// Waits under `lock` until `done` or a failure; a state in which no op
  /// runs or can start is a deadlock and fails the executor.
  void waitFor(std::unique_lock<std::mutex> &lock,
               const std::function<bool()> &done);
  int32_t internalEvent(int32_t stage) const {
    return program.numEvents + 1 + stage;
  }
  int64_t hostGradsBytes() const {
    const rondo_buffer_desc &grads = program.buffers[program.hostGradsBuffer];
    return grads.count * grads.bytes;
  }
  /// Completed by a stale program's STASH_GRADS task.
  int32_t stashEvent() const {
    return program.numEvents + 1 + program.numStages;
  }
  double nowUs() const;

  const rondo_program &program;
  const ModelSpec &model;
  const ProgramInfo &info;
  const void *const *params;
  ExecClient &client;
  const bool recordTrace;
  const int64_t firstRotation;

  std::unique_ptr<DeviceOps> device;
  std::unique_ptr<PinnedPool> pool;
  std::vector<void *> registered; ///< Master weights registered with device.
  char *hostPool = nullptr;
  std::vector<char *> arenas;
  /// Per stage: indices into its pieces, by image offset.
  std::vector<std::vector<int32_t>> sortedPieces;

  StepTag tag;
  bool started = false;
  /// Events completed by this step's gradient downloads, per stage.
  std::vector<std::vector<int32_t>> gradDownloads;
  /// Per internal optimizer event (stage + 1): the seq of the last task
  /// that updates weights (OPTIMIZER, STALE_OPTIMIZER) issued for it, and
  /// of the last one of those that reads the host gradients (OPTIMIZER).
  std::vector<int64_t> optimizerIssued, gradReaderIssued;
  /// The seq of the last STASH_GRADS task issued.
  int64_t stashIssued = -2;

  mutable std::mutex mu;
  /// The issuing thread's waits (barrier, drains); streams wait on their
  /// own `wake`.
  std::condition_variable cv;
  std::vector<int64_t> generation; ///< Program events, then internal ones.
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Server>> servers;
  int64_t pendingWorker = 0, pendingHost = 0, pendingData = 0;
  bool stopping = false;
  bool failed = false;
  std::string failure;
  double watchdogSeconds = 0;
  bool watchdogFired = false;
  std::chrono::steady_clock::time_point lastCompletion;
  std::chrono::steady_clock::time_point origin;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_EXEC_HOSTEXEC_H
