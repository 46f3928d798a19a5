//===- ParamStore.h - The model's fp32 master weights -----------*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// One tensor per model parameter, in table order: loaded from the ONNX
// model (or --weights), drawn (--init=random), or for frozen weights of
// --map-weights used in place from a read-only mapping of their file;
// LoRA adapters from PEFT's initialisation or --load-lora. Writes them at
// the end of a run (--export-onnx, --export-safetensors, --export-lora).
// A parameter the program holds in bf16 (ParamStorage::Bf16: a frozen
// weight of a bf16 plan that only matrix products read) is kept in bf16
// alone, rounded once to nearest even as it is loaded or drawn: the bits
// every product of an fp32 copy would have rounded it to.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_RUNTIME_SRC_TRAINER_PARAMSTORE_H
#define RONDO_RUNTIME_SRC_TRAINER_PARAMSTORE_H

#include "rondo/runtime/AdamW.h"
#include "rondo/runtime/Buffer.h"
#include "rondo/runtime/Model.h"

#include "Cli.h"
#include "trainer/StepLog.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace rondo::rt {

class ParamStore {
public:
  explicit ParamStore(const ModelSpec &model) : model(model) {}

  /// Allocates and fills every parameter (a program downloads the
  /// gradients into its own host buffer).
  void initialise(const TrainerOptions &opts, const StepLog &log);

  /// Per parameter: its fp32 data (read-only when mapped); null for a
  /// parameter held in bf16, whose bits are in stored().
  float *const *data() const { return ptrs.data(); }
  /// Per parameter: its bytes as held (fp32, or bf16 for ParamStorage::
  /// Bf16), which parameter images copy.
  const void *const *stored() const { return storedPtrs.data(); }
  /// Parameter `i` in fp32: its data, or its bf16 bits widened into
  /// `scratch` (exact).
  const float *fp32(int i, std::vector<float> &scratch) const;
  /// Per parameter: whether it lives in a file mapping (not pinnable).
  std::vector<bool> pageable() const;
  /// Order-independent and exact, for comparing replicas.
  uint64_t checksum() const;
  /// Writes --export-onnx, --export-safetensors and --export-lora.
  void exportWeights(const TrainerOptions &opts, const StepLog &log) const;

private:
  /// --map-weights: fills `mapped` with the frozen weights used in place.
  void mapFrozenWeights(const TrainerOptions &opts, const std::string &path,
                        const StepLog &log);

  const ModelSpec &model;
  std::vector<FloatBuffer> params;
  std::vector<float *> ptrs;
  std::vector<const void *> storedPtrs;
  /// Per parameter: its data in a read-only mapping of its file, or null.
  std::vector<const float *> mapped;
  std::vector<std::shared_ptr<const void>> mappings;
};

} // namespace rondo::rt

#endif // RONDO_RUNTIME_SRC_TRAINER_PARAMSTORE_H
