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
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
using rondo::import::kMaxProtobufBytes;

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
/// Reads a pipe (/dev/stdin, <(...)) up to one byte past
/// kMaxProtobufBytes: its size is unknown until it ends, and it may never
/// end.
llvm::ErrorOr<std::string> readPipe(StringRef path) {
  llvm::Expected<llvm::sys::fs::file_t> file =
      llvm::sys::fs::openNativeFileForRead(path);
  if (!file)
    return llvm::errorToErrorCode(file.takeError());
  std::string contents;
  std::error_code ec;
  while (contents.size() <= kMaxProtobufBytes) {
    size_t old = contents.size();
    contents.resize(old +
                    std::min<uint64_t>(1 << 20, kMaxProtobufBytes + 1 - old));
    llvm::Expected<size_t> got = llvm::sys::fs::readNativeFile(
        *file,
        llvm::MutableArrayRef(contents.data() + old, contents.size() - old));
    if (!got) {
      ec = llvm::errorToErrorCode(got.takeError());
      break;
    }
    contents.resize(old + *got);
    if (*got == 0)
      break;
  }
  llvm::sys::fs::closeFile(*file);
  if (ec)
    return ec;
  return contents;
}
} // namespace

std::unique_ptr<llvm::MemoryBuffer>
rondo::import::readModelFile(MLIRContext *ctx, StringRef path) {
  using llvm::sys::fs::file_type;
  Location fileLoc = FileLineColLoc::get(ctx, path, 0, 0);
  auto tooLarge = [&](StringRef size) {
    emitError(fileLoc) << "the model is " << size
                       << " bytes, over protobuf's 2 GB limit ("
                       << kMaxProtobufBytes
                       << " bytes); store the weights as external data";
    return nullptr;
  };
  auto unreadable = [&](std::error_code ec) {
    emitError(UnknownLoc::get(ctx))
        << "cannot read '" << path << "': " << ec.message();
    return nullptr;
  };
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(path, status))
    return unreadable(ec);
  if (status.type() == file_type::directory_file)
    return unreadable(std::make_error_code(std::errc::is_a_directory));
  // A device (/dev/zero, a terminal) is no model and may never end.
  if (status.type() == file_type::character_file ||
      status.type() == file_type::block_file) {
    emitError(fileLoc)
        << "the model is a device, not a file; give a model file or a pipe";
    return nullptr;
  }
  // A regular file's size is known before it is read; a pipe is read only
  // up to the limit.
  if (status.type() != file_type::regular_file) {
    llvm::ErrorOr<std::string> contents = readPipe(path);
    if (!contents)
      return unreadable(contents.getError());
    if (contents->size() > kMaxProtobufBytes)
      return tooLarge("a pipe of more than " +
                      std::to_string(kMaxProtobufBytes));
    return llvm::MemoryBuffer::getMemBufferCopy(*contents, path);
  }
  if (status.getSize() > kMaxProtobufBytes)
    return tooLarge(std::to_string(status.getSize()));
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return unreadable(buffer.getError());
  return std::move(*buffer);
}

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
