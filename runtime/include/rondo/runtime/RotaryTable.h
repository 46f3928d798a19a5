//===- RotaryTable.h - Rotary tables, computed not stored -------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Rotary position tables grow with the sequence (2 x T x head_dim floats:
// 290 MB at 287K tokens), too large to embed in a trainer. The importer
// replaces a folded table by `tg.rotary_table` only after checking every
// element against rotaryTableValue, and the trainer fills the table with
// the same function at start-up, so both sides agree bit for bit (same
// libm, same rounding steps).
//
// The rounding steps are those of the exporter's graph as the importer folds
// it: positions are exact fp32 integers, the phase p * freq is rounded to
// fp32 (MatMul or Mul in fp32), cos/sin is taken of that fp32 phase and
// rounded to fp32, and an optional scale (attention scaling) multiplies the
// rounded value, rounded again.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_ROTARYTABLE_H
#define RONDO_RUNTIME_ROTARYTABLE_H

#include <cmath>
#include <cstdint>

namespace rondo::rt {

inline float rotaryTableValue(bool sine, int64_t position, float freq,
                              float scale) {
  float phase = float(double(position) * double(freq));
  float v = float(sine ? std::sin(double(phase)) : std::cos(double(phase)));
  return float(double(scale) * double(v));
}

/// Fills `count` floats laid out as [..., positions, dim]: element k has
/// position (k / dim) % positions and frequency freqs[k % dim].
inline void fillRotaryTable(float *out, int64_t count, int64_t positions,
                            int64_t dim, const float *freqs, bool sine,
                            float scale) {
  int64_t rows = dim > 0 ? count / dim : 0;
#ifdef _OPENMP // trainers build with OpenMP; the compiler's interpreter not
#pragma omp parallel for schedule(static)
#endif
  for (int64_t r = 0; r < rows; ++r) {
    int64_t position = r % positions;
    for (int64_t j = 0; j < dim; ++j)
      out[r * dim + j] = rotaryTableValue(sine, position, freqs[j], scale);
  }
}

} // namespace rondo::rt

#endif // RONDO_RUNTIME_ROTARYTABLE_H
