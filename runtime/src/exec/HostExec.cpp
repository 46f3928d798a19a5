//===- HostExec.cpp - The host backend of the exec C API ------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "exec/HostExec.h"

#include "ThreadPools.h"
#include "rondo/runtime/Error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rondo::rt {

namespace {

constexpr size_t kAlignment = 64;
/// Roles of the two host threads, after the worker roles of rondo_stream.
constexpr int32_t kDataRole = 5;
constexpr int32_t kOptimizerRole = 6;
constexpr int32_t kNumWorkerRoles = 4;

const char *taskName(int32_t kind) {
  switch (kind) {
  case RONDO_TASK_LOAD_BATCH:
    return "load_batch task";
  case RONDO_TASK_OPTIMIZER:
    return "optimizer task";
  case RONDO_TASK_STASH_GRADS:
    return "gradient stash task";
  case RONDO_TASK_STALE_OPTIMIZER:
    return "stale optimizer task";
  }
  return "host task";
}

/// Tasks that write the master weights (and complete internalEvent).
bool updatesWeights(int32_t kind) {
  return kind == RONDO_TASK_OPTIMIZER || kind == RONDO_TASK_STALE_OPTIMIZER;
}

class AlignedHostPool final : public PinnedPool {
public:
  void *allocate(size_t bytes) override {
    size_t rounded =
        (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void *p = std::aligned_alloc(kAlignment, rounded);
    if (!p)
      throw Error("out of memory allocating " + std::to_string(bytes) +
                  " bytes of host pool");
    std::memset(p, 0, rounded);
    return p;
  }
  void release(void *ptr) override { std::free(ptr); }
};

} // namespace

const char *copyKindName(int32_t kind) {
  switch (kind) {
  case RONDO_COPY_PARAM_UPLOAD:
    return "param_upload";
  case RONDO_COPY_INPUT_UPLOAD:
    return "input_upload";
  case RONDO_COPY_HANDOFF:
    return "handoff";
  case RONDO_COPY_CHECKPOINT:
    return "checkpoint";
  case RONDO_COPY_RELOAD:
    return "reload";
  case RONDO_COPY_GRAD_DOWNLOAD:
    return "grad_download";
  case RONDO_COPY_LOSS_DOWNLOAD:
    return "loss_download";
  }
  return "copy";
}

std::unique_ptr<PinnedPool> makeHostPinnedPool() {
  return std::make_unique<AlignedHostPool>();
}

HostExec::HostExec(const rondo_program &program, const ModelSpec &model,
                   const ProgramInfo &info, const void *const *params,
                   ExecClient &client, bool recordTrace, int64_t firstRotation,
                   std::unique_ptr<DeviceOps> deviceOps,
                   std::vector<bool> pageable)
    : program(program), model(model), info(info), params(params),
      client(client), recordTrace(recordTrace), firstRotation(firstRotation),
      origin(std::chrono::steady_clock::now()) {
  device = deviceOps ? std::move(deviceOps) : makeHostDeviceOps(0, "");
  pool = device->makeHostPool();
  hostPool = static_cast<char *>(pool->allocate(size_t(program.hostPoolBytes)));
  for (int32_t w = 0; w < program.workers; ++w) {
    arenas.push_back(
        device->allocateArena(w, size_t(program.workerArenaBytes)));
    if (program.predictedWorkerBytes > 0)
      device->limitToPlannedMemory(w, program.predictedWorkerBytes);
  }
  // Parameter uploads read the master weights directly, pinned; weights
  // mapped from their files stay pageable (pinning would read them all in
  // and hold them), and their copies go through the driver's staging.
  for (int32_t i = 0; i < model.numParams; ++i) {
    int64_t n = 1;
    for (int d = 0; d < model.params[i].rank; ++d)
      n *= model.params[i].dims[d];
    if (size_t(i) < pageable.size() && pageable[size_t(i)])
      continue;
    if (params && params[i] && n > 0) {
      void *weights = const_cast<void *>(params[i]);
      device->registerHostMemory(
          weights, size_t(n * storedElementBytes(model.params[i])));
      registered.push_back(weights);
    }
  }
  sortedPieces.resize(size_t(program.numStages));
  for (int32_t s = 0; s < program.numStages; ++s) {
    std::vector<int32_t> &order = sortedPieces[size_t(s)];
    for (int32_t i = 0; i < program.stages[s].numPieces; ++i)
      order.push_back(i);
    const rondo_param_piece *pieces = program.stages[s].pieces;
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return pieces[a].imageOffset < pieces[b].imageOffset;
    });
  }
  gradDownloads.resize(size_t(program.numStages));
  optimizerIssued.assign(size_t(program.numStages) + 1, -2);
  gradReaderIssued.assign(size_t(program.numStages) + 1, -2);
  // Program events, the optimizer tasks' (sync, then per stage), the stash.
  generation.assign(
      size_t(program.numEvents) + 1 + size_t(program.numStages) + 1, -1);

  for (int32_t w = 0; w < program.workers; ++w)
    for (int32_t r = 0; r < kNumWorkerRoles; ++r) {
      auto s = std::make_unique<Stream>();
      s->worker = w;
      s->role = r;
      streams.push_back(std::move(s));
    }
  for (int32_t r : {kDataRole, kOptimizerRole}) {
    auto s = std::make_unique<Stream>();
    s->role = r;
    streams.push_back(std::move(s));
  }
  // A host worker's streams share a thread, the compute stream's (first,
  // so that it binds the thread); hand-offs in and gradients out go before
  // its kernels, the next job's parameters after them.
  const bool shared = device->streamsShareCores();
  for (int32_t w = 0; w < program.workers; ++w) {
    if (!shared)
      break;
    auto server = std::make_unique<Server>();
    for (int32_t r : {RONDO_STREAM_COMPUTE, RONDO_STREAM_ACT_UPLOAD,
                      RONDO_STREAM_DOWNLOAD, RONDO_STREAM_PARAM_UPLOAD})
      server->streams.push_back(&streamOf(w, r));
    servers.push_back(std::move(server));
  }
  for (auto &s : streams)
    if (!shared || s->worker < 0) {
      auto server = std::make_unique<Server>();
      server->streams.push_back(s.get());
      servers.push_back(std::move(server));
    }
  for (auto &server : servers)
    for (Stream *s : server->streams)
      s->server = server.get();
  for (auto &server : servers)
    server->thread =
        std::thread([this, sv = server.get()] { run(*sv); });
}

HostExec::~HostExec() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  wakeEveryone();
  for (auto &server : servers)
    if (server->thread.joinable())
      server->thread.join();
  for (size_t w = 0; w < arenas.size(); ++w)
    device->releaseArena(int32_t(w), arenas[w]);
  for (void *p : registered)
    device->unregisterHostMemory(p);
  pool->release(hostPool);
}

double HostExec::nowUs() const {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - origin)
      .count();
}

void HostExec::beginStep(int64_t step, bool eval, float lossScale, int32_t pass,
                         int32_t passes) {
  if (started)
    ++tag.seq;
  started = true;
  tag.step = step;
  tag.eval = eval;
  tag.lossScale = lossScale;
  tag.pass = pass;
  tag.passes = passes;
  for (auto &d : gradDownloads)
    d.clear();
}

int32_t HostExec::workerOf(int32_t job) const {
  const int64_t n = program.workers;
  int64_t x = (int64_t(program.firstWorker) +
               ((firstRotation + tag.seq) % n) * (program.numJobs % n) + job) %
              n;
  return int32_t(x < 0 ? x + n : x);
}

HostExec::Stream &HostExec::streamOf(int32_t worker, int32_t role) {
  if (worker < 0)
    return *streams[size_t(program.workers) * kNumWorkerRoles +
                    (role == kDataRole ? 0 : 1)];
  return *streams[size_t(worker) * kNumWorkerRoles + size_t(role)];
}

std::string HostExec::describe(const char *op, int32_t job,
                               int32_t microbatch) const {
  // Numbered from 1, as the trainer's progress lines and messages are.
  std::string s = std::string(op) + " of step " + std::to_string(tag.step + 1);
  if (job >= 0 && job < program.numJobs)
    s += ", job " + std::to_string(job) + " (stage " +
         program.stages[program.jobStages[job]].name + ")";
  if (microbatch >= 0)
    s += ", microbatch " + std::to_string(microbatch);
  return s;
}

std::string HostExec::Site::text() const {
  std::string s = exec->describe(op, job, microbatch);
  if (detail)
    s += std::string(", ") + detail;
  if (operandIndex >= 0)
    s += ", operand " + std::to_string(operandIndex);
  return s;
}

char *HostExec::resolve(const rondo_ref &ref, int64_t bytes, bool exact,
                        const Site &what) {
  if (ref.buffer < 0 || ref.buffer >= program.numBuffers)
    throw Error("exec: " + what.text() + ": no buffer " +
                std::to_string(ref.buffer));
  const rondo_buffer_desc &d = program.buffers[ref.buffer];
  auto where = [&] {
    return "buffer '" + std::string(d.name ? d.name : "?") + "' (job " +
           std::to_string(ref.job) + ", slot " + std::to_string(ref.slot) +
           ", offset " + std::to_string(ref.offset) + ", " +
           std::to_string(bytes) + " bytes)";
  };
  char *base;
  if (d.space == RONDO_SPACE_HOST) {
    if (ref.job != -1)
      throw Error("exec: " + what.text() + ": " + where() +
                  " is a host buffer, its ref must have job -1");
    base = hostPool;
  } else {
    if (ref.job < 0 || ref.job >= program.numJobs)
      throw Error("exec: " + what.text() + ": " + where() + " names no job");
    base = arenas[size_t(workerOf(ref.job))];
  }
  // A copy may run over several consecutive slots (all microbatches at
  // once), never past the buffer.
  const int64_t start = ref.slot * d.bytes + ref.offset;
  if (ref.slot < 0 || ref.slot >= d.count || ref.offset < 0 || bytes < 0 ||
      (exact ? start + bytes > d.count * d.bytes : ref.offset >= d.bytes))
    throw Error("exec: " + what.text() + ": " + where() +
                " is outside the buffer (" + std::to_string(d.count) +
                " slots of " + std::to_string(d.bytes) + " bytes)");
  return base + d.offset + start;
}

void HostExec::addAwaits(Op &op, const rondo_await *awaits, int32_t numAwaits,
                         const Site &what) {
  if (numAwaits > 0 && !awaits)
    throw Error("exec: " + what.text() + ": null awaits");
  for (int32_t i = 0; i < numAwaits; ++i) {
    const rondo_await &a = awaits[i];
    if (a.event < 0 || a.event >= program.numEvents ||
        (a.previousStep != 0 && a.previousStep != 1))
      throw Error("exec: " + what.text() + ": await " + std::to_string(i) +
                  " names event " + std::to_string(a.event) + " (of " +
                  std::to_string(program.numEvents) + ")");
    op.waits.push_back({a.event, tag.seq - a.previousStep});
  }
}

void HostExec::checkIssue(const Site &what, int32_t event) const {
  if (!started)
    throw Error("exec: " + what.text() + ": issued before the step began");
  if (event < -1 || event >= program.numEvents)
    throw Error("exec: " + what.text() + ": no event " + std::to_string(event));
}

void HostExec::checkJob(const Site &what, int32_t job, bool hostAllowed) const {
  if (job < (hostAllowed ? -1 : 0) || job >= program.numJobs)
    throw Error("exec: " + what.text() + ": no job " + std::to_string(job));
}

void HostExec::copy(int32_t event, int32_t kind, int32_t stream, int32_t job,
                    int32_t microbatch, rondo_ref src, rondo_ref dst,
                    int64_t bytes, const rondo_await *awaits,
                    int32_t numAwaits) {
  const Site what{this, copyKindName(kind), job, microbatch};
  try {
    checkIssue(what, event);
    if (stream < RONDO_STREAM_COMPUTE || stream > RONDO_STREAM_DOWNLOAD)
      throw Error("exec: " + what.text() +
                  ": copies run on a worker stream, not " +
                  std::to_string(stream));
    checkJob(what, job, /*hostAllowed=*/false);
    Op op;
    op.op = TraceRecord::Copy;
    op.event = event;
    op.copyKind = kind;
    op.job = job;
    op.stage = program.jobStages[job];
    op.microbatch = microbatch;
    op.worker = workerOf(job);
    op.tag = tag;
    op.bytes = bytes;
    if (dst.buffer == RONDO_BUFFER_PARAMS)
      throw Error("exec: " + what.text() +
                  ": the master parameters are written by the optimizer only");
    op.dst = resolve(dst, bytes, true, what.part("destination"));
    if (src.buffer == RONDO_BUFFER_PARAMS) {
      if (src.slot < 0 || src.slot >= program.numStages || src.offset < 0 ||
          bytes < 0 || src.offset + bytes > program.stages[src.slot].paramBytes)
        throw Error("exec: " + what.text() + ": parameter image ref (stage " +
                    std::to_string(src.slot) + ", offset " +
                    std::to_string(src.offset) + ", " + std::to_string(bytes) +
                    " bytes) is outside the stage's image");
      op.paramStage = int32_t(src.slot);
      op.srcOffset = src.offset;
      // The upload must see the previous step's updates of its pieces.
      const int64_t updateSeq = tag.seq - 1;
      for (int32_t x : info.updatedBy[size_t(src.slot)])
        if (optimizerIssued[size_t(x) + 1] == updateSeq)
          op.waits.push_back({internalEvent(x), updateSeq});
      if (optimizerIssued[0] == updateSeq)
        op.waits.push_back({internalEvent(-1), updateSeq});
    } else {
      op.src = resolve(src, bytes, true, what.part("source"));
    }
    if (dst.buffer == program.hostGradsBuffer) {
      // Do not overwrite gradients the previous step's tasks still read.
      if (stashIssued == tag.seq - 1)
        op.waits.push_back({stashEvent(), tag.seq - 1});
      for (size_t x = 0; x < gradReaderIssued.size(); ++x)
        if (gradReaderIssued[x] == tag.seq - 1)
          op.waits.push_back({internalEvent(int32_t(x) - 1), tag.seq - 1});
      if (event >= 0)
        gradDownloads[size_t(op.stage)].push_back(event);
    }
    addAwaits(op, awaits, numAwaits, what);
    enqueue(streamOf(op.worker, stream), std::move(op));
  } catch (const Error &e) {
    fail(e.what());
    throw;
  }
}

void HostExec::fillZero(int32_t event, int32_t job, rondo_ref dst,
                        int64_t bytes, const rondo_await *awaits,
                        int32_t numAwaits) {
  const Site what{this, "fill_zero", job, -1};
  try {
    checkIssue(what, event);
    checkJob(what, job, /*hostAllowed=*/true);
    Op op;
    op.op = TraceRecord::Fill;
    op.event = event;
    op.job = job;
    op.stage = job >= 0 ? program.jobStages[job] : -1;
    op.worker = job >= 0 ? workerOf(job) : -1;
    op.tag = tag;
    op.bytes = bytes;
    if (dst.buffer == RONDO_BUFFER_PARAMS)
      throw Error("exec: " + what.text() +
                  ": cannot clear the master parameters");
    op.dst = resolve(dst, bytes, true, what);
    addAwaits(op, awaits, numAwaits, what);
    enqueue(streamOf(op.worker, job >= 0 ? RONDO_STREAM_COMPUTE : kDataRole),
            std::move(op));
  } catch (const Error &e) {
    fail(e.what());
    throw;
  }
}

void HostExec::launch(int32_t event, int32_t job, int32_t microbatch,
                      rondo_stage_fn fn, const rondo_ref *io, int32_t numIo,
                      const rondo_await *awaits, int32_t numAwaits) {
  const Site what{this, "launch", job, microbatch};
  try {
    checkIssue(what, event);
    checkJob(what, job, /*hostAllowed=*/false);
    if (!fn || numIo < 0 || (numIo > 0 && !io))
      throw Error("exec: " + what.text() + ": no stage function or operands");
    Op op;
    op.op = TraceRecord::Launch;
    op.event = event;
    op.job = job;
    op.stage = program.jobStages[job];
    op.microbatch = microbatch;
    op.worker = workerOf(job);
    op.tag = tag;
    op.fn = fn;
    for (int32_t i = 0; i < numIo; ++i) {
      if (io[i].buffer == RONDO_BUFFER_PARAMS)
        throw Error("exec: " + what.text() + ": operand " + std::to_string(i) +
                    " reads the master parameters; upload them first");
      op.io.push_back(resolve(io[i], 0, false, what.operand(i)));
    }
    addAwaits(op, awaits, numAwaits, what);
    enqueue(streamOf(op.worker, RONDO_STREAM_COMPUTE), std::move(op));
  } catch (const Error &e) {
    fail(e.what());
    throw;
  }
}

void HostExec::hostTask(int32_t event, int32_t kind, int32_t stage,
                        const rondo_await *awaits, int32_t numAwaits) {
  const Site what{this, taskName(kind), -1, -1};
  try {
    checkIssue(what, event);
    if (kind < RONDO_TASK_LOAD_BATCH || kind > RONDO_TASK_STALE_OPTIMIZER)
      throw Error("exec: " + what.text() + ": unknown task kind " +
                  std::to_string(kind));
    if (stage < -1 || stage >= program.numStages)
      throw Error("exec: " + what.text() + ": no stage " +
                  std::to_string(stage));
    const bool stale =
        kind == RONDO_TASK_STASH_GRADS || kind == RONDO_TASK_STALE_OPTIMIZER;
    if (stale && stage != -1)
      throw Error("exec: " + what.text() + ": serves every stage, not stage " +
                  std::to_string(stage));
    const std::string mode = program.optimizer ? program.optimizer : "?";
    if (stale && mode != "stale")
      throw Error("exec: " + what.text() +
                  ": belongs to a stale program, not a " + mode + " one");
    Op op;
    op.op = TraceRecord::Task;
    op.event = event;
    op.taskKind = kind;
    op.stage = stage;
    op.tag = tag;
    if (kind == RONDO_TASK_OPTIMIZER || kind == RONDO_TASK_STASH_GRADS) {
      // The task reads gradient images: wait for their downloads.
      std::vector<int32_t> reads;
      if (stage >= 0)
        reads = info.readsGradsOf[size_t(stage)];
      else
        for (int32_t y = 0; y < program.numStages; ++y)
          reads.push_back(y);
      for (int32_t y : reads)
        for (int32_t e : gradDownloads[size_t(y)])
          op.waits.push_back({e, tag.seq});
    }
    if (kind == RONDO_TASK_OPTIMIZER)
      gradReaderIssued[size_t(stage) + 1] = tag.seq;
    if (updatesWeights(kind))
      optimizerIssued[size_t(stage) + 1] = tag.seq;
    if (kind == RONDO_TASK_STASH_GRADS)
      stashIssued = tag.seq;
    addAwaits(op, awaits, numAwaits, what);
    enqueue(streamOf(-1, kind == RONDO_TASK_LOAD_BATCH ? kDataRole
                                                       : kOptimizerRole),
            std::move(op));
  } catch (const Error &e) {
    fail(e.what());
    throw;
  }
}

void HostExec::enqueue(Stream &stream, Op op) {
  bool startable;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (failed)
      return;
    (stream.worker >= 0         ? pendingWorker
     : stream.role == kDataRole ? pendingData
                                : pendingHost)++;
    // Most ops wait for an earlier one; the completion that makes them
    // ready wakes their stream, so waking it now would only cost a
    // futex call and a context switch.
    startable = !stream.busy && stream.queue.empty() && ready(op);
    stream.queue.push_back(std::move(op));
  }
  if (startable)
    stream.server->wake.notify_one();
}

void HostExec::wakeReadyStreams() {
  for (auto &s : streams)
    if (!s->busy && !s->queue.empty() && (failed || ready(s->queue.front())))
      s->server->wake.notify_one();
}

void HostExec::wakeEveryone() {
  for (auto &server : servers)
    server->wake.notify_all();
  cv.notify_all();
}

bool HostExec::ready(const Op &op) const {
  for (const Wait &w : op.waits)
    if (generation[size_t(w.event)] < w.generation)
      return false;
  return true;
}

void HostExec::run(Server &server) {
  Stream &first = *server.streams.front();
#ifdef _OPENMP
  // Workers share the cores; kernels give the same bits for any count.
  // The trainer sized BLAS's pool to the same share (ThreadPools.h). GPU
  // workers compute off the host: the host's tasks take its cores.
  omp_set_num_threads(first.worker >= 0 && first.role != RONDO_STREAM_COMPUTE
                          ? 1
                      : first.worker < 0 && !device->streamsShareCores()
                          ? hostTaskThreadsBesideGpus()
                          : threadsPerWorker(program.workers));
#endif
  try {
    device->bindThread(first.worker,
                       first.worker >= 0 ? first.role : RONDO_STREAM_HOST);
  } catch (const std::exception &e) {
    fail(e.what());
  }
  auto pendingOf = [&](const Stream &st) -> int64_t & {
    return st.worker >= 0         ? pendingWorker
           : st.role == kDataRole ? pendingData
                                  : pendingHost;
  };
  // The first of its streams whose front op can start.
  auto startable = [&]() -> Stream * {
    for (Stream *st : server.streams)
      if (!st->queue.empty() && (failed || ready(st->queue.front())))
        return st;
    return nullptr;
  };
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    Stream *next = nullptr;
    server.wake.wait(lock, [&] {
      return stopping || (next = startable()) != nullptr;
    });
    if (stopping || failed) {
      for (Stream *st : server.streams) {
        pendingOf(*st) -= int64_t(st->queue.size());
        st->queue.clear();
      }
      cv.notify_all();
      if (stopping)
        return;
      continue;
    }
    Stream &s = *next;
    int64_t &pending = pendingOf(s);
    Op op = std::move(s.queue.front());
    s.queue.pop_front();
    s.busy = true;
    s.running = &op;
    s.startedAt = std::chrono::steady_clock::now();
    lock.unlock();
    const double start = recordTrace ? nowUs() : 0;
    std::string error;
    try {
      execute(op);
    } catch (const std::exception &e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
    const double end = recordTrace ? nowUs() : 0;
    lock.lock();
    s.busy = false;
    s.running = nullptr;
    lastCompletion = std::chrono::steady_clock::now();
    --pending;
    if (!error.empty()) {
      if (!failed) {
        failed = true;
        failure = describeOp(op) + ": " + error;
      }
    } else {
      if (op.event >= 0)
        generation[size_t(op.event)] =
            std::max(generation[size_t(op.event)], op.tag.seq);
      if (op.op == TraceRecord::Task && updatesWeights(op.taskKind)) {
        int64_t &g = generation[size_t(internalEvent(op.stage))];
        g = std::max(g, op.tag.seq);
      }
      if (op.op == TraceRecord::Task && op.taskKind == RONDO_TASK_STASH_GRADS) {
        int64_t &g = generation[size_t(stashEvent())];
        g = std::max(g, op.tag.seq);
      }
      if (recordTrace && op.traced) {
        TraceRecord r;
        r.op = op.op;
        r.copyKind = int8_t(op.copyKind);
        r.taskKind = int8_t(op.taskKind);
        r.stream = int8_t(s.worker >= 0 ? s.role : RONDO_STREAM_HOST);
        r.eval = op.tag.eval;
        r.worker = op.worker;
        r.job = op.job;
        r.stage = op.stage;
        r.microbatch = op.microbatch;
        r.step = op.tag.step;
        r.bytes = op.bytes;
        r.startUs = start;
        r.endUs = end;
        s.trace.push_back(r);
      }
    }
    if (failed)
      wakeEveryone();
    else
      wakeReadyStreams();
    cv.notify_all();
  }
}

void HostExec::execute(Op &op) {
  switch (op.op) {
  case TraceRecord::Copy:
    if (op.paramStage >= 0)
      gatherParams(op.worker, op.paramStage, op.srcOffset, op.bytes, op.dst);
    else if (op.bytes > 0)
      device->copy(op.worker, op.dst, op.src, size_t(op.bytes));
    return;
  case TraceRecord::Fill:
    if (op.bytes > 0)
      device->zero(op.worker, op.dst, size_t(op.bytes));
    return;
  case TraceRecord::Launch:
    device->launch(op.worker, op.fn, op.io.data(), op.io.size(),
                   op.tag.lossScale);
    return;
  case TraceRecord::Task:
    if (op.taskKind == RONDO_TASK_LOAD_BATCH) {
      client.loadBatch(op.tag);
    } else if (op.taskKind == RONDO_TASK_STASH_GRADS) {
      const int64_t bytes = hostGradsBytes();
      const char *from = hostBuffer(program.hostGradsBuffer);
      char *to = hostBuffer(program.gradStashBuffer);
      // In 1 MiB pieces over the optimizer thread's OpenMP threads.
      const int64_t piece = int64_t(1) << 20;
#pragma omp parallel for schedule(static)
      for (int64_t at = 0; at < bytes; at += piece)
        std::memcpy(to + at, from + at, size_t(std::min(piece, bytes - at)));
    } else if (op.taskKind == RONDO_TASK_STALE_OPTIMIZER) {
      // The trace shows the update under the step it applies.
      const int64_t step = client.optimizeStashed(op.tag);
      op.traced = step >= 0;
      if (op.traced)
        op.tag.step = step;
    } else {
      client.optimize(op.tag, op.stage);
    }
    return;
  }
}

void HostExec::gatherParams(int32_t worker, int32_t stage, int64_t offset,
                            int64_t bytes, char *dst) const {
  // The range may cut pieces; bytes between pieces (alignment) are zero.
  const rondo_stage_desc &st = program.stages[stage];
  const int64_t end = offset + bytes;
  int64_t pos = offset;
  for (int32_t i : sortedPieces[size_t(stage)]) {
    const rondo_param_piece &pc = st.pieces[i];
    if (pc.imageOffset >= end)
      break;
    int64_t lo = std::max(pos, pc.imageOffset);
    int64_t hi = std::min(end, pc.imageOffset + pc.bytes);
    if (hi <= lo)
      continue;
    if (lo > pos)
      device->zero(worker, dst + (pos - offset), size_t(lo - pos));
    device->copy(worker, dst + (lo - offset),
                 reinterpret_cast<const char *>(params[pc.param]) +
                     (lo - pc.imageOffset),
                 size_t(hi - lo));
    pos = hi;
  }
  if (pos < end)
    device->zero(worker, dst + (pos - offset), size_t(end - pos));
}

std::string HostExec::describeOp(const Op &op) const {
  const char *kind = op.op == TraceRecord::Launch ? "launch"
                     : op.op == TraceRecord::Task ? taskName(op.taskKind)
                     : op.op == TraceRecord::Fill ? "fill_zero"
                                                  : copyKindName(op.copyKind);
  std::string s =
      std::string(kind) + " of step " + std::to_string(op.tag.step + 1);
  if (op.job >= 0)
    s += ", job " + std::to_string(op.job);
  if (op.stage >= 0)
    s += " (stage " + std::string(program.stages[op.stage].name) + ")";
  if (op.microbatch >= 0)
    s += ", microbatch " + std::to_string(op.microbatch);
  if (op.worker >= 0)
    s += ", worker " + std::to_string(op.worker);
  return s;
}

void HostExec::waitFor(std::unique_lock<std::mutex> &lock,
                       const std::function<bool()> &done) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point waitStart = Clock::now();
  while (!cv.wait_for(lock, std::chrono::milliseconds(200),
                      [&] { return failed || done(); })) {
    // The watchdog: no op completed for watchdogSeconds during this wait.
    // Name the op that has been running longest (it stopped advancing),
    // else the first one waiting.
    if (watchdogSeconds > 0) {
      const Clock::time_point now = Clock::now();
      const double idle = std::chrono::duration<double>(
                              now - std::max(waitStart, lastCompletion))
                              .count();
      if (idle >= watchdogSeconds) {
        const Stream *oldest = nullptr;
        for (const auto &st : streams)
          if (st->busy && st->running &&
              (!oldest || st->startedAt < oldest->startedAt))
            oldest = st.get();
        const Op *op = oldest ? oldest->running : nullptr;
        for (const auto &st : streams)
          if (!op && !st->queue.empty())
            op = &st->queue.front();
        if (op) {
          char seconds[32];
          std::snprintf(seconds, sizeof(seconds), "%g", watchdogSeconds);
          failure = std::string("exec: watchdog: no op of program ") +
                    program.name + " completed for " + seconds +
                    " s (--watchdog-seconds): the " + describeOp(*op) +
                    (oldest ? " has not finished" : " has not started");
          failed = true;
          watchdogFired = oldest != nullptr;
          wakeEveryone();
          return;
        }
      }
    }
    // Nothing runs and nothing can start: an await that no op issued so far
    // completes. A compiler bug; say which op waits for what.
    bool progress = false;
    const Stream *blocked = nullptr;
    for (const auto &s : streams) {
      if (s->busy || (!s->queue.empty() && ready(s->queue.front())))
        progress = true;
      else if (!s->queue.empty() && !blocked)
        blocked = s.get();
    }
    if (progress || !blocked)
      continue;
    const Op &op = blocked->queue.front();
    std::string message =
        "exec: deadlock: the " + describeOp(op) + " waits for";
    for (const Wait &w : op.waits)
      if (generation[size_t(w.event)] < w.generation)
        message += " event " + std::to_string(w.event) + " (generation " +
                   std::to_string(w.generation) + ", completed up to " +
                   std::to_string(generation[size_t(w.event)]) + ")";
    message += ", which no issued op completes";
    failed = true;
    failure = message;
    wakeEveryone();
    return;
  }
}

void HostExec::barrier() {
  std::unique_lock<std::mutex> lock(mu);
  waitFor(lock, [&] { return pendingWorker == 0; });
}

void HostExec::drainHost() {
  std::unique_lock<std::mutex> lock(mu);
  waitFor(lock, [&] { return pendingHost == 0 && pendingData == 0; });
}

void HostExec::waitForUpdate() {
  std::unique_lock<std::mutex> lock(mu);
  const int64_t seq = tag.seq;
  waitFor(lock, [&] { return generation[size_t(internalEvent(-1))] >= seq; });
}

void HostExec::drainData() {
  std::unique_lock<std::mutex> lock(mu);
  waitFor(lock, [&] { return pendingData == 0; });
}

void HostExec::checkError() {
  std::lock_guard<std::mutex> lock(mu);
  if (failed)
    throw Error(failure);
}

void HostExec::fail(const std::string &message) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed) {
      failed = true;
      failure = message;
    }
  }
  wakeEveryone();
}

char *HostExec::hostBuffer(int32_t buffer) const {
  return hostPool + program.buffers[buffer].offset;
}

std::vector<TraceRecord> HostExec::takeTrace() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<TraceRecord> all;
  for (auto &s : streams) {
    all.insert(all.end(), s->trace.begin(), s->trace.end());
    s->trace.clear();
  }
  std::sort(all.begin(), all.end(),
            [](const TraceRecord &a, const TraceRecord &b) {
              return a.startUs < b.startUs;
            });
  return all;
}

} // namespace rondo::rt
