//===- Data.cpp - Token data: .npy arrays and flat .bin streams -----------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Data.h"
#include "rondo/runtime/Error.h"

#include "FileUtil.h"

#include <cctype>
#include <cstring>

namespace rondo::rt {

namespace {

// One row a token type: its --data-dtype name, .npy descr and size.
struct TokenDTypeInfo {
  TokenDType dtype;
  const char *name;
  const char *descr;
  size_t size;
};

constexpr TokenDTypeInfo kTokenDTypes[] = {
    {TokenDType::Int32, "int32", "<i4", 4},
    {TokenDType::Int64, "int64", "<i8", 8},
    {TokenDType::UInt16, "uint16", "<u2", 2},
    {TokenDType::UInt32, "uint32", "<u4", 4},
};

const TokenDTypeInfo *findTokenDType(TokenDType dtype) {
  for (const TokenDTypeInfo &info : kTokenDTypes)
    if (info.dtype == dtype)
      return &info;
  return nullptr;
}

const char *npyDescr(TokenDType dtype) {
  const TokenDTypeInfo *info = findTokenDType(dtype);
  return info ? info->descr : "?";
}

} // namespace

std::optional<TokenDType> parseTokenDType(const std::string &name) {
  for (const TokenDTypeInfo &info : kTokenDTypes)
    if (name == info.name)
      return info.dtype;
  return std::nullopt;
}

const char *tokenDTypeName(TokenDType dtype) {
  const TokenDTypeInfo *info = findTokenDType(dtype);
  return info ? info->name : "?";
}

size_t tokenDTypeSize(TokenDType dtype) {
  const TokenDTypeInfo *info = findTokenDType(dtype);
  return info ? info->size : 0;
}

namespace {

std::optional<TokenDType> dtypeFromDescr(const std::string &descr) {
  // '=' (native) and '|' mean little-endian on every host we build for.
  std::string d = descr;
  if (!d.empty() && (d[0] == '=' || d[0] == '|'))
    d[0] = '<';
  for (const TokenDTypeInfo &info : kTokenDTypes)
    if (d == info.descr)
      return info.dtype;
  return std::nullopt;
}

template <typename T> int64_t loadAs(const unsigned char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return int64_t(v);
}

int64_t loadToken(const unsigned char *p, TokenDType dtype) {
  switch (dtype) {
  case TokenDType::Int32:
    return loadAs<int32_t>(p);
  case TokenDType::Int64:
    return loadAs<int64_t>(p);
  case TokenDType::UInt16:
    return loadAs<uint16_t>(p);
  case TokenDType::UInt32:
    return loadAs<uint32_t>(p);
  }
  return 0;
}

/// A tiny reader for the Python dict literal of a .npy header.
class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &path)
      : text(text), path(path) {}

  NpyHeader parse() {
    NpyHeader header;
    bool haveDescr = false, haveOrder = false, haveShape = false;
    expect('{');
    while (true) {
      skipSpace();
      if (peek() == '}')
        break;
      std::string key = parseString();
      expect(':');
      if (key == "descr") {
        header.descr = parseString();
        haveDescr = true;
      } else if (key == "fortran_order") {
        header.fortranOrder = parseBool();
        haveOrder = true;
      } else if (key == "shape") {
        header.shape = parseTuple();
        haveShape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      skipSpace();
      if (peek() == ',') {
        ++pos;
        continue;
      }
      expect('}');
      --pos;
    }
    if (!haveDescr || !haveOrder || !haveShape)
      fail("missing 'descr', 'fortran_order' or 'shape'");
    return header;
  }

private:
  [[noreturn]] void fail(const std::string &why) {
    throw Error(path + ": malformed .npy header (" + why + "): " + text);
  }
  void skipSpace() {
    while (pos < text.size() && std::isspace((unsigned char)text[pos]))
      ++pos;
  }
  char peek() {
    skipSpace();
    return pos < text.size() ? text[pos] : '\0';
  }
  void expect(char c) {
    if (peek() != c)
      fail(std::string("expected '") + c + "'");
    ++pos;
  }
  std::string parseString() {
    char quote = peek();
    if (quote != '\'' && quote != '"')
      fail("expected a string");
    size_t end = text.find(quote, ++pos);
    if (end == std::string::npos)
      fail("unterminated string");
    std::string s = text.substr(pos, end - pos);
    pos = end + 1;
    return s;
  }
  bool parseBool() {
    skipSpace();
    if (text.compare(pos, 4, "True") == 0) {
      pos += 4;
      return true;
    }
    if (text.compare(pos, 5, "False") == 0) {
      pos += 5;
      return false;
    }
    fail("expected True or False");
  }
  std::vector<int64_t> parseTuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (peek() != ')') {
      if (!std::isdigit((unsigned char)peek()))
        fail("expected a dimension");
      int64_t d = 0;
      while (pos < text.size() && std::isdigit((unsigned char)text[pos])) {
        if (d > (int64_t(1) << 52))
          fail("dimension too large");
        d = d * 10 + (text[pos++] - '0');
      }
      dims.push_back(d);
      if (peek() == ',')
        ++pos;
      else if (peek() != ')')
        fail("expected ',' or ')'");
    }
    ++pos;
    return dims;
  }

  const std::string &text;
  const std::string &path;
  size_t pos = 0;
};

} // namespace

NpyHeader parseNpyHeader(const unsigned char *bytes, size_t size,
                         const std::string &path) {
  static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size < 10 || std::memcmp(bytes, kMagic, 6) != 0)
    throw Error(path + ": not a .npy file (bad magic; expected "
                       "\"\\x93NUMPY\")");
  unsigned major = bytes[6];
  size_t headerLen, prefix;
  if (major == 1) {
    headerLen = size_t(bytes[8]) | size_t(bytes[9]) << 8;
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      throw Error(path + ": truncated .npy header");
    headerLen = size_t(bytes[8]) | size_t(bytes[9]) << 8 |
                size_t(bytes[10]) << 16 | size_t(bytes[11]) << 24;
    prefix = 12;
  } else {
    throw Error(path + ": unsupported .npy format version " +
                std::to_string(major) + "." + std::to_string(bytes[7]));
  }
  if (prefix + headerLen > size)
    throw Error(path + ": truncated .npy header");
  std::string text(reinterpret_cast<const char *>(bytes + prefix), headerLen);
  NpyHeader header = HeaderParser(text, path).parse();
  header.dataOffset = prefix + headerLen;
  return header;
}

TokenMatrix TokenMatrix::openNpy(const std::string &path) {
  MappedFile file = mapFile(path);
  NpyHeader header = parseNpyHeader(file.data, file.size, path);
  std::optional<TokenDType> dtype = dtypeFromDescr(header.descr);
  if (!dtype)
    throw Error(path + ": dtype '" + header.descr +
                "' is not supported; token ids must be little-endian int32, "
                "int64, uint16 or uint32");
  if (header.fortranOrder)
    throw Error(path + ": Fortran-order arrays are not supported; save a "
                       "C-order array (np.ascontiguousarray)");
  if (header.shape.size() != 2) {
    std::string shape = "(";
    for (size_t i = 0; i < header.shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(header.shape[i]);
    shape += header.shape.size() == 1 ? ",)" : ")";
    throw Error(path + ": expected a 2-D [rows, seq] array, got shape " +
                shape);
  }
  const size_t elem = tokenDTypeSize(*dtype);
  const int64_t rows = header.shape[0], cols = header.shape[1];
  if (rows == 0 || cols == 0)
    throw Error(path + ": the array is empty");
  const size_t available = file.size - header.dataOffset;
  if (uint64_t(cols) > available / elem ||
      uint64_t(rows) > available / elem / uint64_t(cols))
    throw Error(path + ": truncated: the header promises " +
                std::to_string(rows) + "x" + std::to_string(cols) + " " +
                tokenDTypeName(*dtype) + " values, the file holds " +
                std::to_string(available) + " data bytes");
  TokenMatrix m;
  m.mapping = file.keepAlive;
  m.base = file.data + header.dataOffset;
  m.numRows = rows;
  m.numCols = cols;
  m.type = *dtype;
  m.filePath = path;
  return m;
}

TokenMatrix TokenMatrix::openBin(const std::string &path, TokenDType dtype,
                                 int64_t cols) {
  if (cols <= 0)
    throw Error(path + ": sequence length must be positive");
  MappedFile file = mapFile(path);
  const size_t elem = tokenDTypeSize(dtype);
  if (file.size % elem != 0)
    throw Error(path + ": size " + std::to_string(file.size) +
                " bytes is not a multiple of " + std::to_string(elem) + " (" +
                tokenDTypeName(dtype) + " tokens); is --data-dtype right?");
  const int64_t tokens = int64_t(file.size / elem);
  if (tokens < cols)
    throw Error(path + ": holds " + std::to_string(tokens) +
                " tokens, fewer than one row of " + std::to_string(cols));
  TokenMatrix m;
  m.mapping = file.keepAlive;
  m.base = file.data;
  m.numRows = tokens / cols;
  m.numCols = cols;
  m.dropped = tokens % cols;
  m.type = dtype;
  m.filePath = path;
  return m;
}

TokenMatrix TokenMatrix::open(const std::string &path, TokenDType binDType,
                              int64_t cols) {
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0)
    return openNpy(path);
  return openBin(path, binDType, cols);
}

int64_t TokenMatrix::at(int64_t row, int64_t col) const {
  const size_t elem = tokenDTypeSize(type);
  return loadToken(base + (size_t(row) * size_t(numCols) + size_t(col)) * elem,
                   type);
}

void TokenMatrix::readRow(int64_t row, int64_t *out) const {
  const size_t elem = tokenDTypeSize(type);
  const unsigned char *p = base + size_t(row) * size_t(numCols) * elem;
  for (int64_t c = 0; c < numCols; ++c, p += elem)
    out[c] = loadToken(p, type);
}

void TokenMatrix::checkRange(int64_t lo, int64_t hi,
                             std::optional<int64_t> allowed) const {
  std::vector<int64_t> row(numCols);
  for (int64_t r = 0; r < numRows; ++r) {
    readRow(r, row.data());
    for (int64_t c = 0; c < numCols; ++c) {
      int64_t v = row[c];
      if ((v < lo || v >= hi) && !(allowed && v == *allowed))
        throw Error(filePath + ": row " + std::to_string(r) + ", column " +
                    std::to_string(c) + ": value " + std::to_string(v) +
                    " is outside [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + ")" +
                    (allowed ? " and is not " + std::to_string(*allowed)
                             : std::string()));
    }
  }
}

void writeNpy(const std::string &path, TokenDType dtype,
              const std::vector<int64_t> &shape, const void *data) {
  std::string header = std::string("{'descr': '") + npyDescr(dtype) +
                       "', 'fortran_order': False, 'shape': (";
  size_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    header += std::to_string(shape[i]) + ",";
    if (i + 1 < shape.size())
      header += " ";
    count *= size_t(shape[i]);
  }
  if (shape.size() > 1)
    header.pop_back(); // Python writes (3, 4) but (3,).
  header += "), }";
  // Pad with spaces so the data starts 64-byte aligned, ending in '\n'.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += char(1);
  bytes += char(0);
  bytes += char(header.size() & 0xff);
  bytes += char(header.size() >> 8);
  bytes += header;
  bytes.append(static_cast<const char *>(data), count * tokenDTypeSize(dtype));
  writeFileAtomically(path, bytes.data(), bytes.size());
}

} // namespace rondo::rt
