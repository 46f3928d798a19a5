//===- ProgramAnalysis.cpp - What the executor derives from a program -----===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Checks a compiled program's tables against the model (every index in
// range, every byte range inside its buffer) before anything runs, and
// derives what the executor needs of them (HostExec.h, ProgramInfo).
//
//===----------------------------------------------------------------------===//

#include "exec/HostExec.h"

#include "rondo/runtime/Error.h"

#include <algorithm>
#include <string>

namespace rondo::rt {

ProgramInfo analyseProgram(const rondo_program &p, const ModelSpec &model) {
  const std::string name =
      std::string("the compiled program '") + (p.name ? p.name : "?") + "'";
  auto bad = [&](const std::string &why) { return Error(name + " " + why); };
  if (p.workers < 1 || p.microbatches < 1 || p.rowsPerMicrobatch < 1 ||
      p.numJobs < 1 || p.numStages < 1 || p.numEvents < 0 || !p.issue ||
      !p.jobStages || !p.stages || (p.numBuffers > 0 && !p.buffers) ||
      (p.numGradParts > 0 && !p.gradParts) || p.firstWorker < 0)
    throw bad("is malformed (workers, microbatches, jobs, stages or issue)");
  if (int64_t(p.microbatches) * p.rowsPerMicrobatch != model.batch)
    throw bad("runs " + std::to_string(p.microbatches) + " microbatches of " +
              std::to_string(p.rowsPerMicrobatch) + " rows, but the model's " +
              "global batch is " + std::to_string(model.batch));
  for (int32_t n = 0; n < p.numJobs; ++n)
    if (p.jobStages[n] < 0 || p.jobStages[n] >= p.numStages)
      throw bad("job " + std::to_string(n) + " names stage " +
                std::to_string(p.jobStages[n]));
  for (int32_t b = 0; b < p.numBuffers; ++b) {
    const rondo_buffer_desc &d = p.buffers[b];
    int64_t limit =
        d.space == RONDO_SPACE_WORKER ? p.workerArenaBytes : p.hostPoolBytes;
    if ((d.space != RONDO_SPACE_WORKER && d.space != RONDO_SPACE_HOST) ||
        d.count < 0 || d.bytes < 0 || d.offset < 0 ||
        d.offset + d.count * d.bytes > limit)
      throw bad(std::string("buffer '") + (d.name ? d.name : "?") +
                "' does not fit its arena or pool");
  }
  auto hostBuffer = [&](int32_t b, const char *what, int64_t minBytes) {
    if (b < 0 || b >= p.numBuffers || p.buffers[b].space != RONDO_SPACE_HOST)
      throw bad(std::string("has no host ") + what + " buffer");
    if (p.buffers[b].count * p.buffers[b].bytes < minBytes)
      throw bad(std::string("'s ") + what + " buffer holds " +
                std::to_string(p.buffers[b].count * p.buffers[b].bytes) +
                " bytes, it needs " + std::to_string(minBytes));
  };
  const int64_t tokenBytes = int64_t(p.microbatches) * p.rowsPerMicrobatch *
                             model.seqLen * int64_t(sizeof(int64_t));
  hostBuffer(p.idsBuffer, "ids", tokenBytes);
  hostBuffer(p.labelsBuffer, "labels", tokenBytes);
  hostBuffer(p.lossBuffer, "loss", int64_t(p.microbatches) * 4);
  hostBuffer(p.hostGradsBuffer, "gradients", 0);
  const rondo_buffer_desc &grads = p.buffers[p.hostGradsBuffer];
  const int64_t gradsBytes = grads.count * grads.bytes;
  if (p.optimizer && std::string(p.optimizer) == "stale") {
    // Its stash copies the gradient images aside for the next step's update.
    if (p.gradStashBuffer == p.hostGradsBuffer)
      throw bad("stashes its gradients in its gradients buffer");
    hostBuffer(p.gradStashBuffer, "gradient stash", gradsBytes);
    if (p.numResidentParams > 0)
      throw bad("applies its updates one step late but keeps parameters on "
                "the worker, with nothing to hide the update behind");
  }

  ProgramInfo info;
  const int numParams = model.numParams;
  for (int32_t s = 0; s < p.numStages; ++s) {
    const rondo_stage_desc &st = p.stages[s];
    const std::string stageName =
        std::string("stage '") + (st.name ? st.name : "?") + "'";
    if (st.numPieces < 0 || (st.numPieces > 0 && !st.pieces) ||
        st.paramBytes < 0 || st.gradBytes < 0 || st.gradOffset < 0 ||
        (st.gradBytes > 0 && st.gradOffset + st.gradBytes > gradsBytes))
      throw bad(stageName + " is malformed");
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int32_t i = 0; i < st.numPieces; ++i) {
      const rondo_param_piece &pc = st.pieces[i];
      if (pc.param < 0 || pc.param >= numParams || pc.imageOffset < 0 ||
          pc.bytes < 0 || pc.imageOffset + pc.bytes > st.paramBytes ||
          pc.bytes > numElements(model.params[pc.param]) *
                         storedElementBytes(model.params[pc.param]))
        throw bad(stageName + " piece " + std::to_string(i) +
                  " lies outside the parameter or the image");
      ranges.push_back({pc.imageOffset, pc.imageOffset + pc.bytes});
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].first < ranges[i - 1].second)
        throw bad(stageName + " has overlapping parameter pieces");
  }

  // Device-resident state: one worker holds it, and every range lies in
  // its buffers.
  auto workerBufferBytes = [&](int32_t b, const char *what) -> int64_t {
    if (b < 0 || b >= p.numBuffers || p.buffers[b].space != RONDO_SPACE_WORKER)
      throw bad(std::string("keeps state on the worker but has no ") + what +
                " buffer");
    return p.buffers[b].count * p.buffers[b].bytes;
  };
  info.residentOf.assign(size_t(model.numParams), -1);
  if (p.numResidentParams < 0 || (p.numResidentParams > 0 && !p.residentParams))
    throw bad("has a malformed table of device-resident parameters");
  if (p.numResidentParams > 0) {
    if (p.workers != 1)
      throw bad("keeps parameters on the worker with " +
                std::to_string(p.workers) +
                " workers; device-resident state needs one worker");
    const int64_t residentBytes =
        workerBufferBytes(p.residentBuffer, "resident");
    for (int32_t i = 0; i < p.numResidentParams; ++i) {
      const rondo_resident_param &r = p.residentParams[i];
      if (r.param < 0 || r.param >= model.numParams)
        throw bad("resident parameter " + std::to_string(i) + " is malformed");
      const int64_t bytes =
          numElements(model.params[r.param]) * int64_t(sizeof(float));
      for (int64_t offset : {r.weights, r.expAvg, r.expAvgSq, r.sum, r.normSum})
        if (offset != -1 && (offset < 0 || offset % int64_t(sizeof(float)) ||
                             offset + bytes > residentBytes))
          throw bad(std::string("keeps '") + model.params[r.param].name +
                    "' outside its resident buffer");
      if (r.bf16 != -1 &&
          (r.bf16 < 0 || r.bf16 % 2 || r.bf16 + bytes / 2 > residentBytes))
        throw bad(std::string("keeps the bf16 copy of '") +
                  model.params[r.param].name + "' outside its resident buffer");
      // A weight held in bf16 has its bf16 copy there and nothing else.
      const bool bf16Alone =
          model.params[r.param].storage == ParamStorage::Bf16;
      if ((bf16Alone ? r.weights != -1 || r.bf16 < 0 : r.weights < 0) ||
          (model.params[r.param].trainable && (r.expAvg < 0 || r.expAvgSq < 0)))
        throw bad(std::string("keeps '") + model.params[r.param].name +
                  "' on the worker without its weights or AdamW moments" +
                  (bf16Alone ? " (held in bf16: its bf16 copy alone)" : ""));
      if (info.residentOf[size_t(r.param)] >= 0)
        throw bad(std::string("keeps '") + model.params[r.param].name +
                  "' on the worker twice");
      info.residentOf[size_t(r.param)] = i;
    }
  }
  for (int32_t s = 0; s < p.numStages; ++s)
    for (int32_t i = 0; i < p.stages[s].numPieces; ++i)
      if (info.residentOf[size_t(p.stages[s].pieces[i].param)] >= 0)
        throw bad(std::string("stage '") + p.stages[s].name +
                  "' uploads the device-resident parameter '" +
                  model.params[p.stages[s].pieces[i].param].name + "'");

  info.partsOf.assign(size_t(numParams), {});
  for (int32_t i = 0; i < p.numGradParts; ++i) {
    const rondo_grad_part &g = p.gradParts[i];
    if (g.param < 0 || g.param >= numParams || g.stage < 0 ||
        g.stage >= p.numStages)
      throw bad("gradient part " + std::to_string(i) + " is malformed");
    const rondo_stage_desc &st = p.stages[g.stage];
    int64_t bytes = numElements(model.params[g.param]) * int64_t(sizeof(float));
    if ((g.onWorker != 0) != (info.residentOf[size_t(g.param)] >= 0))
      throw bad("gradient part " + std::to_string(i) + " of '" +
                model.params[g.param].name +
                (g.onWorker ? "' stays on the worker, but the parameter streams"
                            : "' is downloaded, but the parameter is "
                              "device-resident"));
    if (g.onWorker) {
      if (g.hostOffset < 0 || g.hostOffset % int64_t(sizeof(float)) != 0 ||
          g.hostOffset + bytes >
              workerBufferBytes(p.residentGradsBuffer, "resident gradients"))
        throw bad("gradient part " + std::to_string(i) + " of '" +
                  model.params[g.param].name +
                  "' lies outside the resident gradients buffer");
      info.partsOf[size_t(g.param)].push_back(i);
      continue;
    }
    if (g.hostOffset < st.gradOffset ||
        g.hostOffset + bytes > st.gradOffset + st.gradBytes ||
        g.hostOffset % int64_t(sizeof(float)) != 0)
      throw bad("gradient part " + std::to_string(i) + " of '" +
                model.params[g.param].name +
                "' lies outside the gradient image of stage '" + st.name + "'");
    info.partsOf[size_t(g.param)].push_back(i);
  }

  // A stage's position in job order: its last job.
  std::vector<int32_t> lastJob(size_t(p.numStages), -1);
  for (int32_t n = 0; n < p.numJobs; ++n)
    lastJob[size_t(p.jobStages[n])] = n;
  const int32_t lastStage = p.jobStages[p.numJobs - 1];
  info.finalStage.assign(size_t(numParams), -1);
  info.finalises.assign(size_t(p.numStages), {});
  info.readsGradsOf.assign(size_t(p.numStages), {});
  info.updatedBy.assign(size_t(p.numStages), {});
  auto addUnique = [](std::vector<int32_t> &v, int32_t x) {
    if (std::find(v.begin(), v.end(), x) == v.end())
      v.push_back(x);
  };
  for (int32_t q = 0; q < numParams; ++q) {
    if (!model.params[q].trainable)
      continue;
    // A trainable parameter no stage differentiates still decays, so some
    // stage must run its update: the last one.
    const std::vector<int32_t> &parts = info.partsOf[size_t(q)];
    int32_t owner = parts.empty() ? lastStage : p.gradParts[parts[0]].stage;
    for (int32_t part : parts) {
      int32_t s = p.gradParts[part].stage;
      if (lastJob[size_t(s)] > lastJob[size_t(owner)])
        owner = s;
    }
    info.finalStage[size_t(q)] = owner;
    info.finalises[size_t(owner)].push_back(q);
    for (int32_t part : info.partsOf[size_t(q)])
      addUnique(info.readsGradsOf[size_t(owner)], p.gradParts[part].stage);
  }
  for (int32_t s = 0; s < p.numStages; ++s)
    for (int32_t i = 0; i < p.stages[s].numPieces; ++i) {
      int32_t f = info.finalStage[size_t(p.stages[s].pieces[i].param)];
      if (f >= 0)
        addUnique(info.updatedBy[size_t(s)], f);
    }
  return info;
}

} // namespace rondo::rt
