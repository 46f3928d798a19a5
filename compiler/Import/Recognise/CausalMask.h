//===- CausalMask.h - Recognising the causal mask ---------------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// The causal mask ([B, 1, T, T]) is too large to fold at real sizes. When a
// large data-independent tensor meets data (Add to attention scores, or a
// Where), the importer proves that it is the causal mask by importing the
// same graph at two small probe shapes, where the mask is small enough to
// evaluate, and checking it elementwise. It then becomes tg.causal_mask.
// This relies on the mask being a function of the shapes only, which holds
// for every value the folder can compute (graph inputs that carry data, like
// attention_mask, are specialised to constants first).
//
// A sliding-window mask (query i sees its last `window` keys, the band
// bottom-right aligned as the causal triangle is) is the causal mask with a
// window: tg.causal_mask {window}. A window only shows in a mask longer than
// it, so when the small probes see a full triangle and the real sequence is
// longer, a third probe at batch 1 and the real length (at most
// kWindowProbeSeq) looks for one. A window of kWindowProbeSeq keys or more
// on a longer sequence is therefore not seen: the limit keeps that probe's
// mask (kWindowProbeSeq^2 elements) cheap to fold.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_LIB_IMPORT_RECOGNISE_CAUSALMASK_H
#define RONDO_LIB_IMPORT_RECOGNISE_CAUSALMASK_H

#include "Import/HostTensor.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace rondo::import {

/// Whether a constant is the causal mask: additive (0 / -inf) or boolean
/// (true = attend).
enum class MaskKind { None, Additive, Boolean };

/// A recognised mask: its kind and its sliding window (0: the full causal
/// triangle, also when the window covers every key).
struct MaskClass {
  MaskKind kind = MaskKind::None;
  int64_t window = 0;
  bool operator==(const MaskClass &o) const {
    return kind == o.kind && window == o.window;
  }
};

/// The longest sequence the window probe imports at.
constexpr int64_t kWindowProbeSeq = 2048;

/// Checks folded data elementwise against the causal mask, banded by the
/// window that its last row shows.
MaskClass checkMaskData(const HostTensor &t);

/// Imports the graph again with the given batch and sequence length and
/// returns the folded value in question there (none if that fails).
using MaskProbe =
    llvm::function_ref<std::optional<HostTensor>(int64_t batch, int64_t seq)>;

/// Classifies `t`: by its data if it has any, else by the values `probe`
/// gives at two small shapes, which must agree, and at the window probe.
MaskClass classifyMask(const HostTensor &t, MaskProbe probe);

} // namespace rondo::import

#endif // RONDO_LIB_IMPORT_RECOGNISE_CAUSALMASK_H
