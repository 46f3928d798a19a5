//===- DataTest.cpp - .npy and .bin token data ----------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/Data.h"

#include "TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace rondo::rt;
using namespace rondo::test;
using ::testing::HasSubstr;

namespace {

/// A .npy image with a hand-written header, for malformed cases.
std::string npyBytes(const std::string &dict, const std::string &data,
                     int major = 1) {
  std::string header = dict;
  size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += char(major);
  bytes += char(0);
  bytes += char(header.size() & 0xff);
  bytes += char((header.size() >> 8) & 0xff);
  if (major != 1) {
    bytes += char(0);
    bytes += char(0);
  }
  return bytes + header + data;
}

TEST(Npy, RoundTripsEveryTokenType) {
  std::string dir = makeTempDir();
  std::vector<int64_t> values = {0, 1, 2, 511, 3, 65535, 7, 8};
  for (TokenDType type : {TokenDType::Int32, TokenDType::Int64,
                          TokenDType::UInt16, TokenDType::UInt32}) {
    std::vector<unsigned char> raw(values.size() * tokenDTypeSize(type));
    for (size_t i = 0; i < values.size(); ++i) {
      int64_t v = values[i];
      std::memcpy(&raw[i * tokenDTypeSize(type)], &v, tokenDTypeSize(type));
    }
    std::string path = dir + "/t_" + tokenDTypeName(type) + ".npy";
    writeNpy(path, type, {2, 4}, raw.data());
    TokenMatrix m = TokenMatrix::openNpy(path);
    EXPECT_EQ(m.rows(), 2);
    EXPECT_EQ(m.cols(), 4);
    EXPECT_EQ(m.dtype(), type);
    std::vector<int64_t> row(4);
    m.readRow(1, row.data());
    EXPECT_EQ(row, std::vector<int64_t>(values.begin() + 4, values.end()));
    EXPECT_EQ(m.at(0, 3), 511);
  }
}

TEST(Npy, ReadsVersion2HeadersAndNegativeInt64) {
  std::string dir = makeTempDir();
  int64_t data[3] = {-100, 5, 1ll << 40};
  std::string bytes =
      npyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 3), }",
               std::string(reinterpret_cast<char *>(data), sizeof(data)), 2);
  writeBytes(dir + "/v2.npy", bytes);
  TokenMatrix m = TokenMatrix::openNpy(dir + "/v2.npy");
  EXPECT_EQ(m.at(0, 0), -100);
  EXPECT_EQ(m.at(0, 2), 1ll << 40);
}

TEST(Npy, RejectsMalformedFiles) {
  std::string dir = makeTempDir();
  int32_t data[6] = {1, 2, 3, 4, 5, 6};
  std::string raw(reinterpret_cast<char *>(data), sizeof(data));

  writeBytes(dir + "/magic.npy", "NOTNUMPY" + std::string(64, ' '));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/magic.npy"); }),
              HasSubstr("magic.npy: not a .npy file (bad magic"));

  writeBytes(dir + "/fortran.npy",
             npyBytes("{'descr': '<i4', 'fortran_order': True, "
                      "'shape': (2, 3), }",
                      raw));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/fortran.npy"); }),
              HasSubstr("fortran.npy: Fortran-order arrays are not supported"));

  writeBytes(dir + "/rank1.npy",
             npyBytes("{'descr': '<i4', 'fortran_order': False, "
                      "'shape': (6,), }",
                      raw));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/rank1.npy"); }),
              HasSubstr("expected a 2-D [rows, seq] array, got shape (6,)"));

  writeBytes(dir + "/rank3.npy",
             npyBytes("{'descr': '<i4', 'fortran_order': False, "
                      "'shape': (1, 2, 3), }",
                      raw));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/rank3.npy"); }),
              HasSubstr("got shape (1, 2, 3)"));

  writeBytes(dir + "/float.npy",
             npyBytes("{'descr': '<f4', 'fortran_order': False, "
                      "'shape': (2, 3), }",
                      raw));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/float.npy"); }),
              HasSubstr("dtype '<f4' is not supported"));

  writeBytes(dir + "/bigendian.npy",
             npyBytes("{'descr': '>i4', 'fortran_order': False, "
                      "'shape': (2, 3), }",
                      raw));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/bigendian.npy"); }),
              HasSubstr("dtype '>i4' is not supported"));

  writeBytes(dir + "/short.npy",
             npyBytes("{'descr': '<i4', 'fortran_order': False, "
                      "'shape': (3, 3), }",
                      raw));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/short.npy"); }),
              HasSubstr("short.npy: truncated"));

  writeBytes(dir + "/garbled.npy",
             npyBytes("{'descr': '<i4', 'fortran_order': Maybe, "
                      "'shape': (2, 3), }",
                      raw));
  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/garbled.npy"); }),
              HasSubstr("malformed .npy header"));

  EXPECT_THAT(errorOf([&] { TokenMatrix::openNpy(dir + "/absent.npy"); }),
              HasSubstr("absent.npy: cannot open"));
}

TEST(Bin, CutsFlatStreamsIntoRows) {
  std::string dir = makeTempDir();
  std::vector<uint16_t> u16 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  writeBytes(dir + "/tokens.bin",
             std::string(reinterpret_cast<char *>(u16.data()), u16.size() * 2));
  TokenMatrix m = TokenMatrix::open(dir + "/tokens.bin", TokenDType::UInt16, 4);
  EXPECT_EQ(m.rows(), 2);
  EXPECT_EQ(m.cols(), 4);
  EXPECT_EQ(m.droppedTokens(), 3);
  std::vector<int64_t> row(4);
  m.readRow(1, row.data());
  EXPECT_EQ(row, (std::vector<int64_t>{5, 6, 7, 8}));

  std::vector<uint32_t> u32 = {70000, 1, 2, 3, 100000, 5};
  writeBytes(dir + "/tokens32.bin",
             std::string(reinterpret_cast<char *>(u32.data()), u32.size() * 4));
  TokenMatrix m32 =
      TokenMatrix::open(dir + "/tokens32.bin", TokenDType::UInt32, 3);
  EXPECT_EQ(m32.rows(), 2);
  EXPECT_EQ(m32.at(0, 0), 70000);
  EXPECT_EQ(m32.at(1, 1), 100000);

  writeBytes(dir + "/odd.bin", std::string(7, '\0'));
  EXPECT_THAT(errorOf([&] {
                TokenMatrix::openBin(dir + "/odd.bin", TokenDType::UInt16, 2);
              }),
              HasSubstr("not a multiple of 2"));
  EXPECT_THAT(errorOf([&] {
                TokenMatrix::openBin(dir + "/tokens.bin", TokenDType::UInt16,
                                     100);
              }),
              HasSubstr("fewer than one row of 100"));
}

TEST(TokenMatrix, RangeCheckNamesRowAndValue) {
  std::string dir = makeTempDir();
  int32_t data[6] = {1, 2, 3, 4, 99, -100};
  writeNpy(dir + "/ids.npy", TokenDType::Int32, {2, 3}, data);
  TokenMatrix m = TokenMatrix::openNpy(dir + "/ids.npy");
  EXPECT_THAT(errorOf([&] { m.checkRange(0, 16); }),
              HasSubstr("ids.npy: row 1, column 1: value 99 is outside [0, "
                        "16)"));
  EXPECT_THAT(errorOf([&] { m.checkRange(0, 100); }),
              HasSubstr("row 1, column 2: value -100"));
  EXPECT_EQ(errorOf([&] { m.checkRange(0, 100, -100); }), "");
}

} // namespace
