//===- OnnxWeights.cpp - Reading and writing ONNX initializers ------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/OnnxWeights.h"
#include "rondo/runtime/Error.h"
#include "rondo/runtime/FloatConv.h"

#include "FileUtil.h"

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>

namespace rondo::rt {

namespace {

using onnx::TensorProto;

/// Elements decoded per chunk when streaming external data.
constexpr int64_t kChunkElements = int64_t(1) << 22;

std::string shapeString(const int64_t *dims, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i)
    s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string dataTypeName(int32_t type) {
  if (onnx::TensorProto_DataType_IsValid(type))
    return onnx::TensorProto_DataType_Name(TensorProto::DataType(type));
  return "type " + std::to_string(type);
}

bool isFloatingType(int32_t type) {
  return type == TensorProto::FLOAT || type == TensorProto::FLOAT16 ||
         type == TensorProto::BFLOAT16 || type == TensorProto::DOUBLE;
}

size_t elementSize(int32_t type) {
  switch (type) {
  case TensorProto::FLOAT:
  case TensorProto::INT32:
  case TensorProto::UINT32:
    return 4;
  case TensorProto::DOUBLE:
  case TensorProto::INT64:
  case TensorProto::UINT64:
    return 8;
  case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16:
  case TensorProto::INT16:
  case TensorProto::UINT16:
    return 2;
  case TensorProto::INT8:
  case TensorProto::UINT8:
  case TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

int64_t numElements(const TensorProto &t) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    n *= d;
  return n;
}

/// Reads N packed little-endian values of type Stored from SRC as floats.
template <typename Stored, typename Convert>
void decodeAs(const unsigned char *src, int64_t n, float *dst,
              Convert convert) {
  for (int64_t i = 0; i < n; ++i) {
    Stored v;
    std::memcpy(&v, src + sizeof(Stored) * i, sizeof(Stored));
    dst[i] = convert(v);
  }
}

/// Writes N floats into DST packed as type Stored.
template <typename Stored, typename Convert>
void encodeAs(const float *src, int64_t n, unsigned char *dst,
              Convert convert) {
  for (int64_t i = 0; i < n; ++i) {
    Stored v = convert(src[i]);
    std::memcpy(dst + sizeof(Stored) * i, &v, sizeof(Stored));
  }
}

void decodeToFloat(const unsigned char *src, int64_t n, int32_t type,
                   float *dst) {
  switch (type) {
  case TensorProto::FLOAT:
    std::memcpy(dst, src, size_t(n) * 4);
    return;
  case TensorProto::DOUBLE:
    return decodeAs<double>(src, n, dst, [](double d) { return float(d); });
  case TensorProto::FLOAT16:
    return decodeAs<uint16_t>(src, n, dst, halfToFloat);
  case TensorProto::BFLOAT16:
    return decodeAs<uint16_t>(src, n, dst, bf16ToFloat);
  }
}

void encodeFromFloat(const float *src, int64_t n, int32_t type,
                     unsigned char *dst) {
  switch (type) {
  case TensorProto::FLOAT:
    std::memcpy(dst, src, size_t(n) * 4);
    return;
  case TensorProto::DOUBLE:
    return encodeAs<double>(src, n, dst, [](float f) { return double(f); });
  case TensorProto::FLOAT16:
    return encodeAs<uint16_t>(src, n, dst, floatToHalf);
  case TensorProto::BFLOAT16:
    return encodeAs<uint16_t>(src, n, dst, floatToBf16);
  }
}

/// A loaded model and where relative external-data paths start.
struct LoadedModel {
  std::string path;
  std::string dir;
  onnx::ModelProto proto;
};

void readModel(const std::string &path, LoadedModel &model) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(path + ": cannot open ONNX model: " + std::strerror(errno));
  bool ok;
  {
    google::protobuf::io::FileInputStream raw(fd);
    google::protobuf::io::CodedInputStream coded(&raw);
    // Models with inline weights exceed protobuf's 64 MiB default.
    coded.SetTotalBytesLimit(INT_MAX);
    ok = model.proto.ParseFromCodedStream(&coded) &&
         coded.ConsumedEntireMessage();
  }
  ::close(fd);
  if (!ok)
    throw Error(path + ": not a valid ONNX model (protobuf parse failed)");
  model.path = path;
  model.dir = parentDirectory(path);
}

/// Where a tensor's external data lives.
struct ExternalRef {
  std::string file;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};

std::string describe(const TensorProto &t, const LoadedModel &model) {
  return "initializer '" + t.name() + "' of " + model.path;
}

ExternalRef externalRef(const TensorProto &t, const LoadedModel &model) {
  ExternalRef ref;
  std::string location;
  for (const auto &entry : t.external_data()) {
    const std::string &key = entry.key(), &value = entry.value();
    auto number = [&](const std::string &what) -> uint64_t {
      char *end = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end || errno || value[0] == '-')
        throw Error(describe(t, model) + ": bad external data " + what + " '" +
                    value + "'");
      return v;
    };
    if (key == "location")
      location = value;
    else if (key == "offset")
      ref.offset = number("offset");
    else if (key == "length")
      ref.length = number("length");
  }
  if (location.empty())
    throw Error(describe(t, model) +
                ": external data without a 'location' entry");
  // The ONNX spec makes locations relative to the model's directory; a path
  // that leaves it would let a model file read arbitrary files.
  bool escapes = location[0] == '/';
  size_t start = 0;
  while (!escapes && start <= location.size()) {
    size_t end = location.find_first_of("/\\", start);
    if (end == std::string::npos)
      end = location.size();
    if (location.compare(start, end - start, "..") == 0 && end - start == 2)
      escapes = true;
    start = end + 1;
  }
  if (escapes)
    throw Error(describe(t, model) + ": external data location '" + location +
                "' is absolute or leaves the model's directory");
  ref.file = model.dir + "/" + location;
  return ref;
}

/// Calls `sink(bytes, count, first)` over consecutive runs of the raw
/// little-endian element data of `t`, for inline raw_data and external data.
void forEachRawRun(
    const TensorProto &t, const LoadedModel &model, int64_t numel,
    size_t elemSize,
    const std::function<void(const unsigned char *, int64_t, int64_t)> &sink) {
  const uint64_t bytes = uint64_t(numel) * elemSize;
  if (t.data_location() != TensorProto::EXTERNAL) {
    if (t.raw_data().size() != bytes)
      throw Error(describe(t, model) + ": raw_data holds " +
                  std::to_string(t.raw_data().size()) + " bytes, expected " +
                  std::to_string(bytes));
    sink(reinterpret_cast<const unsigned char *>(t.raw_data().data()), numel,
         0);
    return;
  }
  ExternalRef ref = externalRef(t, model);
  if (ref.length && *ref.length != bytes)
    throw Error(describe(t, model) + ": external data length " +
                std::to_string(*ref.length) + " does not match " +
                std::to_string(bytes) + " bytes of its shape and type");
  int fd = ::open(ref.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(describe(t, model) + ": cannot open external data file '" +
                ref.file + "': " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) < ref.offset + bytes)
    throw Error(describe(t, model) + ": external data file '" + ref.file +
                "' is too short: needs bytes [" + std::to_string(ref.offset) +
                ", " + std::to_string(ref.offset + bytes) + ")");
  std::vector<unsigned char> buffer(
      size_t(std::min<int64_t>(numel, kChunkElements)) * elemSize);
  for (int64_t first = 0; first < numel; first += kChunkElements) {
    int64_t count = std::min(kChunkElements, numel - first);
    size_t want = size_t(count) * elemSize, got = 0;
    off_t at = off_t(ref.offset + uint64_t(first) * elemSize);
    while (got < want) {
      ssize_t n = ::pread(fd, buffer.data() + got, want - got, at + off_t(got));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw Error(describe(t, model) + ": cannot read external data file '" +
                    ref.file + "'");
      got += size_t(n);
    }
    sink(buffer.data(), count, first);
  }
}

/// Decodes the floating-point tensor `t` into `dst` (numElements(t) floats).
void readFloatTensor(const TensorProto &t, const LoadedModel &model,
                     float *dst) {
  const int32_t type = t.data_type();
  if (!isFloatingType(type))
    throw Error(describe(t, model) + " has data type " + dataTypeName(type) +
                "; a trained parameter must be FLOAT, FLOAT16, BFLOAT16 or "
                "DOUBLE");
  const int64_t numel = numElements(t);
  const bool typed = t.data_location() != TensorProto::EXTERNAL &&
                     t.raw_data().empty() && numel > 0;
  if (!typed) {
    forEachRawRun(
        t, model, numel, elementSize(type),
        [&](const unsigned char *bytes, int64_t count, int64_t first) {
          decodeToFloat(bytes, count, type, dst + first);
        });
    return;
  }
  auto checkCount = [&](int64_t have) {
    if (have != numel)
      throw Error(describe(t, model) + " holds " + std::to_string(have) +
                  " values, its shape " +
                  shapeString(t.dims().data(), t.dims_size()) + " needs " +
                  std::to_string(numel));
  };
  switch (type) {
  case TensorProto::FLOAT:
    checkCount(t.float_data_size());
    std::copy(t.float_data().begin(), t.float_data().end(), dst);
    return;
  case TensorProto::DOUBLE:
    checkCount(t.double_data_size());
    for (int64_t i = 0; i < numel; ++i)
      dst[i] = float(t.double_data(int(i)));
    return;
  case TensorProto::FLOAT16:
  case TensorProto::BFLOAT16:
    // The spec stores each 16-bit pattern in the low bits of an int32.
    checkCount(t.int32_data_size());
    for (int64_t i = 0; i < numel; ++i) {
      uint16_t bits = uint16_t(t.int32_data(int(i)));
      dst[i] =
          type == TensorProto::FLOAT16 ? halfToFloat(bits) : bf16ToFloat(bits);
    }
    return;
  }
}

/// The raw bytes of any tensor whose data is external, to re-home them.
std::string readRawBytes(const TensorProto &t, const LoadedModel &model) {
  size_t elemSize = elementSize(t.data_type());
  if (elemSize == 0)
    throw Error(describe(t, model) + ": cannot copy external data of type " +
                dataTypeName(t.data_type()));
  std::string bytes;
  bytes.reserve(size_t(numElements(t)) * elemSize);
  forEachRawRun(t, model, numElements(t), elemSize,
                [&](const unsigned char *p, int64_t count, int64_t) {
                  bytes.append(reinterpret_cast<const char *>(p),
                               size_t(count) * elemSize);
                });
  return bytes;
}

/// Data to place into a tensor of the model being written.
struct DataSource {
  TensorProto *tensor = nullptr;
  int64_t numel = 0;
  const float *floats = nullptr; ///< Encoded to tensor->data_type().
  const int64_t *ints = nullptr; ///< INT64 tensors.
  std::string bytes;             ///< Already-encoded raw bytes.
};

void clearData(TensorProto &t) {
  t.clear_raw_data();
  t.clear_float_data();
  t.clear_double_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_uint64_data();
  t.clear_string_data();
  t.clear_external_data();
  t.clear_data_location();
}

size_t sourceBytes(const DataSource &s) {
  if (!s.bytes.empty() || (!s.floats && !s.ints))
    return s.bytes.size();
  return size_t(s.numel) * elementSize(s.tensor->data_type());
}

/// Appends the encoding of elements [first, first + count) of `s` to `out`.
void encodeRun(const DataSource &s, int64_t first, int64_t count,
               std::string &out) {
  size_t elemSize = elementSize(s.tensor->data_type());
  size_t at = out.size();
  out.resize(at + size_t(count) * elemSize);
  auto *dst = reinterpret_cast<unsigned char *>(&out[at]);
  if (s.floats)
    encodeFromFloat(s.floats + first, count, s.tensor->data_type(), dst);
  else
    std::memcpy(dst, s.ints + first, size_t(count) * 8);
}

/// Fills the tensors of `sources` and writes `model` to `outPath`, with the
/// data inline or, above `threshold` bytes in total, in `<outPath>.data`.
void writeModel(onnx::ModelProto &model, std::vector<DataSource> &sources,
                const std::string &outPath, int64_t threshold) {
  uint64_t total = 0;
  for (const DataSource &s : sources)
    total += sourceBytes(s);
  if (total <= uint64_t(std::max<int64_t>(threshold, 0))) {
    for (DataSource &s : sources) {
      clearData(*s.tensor);
      if (s.floats || s.ints) {
        std::string bytes;
        encodeRun(s, 0, s.numel, bytes);
        s.tensor->set_raw_data(std::move(bytes));
      } else {
        s.tensor->set_raw_data(std::move(s.bytes));
      }
    }
  } else {
    const std::string dataPath = outPath + ".data";
    const std::string location = baseName(dataPath);
    AtomicFile data(dataPath);
    for (DataSource &s : sources) {
      // 64-byte aligned offsets let readers map tensors directly.
      static const char kZeros[64] = {};
      data.write(kZeros, size_t((64 - data.bytesWritten() % 64) % 64));
      uint64_t offset = data.bytesWritten();
      if (s.floats || s.ints) {
        std::string run;
        for (int64_t first = 0; first < s.numel; first += kChunkElements) {
          run.clear();
          encodeRun(s, first, std::min(kChunkElements, s.numel - first), run);
          data.write(run.data(), run.size());
        }
      } else {
        data.write(s.bytes.data(), s.bytes.size());
        std::string().swap(s.bytes);
      }
      uint64_t length = data.bytesWritten() - offset;
      clearData(*s.tensor);
      s.tensor->set_data_location(TensorProto::EXTERNAL);
      auto add = [&](const char *key, const std::string &value) {
        auto *entry = s.tensor->add_external_data();
        entry->set_key(key);
        entry->set_value(value);
      };
      add("location", location);
      add("offset", std::to_string(offset));
      add("length", std::to_string(length));
    }
    data.commit();
  }
  if (model.ByteSizeLong() > size_t(INT_MAX))
    throw Error(outPath + ": the model would exceed protobuf's 2 GiB limit");
  AtomicFile out(outPath);
  if (!model.SerializeToFileDescriptor(out.fd()))
    throw Error(outPath + ": cannot write the ONNX model");
  out.commit();
}

/// params[i]'s initializer in `model`, checked against its shape.
const TensorProto &
findParam(const LoadedModel &model, const std::string &path,
          const std::unordered_map<std::string, const TensorProto *> &byName,
          const ParamSpec &p) {
  auto it = byName.find(p.name);
  if (it == byName.end())
    throw Error(std::string("initializer '") + p.name + "' not found in " +
                path + " (the compiled model reads it)");
  const TensorProto &t = *it->second;
  bool sameShape = t.dims_size() == p.rank &&
                   std::equal(t.dims().begin(), t.dims().end(), p.dims);
  if (!sameShape)
    throw Error(describe(t, model) + " has shape " +
                shapeString(t.dims().data(), t.dims_size()) +
                ", the compiled model expects " + shapeString(p.dims, p.rank));
  return t;
}

std::unordered_map<std::string, const TensorProto *>
initializersByName(const LoadedModel &model) {
  std::unordered_map<std::string, const TensorProto *> byName;
  for (const TensorProto &t : model.proto.graph().initializer())
    byName.emplace(t.name(), &t);
  return byName;
}

} // namespace

MappedWeights mapOnnxWeights(const std::string &path, const ParamSpec *params,
                             int numParams, const std::vector<bool> &wanted) {
  LoadedModel model;
  readModel(path, model);
  auto byName = initializersByName(model);
  MappedWeights result;
  result.data.assign(size_t(numParams), nullptr);
  std::unordered_map<std::string, MappedFile> files;
  for (int i = 0; i < numParams; ++i) {
    if (!wanted[size_t(i)])
      continue;
    const TensorProto &t = findParam(model, path, byName, params[i]);
    if (t.data_location() != TensorProto::EXTERNAL ||
        t.data_type() != TensorProto::FLOAT)
      continue;
    ExternalRef ref = externalRef(t, model);
    const uint64_t bytes = uint64_t(numElements(t)) * sizeof(float);
    if (ref.offset % alignof(float) != 0 || bytes == 0)
      continue;
    if (ref.length && *ref.length != bytes)
      throw Error(describe(t, model) + ": external data length " +
                  std::to_string(*ref.length) + " does not match " +
                  std::to_string(bytes) + " bytes of its shape and type");
    auto it = files.find(ref.file);
    if (it == files.end()) {
      MappedFile file;
      try {
        file = mapFile(ref.file);
      } catch (const Error &e) {
        throw Error(describe(t, model) + ": " + e.what());
      }
      it = files.emplace(ref.file, std::move(file)).first;
      result.keepAlive.push_back(it->second.keepAlive);
    }
    if (it->second.size < ref.offset + bytes)
      throw Error(describe(t, model) + ": external data file '" + ref.file +
                  "' is too short: needs bytes [" + std::to_string(ref.offset) +
                  ", " + std::to_string(ref.offset + bytes) + ")");
    // The file holds little-endian floats, as this host does.
    result.data[size_t(i)] =
        reinterpret_cast<const float *>(it->second.data + ref.offset);
    result.bytes += int64_t(bytes);
  }
  return result;
}

void loadOnnxWeights(const std::string &path, const ParamSpec *params,
                     int numParams, float *const *dst) {
  LoadedModel model;
  readModel(path, model);
  auto byName = initializersByName(model);
  for (int i = 0; i < numParams; ++i) {
    if (!dst[i])
      continue;
    readFloatTensor(findParam(model, path, byName, params[i]), model, dst[i]);
  }
}

std::vector<FloatTensor> readOnnxFloatInitializers(const std::string &path) {
  LoadedModel model;
  readModel(path, model);
  std::vector<FloatTensor> result;
  for (const TensorProto &t : model.proto.graph().initializer()) {
    if (!isFloatingType(t.data_type()))
      continue;
    FloatTensor f;
    f.name = t.name();
    f.dims.assign(t.dims().begin(), t.dims().end());
    f.data.resize(size_t(numElements(t)));
    readFloatTensor(t, model, f.data.data());
    result.push_back(std::move(f));
  }
  return result;
}

void writeInitializerModel(const std::string &path,
                           const std::vector<TensorToWrite<float>> &floats,
                           const std::vector<TensorToWrite<int64_t>> &ints) {
  onnx::ModelProto model;
  model.set_ir_version(10);
  model.set_producer_name("rondo");
  auto *opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(20);
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("initializers");
  std::vector<DataSource> sources;
  auto add = [&](const std::string &name, const std::vector<int64_t> &dims,
                 int32_t type) {
    TensorProto *t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    int64_t numel = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      numel *= d;
    }
    DataSource s;
    s.tensor = t;
    s.numel = numel;
    return s;
  };
  for (const auto &f : floats) {
    DataSource s = add(f.name, f.dims, TensorProto::FLOAT);
    s.floats = f.data;
    sources.push_back(std::move(s));
  }
  for (const auto &i : ints) {
    DataSource s = add(i.name, i.dims, TensorProto::INT64);
    s.ints = i.data;
    sources.push_back(std::move(s));
  }
  writeModel(model, sources, path, ExportOptions().externalDataThreshold);
}

void exportOnnxWeights(const std::string &modelPath, const std::string &outPath,
                       const ParamSpec *params, int numParams,
                       const float *const *data, const ExportOptions &options) {
  LoadedModel model;
  readModel(modelPath, model);
  std::unordered_map<std::string, int> paramIndex;
  for (int i = 0; i < numParams; ++i)
    paramIndex.emplace(params[i].name, i);
  std::vector<DataSource> sources;
  std::vector<bool> found(size_t(numParams), false);
  onnx::GraphProto *graph = model.proto.mutable_graph();
  for (TensorProto &t : *graph->mutable_initializer()) {
    auto it = paramIndex.find(t.name());
    DataSource s;
    s.tensor = &t;
    s.numel = numElements(t);
    if (it != paramIndex.end()) {
      const ParamSpec &p = params[it->second];
      if (!isFloatingType(t.data_type()))
        throw Error(describe(t, model) + " has data type " +
                    dataTypeName(t.data_type()) +
                    "; cannot store trained weights in it");
      if (t.dims_size() != p.rank ||
          !std::equal(t.dims().begin(), t.dims().end(), p.dims))
        throw Error(describe(t, model) + " has shape " +
                    shapeString(t.dims().data(), t.dims_size()) +
                    ", the compiled model has " + shapeString(p.dims, p.rank));
      found[size_t(it->second)] = true;
      s.floats = data[it->second];
    } else if (t.data_location() == TensorProto::EXTERNAL) {
      // Relative locations would dangle next to the new file.
      s.bytes = readRawBytes(t, model);
    } else {
      continue;
    }
    sources.push_back(std::move(s));
  }
  for (int i = 0; i < numParams; ++i)
    if (!found[size_t(i)])
      throw Error(std::string("initializer '") + params[i].name +
                  "' not found in " + modelPath + "; cannot export it");
  writeModel(model.proto, sources, outPath, options.externalDataThreshold);
}

} // namespace rondo::rt
