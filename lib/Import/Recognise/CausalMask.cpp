//===- CausalMask.cpp - Recognising the causal mask -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "CausalMask.h"

#include <utility>

using namespace rondo::import;

MaskKind rondo::import::checkMaskData(const HostTensor &t) {
  if (t.shape.size() < 2 || !t.hasData)
    return MaskKind::None;
  int64_t rows = t.shape[t.shape.size() - 2], cols = t.shape.back();
  if (rows < 2 || cols < rows)
    return MaskKind::None;
  bool boolean = t.dtype == DType::Bool;
  if (!boolean && !isFloat(t.dtype))
    return MaskKind::None;
  for (int64_t k = 0, n = t.numel(); k < n; ++k) {
    int64_t i = (k / cols) % rows, j = k % cols;
    bool attend = j <= i + (cols - rows);
    if (boolean) {
      if ((t.i[k] != 0) != attend)
        return MaskKind::None;
    } else if (attend ? t.f[k] != 0.0 : !(t.f[k] <= -1e30)) {
      return MaskKind::None;
    }
  }
  return boolean ? MaskKind::Boolean : MaskKind::Additive;
}

MaskKind rondo::import::classifyMask(const HostTensor &t, MaskProbe probe) {
  if (t.hasData)
    return checkMaskData(t);
  MaskKind kind = MaskKind::None;
  for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 5}, {3, 7}}) {
    std::optional<HostTensor> small = probe(b, s);
    MaskKind k = small ? checkMaskData(*small) : MaskKind::None;
    if (k == MaskKind::None || (kind != MaskKind::None && k != kind))
      return MaskKind::None;
    kind = k;
  }
  return kind;
}
