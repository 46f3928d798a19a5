//===- HostTensor.cpp - Compile-time tensors ------------------------*- C++
//-*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Host tensors, and ONNX TensorProtos read into them. The folding of each op
// lives with its conversion in Ops/*.cpp.
//
//===----------------------------------------------------------------------===//

#include "HostTensor.h"

#include "Dialect/TG/IR/TGOps.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>

using namespace rondo::import;
using llvm::ArrayRef;
using llvm::SmallVector;

bool rondo::import::isFloat(DType t) {
  return t == DType::F32 || t == DType::F64;
}

const char *rondo::import::dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "float32";
  case DType::F64:
    return "float64";
  case DType::I64:
    return "int64";
  case DType::I32:
    return "int32";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

int64_t rondo::import::checkedNumel(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
  return n;
}

llvm::Error rondo::import::checkShape(ArrayRef<int64_t> shape,
                                      const llvm::Twine &what) {
  for (int64_t d : shape)
    if (d < 0)
      return llvm::createStringError(llvm::formatv(
          "{0} has negative dimension {1} (shape [{2}])", what.str(), d,
          llvm::make_range(shape.begin(), shape.end())));
  if (checkedNumel(shape) < 0)
    return llvm::createStringError(llvm::formatv(
        "{0} has shape [{1}], whose element count overflows int64", what.str(),
        llvm::make_range(shape.begin(), shape.end())));
  return llvm::Error::success();
}

int64_t HostTensor::numel() const {
  return std::max<int64_t>(checkedNumel(shape), 0);
}

HostTensor HostTensor::shapeOnly(DType t, ArrayRef<int64_t> shape) {
  HostTensor r;
  r.dtype = t;
  r.shape.assign(shape.begin(), shape.end());
  return r;
}

HostTensor HostTensor::zeros(DType t, ArrayRef<int64_t> shape) {
  HostTensor r = shapeOnly(t, shape);
  r.hasData = true;
  if (isFloat(t))
    r.f.assign(r.numel(), 0.0);
  else
    r.i.assign(r.numel(), 0);
  return r;
}

HostTensor HostTensor::scalarI64(int64_t v) {
  HostTensor r = zeros(DType::I64, {});
  r.i[0] = v;
  return r;
}

HostTensor HostTensor::vectorI64(ArrayRef<int64_t> v) {
  HostTensor r = zeros(DType::I64, {int64_t(v.size())});
  llvm::copy(v, r.i.begin());
  return r;
}

llvm::Expected<SmallVector<int64_t>>
rondo::import::broadcastShape(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  auto shape = rondo::tg::broadcastShapes(a, b);
  if (failed(shape))
    return llvm::createStringError(
        llvm::formatv("shapes [{0}] and [{1}] do not broadcast",
                      llvm::make_range(a.begin(), a.end()),
                      llvm::make_range(b.begin(), b.end())));
  return *shape;
}

namespace {

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

} // namespace

DType rondo::import::dtypeFromOnnx(int t, bool &ok) {
  ok = true;
  switch (t) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
    return DType::F32;
  case onnx::TensorProto::DOUBLE:
    return DType::F64;
  case onnx::TensorProto::INT64:
    return DType::I64;
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
    return DType::I32;
  case onnx::TensorProto::BOOL:
    return DType::Bool;
  default:
    ok = false;
    return DType::F32;
  }
}

/// Bytes per element of an ONNX data type in raw_data (0: unknown or not a
/// fixed-size type).
static int64_t onnxElementBytes(int dt) {
  switch (dt) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
  case onnx::TensorProto::COMPLEX64:
    return 8;
  case onnx::TensorProto::COMPLEX128:
    return 16;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

static std::string onnxTypeName(int dt) {
  if (onnx::TensorProto::DataType_IsValid(dt))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(dt));
  return "type " + std::to_string(dt);
}

llvm::Error rondo::import::checkTensorProto(const onnx::TensorProto &proto,
                                            llvm::StringRef what) {
  SmallVector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  if (llvm::Error e = checkShape(shape, what))
    return e;
  int64_t n = checkedNumel(shape);
  int dt = proto.data_type();
  int64_t elem = onnxElementBytes(dt);
  auto shapeStr = [&] {
    return llvm::formatv("[{0}]", llvm::make_range(shape.begin(), shape.end()))
        .str();
  };
  int64_t bytes = -1; // what the shape needs, if it fits in int64
  if (elem && __builtin_mul_overflow(n, elem, &bytes))
    return err(llvm::formatv("{0} has shape {1} of {2}, whose size in bytes "
                             "overflows int64",
                             what, shapeStr(), onnxTypeName(dt)));
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    bool haveLocation = false;
    for (const auto &entry : proto.external_data()) {
      llvm::StringRef key = entry.key(), value = entry.value();
      if (key == "location") {
        location = value.str();
        haveLocation = true;
      } else if (key == "offset" || key == "length") {
        uint64_t v;
        if (value.getAsInteger(10, v) || int64_t(v) < 0)
          return err(llvm::formatv(
              "{0} has external data {1} '{2}', not a non-negative integer",
              what, key, value));
        if (key == "length" && bytes >= 0 && int64_t(v) != bytes)
          return err(llvm::formatv(
              "{0} has external data of length {1} bytes, but its shape {2} "
              "of {3} needs {4} bytes",
              what, v, shapeStr(), onnxTypeName(dt), bytes));
      }
    }
    if (!haveLocation || location.empty())
      return err(what + " is external data without a 'location' entry");
    if (location.find('\0') != std::string::npos)
      return err(what + " has an external data location with a NUL byte");
    namespace path = llvm::sys::path;
    if (path::is_absolute(location, path::Style::posix) ||
        path::is_absolute(location, path::Style::windows) ||
        path::has_root_name(location, path::Style::windows) ||
        llvm::StringRef(location).starts_with("~"))
      return err(llvm::formatv("{0} has external data location '{1}', an "
                               "absolute path; it must be relative to the "
                               "model's directory",
                               what, location));
    for (auto it = path::begin(location, path::Style::windows_slash),
              end = path::end(location);
         it != end; ++it)
      if (*it == "..")
        return err(llvm::formatv("{0} has external data location '{1}', "
                                 "which escapes the model's directory",
                                 what, location));
    return llvm::Error::success();
  }
  if (!proto.raw_data().empty()) {
    if (!elem)
      return err(llvm::formatv("{0} has raw_data of data type {1}, which has "
                               "no fixed element size",
                               what, onnxTypeName(dt)));
    if (int64_t(proto.raw_data().size()) != bytes)
      return err(llvm::formatv("{0} has raw_data of {1} bytes, but its shape "
                               "{2} of {3} needs {4} bytes",
                               what, proto.raw_data().size(), shapeStr(),
                               onnxTypeName(dt), bytes));
    return llvm::Error::success();
  }
  int64_t have;
  const char *field;
  switch (dt) {
  case onnx::TensorProto::FLOAT:
    have = proto.float_data_size(), field = "float_data";
    break;
  case onnx::TensorProto::COMPLEX64:
    have = proto.float_data_size() / 2, field = "float_data";
    break;
  case onnx::TensorProto::DOUBLE:
    have = proto.double_data_size(), field = "double_data";
    break;
  case onnx::TensorProto::COMPLEX128:
    have = proto.double_data_size() / 2, field = "double_data";
    break;
  case onnx::TensorProto::INT64:
    have = proto.int64_data_size(), field = "int64_data";
    break;
  case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT64:
    have = proto.uint64_data_size(), field = "uint64_data";
    break;
  case onnx::TensorProto::STRING:
    have = proto.string_data_size(), field = "string_data";
    break;
  default:
    have = proto.int32_data_size(), field = "int32_data";
  }
  if (have != n)
    return err(llvm::formatv("{0} holds {1} values in {2}, but its shape {3} "
                             "needs {4}",
                             what, have, field, shapeStr(), n));
  return llvm::Error::success();
}

llvm::Expected<HostTensor>
rondo::import::hostTensorFromProto(const onnx::TensorProto &proto,
                                   llvm::StringRef what) {
  bool ok;
  DType t = dtypeFromOnnx(proto.data_type(), ok);
  if (!ok)
    return err(llvm::formatv("{0} has unsupported ONNX data type {1}", what,
                             proto.data_type()));
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    if (llvm::Error e = checkTensorProto(proto, what))
      return std::move(e);
    return err(what + " is stored as external data; constants must be inline");
  }
  // Header against data before anything is allocated.
  if (llvm::Error e = checkTensorProto(proto, what))
    return std::move(e);
  SmallVector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  HostTensor r = HostTensor::zeros(t, shape);
  int64_t n = r.numel();
  const std::string &raw = proto.raw_data();
  int dt = proto.data_type();
  auto sizeError = [&](size_t have) {
    return err(llvm::formatv("{0} holds {1} values but its shape needs {2}",
                             what, have, n));
  };
  auto halfToFloat = [&](uint16_t h, bool bf16) -> double {
    if (bf16) {
      uint32_t bits = uint32_t(h) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v = exp == 0    ? std::ldexp(double(mant), -24)
               : exp == 31 ? (mant ? NAN : INFINITY)
                           : std::ldexp(double(mant | 0x400), int(exp) - 25);
    return sign ? -v : v;
  };
  if (!raw.empty()) {
    size_t elem =
        dt == onnx::TensorProto::FLOAT || dt == onnx::TensorProto::INT32    ? 4
        : dt == onnx::TensorProto::DOUBLE || dt == onnx::TensorProto::INT64 ? 8
        : dt == onnx::TensorProto::FLOAT16 ||
                dt == onnx::TensorProto::BFLOAT16 ||
                dt == onnx::TensorProto::INT16
            ? 2
            : 1;
    if (raw.size() != size_t(n) * elem)
      return sizeError(raw.size() / elem);
    const char *p = raw.data();
    for (int64_t k = 0; k < n; ++k, p += elem) {
      switch (dt) {
      case onnx::TensorProto::FLOAT: {
        float v;
        std::memcpy(&v, p, 4);
        r.f[k] = v;
        break;
      }
      case onnx::TensorProto::DOUBLE:
        std::memcpy(&r.f[k], p, 8);
        break;
      case onnx::TensorProto::FLOAT16:
      case onnx::TensorProto::BFLOAT16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        r.f[k] = halfToFloat(h, dt == onnx::TensorProto::BFLOAT16);
        break;
      }
      case onnx::TensorProto::INT64:
        std::memcpy(&r.i[k], p, 8);
        break;
      case onnx::TensorProto::INT32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        r.i[k] = v;
        break;
      }
      case onnx::TensorProto::INT16: {
        int16_t v;
        std::memcpy(&v, p, 2);
        r.i[k] = v;
        break;
      }
      case onnx::TensorProto::INT8:
        r.i[k] = int8_t(*p);
        break;
      default:
        r.i[k] = uint8_t(*p);
      }
    }
    return r;
  }
  switch (dt) {
  case onnx::TensorProto::FLOAT:
    if (proto.float_data_size() != n)
      return sizeError(proto.float_data_size());
    for (int64_t k = 0; k < n; ++k)
      r.f[k] = proto.float_data(k);
    break;
  case onnx::TensorProto::DOUBLE:
    if (proto.double_data_size() != n)
      return sizeError(proto.double_data_size());
    for (int64_t k = 0; k < n; ++k)
      r.f[k] = proto.double_data(k);
    break;
  case onnx::TensorProto::INT64:
    if (proto.int64_data_size() != n)
      return sizeError(proto.int64_data_size());
    for (int64_t k = 0; k < n; ++k)
      r.i[k] = proto.int64_data(k);
    break;
  default:
    if (proto.int32_data_size() != n)
      return sizeError(proto.int32_data_size());
    for (int64_t k = 0; k < n; ++k) {
      if (isFloat(t))
        r.f[k] = halfToFloat(uint16_t(proto.int32_data(k)),
                             dt == onnx::TensorProto::BFLOAT16);
      else
        r.i[k] = proto.int32_data(k);
    }
  }
  return r;
}
