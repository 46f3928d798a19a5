//===- ToyPipeline.cpp - A hand-written pipelined "emitted model" ---------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "ToyPipeline.h"
#include "ToyModel.h"

#include "rondo/runtime/FloatConv.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace rondo::toy {

namespace {

constexpr int64_t V = kVocab, D = kDim;
constexpr int64_t kF = sizeof(float);

int32_t gM = 0, gR = 0;
int64_t gT = 0;
bool gGraphLoss = false;
std::atomic<int> gLaunches{0};
int gFailAt = 0;
int64_t gBadCopyStep = -1;
int64_t gDeadlockStep = -1;
int64_t gIssued = 0;
int gActionAt = 0;
void (*gAction)() = nullptr;
std::atomic<int> gActionLaunches{0};
int64_t gNanStep = -1;
int gNanWhere = 0;
bool gNanFrom = false; ///< Every step from gNanStep on.
bool nanInStep(int64_t launch) {
  return gNanStep >= 0 &&
         (gNanFrom ? launch / gM >= gNanStep : launch / gM == gNanStep);
}
std::atomic<int64_t> gTLaunches{0}, gB1Launches{0};

// Stage images (the norm's pieces shrink when it is held in bf16:
// setImages).
rondo_param_piece kF0Pieces[] = {{kEmb, 0, V *D *kF}, {kNorm, V *D *kF, D *kF}};
const rondo_param_piece kTPieces[] = {{kProj, 0, D *V *kF},
                                      {kBias, D *V *kF, V *kF}};
rondo_param_piece kB1Pieces[] = {{kNorm, 0, D *kF}};
constexpr int64_t kTGradBytes = (V * D + D * V + V) * kF;
constexpr int64_t kB1GradBytes = V * D * kF;

rondo_stage_desc gStages[3] = {
    {"F0", RONDO_STAGE_FORWARD, 0, 1, kF0Pieces, 2, (V * D + D) * kF, 0, 0,
     0.001},
    {"T", RONDO_STAGE_TAIL, 1, 2, kTPieces, 2, (D * V + V) * kF, kTGradBytes, 0,
     0.002},
    {"B1", RONDO_STAGE_BACKWARD, 0, 1, kB1Pieces, 1, D *kF, kB1GradBytes,
     kTGradBytes, 0.0015},
};
const int32_t kJobStages[] = {0, 1, 2};
// Table order: emb's zero part in T first, its real part in B1 last.
const rondo_grad_part kGradParts[] = {
    {kEmb, 1, 0},
    {kProj, 1, V *D *kF},
    {kBias, 1, (V * D + D * V) * kF},
    {kEmb, 2, kTGradBytes},
};

enum Buf : int32_t {
  WParams,
  WGrads,
  WIds,
  WLabels,
  WH,
  WHIn,
  WDh,
  WDhIn,
  WLoss,
  HIds,
  HLabels,
  HLoss,
  HGrads,
  HCkpt,
  HStash,
  kNumBuffers
};
rondo_buffer_desc gBuffers[kNumBuffers];
int64_t gArena = 0, gPool = 0;

int64_t align64(int64_t x) { return (x + 63) / 64 * 64; }

/// Bytes of the norm in the images: fp32, or bf16 (toyNormInBf16).
int64_t normBytes() { return D * (toyNormIsBf16() ? 2 : kF); }

void setImages() {
  kF0Pieces[1].bytes = kB1Pieces[0].bytes = normBytes();
  gStages[0].paramBytes = V * D * kF + normBytes();
  gStages[2].paramBytes = normBytes();
}

/// The norm of an image as fp32: as it lies, or widened from bf16.
const float *normOf(const void *image, float (&wide)[D]) {
  if (!toyNormIsBf16())
    return static_cast<const float *>(image);
  const uint16_t *bits = static_cast<const uint16_t *>(image);
  for (int64_t d = 0; d < D; ++d)
    wide[d] = rt::bf16ToFloat(bits[d]);
  return wide;
}

void layout() {
  const int64_t tokens = int64_t(gR) * gT * 8;
  const int64_t act = int64_t(gR) * gT * D * kF;
  struct Spec {
    const char *name;
    int32_t space;
    int64_t count, bytes;
  };
  const Spec specs[kNumBuffers] = {
      {"w.params", RONDO_SPACE_WORKER, 3, align64((V * D + D) * kF)},
      {"w.grads", RONDO_SPACE_WORKER, 3, align64(kTGradBytes)},
      {"w.ids", RONDO_SPACE_WORKER, 3 * gM, tokens},
      {"w.labels", RONDO_SPACE_WORKER, gM, tokens},
      {"w.h", RONDO_SPACE_WORKER, gM, act},
      {"w.hin", RONDO_SPACE_WORKER, gM, act},
      {"w.dh", RONDO_SPACE_WORKER, gM, act},
      {"w.dhin", RONDO_SPACE_WORKER, gM, act},
      {"w.loss", RONDO_SPACE_WORKER, gM, kF},
      {"ids", RONDO_SPACE_HOST, gM, tokens},
      {"labels", RONDO_SPACE_HOST, gM, tokens},
      {"loss", RONDO_SPACE_HOST, gM, kF},
      {"grads", RONDO_SPACE_HOST, 1, kTGradBytes + kB1GradBytes},
      {"ckpt", RONDO_SPACE_HOST, gM, tokens},
      {"stash", RONDO_SPACE_HOST, 1, kTGradBytes + kB1GradBytes},
  };
  gArena = gPool = 0;
  for (int b = 0; b < kNumBuffers; ++b) {
    int64_t &end = specs[b].space == RONDO_SPACE_WORKER ? gArena : gPool;
    gBuffers[b] = {specs[b].name, specs[b].space, specs[b].count,
                   specs[b].bytes, end};
    end = align64(end + specs[b].count * specs[b].bytes);
  }
}

// Stage functions: one microbatch of gR rows.

void stageF0(void *const *io, float) {
  if (gFailAt > 0 && ++gLaunches == gFailAt)
    throw std::runtime_error("toy stage F0 failed on purpose");
  if (gActionAt > 0 && ++gActionLaunches == gActionAt && gAction)
    gAction();
  const float *emb = static_cast<const float *>(io[0]);
  float wide[D];
  const float *norm = normOf(emb + V * D, wide);
  const int64_t *ids = static_cast<const int64_t *>(io[1]);
  float *h = static_cast<float *>(io[2]);
  // OpenMP inside the worker's compute thread, as the CPU kernels do; every
  // element is written by one thread.
  const int64_t n = int64_t(gR) * gT;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d)
      h[i * D + d] = emb[ids[i] * D + d] * norm[d];
}

void stageT(void *const *io, float lossScale) {
  const float *proj = static_cast<const float *>(io[0]);
  const float *bias = proj + D * V;
  const float *h = static_cast<const float *>(io[1]);
  const int64_t *labels = static_cast<const int64_t *>(io[2]);
  float *loss = static_cast<float *>(io[3]);
  float *dh = static_cast<float *>(io[4]);
  float *gProj = static_cast<float *>(io[5]) + V * D;
  float *gBias = gProj + D * V;
  // GraphOutput: the graph's loss is the microbatch's mean, so its gradient
  // carries 1/count besides the runtime's scale (1/M).
  int64_t count = 0;
  for (int64_t b = 0; b < gR; ++b)
    for (int64_t t = 0; t + 1 < gT; ++t)
      count += labels[b * gT + t + 1] != -100;
  const double scale = gGraphLoss
                           ? (count ? double(lossScale) / double(count) : 0.0)
                           : double(lossScale);
  const int64_t launch = gTLaunches++;
  const bool nanHere = nanInStep(launch);
  double lossSum = 0;
  std::vector<double> logits(V), dl(V);
  std::fill(dh, dh + gR * gT * D, 0.0f);
  for (int64_t b = 0; b < gR; ++b)
    for (int64_t t = 0; t + 1 < gT; ++t) {
      const int64_t y = labels[b * gT + t + 1];
      if (y == -100)
        continue;
      const float *hv = h + (b * gT + t) * D;
      lossSum += headCrossEntropy(hv, proj, bias, y, scale, logits, dl);
      for (int64_t v = 0; v < V; ++v)
        gBias[v] += float(dl[v]);
      if (b == 0 && t == 0 && nanHere && (gNanWhere & kNanProjGrad))
        gProj[3] += std::nanf("");
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t v = 0; v < V; ++v) {
          gProj[d * V + v] += float(double(hv[d]) * dl[v]);
          acc += proj[d * V + v] * dl[v];
        }
        dh[(b * gT + t) * D + d] = float(acc);
      }
    }
  *loss = float(gGraphLoss ? (count ? lossSum / double(count) : 0.0) : lossSum);
  if (nanHere && (gNanWhere & kNanLoss) && launch % gM == 1)
    *loss = std::nanf("");
}

void stageB1(void *const *io, float) {
  float wide[D];
  const float *norm = normOf(io[0], wide);
  const int64_t *ids = static_cast<const int64_t *>(io[1]);
  const float *dh = static_cast<const float *>(io[2]);
  float *gEmb = static_cast<float *>(io[3]);
  // Rows of emb repeat across positions, so threads split the columns and
  // each keeps the positions' order: the same bits for any thread count.
  const int64_t n = int64_t(gR) * gT;
#pragma omp parallel for schedule(static)
  for (int64_t d = 0; d < D; ++d)
    for (int64_t i = 0; i < n; ++i)
      gEmb[ids[i] * D + d] += float(double(dh[i * D + d]) * norm[d]);
  const int64_t launch = gB1Launches++;
  if (nanInStep(launch) && (gNanWhere & kInfEmbGrad))
    gEmb[5] = HUGE_VALF;
}

// Events.
enum : int32_t {
  ELoad,
  EPu0a,
  EPu0b,
  EPu1,
  EPu2,
  EZ1,
  EZ2,
  EGd1,
  EGd2,
  EOptT,
  EOptB1,
  EOptAll, ///< The sync update, or the stale program's (the previous step's).
  EStash,  ///< The stale program's gradient stash.
  kPerMb
};
enum : int32_t { MIu0, MCk, ML0, MIu1, MH1, ML1, MLd, MRl, MH2, ML2, kMbKinds };
int32_t ev(int32_t kind, int32_t m) { return kPerMb + kind * gM + m; }

rondo_ref w(int32_t buffer, int32_t job, int64_t slot) {
  return {buffer, job, slot, 0};
}
rondo_ref host(int32_t buffer, int64_t slot, int64_t offset = 0) {
  return {buffer, -1, slot, offset};
}

enum class Mode { Sync, Overlap, Stale };

void issue(rondo_exec *x, Mode mode) {
  const bool overlap = mode == Mode::Overlap, stale = mode == Mode::Stale;
  const int64_t step = gIssued++;
  const int64_t tokens = int64_t(gR) * gT * 8;
  const int64_t act = int64_t(gR) * gT * D * kF;
  auto copy = [&](int32_t event, int32_t kind, int32_t stream, int32_t job,
                  int32_t m, rondo_ref src, rondo_ref dst, int64_t bytes,
                  std::vector<rondo_await> awaits) {
    rondo_exec_copy(x, event, kind, stream, job, m, src, dst, bytes,
                    awaits.data(), int32_t(awaits.size()));
  };
  auto now = [](int32_t e) { return rondo_await{e, 0}; };
  auto prev = [](int32_t e) { return rondo_await{e, 1}; };
  const rondo_ref params0 = {RONDO_BUFFER_PARAMS, -1, 0, 0};

  rondo_exec_host_task(x, ELoad, RONDO_TASK_LOAD_BATCH, -1, nullptr, 0);

  // Job 0: F0. Its image is uploaded in two chunks; the cut lies inside
  // emb.
  const int64_t f0Bytes = gStages[0].paramBytes, cut = 300;
  const rondo_await f0Opt = prev(overlap ? EOptB1 : EOptAll);
  copy(EPu0a, RONDO_COPY_PARAM_UPLOAD, RONDO_STREAM_PARAM_UPLOAD, 0, -1,
       params0, w(WParams, 0, 0), cut, {f0Opt});
  rondo_ref params0b = params0;
  params0b.offset = cut;
  rondo_ref dst0b = w(WParams, 0, 0);
  dst0b.offset = cut;
  copy(EPu0b, RONDO_COPY_PARAM_UPLOAD, RONDO_STREAM_PARAM_UPLOAD, 0, -1,
       params0b, dst0b, f0Bytes - cut, {f0Opt});
  for (int32_t m = 0; m < gM; ++m) {
    copy(ev(MIu0, m), RONDO_COPY_INPUT_UPLOAD, RONDO_STREAM_ACT_UPLOAD, 0, m,
         host(HIds, m), w(WIds, 0, m), tokens, {now(ELoad)});
    rondo_ref io[] = {w(WParams, 0, 0), w(WIds, 0, m), w(WH, 0, m)};
    rondo_await a[] = {now(EPu0a), now(EPu0b), now(ev(MIu0, m))};
    rondo_exec_launch(x, ev(ML0, m), 0, m, stageF0, io, 3, a, 3);
    rondo_ref bad = host(HCkpt, m);
    if (step == gBadCopyStep && m == gM - 1)
      bad.slot = gM; // One past the last slot.
    copy(ev(MCk, m), RONDO_COPY_CHECKPOINT, RONDO_STREAM_DOWNLOAD, 0, m,
         w(WIds, 0, m), bad, tokens, {now(ev(MIu0, m))});
  }

  // Job 1: the tail.
  rondo_ref params1 = params0;
  params1.slot = 1;
  copy(EPu1, RONDO_COPY_PARAM_UPLOAD, RONDO_STREAM_PARAM_UPLOAD, 1, -1, params1,
       w(WParams, 1, 1), gStages[1].paramBytes,
       {prev(overlap ? EOptT : EOptAll)});
  rondo_exec_fill_zero(x, EZ1, 1, w(WGrads, 1, 1), kTGradBytes, nullptr, 0);
  for (int32_t m = 0; m < gM; ++m) {
    copy(ev(MIu1, m), RONDO_COPY_INPUT_UPLOAD, RONDO_STREAM_ACT_UPLOAD, 1, m,
         host(HLabels, m), w(WLabels, 1, m), tokens, {now(ELoad)});
    copy(ev(MH1, m), RONDO_COPY_HANDOFF, RONDO_STREAM_ACT_UPLOAD, 1, m,
         w(WH, 0, m), w(WHIn, 1, m), act, {now(ev(ML0, m))});
    rondo_ref io[] = {w(WParams, 1, 1), w(WHIn, 1, m), w(WLabels, 1, m),
                      w(WLoss, 1, m),   w(WDh, 1, m),  w(WGrads, 1, 1)};
    rondo_await a[] = {now(EPu1), now(EZ1), now(ev(MIu1, m)), now(ev(MH1, m))};
    rondo_exec_launch(x, ev(ML1, m), 1, m, stageT, io, 6, a, 4);
    copy(ev(MLd, m), RONDO_COPY_LOSS_DOWNLOAD, RONDO_STREAM_DOWNLOAD, 1, m,
         w(WLoss, 1, m), host(HLoss, m), kF, {now(ev(ML1, m))});
  }
  std::vector<rondo_await> gd1 = {now(ev(ML1, gM - 1))};
  if (overlap) {
    gd1.push_back(prev(EOptT));
    gd1.push_back(prev(EOptB1));
  } else {
    // Stale: the previous step's stash reads the gradients, its update
    // does not.
    gd1.push_back(prev(stale ? EStash : EOptAll));
  }
  copy(EGd1, RONDO_COPY_GRAD_DOWNLOAD, RONDO_STREAM_DOWNLOAD, 1, -1,
       w(WGrads, 1, 1), host(HGrads, 0, gStages[1].gradOffset), kTGradBytes,
       gd1);
  if (overlap) {
    rondo_await a[] = {now(EGd1)};
    rondo_exec_host_task(x, EOptT, RONDO_TASK_OPTIMIZER, kStageT, a, 1);
  }

  // Job 2: B1.
  rondo_ref params2 = params0;
  params2.slot = 2;
  copy(EPu2, RONDO_COPY_PARAM_UPLOAD, RONDO_STREAM_PARAM_UPLOAD, 2, -1, params2,
       w(WParams, 2, 2), gStages[2].paramBytes, {});
  rondo_exec_fill_zero(x, EZ2, 2, w(WGrads, 2, 2), kB1GradBytes, nullptr, 0);
  for (int32_t m = 0; m < gM; ++m) {
    copy(ev(MRl, m), RONDO_COPY_RELOAD, RONDO_STREAM_ACT_UPLOAD, 2, m,
         host(HCkpt, m), w(WIds, 2, 2 * gM + m), tokens, {now(ev(MCk, m))});
    copy(ev(MH2, m), RONDO_COPY_HANDOFF, RONDO_STREAM_ACT_UPLOAD, 2, m,
         w(WDh, 1, m), w(WDhIn, 2, m), act, {now(ev(ML1, m))});
    rondo_ref io[] = {w(WParams, 2, 2), w(WIds, 2, 2 * gM + m), w(WDhIn, 2, m),
                      w(WGrads, 2, 2)};
    rondo_await a[] = {now(EPu2), now(EZ2), now(ev(MRl, m)), now(ev(MH2, m)),
                       now(EOptAll)};
    // The sync task's event never completes in overlap mode.
    const bool hang = step == gDeadlockStep && m == 0;
    rondo_exec_launch(x, ev(ML2, m), 2, m, stageB1, io, 4, a, hang ? 5 : 4);
  }
  copy(EGd2, RONDO_COPY_GRAD_DOWNLOAD, RONDO_STREAM_DOWNLOAD, 2, -1,
       w(WGrads, 2, 2), host(HGrads, 0, gStages[2].gradOffset), kB1GradBytes,
       {now(ev(ML2, gM - 1)), prev(overlap ? EOptB1
                                   : stale ? EStash
                                           : EOptAll)});
  if (overlap) {
    rondo_await a[] = {now(EGd1), now(EGd2)};
    rondo_exec_host_task(x, EOptB1, RONDO_TASK_OPTIMIZER, kStageB1, a, 2);
  } else if (stale) {
    // The previous step's update once this step's uploads read the
    // weights, then this step's gradients set aside.
    rondo_await u[] = {now(EPu0a), now(EPu0b), now(EPu1), prev(EStash)};
    rondo_exec_host_task(x, EOptAll, RONDO_TASK_STALE_OPTIMIZER, -1, u, 4);
    rondo_await st[] = {now(EGd1), now(EGd2)};
    rondo_exec_host_task(x, EStash, RONDO_TASK_STASH_GRADS, -1, st, 2);
  } else {
    rondo_await a[] = {now(EGd1), now(EGd2)};
    rondo_exec_host_task(x, EOptAll, RONDO_TASK_OPTIMIZER, -1, a, 2);
  }
  rondo_exec_barrier(x);
}

void issueSync(rondo_exec *x) { issue(x, Mode::Sync); }
void issueOverlap(rondo_exec *x) { issue(x, Mode::Overlap); }
void issueStale(rondo_exec *x) { issue(x, Mode::Stale); }

ToyPipeline gPipeline;
const char *const kNames[3][3] = {
    {"exec_w1_sync", "exec_w1_overlap", "exec_w1_stale"},
    {"exec_w2_sync", "exec_w2_overlap", "exec_w2_stale"},
    {"exec_w3_sync", "exec_w3_overlap", "exec_w3_stale"}};

} // namespace

const ToyPipeline &toyPipeline(int32_t microbatches, int32_t rows,
                               int64_t seqLen, const std::string &modelPath,
                               rt::LossKind loss) {
  gGraphLoss = loss == rt::LossKind::GraphOutput;
  gM = microbatches;
  gR = rows;
  gT = seqLen;
  gFailAt = 0;
  gLaunches = 0;
  gBadCopyStep = -1;
  gDeadlockStep = -1;
  gIssued = 0;
  gActionAt = 0;
  gAction = nullptr;
  gActionLaunches = 0;
  gNanStep = -1;
  gNanWhere = 0;
  gNanFrom = false;
  gTLaunches = 0;
  gB1Launches = 0;
  layout();
  setImages();
  gPipeline.model =
      &toyModel(int64_t(microbatches) * rows, seqLen, loss, modelPath);
  gPipeline.programs.clear();
  // Sync and overlap for each worker count, then the stale programs.
  auto add = [&](int32_t workers, int mode) {
    rondo_program p = {};
    p.name = kNames[workers - 1][mode];
    p.optimizer = mode == 2 ? "stale" : mode == 1 ? "overlap" : "sync";
    p.workers = workers;
    p.microbatches = microbatches;
    p.rowsPerMicrobatch = rows;
    // Start the rotation on worker 1 so that c0 shows in the trace.
    p.firstWorker = 1 % workers;
    p.numJobs = 3;
    p.jobStages = kJobStages;
    p.stages = gStages;
    p.numStages = 3;
    p.buffers = gBuffers;
    p.numBuffers = kNumBuffers;
    p.workerArenaBytes = gArena;
    p.hostPoolBytes = gPool;
    p.gradParts = kGradParts;
    p.numGradParts = 4;
    p.idsBuffer = HIds;
    p.labelsBuffer = HLabels;
    p.lossBuffer = HLoss;
    p.hostGradsBuffer = HGrads;
    p.numEvents = kPerMb + kMbKinds * microbatches;
    p.predictedStepSeconds = 0.005;
    p.gradStashBuffer = HStash;
    p.issue = mode == 2 ? issueStale : mode == 1 ? issueOverlap : issueSync;
    gPipeline.programs.push_back(p);
  };
  for (int32_t workers = 1; workers <= 3; ++workers)
    for (int mode = 0; mode < 2; ++mode)
      add(workers, mode);
  for (int32_t workers = 1; workers <= 3; ++workers)
    add(workers, 2);
  return gPipeline;
}

void toyPipelineFailAtLaunch(int n) {
  gFailAt = n;
  gLaunches = 0;
}

void toyPipelineBadCopyAtStep(int64_t step) { gBadCopyStep = step; }

void toyPipelineAtLaunch(int n, void (*action)()) {
  gActionAt = n;
  gAction = action;
  gActionLaunches = 0;
}

void toyPipelineNonFiniteAtStep(int64_t step, int where) {
  gNanStep = step;
  gNanWhere = where;
  gNanFrom = false;
  gTLaunches = 0;
  gB1Launches = 0;
}

void toyPipelineNonFiniteFromStep(int64_t step, int where) {
  toyPipelineNonFiniteAtStep(step, where);
  gNanFrom = true;
}

void toyPipelineDeadlockAtStep(int64_t step) { gDeadlockStep = step; }

std::vector<float> toyReferenceStep(const float *const *params,
                                    float *const *grads, const int64_t *ids,
                                    const int64_t *labels, int64_t rows,
                                    int64_t seqLen, rt::LossKind loss,
                                    float lossScale) {
  // The stage functions read the microbatch shape from the configuration;
  // borrow it, and leave the launch counters of the tests' hooks alone.
  const int32_t savedM = gM, savedR = gR;
  const int64_t savedT = gT;
  const bool savedGraph = gGraphLoss;
  const int savedLaunches = gLaunches, savedAction = gActionLaunches;
  const int64_t savedTL = gTLaunches, savedBL = gB1Launches;
  gM = 1;
  gR = 1;
  gT = seqLen;
  gGraphLoss = loss == rt::LossKind::GraphOutput;
  // The stage images, as the parameter uploads lay them out.
  std::vector<float> f0(size_t(V * D + D)), tImage(size_t(D * V + V));
  std::vector<float> b1(static_cast<size_t>(D));
  std::copy(params[kEmb], params[kEmb] + V * D, f0.begin());
  std::copy(params[kProj], params[kProj] + D * V, tImage.begin());
  std::copy(params[kBias], params[kBias] + V, tImage.begin() + D * V);
  auto putNorm = [&](float *at) {
    if (!toyNormIsBf16())
      return (void)std::copy(params[kNorm], params[kNorm] + D, at);
    uint16_t *bits = reinterpret_cast<uint16_t *>(at);
    for (int64_t d = 0; d < D; ++d)
      bits[d] = rt::floatToBf16(params[kNorm][d]);
  };
  putNorm(f0.data() + V * D);
  putNorm(b1.data());
  // One stage-job each: the gradient images accumulate over the rows.
  std::vector<float> tGrads(size_t(kTGradBytes / kF), 0.0f),
      b1Grads(size_t(kB1GradBytes / kF), 0.0f);
  std::vector<float> h(size_t(seqLen * D)), dh(size_t(seqLen * D));
  std::vector<float> losses;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t *x = ids + r * seqLen;
    const int64_t *y = labels + r * seqLen;
    float lossValue = 0;
    void *f0io[] = {f0.data(), const_cast<int64_t *>(x), h.data()};
    stageF0(f0io, lossScale);
    void *tio[] = {tImage.data(), h.data(),  const_cast<int64_t *>(y),
                   &lossValue,    dh.data(), tGrads.data()};
    stageT(tio, lossScale);
    void *b1io[] = {b1.data(), const_cast<int64_t *>(x), dh.data(),
                    b1Grads.data()};
    stageB1(b1io, lossScale);
    losses.push_back(lossValue);
  }
  // The parts of each gradient in table order: emb's in T, then in B1.
  for (int64_t e = 0; e < V * D; ++e)
    grads[kEmb][e] += tGrads[size_t(e)] + b1Grads[size_t(e)];
  for (int64_t e = 0; e < D * V; ++e)
    grads[kProj][e] += tGrads[size_t(V * D + e)];
  for (int64_t e = 0; e < V; ++e)
    grads[kBias][e] += tGrads[size_t(V * D + D * V + e)];
  gM = savedM;
  gR = savedR;
  gT = savedT;
  gGraphLoss = savedGraph;
  gLaunches = savedLaunches;
  gActionLaunches = savedAction;
  gTLaunches = savedTL;
  gB1Launches = savedBL;
  return losses;
}

int64_t toyStageParamBytes(int stage) { return gStages[stage].paramBytes; }
int64_t toyStageGradBytes(int stage) { return gStages[stage].gradBytes; }

} // namespace rondo::toy
