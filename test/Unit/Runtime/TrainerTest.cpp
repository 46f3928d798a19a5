//===- TrainerTest.cpp - trainerMain end to end on the toy model ----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The trainer's semantics (data order, loss scale, AdamW, schedules, logs,
// exports, gradient accumulation, errors) on the toy's programs
// (ToyPipeline.h) with microbatches of one row, against a reference that
// calls the toy's stage functions directly.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Trainer.h"
#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/Data.h"
#include "rondo/runtime/OnnxWeights.h"

#include "TestUtil.h"
#include "ToyModel.h"
#include "ToyPipeline.h"

#include <onnx/onnx_pb.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <unistd.h>
#include <vector>

using namespace rondo;
using namespace rondo::rt;
using namespace rondo::test;
using ::testing::HasSubstr;

namespace {

constexpr int64_t kSeq = 9;
constexpr int64_t kRows = 6;

using Weights = std::vector<std::vector<float>>;
using Rows = std::vector<std::vector<int64_t>>;

/// One parsed --log-json line.
struct LogLine {
  int64_t step;
  double loss;
  int64_t tokens;
  double seconds;
  double lr;
  double gradNorm;
};

/// Parses the log strictly: every line one object with exactly the six
/// keys, in order.
std::vector<LogLine> parseLog(const std::string &path) {
  std::vector<LogLine> lines;
  std::istringstream in(readText(path));
  std::string line;
  const char *keys[] = {"step", "loss", "tokens", "seconds", "lr", "grad_norm"};
  while (std::getline(in, line)) {
    EXPECT_EQ(line.front(), '{') << line;
    EXPECT_EQ(line.back(), '}') << line;
    double values[6];
    size_t pos = 1;
    for (int k = 0; k < 6; ++k) {
      std::string key = std::string("\"") + keys[k] + "\": ";
      EXPECT_EQ(line.compare(pos, key.size(), key), 0) << line;
      pos += key.size();
      char *end = nullptr;
      values[k] = std::strtod(line.c_str() + pos, &end);
      EXPECT_NE(end, line.c_str() + pos) << line;
      pos = size_t(end - line.c_str());
      EXPECT_EQ(line[pos], k == 5 ? '}' : ',') << line;
      pos += k == 5 ? 1 : 2;
    }
    EXPECT_EQ(pos, line.size());
    lines.push_back({int64_t(values[0]), values[1], int64_t(values[2]),
                     values[3], values[4], values[5]});
  }
  return lines;
}

class TrainerTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = makeTempDir();
    modelPath = dir + "/toy.onnx";
    dataPath = dir + "/tokens.npy";
    // Initial weights: random, but the frozen scale is not all ones so that
    // a missing factor in the backward would show.
    const ModelSpec &spec =
        toy::toyModel(2, kSeq, LossKind::CausalLM, modelPath);
    initial = toy::writeRandomWeights(spec, modelPath, 1234);
    // A learnable sequence rule: next = 3 * token + 1 (mod V).
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<int64_t> row(kSeq);
      row[0] = (r * 5) % toy::kVocab;
      for (int64_t t = 1; t < kSeq; ++t)
        row[t] = (3 * row[t - 1] + 1) % toy::kVocab;
      rows.push_back(row);
    }
    writeRows(dataPath, rows);
  }

  static void writeRows(const std::string &path, const Rows &r) {
    std::vector<int64_t> flat;
    for (const auto &row : r)
      flat.insert(flat.end(), row.begin(), row.end());
    writeNpy(path, TokenDType::Int64, {int64_t(r.size()), int64_t(r[0].size())},
             flat.data());
  }

  /// Runs the toy's programs: `batch` microbatches of one row per program
  /// step.
  RunResult run(std::vector<std::string> args, int64_t batch = 2,
                LossKind loss = LossKind::CausalLM) {
    const toy::ToyPipeline &p =
        toy::toyPipeline(int32_t(batch), 1, kSeq, modelPath, loss);
    if (nanFromStep >= 0)
      toy::toyPipelineNonFiniteFromStep(nanFromStep, toy::kNanProjGrad);
    std::vector<rondo_program> programs = p.programs;
    args.insert(args.begin(), "toy-trainer");
    std::vector<char *> argv = argvOf(args);
    return captureRun([&] {
      return trainerMain(int(args.size()), argv.data(), *p.model,
                         programs.data(), int(programs.size()));
    });
  }

  /// Loss and gradients of the toy on `batchRows`, computed by calling the
  /// stage functions directly, one row per microbatch, as the trainer
  /// should (its loss is the sum of the microbatches' float losses).
  struct Direct {
    double loss;
    Weights grads;
  };
  Direct direct(const Weights &weights, const Rows &batchRows,
                const Rows *labelRows = nullptr,
                LossKind loss = LossKind::CausalLM) {
    const ModelSpec &spec =
        toy::toyModel(int64_t(batchRows.size()), kSeq, loss, modelPath);
    std::vector<int64_t> ids, labels;
    for (size_t r = 0; r < batchRows.size(); ++r) {
      ids.insert(ids.end(), batchRows[r].begin(), batchRows[r].end());
      const auto &l = labelRows ? (*labelRows)[r] : batchRows[r];
      labels.insert(labels.end(), l.begin(), l.end());
    }
    int64_t count = 0;
    for (size_t r = 0; r < batchRows.size(); ++r)
      for (int64_t t = 1; t < kSeq; ++t)
        count += labels[r * kSeq + size_t(t)] != -100;
    Direct d;
    d.grads.resize(size_t(spec.numParams));
    std::vector<const float *> p;
    std::vector<float *> g;
    for (int i = 0; i < spec.numParams; ++i) {
      d.grads[size_t(i)].assign(weights[size_t(i)].size(), 0.0f);
      p.push_back(weights[size_t(i)].data());
      g.push_back(spec.params[i].trainable ? d.grads[size_t(i)].data()
                                           : nullptr);
    }
    const int64_t n = int64_t(batchRows.size());
    std::vector<float> losses = toy::toyReferenceStep(
        p.data(), g.data(), ids.data(), labels.data(), n, kSeq, loss,
        loss == LossKind::CausalLM ? float(1.0 / double(count))
                                   : float(1.0 / double(n)));
    double sum = 0;
    for (float l : losses)
      sum += double(l);
    d.loss = loss == LossKind::CausalLM ? sum / double(count) : sum / double(n);
    return d;
  }

  Weights exported(const std::string &path) {
    Weights w;
    for (FloatTensor &t : readOnnxFloatInitializers(path))
      w.push_back(t.data);
    return w;
  }

  std::string dir, modelPath, dataPath;
  Weights initial;
  Rows rows;
  /// >= 0: the tail's gradient of proj is NaN in this step (0-based) and
  /// every later one.
  int64_t nanFromStep = -1;
};

TEST_F(TrainerTest, ToyGradientMatchesFiniteDifferences) {
  // The end-to-end checks below rely on the toy's backward being right.
  Rows batch = {rows[0], rows[1]};
  Direct d = direct(initial, batch);
  for (int i : {toy::kEmb, toy::kProj, toy::kBias}) {
    for (size_t e = 0; e < initial[size_t(i)].size(); e += 7) {
      Weights plus = initial, minus = initial;
      const float h = 1e-2f;
      plus[size_t(i)][e] += h;
      minus[size_t(i)][e] -= h;
      double numeric = (direct(plus, batch).loss - direct(minus, batch).loss) /
                       (double(plus[size_t(i)][e]) - minus[size_t(i)][e]);
      EXPECT_NEAR(d.grads[size_t(i)][e], numeric, 2e-4)
          << "param " << i << " element " << e;
    }
  }
  EXPECT_TRUE(std::all_of(d.grads[toy::kNorm].begin(),
                          d.grads[toy::kNorm].end(),
                          [](float x) { return x == 0.0f; }));
}

TEST_F(TrainerTest, LossesDecreaseAndLogParses) {
  RunResult r = run({"--data", dataPath, "--steps", "40", "--lr=0.05",
                     "--log-json", dir + "/log.jsonl"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<LogLine> log = parseLog(dir + "/log.jsonl");
  ASSERT_EQ(log.size(), 40u);
  for (size_t s = 0; s < log.size(); ++s) {
    EXPECT_EQ(log[s].step, int64_t(s));
    EXPECT_EQ(log[s].tokens, 2 * kSeq);
    EXPECT_DOUBLE_EQ(log[s].lr, 0.05);
    EXPECT_GE(log[s].seconds, 0.0);
    EXPECT_GT(log[s].gradNorm, 0.0);
  }
  EXPECT_LT(log.back().loss, 0.5 * log.front().loss);
  // The first logged loss is the loss of the initial weights.
  Direct d = direct(initial, {rows[0], rows[1]});
  EXPECT_NEAR(log[0].loss, d.loss, 1e-12 * d.loss);
  // Progress goes to stderr, so stdout stays free for the user's pipes.
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("step 40/40"));
  EXPECT_THAT(r.err, HasSubstr("tok/s"));
  EXPECT_THAT(r.err, HasSubstr("ETA"));
  EXPECT_THAT(r.err, HasSubstr("rondo: 40 steps in"));
}

TEST_F(TrainerTest, QuietPrintsNothing) {
  RunResult r = run({"--data", dataPath, "--steps", "2", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST_F(TrainerTest, DumpedGradientsAreTheFirstStepsGradients) {
  RunResult r = run({"--data", dataPath, "--steps", "3", "--dump-gradients",
                     dir + "/grads.onnx", "--grad-accum", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // Step 0 with --grad-accum 2 covers rows 0..3 with one global mean.
  Direct d = direct(initial, {rows[0], rows[1], rows[2], rows[3]});
  std::vector<FloatTensor> dumped =
      readOnnxFloatInitializers(dir + "/grads.onnx");
  // Trainable params only, then the loss as in the references.
  ASSERT_EQ(dumped.size(), 4u);
  EXPECT_EQ(dumped[3].name, "loss");
  EXPECT_TRUE(dumped[3].dims.empty());
  EXPECT_NEAR(dumped[3].data[0], d.loss, 1e-6 * d.loss);
  // And the batch the gradients belong to.
  onnx::ModelProto model;
  std::ifstream in(dir + "/grads.onnx", std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&in));
  EXPECT_EQ(model.ir_version(), 10);
  const onnx::TensorProto &ids = model.graph().initializer(4);
  EXPECT_EQ(ids.name(), "input_ids");
  EXPECT_EQ(std::vector<int64_t>(ids.dims().begin(), ids.dims().end()),
            (std::vector<int64_t>{4, kSeq}));
  std::vector<int64_t> flat;
  for (int r = 0; r < 4; ++r)
    flat.insert(flat.end(), rows[size_t(r)].begin(), rows[size_t(r)].end());
  EXPECT_EQ(ids.raw_data(),
            std::string(reinterpret_cast<const char *>(flat.data()),
                        flat.size() * sizeof(int64_t)));
  const char *names[] = {"emb.weight", "proj.weight", "proj.bias"};
  int index[] = {toy::kEmb, toy::kProj, toy::kBias};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(dumped[size_t(k)].name, names[k]);
    const std::vector<float> &want = d.grads[size_t(index[k])];
    ASSERT_EQ(dumped[size_t(k)].data.size(), want.size());
    double scale = 0;
    for (float x : want)
      scale = std::max(scale, double(std::fabs(x)));
    for (size_t e = 0; e < want.size(); ++e)
      EXPECT_NEAR(dumped[size_t(k)].data[e], want[e], 1e-6 * scale)
          << names[k] << "[" << e << "]";
  }
}

TEST_F(TrainerTest, GradAccumEqualsLargerBatch) {
  RunResult a = run({"--data", dataPath, "--steps", "5", "--grad-accum", "2",
                     "--lr", "0.02", "--log-json", dir + "/a.jsonl",
                     "--export-onnx", dir + "/a.onnx"},
                    /*batch=*/2);
  ASSERT_EQ(a.rc, 0) << a.err;
  RunResult b =
      run({"--data", dataPath, "--steps", "5", "--lr", "0.02", "--log-json",
           dir + "/b.jsonl", "--export-onnx", dir + "/b.onnx"},
          /*batch=*/4);
  ASSERT_EQ(b.rc, 0) << b.err;
  std::vector<LogLine> la = parseLog(dir + "/a.jsonl"),
                       lb = parseLog(dir + "/b.jsonl");
  ASSERT_EQ(la.size(), 5u);
  ASSERT_EQ(lb.size(), 5u);
  for (size_t s = 0; s < 5; ++s) {
    EXPECT_NEAR(la[s].loss, lb[s].loss, 1e-5 * lb[s].loss) << "step " << s;
    EXPECT_EQ(la[s].tokens, lb[s].tokens);
    EXPECT_NEAR(la[s].gradNorm, lb[s].gradNorm, 1e-5 * lb[s].gradNorm);
  }
  Weights wa = exported(dir + "/a.onnx"), wb = exported(dir + "/b.onnx");
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i)
    for (size_t e = 0; e < wa[i].size(); ++e)
      EXPECT_NEAR(wa[i][e], wb[i][e], 1e-5) << "param " << i;
}

TEST_F(TrainerTest, ExportEqualsOneManualAdamWStep) {
  RunResult r =
      run({"--data", dataPath, "--steps", "1", "--lr", "0.1", "--weight-decay",
           "0.5", "--betas", "0.8,0.99", "--eps", "1e-6", "--no-decay",
           "model\\.proj\\.bias", "--export-onnx", dir + "/out.onnx"});
  ASSERT_EQ(r.rc, 0) << r.err;
  Direct d = direct(initial, {rows[0], rows[1]});
  Weights expect = initial;
  AdamWConfig config;
  config.beta1 = 0.8;
  config.beta2 = 0.99;
  config.eps = 1e-6;
  AdamW opt(config);
  for (int i : {toy::kEmb, toy::kProj, toy::kBias})
    opt.addParam(expect[size_t(i)].data(), d.grads[size_t(i)].data(),
                 int64_t(expect[size_t(i)].size()),
                 i == toy::kBias ? 0.0 : 0.5);
  opt.step(0.1);
  Weights got = exported(dir + "/out.onnx");
  ASSERT_EQ(got.size(), expect.size());
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t e = 0; e < got[i].size(); ++e)
      EXPECT_NEAR(got[i][e], expect[i][e], 1e-6) << "param " << i;
  EXPECT_EQ(got[toy::kNorm], initial[toy::kNorm]); // Frozen.
}

TEST_F(TrainerTest, GraphOutputLossIsMeanOverMicrobatches) {
  RunResult r = run({"--data", dataPath, "--steps", "1", "--grad-accum", "2",
                     "--log-json", dir + "/log.jsonl", "--dump-gradients",
                     dir + "/g.onnx"},
                    2, LossKind::GraphOutput);
  ASSERT_EQ(r.rc, 0) << r.err;
  Direct d0 =
      direct(initial, {rows[0], rows[1]}, nullptr, LossKind::GraphOutput);
  Direct d1 =
      direct(initial, {rows[2], rows[3]}, nullptr, LossKind::GraphOutput);
  std::vector<LogLine> log = parseLog(dir + "/log.jsonl");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NEAR(log[0].loss, 0.5 * (d0.loss + d1.loss), 1e-12);
  std::vector<FloatTensor> g = readOnnxFloatInitializers(dir + "/g.onnx");
  ASSERT_EQ(g.size(), 4u);
  for (size_t e = 0; e < g[2].data.size(); ++e) // proj.bias
    EXPECT_NEAR(g[2].data[e],
                0.5 * (d0.grads[toy::kBias][e] + d1.grads[toy::kBias][e]),
                1e-7);
}

TEST_F(TrainerTest, DataWrapsAroundAndLabelsIgnoreTargets) {
  // With lr 0 and no decay the weights stay put, so each logged loss is the
  // loss of the rows that step read: 6 rows, 4 per step -> (0,1,2,3),
  // (4,5,0,1), (2,3,4,5).
  Rows labels = rows;
  labels[0][3] = -100;
  labels[4][1] = -100;
  labels[5][0] = -100; // Column 0 is never a target: no effect.
  writeRows(dir + "/labels.npy", labels);
  RunResult r = run({"--data", dataPath, "--labels", dir + "/labels.npy",
                     "--steps", "3", "--lr", "0", "--weight-decay", "0",
                     "--log-json", dir + "/log.jsonl"},
                    4);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<LogLine> log = parseLog(dir + "/log.jsonl");
  ASSERT_EQ(log.size(), 3u);
  int order[3][4] = {{0, 1, 2, 3}, {4, 5, 0, 1}, {2, 3, 4, 5}};
  for (int s = 0; s < 3; ++s) {
    Rows in, lab;
    for (int j : order[s]) {
      in.push_back(rows[size_t(j)]);
      lab.push_back(labels[size_t(j)]);
    }
    Direct d = direct(initial, in, &lab);
    EXPECT_NEAR(log[size_t(s)].loss, d.loss, 1e-12 * d.loss) << "step " << s;
  }
  // Without the labels file the ignored targets count again.
  Direct plain = direct(initial, {rows[0], rows[1], rows[2], rows[3]});
  EXPECT_NE(log[0].loss, plain.loss);
}

TEST_F(TrainerTest, ScheduleDrivesTheLoggedLearningRate) {
  RunResult r = run({"--data", dataPath, "--steps", "5", "--lr", "0.3",
                     "--lr-schedule=linear", "--warmup=2", "--log-json",
                     dir + "/log.jsonl"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<LogLine> log = parseLog(dir + "/log.jsonl");
  ASSERT_EQ(log.size(), 5u);
  double expect[] = {0.0, 0.15, 0.3, 0.2, 0.1}; // lambda = 0, .5, 1, 2/3, 1/3
  for (int s = 0; s < 5; ++s)
    EXPECT_NEAR(log[size_t(s)].lr, expect[s], 1e-15) << "step " << s;
  // lr 0 for the first update leaves the weights (and the decay factor
  // 1 - lr * wd) unchanged, so step 1 still sees the initial weights.
  Direct d = direct(initial, {rows[2], rows[3]});
  EXPECT_NEAR(log[1].loss, d.loss, 1e-12 * d.loss);
}

TEST_F(TrainerTest, ClipLogsTheNormBeforeClipping) {
  RunResult a =
      run({"--data", dataPath, "--steps", "3", "--log-json", dir + "/a.jsonl"});
  RunResult b = run({"--data", dataPath, "--steps", "3", "--clip-grad-norm",
                     "1e-3", "--log-json", dir + "/b.jsonl"});
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  std::vector<LogLine> la = parseLog(dir + "/a.jsonl"),
                       lb = parseLog(dir + "/b.jsonl");
  EXPECT_EQ(la[0].gradNorm, lb[0].gradNorm);
  EXPECT_GT(la[0].gradNorm, 1e-3);
  // Clipping changes the trajectory (through eps and the moments' history).
  EXPECT_NE(la[2].loss, lb[2].loss);
}

TEST_F(TrainerTest, BitwiseSameForAnyWorkerCount) {
  RunResult a = run({"--data", dataPath, "--steps", "4", "--workers", "1",
                     "--export-onnx", dir + "/a.onnx"});
  RunResult b = run({"--data", dataPath, "--steps", "4", "--workers=2",
                     "--export-onnx", dir + "/b.onnx"});
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(exported(dir + "/a.onnx"), exported(dir + "/b.onnx"));
}

TEST_F(TrainerTest, RandomInitIsDeterministic) {
  auto runRandom = [&](const std::string &seed, const std::string &out) {
    RunResult r = run({"--data", dataPath, "--steps", "0", "--init=random",
                       "--seed", seed, "--export-onnx", out});
    EXPECT_EQ(r.rc, 0) << r.err;
    return exported(out);
  };
  Weights a = runRandom("7", dir + "/a.onnx");
  Weights b = runRandom("7", dir + "/b.onnx");
  Weights c = runRandom("8", dir + "/c.onnx");
  EXPECT_EQ(a, b);
  EXPECT_NE(a[toy::kEmb], c[toy::kEmb]);
  EXPECT_EQ(a[toy::kNorm], std::vector<float>(toy::kDim, 1.0f));
  EXPECT_EQ(a[toy::kBias], std::vector<float>(toy::kVocab, 0.0f));
  double sum = 0, sumSq = 0;
  for (float x : a[toy::kEmb]) {
    sum += x;
    sumSq += double(x) * x;
  }
  double n = double(a[toy::kEmb].size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sumSq / n), 0.02, 0.005);
}

TEST_F(TrainerTest, FlatBinData) {
  std::vector<uint16_t> u16;
  for (const auto &row : rows)
    for (int64_t t : row)
      u16.push_back(uint16_t(t));
  writeBytes(dir + "/tokens.bin",
             std::string(reinterpret_cast<char *>(u16.data()), u16.size() * 2));
  std::vector<uint32_t> u32(u16.begin(), u16.end());
  writeBytes(dir + "/tokens32.tok",
             std::string(reinterpret_cast<char *>(u32.data()), u32.size() * 4));
  RunResult a = run({"--data", dir + "/tokens.bin", "--steps", "2",
                     "--log-json", dir + "/a.jsonl"});
  RunResult b = run({"--data", dir + "/tokens32.tok", "--data-dtype", "uint32",
                     "--steps", "2", "--log-json", dir + "/b.jsonl"});
  RunResult c =
      run({"--data", dataPath, "--steps", "2", "--log-json", dir + "/c.jsonl"});
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  ASSERT_EQ(c.rc, 0) << c.err;
  std::vector<LogLine> la = parseLog(dir + "/a.jsonl"),
                       lb = parseLog(dir + "/b.jsonl"),
                       lc = parseLog(dir + "/c.jsonl");
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(la[s].loss, lc[s].loss);
    EXPECT_EQ(lb[s].loss, lc[s].loss);
  }
}

TEST_F(TrainerTest, CommandLineErrorsNameTheFlag) {
  RunResult r = run({"--data", dataPath, "--lrr", "0.1"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag '--lrr'; did you mean '--lr'?"));

  r = run({"--data", dataPath, "--lr", "fast"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("invalid value 'fast' for --lr"));

  r = run({"--data", dataPath, "--betas=0.9"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("for --betas: expected two numbers"));

  r = run({"--data", dataPath, "--grad-accum", "0"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--grad-accum: must be at least 1"));

  r = run({"--data", dataPath, "--no-decay", "(unclosed"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("for --no-decay: invalid regular expression"));

  r = run({"--data", dataPath, "--lr-schedule", "exp"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--lr-schedule: expected constant, cosine or"));

  r = run({"--data", dataPath, "--steps"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--steps needs a value"));

  r = run({"--steps", "3"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--data FILE is required"));

  r = run({"--data", dataPath, "--gpus", "0"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpus 0: this trainer runs on host workers"));

  r = run({"--data", dataPath, "--resume"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--resume needs --checkpoint-dir"));

  r = run({"--data", dataPath, "--save-every", "2"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--save-every needs --checkpoint-dir"));

  r = run({"--data", dataPath, "--eval-every", "2"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--eval-every needs --eval-data"));

  r = run({"--data", dataPath, "--optimizer-mode=overlap", "--clip-grad-norm",
           "1"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--optimizer-mode=overlap cannot be combined "
                               "with --clip-grad-norm"));

  r = run({"--data", dataPath, "--optimizer-mode=overlap", "--dump-gradients",
           dir + "/g.onnx"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--optimizer-mode=overlap cannot be combined "
                               "with --dump-gradients"));

  r = run({"--data", dataPath, "--init=random", "--weights", modelPath});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--weights has no effect with --init=random"));

  r = run({"--data", dataPath, "--data-dtype", "uint32"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--data-dtype applies to flat token streams"));

  r = run({"--data", dataPath, "stray"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("unexpected argument 'stray'"));
}

TEST_F(TrainerTest, HelpListsEveryFlag) {
  RunResult r = run({"--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char *flag : {"--data=",           "--data-dtype=",
                           "--labels=",         "--steps=",
                           "--optimizer=",      "--lr=",
                           "--betas=",          "--eps=",
                           "--weight-decay=",   "--no-decay=",
                           "--clip-grad-norm=", "--grad-accum=",
                           "--lr-schedule=",    "--warmup=",
                           "--init=",           "--seed=",
                           "--weights=",        "--log-json=",
                           "--dump-gradients=", "--export-onnx=",
                           "--workers=",        "--optimizer-mode=",
                           "--trace=",          "--checkpoint-dir=",
                           "--save-every=",     "--resume",
                           "--eval-data=",      "--eval-every=",
                           "--quiet",           "--help"})
    EXPECT_THAT(r.out, HasSubstr(flag));
}

TEST_F(TrainerTest, FileErrorsNameTheFile) {
  RunResult r = run({"--data", dir + "/absent.npy"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(dir + "/absent.npy: cannot open"));

  Rows bad = rows;
  bad[4][2] = toy::kVocab; // One past the vocabulary.
  writeRows(dir + "/bad.npy", bad);
  r = run({"--data", dir + "/bad.npy"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("bad.npy: row 4, column 2: value 16 is "
                               "outside [0, 16)"));

  Rows shortRows = {{1, 2, 3}, {4, 5, 6}};
  writeRows(dir + "/short.npy", shortRows);
  r = run({"--data", dir + "/short.npy"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("rows have 3 tokens, the trainer was compiled "
                               "for seq-len 9"));

  writeRows(dir + "/labels.npy", {rows[0]});
  r = run({"--data", dataPath, "--labels", dir + "/labels.npy"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("labels.npy: shape [1, 9] differs"));

  r = run({"--data", dataPath, "--weights", dir + "/nothere.onnx"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("nothere.onnx: cannot open ONNX model"));
  EXPECT_THAT(r.err, HasSubstr("--init=random"));

  r = run({"--data", dataPath, "--log-json", dir + "/no/such/dir/log"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("--log-json"));
}

TEST_F(TrainerTest, OutOfRangeIdsAndLabelsNameFileRowAndValue) {
  Rows negative = rows;
  negative[2][0] = -1;
  writeRows(dir + "/negative.npy", negative);
  RunResult r = run({"--data", dir + "/negative.npy"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("negative.npy: row 2, column 0: value -1 is "
                               "outside [0, 16)"));

  // Labels: -100 (ignore) is fine, other values must be token ids.
  Rows labels = rows;
  labels[1][4] = -100;
  writeRows(dir + "/ok-labels.npy", labels);
  r = run({"--data", dataPath, "--labels", dir + "/ok-labels.npy"});
  EXPECT_EQ(r.rc, 0) << r.err;
  for (int64_t value : {int64_t(-5), toy::kVocab, int64_t(-99)}) {
    labels[5][7] = value;
    writeRows(dir + "/bad-labels.npy", labels);
    r = run({"--data", dataPath, "--labels", dir + "/bad-labels.npy"});
    EXPECT_EQ(r.rc, 1);
    EXPECT_THAT(r.err, HasSubstr("bad-labels.npy: row 5, column 7: value " +
                                 std::to_string(value) +
                                 " is outside [0, 16) and is not -100"));
  }

  // A flat token stream: the row is the token's index / seq-len.
  std::vector<uint16_t> stream(size_t(3 * kSeq), 1);
  stream[size_t(2 * kSeq + 3)] = 40;
  std::string bin(reinterpret_cast<const char *>(stream.data()),
                  stream.size() * sizeof(uint16_t));
  writeBytes(dir + "/tokens.bin", bin);
  r = run({"--data", dir + "/tokens.bin"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("tokens.bin: row 2, column 3: value 40 is "
                               "outside [0, 16)"));
}

TEST_F(TrainerTest, NonFiniteInitialWeightIsNamedBeforeStep1) {
  // A NaN weight is named as such before step 1, not blamed on the first
  // step's gradients.
  Weights w = initial;
  w[toy::kProj][5] = std::nanf("");
  const ModelSpec &spec = toy::toyModel(2, kSeq, LossKind::CausalLM, modelPath);
  std::vector<TensorToWrite<float>> tensors;
  for (int i = 0; i < spec.numParams; ++i) {
    const ParamSpec &p = spec.params[i];
    tensors.push_back({p.name, std::vector<int64_t>(p.dims, p.dims + p.rank),
                       w[size_t(i)].data()});
  }
  writeInitializerModel(dir + "/nan.onnx", tensors);
  std::string ckpt = dir + "/ckpt";
  for (const char *onNan : {"--on-nan=stop", "--on-nan=skip"}) {
    RunResult r = run({"--data", dataPath, "--steps", "3", "--weights",
                       dir + "/nan.onnx", "--checkpoint-dir", ckpt, onNan});
    EXPECT_EQ(r.rc, 1) << onNan;
    EXPECT_THAT(r.err, HasSubstr("toy-trainer: error: the initial weights are "
                                 "not finite: parameter proj.weight, element "
                                 "5 (from --weights " +
                                 dir + "/nan.onnx); found before step 1"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("gradient")));
    EXPECT_NE(::access((ckpt + "/LATEST").c_str(), F_OK), 0);
  }
}

TEST_F(TrainerTest, NonFiniteGradientStopsOrSkips) {
  // The third step's gradients and every later step's are not finite.
  nanFromStep = 2;
  std::string ckpt = dir + "/ckpt";
  RunResult r = run({"--data", dataPath, "--steps", "3", "--checkpoint-dir",
                     ckpt, "--save-every", "1"});
  EXPECT_EQ(r.rc, 1);
  // Steps are numbered from 1, as in the progress lines.
  EXPECT_THAT(r.err, HasSubstr("toy-trainer: error: step 3: non-finite "
                               "gradient "));
  EXPECT_THAT(r.err, HasSubstr("parameter proj.weight; no update was "
                               "applied with it"));
  std::ifstream latest(ckpt + "/LATEST");
  std::string latestName;
  latest >> latestName;
  EXPECT_EQ(latestName, "step-2.ckpt");

  r = run(
      {"--data", dataPath, "--steps", "2", "--export-onnx", dir + "/two.onnx"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run({"--data", dataPath, "--steps", "4", "--on-nan=skip",
           "--max-skipped-fraction", "1", "--export-onnx",
           dir + "/skipped.onnx"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("step 3 skipped (--on-nan=skip)"));
  EXPECT_THAT(r.err, HasSubstr("step 4 skipped (--on-nan=skip)"));
  // Nothing changed after step 2: the weights of two steps, bit for bit
  // (non-finite ones included, so compared as bytes).
  std::vector<FloatTensor> two = readOnnxFloatInitializers(dir + "/two.onnx");
  std::vector<FloatTensor> skipped =
      readOnnxFloatInitializers(dir + "/skipped.onnx");
  ASSERT_EQ(skipped.size(), two.size());
  for (size_t i = 0; i < two.size(); ++i) {
    ASSERT_EQ(skipped[i].data.size(), two[i].data.size()) << i;
    EXPECT_EQ(std::memcmp(skipped[i].data.data(), two[i].data.data(),
                          two[i].data.size() * sizeof(float)),
              0)
        << i;
  }

  // One of four skipped is more than the default --max-skipped-fraction
  // (0.1): the run fails at the skip that crosses it, not with status 0.
  r = run({"--data", dataPath, "--steps", "4", "--on-nan=skip"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("toy-trainer: error: 1 step skipped "
                               "(--on-nan=skip), step 3 the last: more than "
                               "--max-skipped-fraction 0.1 of --steps 4"));
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("step 4/4")));
}

} // namespace
