//===- Init.h - Deterministic random initialisation -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// --init=random must give the same weights for a seed whatever the thread
// count or the order of the parameters, so every element is a pure
// function of (seed, parameter name, element index): a counter-based
// generator (splitmix64) feeding Box-Muller, not a sequential engine.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_INIT_H
#define RONDO_RUNTIME_SRC_INIT_H

#include "rondo/runtime/Model.h"

#include <cstdint>

namespace rondo::rt {

/// Standard deviation of the normal initialisation (GPT-2/Llama's 0.02).
constexpr double kInitStd = 0.02;

/// Fills `dst` for `param`: ones for rank-1 parameters whose name contains
/// "norm", zeros for rank-1 names containing "bias", normal(0, 0.02)
/// otherwise.
void randomInit(const ParamSpec &param, uint64_t seed, float *dst);

/// Fills a LoRA adapter as PEFT initialises one, so training starts from
/// the base model: B is zero, A [in, r] is uniform in +-1/sqrt(in), which
/// is torch's kaiming_uniform_(a=sqrt(5)) on PEFT's lora_A.weight [r, in]
/// (gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in)). Like randomInit, every
/// element is a function of (seed, name, index) only.
void loraInit(const ParamSpec &param, uint64_t seed, float *dst);

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_INIT_H
