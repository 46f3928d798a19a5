//===- Programs.cpp - exec programs as runtime calls ---===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One runtime call (runtime/include/rondo/runtime/Exec.h) per exec op, in
// issue order, and the program's tables: buffers, stages, parameter pieces,
// gradient parts and the job order.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

namespace rondo::cpp_emit {

namespace {
const char *copyKindName(exec::CopyKind k) {
  switch (k) {
  case exec::CopyKind::param_upload:
    return "RONDO_COPY_PARAM_UPLOAD";
  case exec::CopyKind::input_upload:
    return "RONDO_COPY_INPUT_UPLOAD";
  case exec::CopyKind::handoff:
    return "RONDO_COPY_HANDOFF";
  case exec::CopyKind::checkpoint:
    return "RONDO_COPY_CHECKPOINT";
  case exec::CopyKind::reload:
    return "RONDO_COPY_RELOAD";
  case exec::CopyKind::grad_download:
    return "RONDO_COPY_GRAD_DOWNLOAD";
  case exec::CopyKind::loss_download:
    return "RONDO_COPY_LOSS_DOWNLOAD";
  }
  return "?";
}
const char *taskKindName(exec::HostTaskKind k) {
  switch (k) {
  case exec::HostTaskKind::load_batch:
    return "RONDO_TASK_LOAD_BATCH";
  case exec::HostTaskKind::optimizer:
    return "RONDO_TASK_OPTIMIZER";
  case exec::HostTaskKind::stash_grads:
    return "RONDO_TASK_STASH_GRADS";
  case exec::HostTaskKind::stale_optimizer:
    return "RONDO_TASK_STALE_OPTIMIZER";
  }
  return "?";
}
const char *streamName(exec::Stream s) {
  switch (s) {
  case exec::Stream::compute:
    return "RONDO_STREAM_COMPUTE";
  case exec::Stream::param_upload:
    return "RONDO_STREAM_PARAM_UPLOAD";
  case exec::Stream::act_upload:
    return "RONDO_STREAM_ACT_UPLOAD";
  case exec::Stream::download:
    return "RONDO_STREAM_DOWNLOAD";
  case exec::Stream::host:
    return "RONDO_STREAM_HOST";
  }
  return "?";
}
} // namespace

std::string cIdent(StringRef name) {
  std::string out;
  for (char c : name)
    out += llvm::isAlnum(c) ? c : '_';
  return out;
}

std::string cString(StringRef text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (llvm::isPrint(c)) {
      out += char(c);
    } else {
      // Octal, not hex: an octal escape ends after three digits, a hex one
      // would swallow the hex digits that follow it.
      out += '\\';
      out += char('0' + (c >> 6));
      out += char('0' + ((c >> 3) & 7));
      out += char('0' + (c & 7));
    }
  }
  return out + '"';
}

LogicalResult
Emitter::emitProgram(exec::ProgramOp program,
                     const llvm::StringMap<unsigned> &paramIndex) {
  std::string id = cIdent(program.getSymName());
  Block &block = program.getBody().front();
  // Buffers: the master weights are the trainer's, not the runtime's.
  llvm::StringMap<int> bufferIndex;
  std::string buffers;
  llvm::raw_string_ostream bos(buffers);
  int numBuffers = 0;
  for (auto buf : block.getOps<exec::BufferOp>()) {
    if (buf.getSymName() == exec::kParamsBuffer) {
      bufferIndex[buf.getSymName()] = -1;
      continue;
    }
    bufferIndex[buf.getSymName()] = numBuffers++;
    bos << llvm::formatv(
        "    {{{0}, {1}, {2}, {3}, {4}},\n", cString(buf.getSymName()),
        buf.getSpace() == exec::Space::worker ? "RONDO_SPACE_WORKER"
                                              : "RONDO_SPACE_HOST",
        buf.getSlots(), buf.getBytes(), buf.getOffset());
  }
  tablesOs << "const rondo_buffer_desc " << id << "_buffers[] = {\n"
           << buffers << "};\n";

  // Stages, their parameter pieces, and the gradient parts in the order
  // the host sums them: by parameter, then by job.
  llvm::StringMap<int> stageIndex;
  SmallVector<exec::StageOp> stages(block.getOps<exec::StageOp>());
  struct Part {
    unsigned param;
    int stage;
    int64_t offset;
    bool onWorker = false;
  };
  SmallVector<Part> parts;
  for (auto [k, st] : llvm::enumerate(stages)) {
    stageIndex[st.getSymName()] = k;
    tablesOs << "const rondo_param_piece " << id << "_pieces" << k << "[] = {";
    for (auto [name, off, size] :
         llvm::zip(st.getParams(), st.getParamOffsets(), st.getParamSizes())) {
      auto it = paramIndex.find(cast<StringAttr>(name).getValue());
      if (it == paramIndex.end())
        return st.emitOpError("reads parameter ")
               << name << ", which @main does not have";
      tablesOs << llvm::formatv("{{{0}, {1}, {2}}, ", it->second, off, size);
    }
    tablesOs << "{-1, 0, 0}};\n";
    for (auto [name, off] : llvm::zip(st.getGrads(), st.getGradOffsets()))
      parts.push_back({paramIndex.lookup(cast<StringAttr>(name).getValue()),
                       int(k), st.getHostGradOffset() + off});
    if (ArrayAttr residentGrads = st.getResidentGradsAttr())
      for (auto [name, off] :
           llvm::zip(residentGrads, *st.getResidentGradOffsets()))
        parts.push_back({paramIndex.lookup(cast<StringAttr>(name).getValue()),
                         int(k), off, /*onWorker=*/true});
  }
  // Device-resident parameters: where each one's state lies on the worker.
  tablesOs << "const rondo_resident_param " << id << "_resident[] = {";
  int numResident = 0;
  for (auto r : block.getOps<exec::ResidentOp>()) {
    auto it = paramIndex.find(r.getParam());
    if (it == paramIndex.end())
      return r.emitOpError("keeps parameter '")
             << r.getParam() << "' on the worker, which @main does not have";
    // I64Attr reads back unsigned: -1 (absent) must print as -1.
    tablesOs << llvm::formatv("{{{0}, {1}, {2}, {3}, {4}, {5}, {6}}, ",
                              it->second, int64_t(r.getWeights()),
                              int64_t(r.getExpAvg()), int64_t(r.getExpAvgSq()),
                              int64_t(r.getSum()), int64_t(r.getNormSum()),
                              int64_t(r.getBf16().value_or(-1)));
    ++numResident;
  }
  tablesOs << "{-1, -1, -1, -1, -1, -1, -1}};\n";
  llvm::stable_sort(
      parts, [](const Part &a, const Part &b) { return a.param < b.param; });
  tablesOs << "const rondo_stage_desc " << id << "_stages[] = {\n";
  for (auto [k, st] : llvm::enumerate(stages))
    tablesOs << llvm::formatv(
        "    {{{0}, {1}, {2}, {3}, {4}_pieces{5}, {6}, {7}, {8}, {9}, "
        "{10}},\n",
        cString(st.getSymName()),
        st.getKind() == exec::StageKind::forward ? "RONDO_STAGE_FORWARD"
        : st.getKind() == exec::StageKind::tail  ? "RONDO_STAGE_TAIL"
                                                 : "RONDO_STAGE_BACKWARD",
        st.getFirstLayer(), st.getEndLayer(), id, k, st.getParams().size(),
        st.getParamBytes(), st.getGradBytes(), st.getHostGradOffset(),
        llvm::formatv("{0:e6}", st.getPredictedJobSeconds().convertToDouble()));
  tablesOs << "};\n";
  tablesOs << "const rondo_grad_part " << id << "_grads[] = {";
  for (const Part &p : parts)
    tablesOs << llvm::formatv("{{{0}, {1}, {2}, {3}}, ", p.param, p.stage,
                              p.offset, p.onWorker ? 1 : 0);
  tablesOs << "{-1, -1, 0, 0}};\n";
  tablesOs << "const int32_t " << id << "_jobs[] = {";
  for (auto [n, job] : llvm::enumerate(program.getJobs()))
    tablesOs << (n ? ", " : "")
             << stageIndex.lookup(cast<FlatSymbolRefAttr>(job).getValue());
  tablesOs << "};\n";

  // The issue function: one runtime call per op.
  llvm::DenseMap<Value, int> eventId;
  int numEvents = 0;
  for (Operation &op : block)
    if (op.getNumResults() == 1 &&
        isa<exec::EventType>(op.getResult(0).getType()))
      eventId[op.getResult(0)] = numEvents++;
  auto yield = cast<exec::YieldOp>(block.getTerminator());
  auto awaits = [&](ValueRange events) -> std::string {
    if (events.empty())
      return "nullptr, 0";
    std::string list;
    for (Value e : events) {
      int idValue, previous = 0;
      if (auto arg = dyn_cast<BlockArgument>(e)) {
        idValue = eventId.lookup(yield.getOperand(arg.getArgNumber()));
        previous = 1;
      } else {
        idValue = eventId.lookup(e);
      }
      list += llvm::formatv("{{{0}, {1}}, ", idValue, previous).str();
    }
    std::string name = "aw" + std::to_string(counter++);
    issueOs << "  static const rondo_await " << name << "[] = {" << list
            << "};\n";
    return name + ", " + std::to_string(events.size());
  };
  auto refText = [&](exec::RefAttr r) {
    return llvm::formatv("rondo_ref{{{0}, {1}, {2}, {3}}",
                         bufferIndex.lookup(r.getBuffer().getValue()),
                         r.getJob(), r.getSlot(), r.getOffset())
        .str();
  };
  issueOs << "// " << cString(program.getSymName())
          << ": one call per exec op.\n"
          << "void " << id << "_issue(rondo_exec *x) {\n";
  for (Operation &op : block) {
    if (auto c = dyn_cast<exec::CopyOp>(op)) {
      std::string aw = awaits(c.getAwaits());
      issueOs << llvm::formatv("  rondo_exec_copy(x, {0}, {1}, {2}, {3}, {4}, "
                               "{5}, {6}, {7}, {8});\n",
                               eventId[c.getEvent()], copyKindName(c.getKind()),
                               streamName(c.getStream()), int64_t(c.getJob()),
                               int64_t(c.getMb()), refText(c.getSrc()),
                               refText(c.getDst()), c.getSrc().getBytes(), aw);
    } else if (auto f = dyn_cast<exec::FillZeroOp>(op)) {
      std::string aw = awaits(f.getAwaits());
      issueOs << llvm::formatv("  rondo_exec_fill_zero(x, {0}, {1}, {2}, {3}, "
                               "{4});\n",
                               eventId[f.getEvent()], int64_t(f.getJob()),
                               refText(f.getDst()), f.getDst().getBytes(), aw);
    } else if (auto l = dyn_cast<exec::LaunchOp>(op)) {
      std::string aw = awaits(l.getAwaits());
      auto stage =
          cast<exec::StageOp>(program.lookupSymbol(l.getStageAttr().getAttr()));
      std::string io = "io" + std::to_string(counter++);
      issueOs << "  static const rondo_ref " << io << "[] = {";
      unsigned count = 0;
      for (auto list : {l.getInputs(), l.getOutputs(), l.getAccumulate()})
        for (Attribute a : list) {
          issueOs << (count ? ", " : "") << refText(cast<exec::RefAttr>(a));
          ++count;
        }
      issueOs << "};\n";
      issueOs << llvm::formatv(
          "  rondo_exec_launch(x, {0}, {1}, {2}, {3}, {4}, {5}, {6});\n",
          eventId[l.getEvent()], int64_t(l.getJob()), int64_t(l.getMb()),
          cIdent(stage.getFunction()), io, count, aw);
    } else if (auto h = dyn_cast<exec::HostTaskOp>(op)) {
      std::string aw = awaits(h.getAwaits());
      issueOs << llvm::formatv(
          "  rondo_exec_host_task(x, {0}, {1}, {2}, {3});\n",
          eventId[h.getEvent()], taskKindName(h.getKind()),
          h.getStageAttr() ? stageIndex.lookup(h.getStageAttr().getValue())
                           : -1,
          aw);
    } else if (isa<exec::BarrierOp>(op)) {
      issueOs << "  rondo_exec_barrier(x);\n";
    }
  }
  issueOs << "}\n\n";

  auto bufferOr = [&](StringRef name) {
    auto it = bufferIndex.find(name);
    return it == bufferIndex.end() ? -1 : it->second;
  };
  programsOs << llvm::formatv(
      "    {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}_jobs, {7}_stages, "
      "{8}, {7}_buffers, {9}, {10}, {11}, {7}_grads, {12}, {13}, {14}, {15}, "
      "{16}, {17}, {18}, {7}_issue, {7}_resident, {19}, {20}, {21}, {22}, "
      "{23}, {24}},\n",
      cString(program.getSymName()), cString(program.getOptimizer()),
      program.getWorkers(), program.getMicrobatches(),
      program.getRowsPerMicrobatch(), program.getFirstWorker(),
      program.getNumJobs(), id, stages.size(), numBuffers,
      program->getAttrOfType<IntegerAttr>("worker_arena_bytes").getInt(),
      program->getAttrOfType<IntegerAttr>("host_pool_bytes").getInt(),
      parts.size(), bufferOr(exec::kHostIdsBuffer),
      bufferOr(exec::kHostLabelsBuffer), bufferOr(exec::kHostLossBuffer),
      bufferOr(exec::kHostGradsBuffer), numEvents,
      llvm::formatv("{0:e6}",
                    program.getPredictedStepSeconds().convertToDouble()),
      numResident, bufferOr(exec::kResidentBuffer),
      bufferOr(exec::kResidentGradsBuffer), program.getReplicas().value_or(1),
      bufferOr(exec::kGradStashBuffer),
      llvm::formatv("{0:e6}",
                    program.getPredictedWorkerBytes()
                        ? program.getPredictedWorkerBytes()->convertToDouble()
                        : 0.0));
  return success();
}

} // namespace rondo::cpp_emit
