//===- Init.cpp - Deterministic random initialisation ---------------------===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "Init.h"

#include <cmath>
#include <cstring>
#include <string>

namespace rondo::rt {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; ++s)
    h = (h ^ uint64_t((unsigned char)*s)) * 0x100000001b3ull;
  return h;
}

} // namespace

void randomInit(const ParamSpec &param, uint64_t seed, float *dst) {
  int64_t numel = 1;
  for (int i = 0; i < param.rank; ++i)
    numel *= param.dims[i];
  const std::string name = param.name;
  if (param.rank == 1 && name.find("norm") != std::string::npos) {
    for (int64_t i = 0; i < numel; ++i)
      dst[i] = 1.0f;
    return;
  }
  if (param.rank == 1 && name.find("bias") != std::string::npos) {
    for (int64_t i = 0; i < numel; ++i)
      dst[i] = 0.0f;
    return;
  }
  const uint64_t key = splitmix64(seed ^ splitmix64(fnv1a(param.name)));
  const int64_t pairs = (numel + 1) / 2;
#pragma omp parallel for schedule(static) if (numel > (int64_t(1) << 16))
  for (int64_t p = 0; p < pairs; ++p) {
    uint64_t a = splitmix64(key + 2 * uint64_t(p));
    uint64_t b = splitmix64(key + 2 * uint64_t(p) + 1);
    double u1 = double((a >> 11) + 1) * 0x1p-53; // (0, 1]: log is finite.
    double u2 = double(b >> 11) * 0x1p-53;
    double radius = std::sqrt(-2.0 * std::log(u1)) * kInitStd;
    double angle = 2.0 * M_PI * u2;
    dst[2 * p] = float(radius * std::cos(angle));
    if (2 * p + 1 < numel)
      dst[2 * p + 1] = float(radius * std::sin(angle));
  }
}

void loraInit(const ParamSpec &param, uint64_t seed, float *dst) {
  int64_t numel = 1;
  for (int i = 0; i < param.rank; ++i)
    numel *= param.dims[i];
  if (param.lora != LoraFactor::A || (param.rank != 2 && param.rank != 3)) {
    for (int64_t i = 0; i < numel; ++i)
      dst[i] = 0.0f;
    return;
  }
  // Kaiming-uniform over the fan-in of PEFT's nn.Linear: `in` of A [in, r],
  // d1 of stacked experts' A [E, d1, r] (PEFT's nn.Linear(d1, r·E)).
  const double bound = 1.0 / std::sqrt(double(param.dims[param.rank - 2]));
  const uint64_t key = splitmix64(seed ^ splitmix64(fnv1a(param.name)));
  for (int64_t i = 0; i < numel; ++i) {
    double u = double(splitmix64(key + uint64_t(i)) >> 11) * 0x1p-53;
    dst[i] = float((2.0 * u - 1.0) * bound);
  }
}

} // namespace rondo::rt
