/*===- Exec.h - The runtime C API that `exec` ops lower to -------*- C -*-===//
 *
 * Part of the Rondo project.
 *
 *===----------------------------------------------------------------------===//
 *
 * `rondo-compile --emit=cpp` prints one call of this API per `exec` op
 * (docs/Runtime.md). The generated program is a set of tables (buffers,
 * stages, gradient parts) plus, per compiled plan and optimizer mode, an
 * `issue` function that issues ONE training step: every copy, launch, host
 * task and barrier of the step, in issue order. Calls never block (except
 * rondo_exec_barrier); they enqueue work on a stream of the worker that runs
 * the job and return at once, as CUDA calls do.
 *
 * Workers. Job n of step s runs on worker (firstWorker + s * numJobs + n)
 * mod workers: the rotation continues across steps. A worker is stateless
 * between stage-jobs: everything a job reads was written by an op of the
 * same job (copies are attributed to the job that receives the data).
 *
 * Events. Every enqueued op completes event `event` (an index < numEvents
 * of the program) when it finishes; an event completed in step s has
 * generation s. An await {e, 0} waits for generation s of e (this step's),
 * an await {e, 1} for generation s - 1 (the previous step's; satisfied at
 * once in step 0). These are the "static per-(stage, microbatch) event
 * tables" of ARCHITECTURE.md: event ids are fixed at compile time.
 *
 * Buffers. A worker buffer exists once per worker, in that worker's arena
 * (count slots of `bytes` each, slot i at offset + i * bytes). A host buffer
 * exists once, in the host pool (pinned memory on the CUDA backend). A ref
 * names (buffer, job, slot, byte offset); `job` selects the worker through
 * the rotation above and is -1 for host buffers. Two buffers are special:
 * RONDO_BUFFER_PARAMS (the fp32 master weights owned by the trainer; slot =
 * stage index, offset = byte offset into the stage's parameter image, which
 * is the concatenation of its pieces) and the program's `hostGradsBuffer`,
 * where each stage's gradient image is downloaded at its `gradOffset`.
 *
 *===----------------------------------------------------------------------===*/

#ifndef RONDO_RUNTIME_EXEC_H
#define RONDO_RUNTIME_EXEC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The streams of a worker, by role, and the host stream (optimizer, data). */
enum rondo_stream {
  RONDO_STREAM_COMPUTE = 0,
  RONDO_STREAM_PARAM_UPLOAD = 1,
  RONDO_STREAM_ACT_UPLOAD = 2,
  RONDO_STREAM_DOWNLOAD = 3,
  RONDO_STREAM_HOST = 4
};

/* What a copy moves; decides nothing but the trace name and what tests
 * count. */
enum rondo_copy_kind {
  RONDO_COPY_PARAM_UPLOAD = 0, /* host params -> worker parameter slot */
  RONDO_COPY_INPUT_UPLOAD = 1, /* host token ids / labels -> worker */
  RONDO_COPY_HANDOFF = 2,      /* worker -> next job's worker (activation or
                                  activation gradient) */
  RONDO_COPY_CHECKPOINT = 3,   /* worker -> host checkpoint */
  RONDO_COPY_RELOAD = 4,       /* host checkpoint -> worker */
  RONDO_COPY_GRAD_DOWNLOAD = 5, /* worker gradient image -> host grads */
  RONDO_COPY_LOSS_DOWNLOAD = 6  /* worker loss sums -> host */
};

enum rondo_space { RONDO_SPACE_WORKER = 0, RONDO_SPACE_HOST = 1 };

enum rondo_stage_kind {
  RONDO_STAGE_FORWARD = 0,
  RONDO_STAGE_TAIL = 1,
  RONDO_STAGE_BACKWARD = 2
};

enum rondo_host_task_kind {
  /* Fill the host ids/labels buffers with this step's M microbatches. */
  RONDO_TASK_LOAD_BATCH = 0,
  /* AdamW on the parameters the stage finalises (stage >= 0, overlap mode)
   * or on every parameter (stage = -1, sync mode: clipping, gradient dumps
   * and the norm happen here). Gradient parts of a parameter are summed in
   * table order first. */
  RONDO_TASK_OPTIMIZER = 1,
  /* A stale program's (one-step-stale updates): copy the whole host
   * gradients buffer into gradStashBuffer (stage -1). */
  RONDO_TASK_STASH_GRADS = 2,
  /* A stale program's update: AdamW on every parameter with the gradients
   * the previous step's STASH_GRADS task set aside, i.e. the previous
   * step's update, run one step late (stage -1). The trainer applies
   * nothing when that step's update already ran (a drain applies it). */
  RONDO_TASK_STALE_OPTIMIZER = 3
};

#define RONDO_BUFFER_PARAMS (-1)

typedef struct rondo_ref {
  int32_t buffer; /* index into the program's buffers, or RONDO_BUFFER_PARAMS */
  int32_t job;    /* job whose worker holds the buffer; -1 for host buffers */
  int64_t slot;
  int64_t offset; /* bytes into the slot */
} rondo_ref;

typedef struct rondo_await {
  int32_t event;
  int32_t previousStep; /* 1: the previous step's completion of `event` */
} rondo_await;

typedef struct rondo_buffer_desc {
  const char *name;
  int32_t space; /* rondo_space */
  int64_t count; /* slots */
  int64_t bytes; /* per slot */
  int64_t offset; /* in the worker arena or the host pool */
} rondo_buffer_desc;

/* Where one parameter lies in a stage's parameter image (the bytes of the
 * worker's parameter slot). */
typedef struct rondo_param_piece {
  int32_t param; /* index into the model's parameter table */
  int64_t imageOffset;
  int64_t bytes;
} rondo_param_piece;

typedef struct rondo_stage_desc {
  const char *name; /* "F0", "T", "B1", ... */
  int32_t kind;     /* rondo_stage_kind */
  int32_t firstLayer, endLayer; /* layers [firstLayer, endLayer) */
  const rondo_param_piece *pieces;
  int32_t numPieces;
  int64_t paramBytes; /* size of the parameter image */
  int64_t gradBytes;  /* size of the gradient image (0 for forward) */
  int64_t gradOffset; /* where the gradient image lands in host grads */
  double predictedJobSeconds; /* the plan's stage-job time */
} rondo_stage_desc;

/* One contribution to a parameter's gradient. A parameter with several
 * (a tied embedding and LM head) gets the sum in table order, whatever the
 * partition, so results do not depend on the worker count. */
typedef struct rondo_grad_part {
  int32_t param;
  int32_t stage;      /* the stage whose gradient image holds it */
  int64_t hostOffset; /* bytes into the host grads buffer; for a part on
                         the worker, into its resident gradients buffer */
  int32_t onWorker;   /* 1: a device-resident parameter's part, which the
                         stage accumulates on the worker and nothing
                         downloads */
} rondo_grad_part;

/* A device-resident parameter: its state lives in the worker's resident
 * buffer for the whole run (programs of one worker), at these byte
 * offsets; -1 where it has none (moments of a frozen parameter, sums of a
 * parameter with one gradient part). The trainer copies the weights and
 * moments there before the first step and back for checkpoints and
 * exports; the OPTIMIZER task updates them in place. */
typedef struct rondo_resident_param {
  int32_t param;
  int64_t weights, expAvg, expAvgSq;
  int64_t sum;     /* the parts added in table order, which AdamW reads */
  int64_t normSum; /* the same, for the logged norm (overlap mode) */
  int64_t bf16;    /* the weights' bf16 copy, which stage functions read
                      (the param_bf16 role): rewritten by the trainer
                      whenever the weights change. A frozen weight held in
                      bf16 (ParamStorage::Bf16) has this copy alone:
                      `weights` is -1 */
} rondo_resident_param;

typedef struct rondo_exec rondo_exec;
typedef void (*rondo_issue_fn)(rondo_exec *exec);
/* A stage function computes one microbatch. `io` holds one pointer per
 * argument of the stage function, then one per result, in the order of the
 * launch's refs. Parameter-gradient results are ADDED into their buffers;
 * every other result is overwritten. */
typedef void (*rondo_stage_fn)(void *const *io, float lossScale);

typedef struct rondo_program {
  const char *name;      /* "exec_w2_sync" */
  const char *optimizer; /* "sync", "overlap" or "stale" */
  int32_t workers, microbatches, rowsPerMicrobatch, firstWorker;
  int32_t numJobs;
  const int32_t *jobStages; /* stage index of job n */
  const rondo_stage_desc *stages;
  int32_t numStages;
  const rondo_buffer_desc *buffers;
  int32_t numBuffers;
  int64_t workerArenaBytes, hostPoolBytes;
  const rondo_grad_part *gradParts;
  int32_t numGradParts;
  /* Host buffers with a fixed meaning: ids and labels, [M][rows x seq]
   * int64; loss sums, [M] float; the gradient images. */
  int32_t idsBuffer, labelsBuffer, lossBuffer, hostGradsBuffer;
  int32_t numEvents;
  double predictedStepSeconds;
  rondo_issue_fn issue;
  /* Device-resident state (none: every parameter streams). The resident
   * parameters are in no stage's pieces; their gradient parts are onWorker
   * parts in residentGradsBuffer. */
  const rondo_resident_param *residentParams;
  int32_t numResidentParams;
  int32_t residentBuffer, residentGradsBuffer; /* worker buffers, or -1 */
  /* The data-parallel replicas the plan was made for (rondo-compile --gpus
   * or --replicas): each runs this program on its share of a global batch
   * of replicas x microbatches x rowsPerMicrobatch rows. */
  int32_t replicas;
  /* Stale programs: the host buffer STASH_GRADS copies the gradient images
   * into (the layout of hostGradsBuffer), which STALE_OPTIMIZER reads;
   * unused by other programs. */
  int32_t gradStashBuffer;
  /* The plan's predicted memory of a worker (its arena and its largest
   * stage's temporaries), or 0: what the trainer adds beyond them (CUDA
   * graphs' pools) stays within it. */
  double predictedWorkerBytes;
} rondo_program;

/* The calls, one per exec op. `label` is only for errors and traces. */
void rondo_exec_copy(rondo_exec *exec, int32_t event, int32_t kind,
                     int32_t stream, int32_t job, int32_t microbatch,
                     rondo_ref src, rondo_ref dst, int64_t bytes,
                     const rondo_await *awaits, int32_t numAwaits);
void rondo_exec_fill_zero(rondo_exec *exec, int32_t event, int32_t job,
                          rondo_ref dst, int64_t bytes,
                          const rondo_await *awaits, int32_t numAwaits);
void rondo_exec_launch(rondo_exec *exec, int32_t event, int32_t job,
                       int32_t microbatch, rondo_stage_fn fn,
                       const rondo_ref *io, int32_t numIo,
                       const rondo_await *awaits, int32_t numAwaits);
void rondo_exec_host_task(rondo_exec *exec, int32_t event, int32_t kind,
                          int32_t stage, const rondo_await *awaits,
                          int32_t numAwaits);
/* Blocks the issuing thread until every worker stream is idle (host tasks
 * may still run): the end of a step. */
void rondo_exec_barrier(rondo_exec *exec);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RONDO_RUNTIME_EXEC_H */
