//===- Safetensors.cpp - Reading and writing .safetensors files -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Safetensors.h"

#include "FileUtil.h"
#include "Log.h"
#include "rondo/runtime/Error.h"
#include "rondo/runtime/FloatConv.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

namespace rondo::rt {

namespace {

/// The header of a safetensors file does not need more than this, and a
/// larger value means a damaged or foreign file (the reference
/// implementation's limit is 100 MB as well).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

/// A JSON value, as much of JSON as safetensors headers use.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  double number = 0;
  std::string text; ///< String; also the number's spelling.
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members; ///< In file order.

  const Json *member(const std::string &key) const {
    for (const auto &[k, v] : members)
      if (k == key)
        return &v;
    return nullptr;
  }
};

/// A recursive-descent reader; errors name the byte offset in the header.
class JsonReader {
public:
  JsonReader(const char *begin, const char *end, std::string where)
      : p(begin), start(begin), end(end), where(std::move(where)) {}

  Json document() {
    Json v = value(0);
    skipSpace();
    if (p != end)
      fail("unexpected text after the header object");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string &why) {
    throw Error(where + ": invalid header JSON at byte " +
                std::to_string(p - start) + ": " + why);
  }
  void skipSpace() {
    while (p != end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
      ++p;
  }
  bool consume(char c) {
    skipSpace();
    if (p != end && *p == c) {
      ++p;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c))
      fail(std::string("expected '") + c + "'");
  }
  bool literal(const char *word) {
    size_t n = std::strlen(word);
    if (size_t(end - p) >= n && std::memcmp(p, word, n) == 0) {
      p += n;
      return true;
    }
    return false;
  }

  Json value(int depth) {
    if (depth > 64)
      fail("nested too deeply");
    skipSpace();
    if (p == end)
      fail("unexpected end");
    Json v;
    if (*p == '{') {
      ++p;
      v.kind = Json::Object;
      if (consume('}'))
        return v;
      do {
        skipSpace();
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value(depth + 1));
      } while (consume(','));
      expect('}');
    } else if (*p == '[') {
      ++p;
      v.kind = Json::Array;
      if (consume(']'))
        return v;
      do
        v.items.push_back(value(depth + 1));
      while (consume(','));
      expect(']');
    } else if (*p == '"') {
      v.kind = Json::String;
      v.text = string();
    } else if (literal("true")) {
      v.kind = Json::Bool;
      v.boolean = true;
    } else if (literal("false")) {
      v.kind = Json::Bool;
    } else if (literal("null")) {
      v.kind = Json::Null;
    } else {
      const char *first = p;
      while (p != end && (std::isdigit((unsigned char)*p) || *p == '-' ||
                          *p == '+' || *p == '.' || *p == 'e' || *p == 'E'))
        ++p;
      if (p == first)
        fail("unexpected character");
      v.kind = Json::Number;
      v.text.assign(first, p);
      char *stop = nullptr;
      v.number = std::strtod(v.text.c_str(), &stop);
      if (*stop)
        fail("malformed number '" + v.text + "'");
    }
    return v;
  }

  std::string string() {
    if (p == end || *p != '"')
      fail("expected a string");
    ++p;
    std::string s;
    while (true) {
      if (p == end)
        fail("unterminated string");
      char c = *p++;
      if (c == '"')
        return s;
      if (c != '\\') {
        s += c;
        continue;
      }
      if (p == end)
        fail("unterminated escape");
      char e = *p++;
      switch (e) {
      case '"':
      case '\\':
      case '/':
        s += e;
        break;
      case 'b':
        s += '\b';
        break;
      case 'f':
        s += '\f';
        break;
      case 'n':
        s += '\n';
        break;
      case 'r':
        s += '\r';
        break;
      case 't':
        s += '\t';
        break;
      case 'u': {
        uint32_t code = hex4();
        if (code >= 0xd800 && code < 0xdc00) {
          if (!literal("\\u"))
            fail("unpaired surrogate");
          uint32_t low = hex4();
          if (low < 0xdc00 || low >= 0xe000)
            fail("unpaired surrogate");
          code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
        }
        appendUtf8(s, code);
        break;
      }
      default:
        fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }
  uint32_t hex4() {
    if (end - p < 4)
      fail("short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = *p++;
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= uint32_t(c - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return v;
  }
  static void appendUtf8(std::string &s, uint32_t c) {
    if (c < 0x80) {
      s += char(c);
    } else if (c < 0x800) {
      s += char(0xc0 | (c >> 6));
      s += char(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      s += char(0xe0 | (c >> 12));
      s += char(0x80 | ((c >> 6) & 0x3f));
      s += char(0x80 | (c & 0x3f));
    } else {
      s += char(0xf0 | (c >> 18));
      s += char(0x80 | ((c >> 12) & 0x3f));
      s += char(0x80 | ((c >> 6) & 0x3f));
      s += char(0x80 | (c & 0x3f));
    }
  }

  const char *p, *start, *end;
  std::string where;
};

int dtypeBytes(const std::string &dtype) {
  if (dtype == "F32")
    return 4;
  if (dtype == "F64")
    return 8;
  if (dtype == "F16" || dtype == "BF16")
    return 2;
  return 0;
}

} // namespace

void writeSafetensors(
    const std::string &path, const std::vector<TensorToWrite<float>> &tensors,
    const std::vector<std::pair<std::string, std::string>> &metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i)
      header += (i ? "," : "") + jsonQuote(metadata[i].first) + ":" +
                jsonQuote(metadata[i].second);
    header += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite<float> &t = tensors[i];
    uint64_t numel = 1;
    std::string shape;
    for (size_t d = 0; d < t.dims.size(); ++d) {
      numel *= uint64_t(t.dims[d]);
      shape += (d ? "," : "") + std::to_string(t.dims[d]);
    }
    header += (i || !metadata.empty() ? "," : "") + jsonQuote(t.name) +
              ":{\"dtype\":\"F32\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + 4 * numel) + "]}";
    offset += 4 * numel;
  }
  header += "}";
  // Tensor data starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = (unsigned char)(uint64_t(header.size()) >> (8 * i));
  AtomicFile out(path);
  out.write(length, sizeof(length));
  out.write(header.data(), header.size());
  for (const TensorToWrite<float> &t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.dims)
      numel *= d;
    // The format is little-endian, as are the hosts Rondo runs on.
    out.write(t.data, size_t(numel) * sizeof(float));
  }
  out.commit();
}

std::vector<FloatTensor> readSafetensors(const std::string &path) {
  MappedFile file = mapFile(path);
  if (file.size < 8)
    throw Error(path + ": not a safetensors file (" +
                std::to_string(file.size) + " bytes)");
  uint64_t headerBytes = 0;
  for (int i = 0; i < 8; ++i)
    headerBytes |= uint64_t(file.data[i]) << (8 * i);
  if (headerBytes > kMaxHeaderBytes || headerBytes > file.size - 8)
    throw Error(path + ": not a safetensors file (its header length " +
                std::to_string(headerBytes) + " exceeds the file's " +
                std::to_string(file.size) + " bytes)");
  const char *header = reinterpret_cast<const char *>(file.data + 8);
  Json root = JsonReader(header, header + headerBytes, path).document();
  if (root.kind != Json::Object)
    throw Error(path + ": the safetensors header is not a JSON object");
  const unsigned char *bytes = file.data + 8 + headerBytes;
  const uint64_t dataBytes = file.size - 8 - headerBytes;

  struct Entry {
    uint64_t begin;
    FloatTensor tensor;
  };
  std::vector<Entry> entries;
  for (const auto &[name, info] : root.members) {
    if (name == "__metadata__")
      continue;
    auto bad = [&, &name = name](const std::string &why) {
      return Error(path + ": tensor '" + name + "': " + why);
    };
    const Json *dtype = info.member("dtype");
    const Json *shape = info.member("shape");
    const Json *offsets = info.member("data_offsets");
    if (info.kind != Json::Object || !dtype || dtype->kind != Json::String ||
        !shape || shape->kind != Json::Array || !offsets ||
        offsets->kind != Json::Array || offsets->items.size() != 2)
      throw bad("expected {\"dtype\", \"shape\", \"data_offsets\"}");
    int width = dtypeBytes(dtype->text);
    if (!width)
      throw bad("dtype " + dtype->text +
                " is not a floating-point type the trainer reads (F32, F64, "
                "F16, BF16)");
    FloatTensor t;
    t.name = name;
    uint64_t numel = 1;
    for (const Json &d : shape->items) {
      if (d.kind != Json::Number || d.number < 0 ||
          d.number != double(int64_t(d.number)))
        throw bad("shape entries must be non-negative integers");
      t.dims.push_back(int64_t(d.number));
      numel *= uint64_t(d.number);
    }
    uint64_t range[2];
    for (int k = 0; k < 2; ++k) {
      const Json &o = offsets->items[size_t(k)];
      if (o.kind != Json::Number || o.number < 0 ||
          o.number != double(uint64_t(o.number)))
        throw bad("data_offsets must be non-negative integers");
      range[k] = uint64_t(o.number);
    }
    if (range[1] < range[0] || range[1] > dataBytes ||
        range[1] - range[0] != numel * uint64_t(width))
      throw bad("data_offsets [" + std::to_string(range[0]) + ", " +
                std::to_string(range[1]) + ") do not hold " +
                std::to_string(numel) + " " + dtype->text +
                " values inside the file's " + std::to_string(dataBytes) +
                " data bytes");
    t.data.resize(size_t(numel));
    const unsigned char *src = bytes + range[0];
    for (uint64_t i = 0; i < numel; ++i) {
      const unsigned char *e = src + i * uint64_t(width);
      if (width == 4) {
        std::memcpy(&t.data[size_t(i)], e, 4);
      } else if (width == 8) {
        double d;
        std::memcpy(&d, e, 8);
        t.data[size_t(i)] = float(d);
      } else {
        uint16_t h = uint16_t(e[0] | (e[1] << 8));
        t.data[size_t(i)] =
            dtype->text == "BF16" ? bf16ToFloat(h) : halfToFloat(h);
      }
    }
    entries.push_back({range[0], std::move(t)});
  }
  std::stable_sort(
      entries.begin(), entries.end(),
      [](const Entry &a, const Entry &b) { return a.begin < b.begin; });
  std::vector<FloatTensor> result;
  for (Entry &e : entries)
    result.push_back(std::move(e.tensor));
  return result;
}

} // namespace rondo::rt
