//===- ModelReader.cpp - Reading ONNX models --------------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "ModelReader.h"

#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/logging.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;

namespace {
/// Protobuf's parser's complaints go to the log, not to the caller; while a
/// LogCapture is alive on this thread they are kept for the diagnostic.
thread_local std::string *protobufLogSink = nullptr;

void protobufLogHandler(google::protobuf::LogLevel level, const char *file,
                        int line, const std::string &message) {
  if (protobufLogSink) {
    if (!protobufLogSink->empty())
      *protobufLogSink += "; ";
    *protobufLogSink += message;
    return;
  }
  static const char *names[] = {"INFO", "WARNING", "ERROR", "FATAL"};
  llvm::errs() << "[libprotobuf " << names[std::clamp<int>(level, 0, 3)] << " "
               << file << ":" << line << "] " << message << "\n";
}

struct LogCapture {
  std::string text;
  LogCapture() {
    static bool installed =
        (google::protobuf::SetLogHandler(protobufLogHandler), true);
    (void)installed;
    protobufLogSink = &text;
  }
  ~LogCapture() { protobufLogSink = nullptr; }
};

/// Subgraphs (If/Loop/Scan bodies) nested deeper than this are rejected; the
/// importer supports no control flow, but walking deeper graphs must not
/// exhaust the stack.
constexpr int kMaxGraphDepth = 32;
/// Brackets nested deeper than this in ONNX text are rejected before ONNX's
/// recursive-descent parser sees them.
constexpr int kMaxTextNesting = 128;

std::string describeNode(const onnx::NodeProto &node) {
  std::string who = !node.name().empty() ? "node '" + node.name() + "'"
                    : node.output_size() > 0
                        ? "node producing '" + node.output(0) + "'"
                        : "unnamed node";
  return who + " (op '" + node.op_type() + "')";
}

/// Finds the first subgraph nested deeper than kMaxGraphDepth; `outer` and
/// `inner` name the outermost and the too-deep node holding it.
bool graphTooDeep(const onnx::GraphProto &graph, int depth, std::string &outer,
                  std::string &inner) {
  for (const auto &node : graph.node())
    for (const auto &attr : node.attribute()) {
      SmallVector<const onnx::GraphProto *> subgraphs;
      if (attr.has_g())
        subgraphs.push_back(&attr.g());
      for (const auto &g : attr.graphs())
        subgraphs.push_back(&g);
      for (const onnx::GraphProto *g : subgraphs) {
        std::string here =
            describeNode(node) + " attribute '" + attr.name() + "'";
        if (depth + 1 > kMaxGraphDepth) {
          inner = here;
          outer = here;
          return true;
        }
        if (graphTooDeep(*g, depth + 1, outer, inner)) {
          outer = here;
          return true;
        }
      }
    }
  return false;
}

/// The deepest bracket nesting of ONNX text, outside string literals and
/// comments, or -1 once it exceeds kMaxTextNesting.
int textNesting(StringRef text) {
  int depth = 0, deepest = 0;
  for (size_t k = 0; k < text.size(); ++k) {
    char c = text[k];
    if (c == '"') {
      for (++k; k < text.size() && text[k] != '"'; ++k)
        if (text[k] == '\\')
          ++k;
    } else if (c == '#') {
      while (k < text.size() && text[k] != '\n')
        ++k;
    } else if (c == '{' || c == '(' || c == '[' || c == '<') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxTextNesting)
        return -1;
    } else if (c == '}' || c == ')' || c == ']' || c == '>') {
      depth = std::max(depth - 1, 0);
    }
  }
  return deepest;
}
} // namespace

LogicalResult rondo::import::readOnnxModel(Location fileLoc, StringRef contents,
                                           onnx::ModelProto &model) {
  if (contents.size() > kMaxProtobufBytes) {
    emitError(fileLoc) << "the model is " << contents.size()
                       << " bytes, over protobuf's 2 GB limit ("
                       << kMaxProtobufBytes
                       << " bytes); store the weights as external data";
    return failure();
  }
  // ONNX text starts with '<' (the model header), after '#' comment lines.
  StringRef head = contents.ltrim();
  while (head.starts_with("#"))
    head = head.drop_until([](char c) { return c == '\n'; }).ltrim();
  if (head.starts_with("<")) {
    if (textNesting(contents) < 0) {
      emitError(fileLoc) << "malformed ONNX text: brackets nest more than "
                         << kMaxTextNesting
                         << " levels deep (graph recursion limit)";
      return failure();
    }
    LogCapture log;
    std::string text = contents.str();
    onnx::Status status;
    try {
      status = onnx::OnnxParser::Parse(model, text.c_str());
    } catch (const std::exception &e) {
      emitError(fileLoc) << "malformed ONNX text: " << e.what();
      return failure();
    } catch (...) {
      emitError(fileLoc) << "malformed ONNX text";
      return failure();
    }
    if (!status.IsOK()) {
      emitError(fileLoc) << "malformed ONNX text: " << status.ErrorMessage();
      return failure();
    }
  } else {
    LogCapture log;
    google::protobuf::io::ArrayInputStream raw(contents.data(),
                                               int(contents.size()));
    google::protobuf::io::CodedInputStream coded(&raw);
    coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
    // Deep enough for kMaxGraphDepth subgraph levels (three messages each),
    // so that the graph walk below reports them by name.
    coded.SetRecursionLimit(3 * kMaxGraphDepth + 40);
    if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
      auto diag = emitError(fileLoc)
                  << "not a valid ONNX model (protobuf parse failed; the file "
                     "is truncated or not ONNX)";
      if (!log.text.empty())
        diag << ": " << log.text;
      return failure();
    }
  }
  if (!model.has_graph() || model.graph().node_size() == 0) {
    emitError(fileLoc) << "the ONNX model has no graph nodes";
    return failure();
  }
  std::string outer, inner;
  if (graphTooDeep(model.graph(), 0, outer, inner)) {
    emitError(fileLoc) << "subgraphs nest more than " << kMaxGraphDepth
                       << " levels deep (graph recursion limit): " << outer
                       << " holds a subgraph whose level-" << kMaxGraphDepth
                       << " " << inner << " nests deeper";
    return failure();
  }
  return success();
}
