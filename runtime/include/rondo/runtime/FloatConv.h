//===- FloatConv.h - bf16/fp16 <-> fp32 conversions -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// ONNX weights may be stored as bfloat16 or IEEE half; the trainer keeps fp32
// master weights and writes them back in the file's own type on export.
// Conversions to the narrow types round to nearest even, keep NaN a (quiet)
// NaN and overflow to infinity, as torch's .to(dtype) does.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_FLOATCONV_H
#define RONDO_RUNTIME_FLOATCONV_H

#include <cstdint>
#include <cstring>

namespace rondo::rt {

inline float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint32_t floatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float bf16ToFloat(uint16_t h) { return bitsToFloat(uint32_t(h) << 16); }

inline uint16_t floatToBf16(float f) {
  uint32_t bits = floatToBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet and a NaN.
    return uint16_t((bits >> 16) | 0x40u);
  uint32_t roundingBias = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + roundingBias) >> 16);
}

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_FLOATCONV_H
