//===- Planner.h - Stage partitioning and schedule simulation ---*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The planner's core works on a *layer table* (one row per layer, costs for
// one microbatch on one worker) and knows nothing about MLIR: the compiler
// builds the table from `tg` IR with the cost model (compiler/CostModel), the
// `pipe-partition` pass turns the chosen plan into `pipe` IR, and the unit
// tests drive it with random tables.
//
// Plan shape (RoundPipe's fused mode, research/roundpipe.md section 1.1):
//   forward stages  F0..F(k-1) cover layers [0, b) in ascending order;
//   the fused tail  T covers [b, L): forward + loss + backward, no recompute;
//   backward stages B1..Bj cover [0, b) deepest first, each recomputing its
//   forward from the checkpoint of its first layer's input.
// Jobs run in the order F0..F(k-1), T, B1..Bj; job n of step s runs on worker
// (c0 + s*K + n) mod N where K is the number of jobs.
//
// Units: seconds and bytes throughout.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_PLANNER_PLANNER_H
#define RONDO_PLANNER_PLANNER_H

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace rondo::planner {

enum class LayerKind { Prefix, Block, Tail };

/// The cost of one layer for ONE microbatch on one worker.
struct LayerCost {
  std::string name;
  LayerKind kind = LayerKind::Block;
  double forwardFlops = 0;  // for the table only
  double backwardFlops = 0; // for the table only
  /// Forward of one microbatch (also the cost of recomputing it).
  double forwardSeconds = 0;
  /// Backward of one microbatch, without the recompute.
  double backwardSeconds = 0;
  /// Device bytes of the parameters the layer reads (compute precision).
  double paramBytes = 0;
  /// What its parameters take on a worker that keeps them (device
  /// residency) when that differs from paramBytes: under bf16, the fp32
  /// master weights plus the bf16 copies of those read only by products
  /// (exec.resident's `bf16`). Unset: paramBytes.
  std::optional<double> residentBytes;
  /// Device bytes of the gradients of its trainable parameters.
  double gradBytes = 0;
  /// The activation entering the layer for one microbatch: what a
  /// checkpoint of this layer's input costs, and what a hand-off moves.
  double inputBytes = 0;
  /// Activations the layer's backward needs from its forward, one
  /// microbatch (held while a backward or tail stage runs it).
  double workspaceBytes = 0;
  /// The largest outputs of one of its backward ops, one microbatch:
  /// transient beside the workspace while a backward or tail stage runs.
  double transientBytes = 0;
  /// Whether its backward computes anything. Not for layers below every
  /// trainable parameter (a frozen embedding under LoRA): a backward stage
  /// of only such layers is an empty launch, and it neither reads their
  /// parameters nor recomputes them.
  bool backwardWork = true;
};

/// A parameter read by several layers (a tied embedding and LM head). Each
/// layer's paramBytes and gradBytes count it; a stage holding k of those
/// layers uploads it, and accumulates its gradient, once.
struct SharedParam {
  double paramBytes = 0;
  double gradBytes = 0;
  std::vector<int> layers;
  std::optional<double> residentBytes; ///< As LayerCost's.
};

/// Everything the partitioner and the simulator need besides the layers.
struct PlanProblem {
  std::vector<LayerCost> layers;
  std::vector<SharedParam> sharedParams;
  int workers = 1;      // N
  int microbatches = 2; // M
  /// Device memory one worker may use.
  double workerMemoryBytes = 0;
  /// Host memory the plan may use, and what it needs regardless of the
  /// partition (master weights, moments, fp32 gradients, upload copies).
  double hostMemoryBytes = 0;
  double hostFixedBytes = 0;
  /// Frozen fp32 external-data weights the trainer uses in place from
  /// read-only mappings (--map-weights=auto maps them when they exceed half
  /// of the host's memory): not in hostFixedBytes, shown by --explain.
  double mappedWeightBytes = 0;
  /// Host<->device bandwidth one worker gets per direction while all N
  /// workers transfer (the link is shared: the caller already divided).
  double linkBytesPerSecond = 1e9;
  /// Worker-to-worker activation hand-off bandwidth (peer copy), or 0 when
  /// hand-offs are staged through host memory (D2H then H2D at the link
  /// bandwidth).
  double peerBytesPerSecond = 0;
  /// A copy within one worker's memory (read and write), for the hand-offs
  /// of a one-worker plan, whose consecutive stage-jobs share the worker:
  /// the executor copies between its own buffers there (exec.copy handoff,
  /// device to device). 0: staged like a hand-off between workers.
  double localCopyBytesPerSecond = 0;
  /// Host optimizer throughput (AdamW parameters per second) and the
  /// number of trainable parameters per layer (for optimizer time).
  double optimizerParamsPerSecond = 4e9;
  std::vector<double> trainableParams; // one entry per layer, may be empty
  /// Data-parallel replicas of the whole pipeline (trainer --replicas) and
  /// the bandwidth between them: each optimizer task first sums its
  /// stage's fp32 gradients across replicas (a ring all-reduce moves
  /// 2 (R-1)/R of the bytes over each replica's link).
  int replicas = 1;
  double replicaBytesPerSecond = 25e9;
  /// GPU trainers sum host-held (streamed) gradients over NCCL on the
  /// GPUs: each replica copies its gradients up and its reduced shard down,
  /// then its updated shard up and the broadcast weights down, over its
  /// host link (runtime/src/replicas/NcclReplicas.cpp), at this rate; 0:
  /// summed where they are (MPI in host memory, or resident state in GPU
  /// memory).
  double replicaHostCrossingBytesPerSecond = 0;
  /// The trainer's --shard-optimizer (its default): gradients are
  /// reduce-scattered and the weights all-gathered (the bytes of one
  /// all-reduce) and each replica's optimizer does 1/R of the work.
  bool shardOptimizer = true;
  /// Replicas that share one host: they split its cores, so each one's
  /// host optimizer (and end-of-step pass) runs at 1/replicasPerHost of its
  /// rate, and with a host memory bandwidth they share that too (below).
  int replicasPerHost = 1;
  /// The host's memory bandwidth (bytes/s), shared by everything that
  /// streams host memory at once: the host optimizer's tasks
  /// (kOptimizerHostBytesPerParam a parameter, the sums of a parameter's
  /// gradient parts, the replica sum's host crossings), the trainer's
  /// end-of-step pass over the gradients for the logged norm, and every
  /// worker's parameter uploads and gradient downloads; the replicasPerHost
  /// processes of one host run the same schedule at once, so each of them
  /// demands as much. While the demand exceeds it, every one of them
  /// progresses at bandwidth / demand of its own rate (simulate). 0: each
  /// runs at its own rate as if alone, and the end-of-step pass is free.
  double hostMemoryBytesPerSecond = 0;
  /// The rate of the trainer's end-of-step pass over the host-held
  /// gradients alone on the host (bytes/s; 0: hostMemoryBytesPerSecond).
  /// Like the host optimizer, it is split between the replicasPerHost
  /// processes, which share the host's cores.
  double stepEndPassBytesPerSecond = 0;
  /// Residency (docs/CostModel.md, "Residency"): resident[l] keeps layer
  /// l's parameters, their gradients and AdamW moments in the worker's
  /// memory for the whole run (one worker holds them: plans with N = 1), so
  /// its stage-jobs upload and download nothing for it and its update runs
  /// on the worker at deviceOptimizerParamsPerSecond. Empty: every layer is
  /// streamed (RoundPipe's regime).
  std::vector<char> resident;
  double deviceOptimizerParamsPerSecond = 0;
  /// RoundPipe's min_stages: the objective counts at least
  /// max(N, minJobs) stage-jobs per step. Raising it asks the search for the
  /// best plan with finer stages (the compiler sweeps it and lets the
  /// simulator choose).
  int minJobs = 0;
  /// Host workers on a calibrated host: the cores every worker's kernels
  /// and the host optimizer share. A step then takes at least its CPU
  /// work spread over them (the workers' compute divided by the cores,
  /// plus the optimizer, which runs on all of them), however the pipeline
  /// packs: with more workers than cores, jobs that the replay overlaps
  /// take turns. 0: workers have their own compute (GPUs).
  int sharedCores = 0;
};

enum class StageKind { Forward, Tail, Backward };

/// A contiguous range of layers [first, end).
struct Stage {
  StageKind kind = StageKind::Forward;
  int first = 0;
  int end = 0;
  bool operator==(const Stage &o) const {
    return kind == o.kind && first == o.first && end == o.end;
  }
};

struct Plan {
  std::vector<Stage> forward;  // ascending: F0 starts at layer 0
  Stage tail;                  // [b, L)
  std::vector<Stage> backward; // deepest first: B1 ends at b, Bj starts at 0
  /// The jobs of one step in issue order: forward, tail, backward.
  std::vector<Stage> jobs() const;
  int numJobs() const { return int(forward.size() + 1 + backward.size()); }
};

/// Derived numbers of one stage under a problem.
struct StageCost {
  /// Compute of one microbatch: forward; forward+backward for the tail;
  /// recompute+backward for a backward stage.
  double computeSeconds = 0;
  /// Activation hand-off of one microbatch into this stage (the input of
  /// its first layer for forward stages, the output gradient for backward
  /// stages; the tail receives its input from the last forward stage).
  double hopSeconds = 0;
  double uploadSeconds = 0;   // parameters, once per stage-job
  double downloadSeconds = 0; // gradients, once per stage-job
  /// max(M * computeSeconds + hopSeconds, uploadSeconds, downloadSeconds):
  /// the time the stage-job occupies its worker in a balanced pipeline.
  double jobSeconds = 0;
  double paramBytes = 0;
  double gradBytes = 0;
  /// Activation memory while the stage runs: in/out hand-off buffers for
  /// two microbatches in flight, plus the forward transient (forward) or
  /// the workspace of all its layers for one microbatch (tail, backward).
  double activationBytes = 0;
  /// paramBytes + gradBytes + activationBytes (the running slot).
  double memoryBytes = 0;
};

StageCost costStage(const PlanProblem &problem, const Stage &stage);

/// Whether layer l is device-resident under `problem`.
inline bool isResident(const PlanProblem &problem, int l) {
  return l >= 0 && l < int(problem.resident.size()) && problem.resident[l];
}
/// Worker bytes of the resident state: fp32 weights, gradients and the two
/// AdamW moments of every parameter whose layers are all resident.
double residentBytes(const PlanProblem &problem);

/// Peak device memory of any worker: the largest running stage plus the
/// largest parameter slot being prefetched, plus the resident state.
double workerPeakBytes(const PlanProblem &problem, const Plan &plan);
/// What the executor really allocates on a worker for `plan`, as
/// convert-pipe-to-exec lays it out: one static arena holding two parameter
/// slots of the largest stage, the largest gradient slot, M slots each of
/// activation and gradient hand-offs and M per checkpoint of the forward
/// stage with the most; plus the temporaries of the stage that needs the
/// most (a layer's workspace in forward stages, every layer's in the tail
/// and backward stages). Every buffer class is sized by its own largest
/// stage, so this exceeds workerPeakBytes, the stage-local bound the search
/// prunes with; the partition pass checks plans against it.
double workerArenaBytes(const PlanProblem &problem, const Plan &plan);
/// Host memory: the training state (hostStateBytes) plus the checkpoints of
/// every backward stage's first-layer input for all M microbatches (layer
/// 0's input is the token data and costs nothing) and the hand-off staging
/// buffers.
double hostPeakBytes(const PlanProblem &problem, const Plan &plan);
/// The host's share of the training state, whatever the partition:
/// hostFixedBytes without the fp32 gradients of device-resident parameters
/// (their worker holds them), and for a streamed parameter that several
/// layers use (a tied embedding) a gradient part per use, which the trainer
/// sums into two more fp32 copies (AdamW's and the logged norm's).
double hostStateBytes(const PlanProblem &problem);

/// The planner's objective, RoundPipe's (section 2.2) with Rondo's stage
/// costs: max(K, N, minJobs) * max_j jobSeconds / N, an estimate of one
/// step.
double planObjective(const PlanProblem &problem, const Plan &plan);

/// Structural validity (contiguous coverage, tail non-empty) and budgets.
/// On failure `why` says which rule or budget is violated.
bool isValid(const PlanProblem &problem, const Plan &plan, std::string *why);
bool fitsBudgets(const PlanProblem &problem, const Plan &plan,
                 std::string *why);

/// The finest plan: one layer per stage (the least worker memory any plan
/// of the table needs: one layer's activations at a time).
Plan finestPlan(int numLayers);

/// The longest sequence, in tokens of one row, that some plan holds within
/// the budgets of `problem` (its workers, worker and host memory) with one
/// row per microbatch, when `problem`'s layer table was costed at
/// `tokensPerMicrobatch` tokens per microbatch. Activations, checkpoints and
/// hand-offs grow linearly with the sequence (attention never materialises
/// [T, T], the loss is chunked), weights and optimizer state do not; the
/// finest plan is the one that needs least. A multiple of `granularity`;
/// 0 when not even that fits; `limit` when nothing bounds it.
int64_t maxSequenceLength(const PlanProblem &problem,
                          double tokensPerMicrobatch, int64_t granularity = 256,
                          int64_t limit = int64_t(1) << 24);

/// RoundPipe's `ModelExecutePlan.auto` (research/roundpipe.md section 2.2),
/// reproduced exactly: fwd_t = forwardSeconds, bwd_t = forwardSeconds +
/// backwardSeconds, size = paramBytes, bwd_size = paramBytes + gradBytes,
/// candidate caps in [W, 1.1 W], greedy packing, cost max(K, N) * C.
/// `memoryLimit` is RoundPipe's model_memory_limit (per-stage cap limit/2).
Plan greedyRoundPipe(const PlanProblem &problem, double memoryLimit);

/// The exact search: the plan of minimal planObjective among all plans that
/// fit the budgets, found by sweeping every achievable stage-time cap and
/// every parameter-slot cap and, for each, the fewest stages (dynamic
/// programming over cut points). Ties prefer fewer jobs, then the smaller
/// sum of job times. nullopt when no plan fits.
std::optional<Plan> exactSearch(const PlanProblem &problem);

/// Every plan, for tests on small tables (L <= 10).
std::optional<Plan> bruteForce(const PlanProblem &problem);

/// Host memory one host optimizer task moves per parameter it updates:
/// AdamW's one fused pass reads the weight, the gradient and both moments
/// and writes three of them (28 bytes), after the finiteness check has read
/// the gradient (4) (runtime/src/trainer/ProgramStep.cpp, optimizeStage).
inline constexpr double kOptimizerHostBytesPerParam = 32;
/// The logged gradient norm reads every host-held gradient once
/// (ProgramGrads::normForLog).
inline constexpr double kNormHostBytesPerParam = 4;
/// Summing a parameter's gradient parts (a tied embedding's two) moves 12
/// bytes an element for every part after the first: two read and the sum
/// written, then the sum and the next part read and the sum written
/// (ProgramGrads::sumParts).
inline constexpr double kPartSumHostBytesPerElement = 12;

/// One interval of the predicted timeline.
struct TimelineEvent {
  /// Trainer: the trainer thread's pass over the host-held gradients at the
  /// end of a step (the logged norm, overlap mode), which the next step's
  /// issue waits for.
  enum class Lane { Upload, Compute, Download, Optimizer, Trainer } lane;
  int worker = 0; // -1 for the host optimizer and the trainer thread
  int step = 0;
  int job = 0;         // index into Plan::jobs()
  int microbatch = -1; // -1 for job-level events (uploads, downloads)
  double start = 0, end = 0;
};

/// How the host optimizer runs, as the trainer's --optimizer-mode.
enum class OptimizerMode {
  /// One update per step after its last gradient has landed; the next
  /// step's uploads wait for it.
  Sync,
  /// Per-stage eager updates: each tail/backward stage's parameters are
  /// updated as soon as its gradients land; a stage-job of step s+1 uploads
  /// its parameters once the step-s update of its layers is done. The
  /// trainer's default, and what plans are chosen by.
  Overlap,
  /// RoundPipe's asynchronous step: step s+1 runs on the weights before
  /// update s, which runs (one task) once step s+1's uploads have read
  /// them; step s+2's uploads wait for it.
  Stale,
};

struct SimOptions {
  /// Simulated consecutive steps; 0 chooses enough for the steady state:
  /// two rotation periods (N / gcd(K, N) steps, at least 2) after a warm-up
  /// of one.
  int steps = 0;
  int firstWorker = 0; // c0
  /// The trainer's --optimizer-mode being predicted (see OptimizerMode).
  OptimizerMode optimizer = OptimizerMode::Overlap;
};

struct SimResult {
  /// Steady-state time per step: the time the last rotation period (the
  /// steps after which every job is back on the same worker, at least 2)
  /// took, divided by its steps. With one simulated step, its makespan.
  double stepSeconds = 0;
  /// 1 - sum of worker compute-busy time per step / (N * stepSeconds).
  double bubbleFraction = 0;
  double computeSecondsPerStep = 0; // sum over workers
  /// The host optimizer's tasks per step in the steady state, as the
  /// schedule runs them (with the host's memory shared) and as each would
  /// take alone; and the trainer's end-of-step pass (Lane::Trainer).
  double optimizerSecondsPerStep = 0;
  double optimizerAloneSecondsPerStep = 0;
  double stepEndPassSecondsPerStep = 0;
  std::vector<TimelineEvent> timeline;
};

/// Seconds to sum `params` fp32 gradients across problem.replicas replicas
/// (ring all-reduce), with the trips through the host link when the
/// gradients are host-held and the sum runs on the GPUs; 0 for one replica.
double replicaSumSeconds(const PlanProblem &problem, double params,
                         bool hostHeld);
/// How many ways the optimizer's work is split: R when the replicas shard
/// it, else 1.
double optimizerShards(const PlanProblem &problem);
/// How many replica processes run a plan's schedule on one host at once
/// (they split its cores and demand its memory together).
int processesPerHost(const PlanProblem &problem);

/// Replays the job order with the stage costs: per worker one compute lane,
/// one upload lane (two parameter slots: a job's upload may start when the
/// job two before it on the same worker has finished) and one download
/// lane; microbatch m of job n starts after microbatch m of job n-1 ended
/// and its hand-off (hopSeconds) arrived, and a job with gradients after
/// the worker's previous gradient download (one gradient slot); one host
/// optimizer lane updates each tail/backward stage's parameters when its
/// gradients landed; a step is issued once the previous one's worker ops
/// have ended and the trainer's end-of-step pass is done. With a host
/// memory bandwidth the host-bound intervals (copies, optimizer tasks, the
/// end-of-step pass) share it, and the replay is repeated until their
/// lengths agree with what they overlap.
SimResult simulate(const PlanProblem &problem, const Plan &plan,
                   const SimOptions &options);

/// An SVG Gantt chart of `result.timeline`: one row per worker with
/// uploads, compute (one box per stage-job, labelled with the stage) and
/// downloads as sub-lanes, plus a host row for the optimizer.
void writeGanttSvg(std::ostream &os, const PlanProblem &problem,
                   const Plan &plan, const SimResult &result,
                   const std::string &title);

/// Short names: F0.., T, B1.. in job order.
std::string stageName(const Plan &plan, int job);

} // namespace rondo::planner

#endif // RONDO_PLANNER_PLANNER_H
