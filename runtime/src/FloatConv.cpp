//===- FloatConv.cpp - IEEE half <-> fp32 ---------------------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "rondo/runtime/FloatConv.h"

namespace rondo::rt {

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) // Inf or NaN; NaN payload is kept.
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0)
      return bitsToFloat(sign);
    // Subnormal half: mantissa * 2^-24 is exact in fp32.
    float magnitude = float(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return bitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t floatToHalf(float f) {
  uint32_t bits = floatToBits(f);
  uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t absBits = bits & 0x7fffffffu;
  if (absBits > 0x7f800000u) // NaN: quiet, keep the top payload bits.
    return uint16_t(sign | 0x7e00u | ((absBits >> 13) & 0x3ffu));
  if (absBits >= 0x477ff000u) // Rounds to >= 65520: infinity.
    return uint16_t(sign | 0x7c00u);
  if (absBits < 0x38800000u) {
    // Result is subnormal (or zero) in half: scale so the half ulp (2^-24)
    // becomes 1 and let the fp32 addition round to nearest even.
    float magnitude = bitsToFloat(absBits);
    float shifted = magnitude + 0.5f; // ulp of 0.5f is 2^-24.
    return uint16_t(sign | uint16_t(floatToBits(shifted) - floatToBits(0.5f)));
  }
  // Normal: rebias the exponent and round the 13 dropped bits to nearest
  // even; a mantissa carry correctly bumps the exponent.
  uint32_t rounded = absBits + 0xfffu + ((absBits >> 13) & 1u);
  return uint16_t(sign | uint16_t((rounded - 0x38000000u) >> 13));
}

} // namespace rondo::rt
