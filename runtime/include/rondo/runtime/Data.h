//===- Data.h - Token data: .npy arrays and flat .bin streams ---*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Training data is a matrix of token ids, [rows, seq]. It comes either as a
// NumPy .npy file (format v1/v2/v3, little-endian int32/int64/uint16/uint32,
// C order, rank 2) or as a flat stream of uint16/uint32 tokens (.bin, as
// written by nanoGPT-style tokenizer scripts) cut into consecutive rows of
// `seq` tokens. Files are memory-mapped and decoded one row at a time, so a
// corpus of billions of tokens costs no more resident memory than the rows
// in use.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_DATA_H
#define RONDO_RUNTIME_DATA_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rondo::rt {

/// Element types of token files.
enum class TokenDType { Int32, Int64, UInt16, UInt32 };

/// Parses "int32", "int64", "uint16" or "uint32".
std::optional<TokenDType> parseTokenDType(const std::string &name);
const char *tokenDTypeName(TokenDType dtype);
size_t tokenDTypeSize(TokenDType dtype);

/// A read-only [rows, cols] matrix of token ids backed by a mapped file.
class TokenMatrix {
public:
  /// Opens a .npy file; it must be a rank-2 C-order integer array.
  static TokenMatrix openNpy(const std::string &path);
  /// Opens a flat token stream and cuts it into rows of `cols` tokens; a
  /// trailing partial row is ignored.
  static TokenMatrix openBin(const std::string &path, TokenDType dtype,
                             int64_t cols);
  /// .npy by extension, anything else is a flat stream of `binDType`.
  static TokenMatrix open(const std::string &path, TokenDType binDType,
                          int64_t cols);

  int64_t rows() const { return numRows; }
  int64_t cols() const { return numCols; }
  TokenDType dtype() const { return type; }
  const std::string &path() const { return filePath; }
  /// Tokens dropped at the end of a flat stream (not a whole row).
  int64_t droppedTokens() const { return dropped; }

  int64_t at(int64_t row, int64_t col) const;
  /// Copies row `row` (0 <= row < rows()) into `out[0 .. cols())`.
  void readRow(int64_t row, int64_t *out) const;

  /// Throws rt::Error naming the file, row, column and value of the first
  /// element outside [lo, hi) that is not `allowed`.
  void checkRange(int64_t lo, int64_t hi,
                  std::optional<int64_t> allowed = std::nullopt) const;

private:
  std::shared_ptr<const void> mapping; ///< Keeps the file mapped.
  const unsigned char *base = nullptr; ///< First element.
  int64_t numRows = 0;
  int64_t numCols = 0;
  int64_t dropped = 0;
  TokenDType type = TokenDType::Int64;
  std::string filePath;
};

/// Writes a C-order .npy (format 1.0) file, e.g. for tests and tools. `data`
/// holds the product of `shape` elements of `dtype`.
void writeNpy(const std::string &path, TokenDType dtype,
              const std::vector<int64_t> &shape, const void *data);

/// The header fields of a .npy file, for diagnostics and tests.
struct NpyHeader {
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
  size_t dataOffset = 0;
};

/// Parses the header of the .npy image `bytes`; throws rt::Error naming
/// `path` on malformed input.
NpyHeader parseNpyHeader(const unsigned char *bytes, size_t size,
                         const std::string &path);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_DATA_H
