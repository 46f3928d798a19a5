//===- CausalMask.cpp - Recognising the causal mask -------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#include "CausalMask.h"

#include <algorithm>
#include <utility>

using namespace rondo::import;

MaskClass rondo::import::checkMaskData(const HostTensor &t) {
  if (t.shape.size() < 2 || !t.hasData)
    return {};
  int64_t rows = t.shape[t.shape.size() - 2], cols = t.shape.back();
  if (rows < 2 || cols < rows)
    return {};
  bool boolean = t.dtype == DType::Bool;
  if (!boolean && !isFloat(t.dtype))
    return {};
  auto attended = [&](int64_t k) {
    return boolean ? t.i[k] != 0 : t.f[k] == 0.0;
  };
  // The last row of the first matrix sees every key, or its last `window`.
  int64_t window = 0;
  for (int64_t j = 0, last = (rows - 1) * cols; j < cols; ++j)
    window += attended(last + j);
  if (window == cols)
    window = 0;
  for (int64_t k = 0, n = t.numel(); k < n; ++k) {
    int64_t i = (k / cols) % rows, j = k % cols;
    int64_t lastKey = i + (cols - rows);
    bool attend = j <= lastKey && (window == 0 || j > lastKey - window);
    if (boolean) {
      if ((t.i[k] != 0) != attend)
        return {};
    } else if (attend ? t.f[k] != 0.0 : !(t.f[k] <= -1e30)) {
      return {};
    }
  }
  return {boolean ? MaskKind::Boolean : MaskKind::Additive, window};
}

MaskClass rondo::import::classifyMask(const HostTensor &t, MaskProbe probe) {
  if (t.hasData)
    return checkMaskData(t);
  auto probed = [&](int64_t batch, int64_t seq) {
    std::optional<HostTensor> small = probe(batch, seq);
    return small ? checkMaskData(*small) : MaskClass();
  };
  // A window shows only at probes longer than it: the small probes agree on
  // the kind, and each shows the widest window found if it is shorter than
  // its sequence, else the full triangle.
  MaskClass found;
  std::pair<int64_t, int64_t> shapes[] = {{2, 5}, {3, 7}};
  MaskClass seen[2];
  for (int p = 0; p < 2; ++p) {
    seen[p] = probed(shapes[p].first, shapes[p].second);
    if (seen[p].kind == MaskKind::None || (p && seen[p].kind != seen[0].kind))
      return {};
    found.kind = seen[p].kind;
    found.window = std::max(found.window, seen[p].window);
  }
  for (int p = 0; p < 2; ++p)
    if (seen[p].window != (found.window < shapes[p].second ? found.window : 0))
      return {};
  // A window of 7 keys or more is invisible at those shapes: look for one
  // at the real length (at most kWindowProbeSeq).
  int64_t seq = t.shape.empty() ? 0 : t.shape.back();
  if (found.window == 0 && seq > 7) {
    MaskClass c = probed(1, std::min(seq, kWindowProbeSeq));
    if (c.kind != found.kind)
      return {};
    found = c;
  }
  return found;
}
