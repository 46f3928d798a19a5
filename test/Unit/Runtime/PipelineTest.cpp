//===- PipelineTest.cpp - The pipelined trainer on the host backend -------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Data.h"
#include "rondo/runtime/FloatConv.h"
#include "rondo/runtime/OnnxWeights.h"
#include "rondo/runtime/Trainer.h"

#include "Checkpoint.h"
#include "TestUtil.h"
#include "ToyModel.h"
#include "ToyPipeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>
#include <vector>

using namespace rondo;
using namespace rondo::rt;
using namespace rondo::test;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kSeq = 9;
constexpr int32_t kMicrobatches = 4;
constexpr int32_t kRowsPerMb = 2;
constexpr int64_t kBatch = kMicrobatches * kRowsPerMb;
constexpr int64_t kRows = 12; // Not a multiple of the batch: wraps.

using Weights = std::vector<std::vector<float>>;

/// The values of `key` in every line of a JSON-lines log that has it.
std::vector<double> logValues(const std::string &path, const std::string &key) {
  std::vector<double> values;
  std::istringstream in(readText(path));
  std::string line;
  const std::string needle = "\"" + key + "\": ";
  while (std::getline(in, line)) {
    size_t pos = line.find(needle);
    if (pos != std::string::npos)
      values.push_back(
          std::strtod(line.c_str() + pos + needle.size(), nullptr));
  }
  return values;
}

/// Doubles compared by their bits (NaN-safe, -0 != +0).
bool sameBits(const std::vector<double> &a, const std::vector<double> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

/// Reads the trainable state of the checkpoint LATEST names in `ckpt`.
CheckpointMeta readToyCheckpoint(const std::string &ckpt,
                                 const std::string &modelPath) {
  const ModelSpec &spec =
      toy::toyModel(kBatch, kSeq, LossKind::CausalLM, modelPath);
  std::vector<std::vector<float>> storage;
  std::vector<CheckpointTensor> tensors;
  for (int i = 0; i < spec.numParams; ++i) {
    const ParamSpec &p = spec.params[i];
    if (!p.trainable)
      continue;
    for (const char *prefix : {"", "exp_avg/", "exp_avg_sq/"}) {
      storage.emplace_back(size_t(numElements(p)));
      tensors.push_back(
          {std::string(prefix) + p.name, nullptr, numElements(p)});
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    tensors[i].data = storage[i].data();
  return readLatestCheckpoint(ckpt, tensors);
}

class PipelineTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = makeTempDir();
    modelPath = dir + "/toy.onnx";
    dataPath = dir + "/tokens.npy";
    const ModelSpec &spec =
        toy::toyModel(kBatch, kSeq, LossKind::CausalLM, modelPath);
    toy::writeRandomWeights(spec, modelPath, 99);
    writeTokens(dataPath, kRows, 0);
  }

  static void writeTokens(const std::string &path, int64_t rows, int salt) {
    std::vector<int64_t> flat;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t x = (r * 5 + salt) % toy::kVocab;
      for (int64_t t = 0; t < kSeq; ++t) {
        flat.push_back(x);
        x = (3 * x + 1 + (r % 3 == 0 ? t % 2 : 0)) % toy::kVocab;
      }
    }
    writeNpy(path, TokenDType::Int64, {rows, kSeq}, flat.data());
  }

  /// Runs the pipelined toy (or, with `single`, its programs with the
  /// global batch in one microbatch: one call of each stage function per
  /// step, the reference for the pipelined ones) with `args`.
  RunResult run(std::vector<std::string> args, bool single = false) {
    const LossKind loss = lossKind;
    args.insert(args.begin(), "toy-pipeline");
    std::vector<char *> argv = argvOf(args);
    return captureRun([&] {
      const toy::ToyPipeline &p =
          single ? toy::toyPipeline(1, int32_t(kBatch), kSeq, modelPath, loss)
                 : toy::toyPipeline(kMicrobatches, kRowsPerMb, kSeq, modelPath,
                                    loss);
      if (failAtLaunch)
        toy::toyPipelineFailAtLaunch(failAtLaunch);
      if (badCopyStep >= 0)
        toy::toyPipelineBadCopyAtStep(badCopyStep);
      if (deadlockStep >= 0)
        toy::toyPipelineDeadlockAtStep(deadlockStep);
      std::vector<rondo_program> programs = p.programs;
      if (breakProgram)
        for (rondo_program &program : programs)
          breakProgram(program);
      return trainerMain(int(args.size()), argv.data(), *p.model,
                         programs.data(), int(programs.size()));
    });
  }

  /// Trains `steps` steps with `extra` flags; returns the losses and grad
  /// norms of the log and the exported weights.
  struct Trained {
    std::vector<double> losses, norms;
    Weights weights;
  };
  Trained train(const std::string &tag, std::vector<std::string> extra,
                bool single = false, int64_t steps = 6) {
    std::string log = dir + "/" + tag + ".jsonl";
    std::string onnx = dir + "/" + tag + ".onnx";
    std::vector<std::string> args = {
        "--data", dataPath,     "--steps", std::to_string(steps), "--lr",
        "0.05",   "--log-json", log,       "--export-onnx",       onnx};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = run(args, single);
    EXPECT_EQ(r.rc, 0) << tag << ": " << r.err;
    Trained t;
    t.losses = logValues(log, "loss");
    t.norms = logValues(log, "grad_norm");
    if (r.rc == 0)
      for (FloatTensor &x : readOnnxFloatInitializers(onnx))
        t.weights.push_back(x.data);
    return t;
  }

  std::string dir, modelPath, dataPath;
  int failAtLaunch = 0;
  int64_t badCopyStep = -1;
  int64_t deadlockStep = -1;
  LossKind lossKind = LossKind::CausalLM;
  std::function<void(rondo_program &)> breakProgram;
};

TEST_F(PipelineTest, SameBitsForAnyWorkerCountAndOptimizerMode) {
  Trained ref = train("w1-sync", {"--workers=1", "--optimizer-mode=sync"});
  ASSERT_EQ(ref.losses.size(), 6u);
  EXPECT_LT(ref.losses.back(), ref.losses.front());
  for (const char *workers : {"1", "2", "3"})
    for (const char *mode : {"sync", "overlap"}) {
      std::string tag = std::string("w") + workers + "-" + mode;
      Trained t = train(tag, {std::string("--workers=") + workers,
                              std::string("--optimizer-mode=") + mode});
      EXPECT_TRUE(sameBits(t.losses, ref.losses)) << tag;
      EXPECT_TRUE(sameBits(t.norms, ref.norms)) << tag;
      EXPECT_EQ(t.weights, ref.weights) << tag;
    }
}

TEST_F(PipelineTest, MatchesTheSingleProcessStep) {
  Trained single = train("single", {}, /*single=*/true);
  Trained piped = train("piped", {"--workers=2"});
  ASSERT_EQ(single.losses.size(), piped.losses.size());
  for (size_t s = 0; s < single.losses.size(); ++s) {
    EXPECT_NEAR(piped.losses[s], single.losses[s], 1e-6 * single.losses[s])
        << "step " << s;
    EXPECT_NEAR(piped.norms[s], single.norms[s], 1e-5 * single.norms[s])
        << "step " << s;
  }
  ASSERT_EQ(single.weights.size(), piped.weights.size());
  for (size_t i = 0; i < single.weights.size(); ++i)
    for (size_t e = 0; e < single.weights[i].size(); ++e)
      EXPECT_NEAR(piped.weights[i][e], single.weights[i][e], 1e-4)
          << "param " << i << " element " << e;
}

TEST_F(PipelineTest, GraphOutputLossIsTheMeanOverMicrobatches) {
  // Every microbatch has the same number of targets, so the mean of the
  // microbatch means is the one-microbatch program's batch mean.
  lossKind = LossKind::GraphOutput;
  Trained single = train("single", {}, /*single=*/true);
  Trained piped = train("piped", {"--workers=3", "--optimizer-mode=sync"});
  Trained overlap = train("overlap", {"--workers=2"});
  ASSERT_EQ(single.losses.size(), piped.losses.size());
  for (size_t s = 0; s < single.losses.size(); ++s)
    EXPECT_NEAR(piped.losses[s], single.losses[s], 1e-6 * single.losses[s])
        << "step " << s;
  EXPECT_TRUE(sameBits(piped.losses, overlap.losses));
  EXPECT_EQ(piped.weights, overlap.weights);
}

TEST_F(PipelineTest, DefaultsAndPlanErrors) {
  // Default: the first program's worker count, overlap.
  RunResult r = run({"--data", dataPath, "--steps", "1"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("plan exec_w1_overlap"));
  r = run({"--data", dataPath, "--steps", "1", "--clip-grad-norm", "1"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("plan exec_w1_sync"));

  r = run({"--data", dataPath, "--workers", "5"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--workers 5: this trainer was compiled for "
                               "1, 2, 3 workers"));
  r = run({"--data", dataPath, "--grad-accum", "2", "--optimizer-mode=stale"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--grad-accum cannot be combined with "
                               "--optimizer-mode=stale"));
  r = run({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.out, HasSubstr("exec_w3_overlap (3 workers, overlap)"));
}

TEST_F(PipelineTest, ClipAndDumpRunInSyncMode) {
  // Clipping and dumps happen in the stage -1 task: compare with the
  // one-microbatch programs.
  std::string dump = dir + "/grads.onnx", dumpSingle = dir + "/single.onnx";
  Trained piped = train("clip", {"--workers=3", "--clip-grad-norm", "0.5",
                                 "--dump-gradients", dump});
  Trained single =
      train("clip-single",
            {"--clip-grad-norm", "0.5", "--dump-gradients", dumpSingle},
            /*single=*/true);
  for (size_t s = 0; s < single.losses.size(); ++s)
    EXPECT_NEAR(piped.losses[s], single.losses[s], 1e-6 * single.losses[s]);
  std::vector<FloatTensor> a = readOnnxFloatInitializers(dump);
  std::vector<FloatTensor> b = readOnnxFloatInitializers(dumpSingle);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    ASSERT_EQ(a[i].data.size(), b[i].data.size());
    for (size_t e = 0; e < a[i].data.size(); ++e)
      EXPECT_NEAR(a[i].data[e], b[i].data[e], 1e-5) << a[i].name;
  }
}

/// One complete event of the trace, from its one-line form.
struct Event {
  std::string kind, stage;
  int pid = -1;
  int tid = -1;
  int64_t step = -1, job = -1, microbatch = -1, bytes = 0;
  bool eval = false;
};

std::vector<Event> readTrace(const std::string &path, std::string &otherData) {
  std::vector<Event> events;
  std::istringstream in(readText(path));
  std::string line;
  auto field = [](const std::string &l, const std::string &key) {
    size_t pos = l.find("\"" + key + "\": ");
    return pos == std::string::npos ? std::string()
                                    : l.substr(pos + key.size() + 4);
  };
  auto integer = [&](const std::string &l, const std::string &key) {
    return std::strtoll(field(l, key).c_str(), nullptr, 10);
  };
  auto text = [&](const std::string &l, const std::string &key) {
    std::string v = field(l, key);
    return v.substr(1, v.find('"', 1) - 1);
  };
  while (std::getline(in, line)) {
    if (line.rfind("\"otherData\"", 0) == 0)
      otherData = line;
    if (line.find("\"ph\": \"X\"") == std::string::npos)
      continue;
    Event e;
    e.kind = text(line, "kind");
    e.stage = text(line, "stage");
    e.pid = int(integer(line, "pid"));
    e.tid = int(integer(line, "tid"));
    e.step = integer(line, "step");
    e.job = integer(line, "job");
    e.microbatch = integer(line, "microbatch");
    e.bytes = integer(line, "bytes");
    e.eval = field(line, "eval").rfind("true", 0) == 0;
    events.push_back(e);
  }
  return events;
}

TEST_F(PipelineTest, StaleProgramAppliesEachUpdateOneStepLate) {
  // The stale programs (a stash task and the previous step's update as ops
  // of their own): the same bits on any worker count; step 0 runs on the
  // initial weights as the synchronous one does, step 1 too (update 0 is
  // still pending); a checkpoint after every step applies each pending
  // update first, which is the synchronous run.
  Trained sync = train("sync", {"--workers=1", "--optimizer-mode=sync"});
  Trained stale = train("stale", {"--workers=1", "--optimizer-mode=stale",
                                  "--trace", dir + "/stale.json"});
  ASSERT_EQ(stale.losses.size(), 6u);
  EXPECT_EQ(stale.losses[0], sync.losses[0]);
  EXPECT_NE(stale.losses[2], sync.losses[2]);
  EXPECT_LT(stale.losses.back(), stale.losses.front());
  for (const char *workers : {"2", "3"}) {
    Trained t =
        train(std::string("stale-w") + workers,
              {std::string("--workers=") + workers, "--optimizer-mode=stale"});
    EXPECT_TRUE(sameBits(t.losses, stale.losses)) << workers;
    EXPECT_TRUE(sameBits(t.norms, stale.norms)) << workers;
    EXPECT_EQ(t.weights, stale.weights) << workers;
  }
  Trained every =
      train("every", {"--workers=3", "--optimizer-mode=stale",
                      "--checkpoint-dir", dir + "/ck", "--save-every", "1"});
  EXPECT_TRUE(sameBits(every.losses, sync.losses));
  EXPECT_TRUE(sameBits(every.norms, sync.norms));
  EXPECT_EQ(every.weights, sync.weights);
  // The trace shows each update under the step whose gradients it applied:
  // steps 0-4 by the next step's task, step 5 by the end of the run (not
  // an op); the task of step 0, with nothing to apply, is not shown.
  std::string otherData;
  std::set<int64_t> updated;
  int stashes = 0;
  for (const Event &e : readTrace(dir + "/stale.json", otherData)) {
    if (e.kind == "optimizer")
      EXPECT_TRUE(updated.insert(e.step).second) << e.step;
    stashes += e.kind == "grad_stash";
  }
  EXPECT_EQ(updated, (std::set<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(stashes, 6);
  EXPECT_THAT(otherData, HasSubstr("\"optimizer\": \"stale\""));
}

TEST_F(PipelineTest, TraceShowsRotationAndTransfers) {
  for (int workers : {2, 3}) {
    for (const char *mode : {"sync", "overlap"}) {
      std::string trace = dir + "/trace.json";
      RunResult r =
          run({"--data", dataPath, "--steps", "4", "--workers",
               std::to_string(workers), std::string("--optimizer-mode=") + mode,
               "--trace", trace});
      ASSERT_EQ(r.rc, 0) << r.err;
      std::string otherData;
      std::vector<Event> events = readTrace(trace, otherData);
      ASSERT_FALSE(events.empty());
      EXPECT_THAT(otherData,
                  HasSubstr("\"workers\": " + std::to_string(workers)));
      EXPECT_THAT(otherData, HasSubstr("\"predictedJobSeconds\": 0.002"));
      std::string text = readText(trace);
      for (const char *row : {"\"upload\"", "\"upload (activations)\"",
                              "\"compute\"", "\"download\"", "\"optimizer\"",
                              "\"data\"", "\"worker 0\"", "\"host\""})
        EXPECT_THAT(text, HasSubstr(row));

      const int c0 = 1 % workers, numJobs = 3;
      std::map<std::pair<int64_t, int64_t>, int64_t> uploaded, downloaded,
          downloads;
      std::set<std::pair<int64_t, int>> optimizerTasks;
      for (const Event &e : events) {
        if (e.pid < workers) {
          // Job n of step s runs on worker (c0 + s * K + n) mod N.
          EXPECT_EQ(e.pid, (c0 + e.step * numJobs + e.job) % workers)
              << e.kind << " of step " << e.step << ", job " << e.job;
        } else {
          EXPECT_EQ(e.pid, workers);
        }
        if (e.kind == "param_upload") {
          uploaded[{e.step, e.job}] += e.bytes;
          EXPECT_EQ(e.tid, 0);
        }
        if (e.kind == "grad_download") {
          downloaded[{e.step, e.job}] += e.bytes;
          ++downloads[{e.step, e.job}];
          EXPECT_EQ(e.tid, 3);
        }
        if (e.kind == "launch") {
          EXPECT_EQ(e.tid, 2);
        }
        if (e.kind == "optimizer") {
          EXPECT_EQ(e.tid, 1);
        }
      }
      for (int64_t s = 0; s < 4; ++s)
        for (int job = 0; job < numJobs; ++job) {
          EXPECT_EQ((uploaded[{s, job}]), toy::toyStageParamBytes(job))
              << "step " << s << ", job " << job;
          if (job > 0) {
            EXPECT_EQ((downloads[{s, job}]), 1);
            EXPECT_EQ((downloaded[{s, job}]), toy::toyStageGradBytes(job));
          }
        }
    }
  }
}

TEST_F(PipelineTest, PlanVsTraceSetsThemSideBySide) {
  if (::access("/usr/bin/python3", X_OK) != 0)
    GTEST_SKIP() << "no /usr/bin/python3";
  std::string trace = dir + "/trace.json", table = dir + "/table.txt";
  RunResult r = run(
      {"--data", dataPath, "--steps", "3", "--workers", "2", "--trace", trace});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string command = std::string("/usr/bin/python3 ") + RONDO_SCRIPTS_DIR +
                        "/plan-vs-trace.py '" + trace + "' > '" + table + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::string text = readText(table);
  EXPECT_THAT(text, HasSubstr("plan exec_w2_overlap (overlap optimizer): 2 "
                              "workers, 4 microbatches of 2 rows"));
  EXPECT_THAT(text, HasSubstr("measured over steps 1, 2"));
  for (const char *row : {"F0     forward", "T      tail", "B1     backward",
                          "first to last op", "interval"})
    EXPECT_THAT(text, HasSubstr(row));
  EXPECT_THAT(text, HasSubstr("1.500")); // B1's predicted milliseconds.
}

TEST_F(PipelineTest, ResumeIsBitwise) {
  for (const char *mode : {"sync", "overlap"}) {
    std::string m = std::string("--optimizer-mode=") + mode;
    Trained full = train(std::string("full-") + mode, {"--workers=2", m});
    std::string ckpt = dir + "/ckpt-" + mode;
    Trained first =
        train(std::string("first-") + mode,
              {"--workers=3", m, "--checkpoint-dir", ckpt, "--save-every", "2"},
              false, 3);
    ASSERT_EQ(first.losses.size(), 3u);
    EXPECT_TRUE(hasCheckpoint(ckpt));
    // Resume with another worker count: the plan does not change the bits.
    Trained rest =
        train(std::string("rest-") + mode,
              {"--workers=1", m, "--checkpoint-dir", ckpt, "--resume"});
    ASSERT_EQ(rest.losses.size(), 3u);
    std::vector<double> joined = first.losses;
    joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
    EXPECT_TRUE(sameBits(joined, full.losses)) << mode;
    EXPECT_EQ(rest.weights, full.weights) << mode;
  }
  // The one-microbatch programs resume the same way.
  Trained full = train("single-full", {}, true);
  std::string ckpt = dir + "/ckpt-single";
  train("single-first", {"--checkpoint-dir", ckpt}, true, 2);
  Trained rest =
      train("single-rest", {"--checkpoint-dir", ckpt, "--resume"}, true);
  EXPECT_EQ(rest.weights, full.weights);
}

// A frozen weight held in bf16 alone (the frozen scale here, as a bf16
// plan holds the frozen weights only products read): the trainer rounds it
// as it loads, uploads its bf16 bytes in half-size image pieces and the
// stages read them. It must train exactly like fp32 storage of the same
// weights already rounded to bf16, for any worker count and mode, export
// the rounded values, and resume bitwise (it is not checkpointed: the
// resumed run rounds it again).
TEST_F(PipelineTest, FrozenWeightHeldInBf16TrainsLikeItsRoundedValues) {
  struct Reset {
    ~Reset() { toy::toyNormInBf16(false); }
  } reset;
  // The same weights with the scale rounded to bf16, stored in fp32.
  const ModelSpec &spec =
      toy::toyModel(kBatch, kSeq, LossKind::CausalLM, modelPath);
  std::vector<std::vector<float>> weights =
      toy::writeRandomWeights(spec, modelPath, 99);
  for (float &x : weights[toy::kNorm])
    x = bf16ToFloat(floatToBf16(x));
  ASSERT_NE(weights[toy::kNorm][0], 1.0f);
  const std::string rounded = dir + "/rounded.onnx";
  std::vector<TensorToWrite<float>> tensors;
  for (int i = 0; i < spec.numParams; ++i)
    tensors.push_back(
        {spec.params[i].name,
         std::vector<int64_t>(spec.params[i].dims,
                              spec.params[i].dims + spec.params[i].rank),
         weights[size_t(i)].data()});
  writeInitializerModel(rounded, tensors);

  Trained ref = train("fp32-rounded", {"--workers=1", "--weights", rounded});
  ASSERT_EQ(ref.losses.size(), 6u);
  toy::toyNormInBf16(true);
  for (const char *workers : {"1", "2", "3"})
    for (const char *mode : {"sync", "overlap", "stale"}) {
      std::string tag = std::string("bf16-w") + workers + "-" + mode;
      Trained t = train(tag, {std::string("--workers=") + workers,
                              std::string("--optimizer-mode=") + mode});
      if (std::string(mode) == "stale")
        continue; // Another update order; it ran on the bf16 image.
      EXPECT_TRUE(sameBits(t.losses, ref.losses)) << tag;
      EXPECT_TRUE(sameBits(t.norms, ref.norms)) << tag;
      // The export widens the scale back: its rounded values.
      EXPECT_EQ(t.weights, ref.weights) << tag;
    }
  // B1's image is the scale alone, in bf16.
  EXPECT_EQ(toy::toyStageParamBytes(toy::kStageB1), 2 * toy::kDim);
  const std::string ckpt = dir + "/ckpt-bf16";
  Trained first = train(
      "bf16-first",
      {"--workers=2", "--checkpoint-dir", ckpt, "--save-every", "2"}, false, 3);
  Trained rest =
      train("bf16-rest", {"--workers=3", "--checkpoint-dir", ckpt, "--resume"});
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), rest.losses.begin(), rest.losses.end());
  EXPECT_TRUE(sameBits(joined, ref.losses));
  EXPECT_EQ(rest.weights, ref.weights);
}

TEST_F(PipelineTest, FailedCheckpointWriteKeepsThePreviousOne) {
  std::string ckpt = dir + "/ckpt";
  train("first", {"--checkpoint-dir", ckpt, "--save-every", "1"}, false, 2);
  // A directory where the next checkpoints' files go: their renames fail,
  // even for root.
  ASSERT_EQ(::mkdir((ckpt + "/" + checkpointFileName(3)).c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((ckpt + "/" + checkpointFileName(4)).c_str(), 0755), 0);
  RunResult r = run({"--data", dataPath, "--steps", "4", "--checkpoint-dir",
                     ckpt, "--save-every", "1", "--resume"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("warning: cannot write the checkpoint of "
                               "step 3"));
  EXPECT_THAT(r.err, HasSubstr(checkpointFileName(3)));
  EXPECT_THAT(r.err, HasSubstr("the previous checkpoint is kept"));
  CheckpointMeta meta = readToyCheckpoint(ckpt, modelPath);
  EXPECT_EQ(meta.step, 2);
}

TEST_F(PipelineTest, StageExceptionIsReportedNotAHang) {
  failAtLaunch = 6; // Step 1's second F0 launch.
  RunResult r = run({"--data", dataPath, "--steps", "4", "--workers", "3"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("toy stage F0 failed on purpose"));
  // Messages number steps from 1, as the progress lines do.
  EXPECT_THAT(r.err, HasSubstr("launch of step 2, job 0 (stage F0), "
                               "microbatch 1"));
}

TEST_F(PipelineTest, OutOfBoundsRefNamesTheBufferAndOp) {
  badCopyStep = 1;
  RunResult r = run({"--data", dataPath, "--steps", "3", "--workers", "2"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("checkpoint of step 2, job 0 (stage F0), "
                               "microbatch 3"));
  EXPECT_THAT(r.err, HasSubstr("buffer 'ckpt'"));
  EXPECT_THAT(r.err, HasSubstr("is outside the buffer"));
}

TEST_F(PipelineTest, AwaitThatNothingCompletesIsReportedNotAHang) {
  deadlockStep = 1;
  RunResult r = run({"--data", dataPath, "--steps", "3", "--workers", "3",
                     "--optimizer-mode=overlap"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("exec: deadlock: the launch of step 2, job 2 "
                               "(stage B1), microbatch 0"));
  EXPECT_THAT(r.err, HasSubstr("which no issued op completes"));
}

TEST_F(PipelineTest, MalformedProgramsAreRejectedByName) {
  auto expectError = [&](std::function<void(rondo_program &)> mutate,
                         const std::string &message) {
    breakProgram = mutate;
    RunResult r = run({"--data", dataPath, "--steps", "1"});
    EXPECT_EQ(r.rc, 1);
    EXPECT_THAT(r.err, HasSubstr(message));
  };
  expectError([](rondo_program &p) { p.rowsPerMicrobatch = 3; },
              "the compiled program 'exec_w1_overlap' runs 4 microbatches of "
              "3 rows, but the model's global batch is 8");
  expectError([](rondo_program &p) { p.idsBuffer = -1; },
              "'exec_w1_overlap' has no host ids buffer");
  static rondo_grad_part parts[4];
  expectError(
      [](rondo_program &p) {
        std::copy(p.gradParts, p.gradParts + p.numGradParts, parts);
        parts[2].hostOffset += 4;
        p.gradParts = parts;
      },
      "gradient part 2 of 'proj.bias' lies outside the gradient image of "
      "stage 'T'");
  expectError([](rondo_program &p) { p.workerArenaBytes = 64; },
              "buffer 'w.params' does not fit its arena or pool");
}

TEST_F(PipelineTest, EvaluationLeavesTrainingAlone) {
  std::string evalPath = dir + "/eval.npy";
  writeTokens(evalPath, 2 * kBatch + 3, 7);
  Trained plain = train("plain", {"--workers=2"});
  Trained withEval = train(
      "eval", {"--workers=2", "--eval-data", evalPath, "--eval-every", "2"});
  EXPECT_TRUE(sameBits(plain.losses, withEval.losses));
  EXPECT_EQ(plain.weights, withEval.weights);
  std::vector<double> evals = logValues(dir + "/eval.jsonl", "eval_loss");
  ASSERT_EQ(evals.size(), 3u); // After steps 2, 4 and 6.
  EXPECT_EQ(logValues(dir + "/eval.jsonl", "eval_step"),
            (std::vector<double>{2, 4, 6}));
  // Another worker count and the one-microbatch programs agree.
  train("eval3", {"--workers=3", "--eval-data", evalPath, "--eval-every", "2"});
  EXPECT_TRUE(sameBits(logValues(dir + "/eval3.jsonl", "eval_loss"), evals));
  train("eval-single", {"--eval-data", evalPath, "--eval-every", "2"}, true);
  std::vector<double> single =
      logValues(dir + "/eval-single.jsonl", "eval_loss");
  ASSERT_EQ(single.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(evals[i], single[i], 1e-5 * single[i]);

  RunResult r =
      run({"--data", dataPath, "--steps", "1", "--eval-data", evalPath});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("eval: step 1 loss"));
  EXPECT_THAT(r.err, HasSubstr("ppl"));
  EXPECT_THAT(r.err, HasSubstr("the last 3 rows do not fill a batch"));
}

} // namespace

TEST_F(PipelineTest, CheckpointErrorStopKeepsThePreviousOneAndExits) {
  std::string ckpt = dir + "/ckpt";
  train("first", {"--checkpoint-dir", ckpt, "--save-every", "1"}, false, 2);
  ASSERT_EQ(::mkdir((ckpt + "/" + checkpointFileName(3)).c_str(), 0755), 0);
  RunResult r =
      run({"--data", dataPath, "--steps", "4", "--checkpoint-dir", ckpt,
           "--save-every", "1", "--resume", "--on-checkpoint-error=stop"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("toy-pipeline: error: cannot write the "
                               "checkpoint of step 3: " +
                               ckpt + "/step-3.ckpt"));
  EXPECT_THAT(r.err, HasSubstr("Is a directory; the previous checkpoint is "
                               "kept (--on-checkpoint-error=stop)"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("step 4/4")));
  EXPECT_EQ(readToyCheckpoint(ckpt, modelPath).step, 2);
  // A bad value names the flag.
  RunResult bad = run({"--data", dataPath, "--on-checkpoint-error=retry"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.err, HasSubstr("invalid value 'retry' for "
                                 "--on-checkpoint-error: expected continue "
                                 "or stop"));
}

TEST_F(PipelineTest, NonFiniteGradientStopsNamingTheFirstStageInJobOrder) {
  for (const char *mode : {"overlap", "sync"}) {
    std::string ckpt = dir + "/ckpt-" + mode;
    // run() would reset the fault: call trainerMain directly.
    RunResult r;
    {
      const toy::ToyPipeline &p =
          toy::toyPipeline(kMicrobatches, kRowsPerMb, kSeq, modelPath);
      toy::toyPipelineNonFiniteAtStep(2, toy::kNanProjGrad | toy::kInfEmbGrad);
      std::vector<std::string> args = {"toy-pipeline",
                                       "--data",
                                       dataPath,
                                       "--steps",
                                       "5",
                                       "--workers=2",
                                       std::string("--optimizer-mode=") + mode,
                                       "--checkpoint-dir",
                                       ckpt,
                                       "--save-every",
                                       "1"};
      std::vector<char *> argv = argvOf(args);
      ::testing::internal::CaptureStderr();
      r.rc = trainerMain(int(args.size()), argv.data(), *p.model,
                         p.programs.data(), int(p.programs.size()));
      r.err = ::testing::internal::GetCapturedStderr();
    }
    EXPECT_EQ(r.rc, 1) << mode;
    // T (job 1) comes before B1 (job 2): its NaN is named, not B1's inf.
    EXPECT_THAT(r.err,
                HasSubstr("toy-pipeline: error: step 3: non-finite gradient "
                          "in stage T (first in job order), parameter "
                          "proj.weight; no update was applied with it"))
        << mode << ": " << r.err;
    // The last good checkpoint is that of step 2 (two steps done), with
    // finite weights.
    EXPECT_EQ(readToyCheckpoint(ckpt, modelPath).step, 2) << mode;
  }
}

TEST_F(PipelineTest, NonFiniteLossStopsNamingTheMicrobatch) {
  const toy::ToyPipeline &p =
      toy::toyPipeline(kMicrobatches, kRowsPerMb, kSeq, modelPath);
  toy::toyPipelineNonFiniteAtStep(1, toy::kNanLoss);
  std::vector<std::string> args = {"toy-pipeline", "--data", dataPath,
                                   "--steps",      "3",      "--workers=3"};
  std::vector<char *> argv = argvOf(args);
  ::testing::internal::CaptureStderr();
  int rc = trainerMain(int(args.size()), argv.data(), *p.model,
                       p.programs.data(), int(p.programs.size()));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("toy-pipeline: error: non-finite loss in "
                             "microbatch 1 of step 2"));
}

/// Trains the toy `steps` steps with a non-finite gradient or loss in step
/// `nanStep` and --on-nan=skip, plus `extra`.
struct SkipRun {
  int rc;
  std::string err;
  Weights weights;
};

TEST_F(PipelineTest, OnNanSkipLeavesWeightsAndOptimizerAsBefore) {
  auto skipRun = [&](const std::string &tag, int64_t steps, int64_t nanStep,
                     int where, std::vector<std::string> extra) {
    const toy::ToyPipeline &p =
        toy::toyPipeline(kMicrobatches, kRowsPerMb, kSeq, modelPath);
    toy::toyPipelineNonFiniteAtStep(nanStep, where);
    std::string onnx = dir + "/" + tag + ".onnx";
    std::vector<std::string> args = {
        "toy-pipeline",
        "--data",
        dataPath,
        "--steps",
        std::to_string(steps),
        "--lr",
        "0.05",
        "--on-nan=skip",
        "--max-skipped-fraction=1", // one skip in a few steps
        "--export-onnx",
        onnx};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char *> argv = argvOf(args);
    ::testing::internal::CaptureStderr();
    SkipRun r;
    r.rc = trainerMain(int(args.size()), argv.data(), *p.model,
                       p.programs.data(), int(p.programs.size()));
    r.err = ::testing::internal::GetCapturedStderr();
    if (r.rc == 0)
      for (FloatTensor &x : readOnnxFloatInitializers(onnx))
        r.weights.push_back(x.data);
    return r;
  };
  // Steps 1 and 2, then step 3 skipped: the weights of two clean steps.
  Trained two = train("two", {"--workers=2"}, false, 2);
  for (int where :
       {int(toy::kNanProjGrad), int(toy::kInfEmbGrad), int(toy::kNanLoss)}) {
    SkipRun r =
        skipRun("skip" + std::to_string(where), 3, 2, where, {"--workers=2"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("step 3 skipped (--on-nan=skip): no "
                                 "parameter or optimizer state changed"));
    EXPECT_EQ(r.weights, two.weights) << where;
  }
  // A skipped step moves the data on and leaves AdamW's step count behind;
  // the checkpoint keeps both, so resuming (with another plan) gives the
  // same bits as an uninterrupted run.
  SkipRun full = skipRun("full", 5, 1, toy::kNanProjGrad, {"--workers=3"});
  ASSERT_EQ(full.rc, 0) << full.err;
  std::string ckpt = dir + "/ckpt-skip";
  SkipRun first = skipRun("first", 3, 1, toy::kNanProjGrad,
                          {"--workers=3", "--checkpoint-dir", ckpt});
  ASSERT_EQ(first.rc, 0) << first.err;
  SkipRun rest = skipRun("rest", 5, -1, 0,
                         {"--workers=1", "--checkpoint-dir", ckpt, "--resume"});
  ASSERT_EQ(rest.rc, 0) << rest.err;
  EXPECT_EQ(rest.weights, full.weights);
  for (const auto &w : full.weights)
    for (float x : w)
      ASSERT_TRUE(std::isfinite(x));
  // Skip needs the synchronous optimizer: it is the default, and an
  // explicit overlap is refused naming both flags.
  RunResult r =
      run({"--data", dataPath, "--on-nan=skip", "--optimizer-mode=overlap"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--optimizer-mode=overlap cannot be combined "
                               "with --on-nan=skip"));
}

namespace {
void raiseSigint() { std::raise(SIGINT); }
void raiseSigterm() { std::raise(SIGTERM); }
void sleepThreeSeconds() { ::sleep(3); }
} // namespace

TEST_F(PipelineTest, SignalFinishesTheStepWritesACheckpointAndExits) {
  Trained full = train("full", {"--workers=2"});
  for (auto [signal, action, status] :
       {std::tuple(SIGINT, &raiseSigint, 130),
        std::tuple(SIGTERM, &raiseSigterm, 143)}) {
    std::string ckpt = dir + "/ckpt-" + std::to_string(signal);
    const toy::ToyPipeline &p =
        toy::toyPipeline(kMicrobatches, kRowsPerMb, kSeq, modelPath);
    // F0's 7th launch: step 1 of 4 microbatches.
    toy::toyPipelineAtLaunch(7, action);
    std::vector<std::string> args = {
        "toy-pipeline", "--data", dataPath,      "--steps",          "6",
        "--lr",         "0.05",   "--workers=2", "--checkpoint-dir", ckpt};
    std::vector<char *> argv = argvOf(args);
    ::testing::internal::CaptureStderr();
    int rc = trainerMain(int(args.size()), argv.data(), *p.model,
                         p.programs.data(), int(p.programs.size()));
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, status);
    EXPECT_THAT(err, HasSubstr("rondo: interrupted at step 2; checkpoint "
                               "written to " +
                               ckpt + "/step-2.ckpt"));
    EXPECT_THAT(err, ::testing::Not(HasSubstr("step 3/6")));
    // The stop's handler stays while the process exits: a late copy of
    // the same stop (a process group's) is no death by the signal. Runs
    // that no signal stopped restore the previous handlers
    // (InterruptsTest.HandlersAreRestoredAndTheRequestClearedAfter).
    struct sigaction now;
    ::sigaction(signal, nullptr, &now);
    EXPECT_NE(now.sa_handler, SIG_DFL);
    EXPECT_NE(now.sa_handler, SIG_IGN);
    Trained rest = train("rest-" + std::to_string(signal),
                         {"--workers=1", "--checkpoint-dir", ckpt, "--resume"});
    EXPECT_EQ(rest.weights, full.weights);
  }
}

TEST_F(PipelineTest, WatchdogNamesTheStageJobThatStoppedAdvancing) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // F0's 6th launch (step 1, microbatch 1) sleeps past a 1 s watchdog.
  auto child = [&] {
    const toy::ToyPipeline &p =
        toy::toyPipeline(kMicrobatches, kRowsPerMb, kSeq, modelPath);
    toy::toyPipelineAtLaunch(6, &sleepThreeSeconds);
    std::vector<std::string> args = {"toy-pipeline",
                                     "--data",
                                     dataPath,
                                     "--steps",
                                     "3",
                                     "--workers=2",
                                     "--quiet",
                                     "--watchdog-seconds",
                                     "1"};
    std::vector<char *> argv = argvOf(args);
    std::exit(trainerMain(int(args.size()), argv.data(), *p.model,
                          p.programs.data(), int(p.programs.size())));
  };
  EXPECT_EXIT(
      child(), ::testing::ExitedWithCode(1),
      "toy-pipeline: error: exec: watchdog: no op of program exec_w2_overlap "
      "completed for 1 s \\(--watchdog-seconds\\): the launch of step 2, job "
      "0 \\(stage F0\\), microbatch 1, worker [01] has not finished");
  // Slow but advancing is fine, and 0 turns the watchdog off.
  const toy::ToyPipeline &p =
      toy::toyPipeline(kMicrobatches, kRowsPerMb, kSeq, modelPath);
  (void)p;
  RunResult r = run({"--data", dataPath, "--steps", "2", "--workers=2",
                     "--watchdog-seconds", "0"});
  EXPECT_EQ(r.rc, 0) << r.err;
}
