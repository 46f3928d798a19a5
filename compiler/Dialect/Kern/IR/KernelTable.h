//===- KernelTable.h - The compiler's view of KernelList.def ----*- C++ -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//
//
// Every kernel of runtime/kernels/cpu/KernelList.def with its parameters'
// names and kinds, derived from the list's C++ signatures (so a kernel added
// to the list is known here with no other edit), and the binding of a
// `kern.call`'s operands, results and `args` to those parameters, which the
// verifier, the C++ emitter and the interpreter share.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_DIALECTS_KERN_IR_KERNELTABLE_H
#define RONDO_DIALECTS_KERN_IR_KERNELTABLE_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace rondo::kern {

class CallOp;

/// How a kernel parameter is bound (KernelList.def's header lists them).
enum class ParamKind {
  Input,        ///< CFView: an f32 input operand
  Bf16Input,    ///< CBView: a bf16 input operand
  IntInput,     ///< IView: an integer input operand
  InputList,    ///< const CFView *: every input operand
  IntInputList, ///< const IView *: every input operand
  ListSize,     ///< the int after a list: its length
  Output,       ///< FView: an f32 result
  Bf16Output,   ///< BView: a bf16 result
  IntOutput,    ///< MIView: an integer result
  LossOutput,   ///< float *: a one-element f32 result
  ErrorFlag,    ///< int *: nothing (null in generated code)
  F32,          ///< float: `args` entry, else a one-element input operand
  Bool,
  I32,
  I64,
  I64Array,   ///< const int64_t *
  UnaryKind,  ///< enumerator name of rondo::cpu::UnaryKind
  BinaryKind, ///< enumerator name of rondo::cpu::BinaryKind
};

struct KernelParam {
  ParamKind kind;
  std::string name;
};

struct KernelInfo {
  std::string name;
  std::vector<KernelParam> params;
};

/// The kernel named `name`, or null.
const KernelInfo *lookupKernel(llvm::StringRef name);
llvm::ArrayRef<KernelInfo> kernelList();
/// Enumerator names of rondo::cpu::UnaryKind / BinaryKind, in order.
llvm::ArrayRef<llvm::StringRef> unaryKindNames();
llvm::ArrayRef<llvm::StringRef> binaryKindNames();

/// One parameter of a call, bound: which operands, result or attribute it
/// takes (unused fields stay -1 / null).
struct BoundParam {
  const KernelParam *param = nullptr;
  int operand = -1;     ///< Input, IntInput, F32 from an operand; list start
  int count = 0;        ///< number of operands of a list (and its ListSize)
  int result = -1;      ///< Output, IntOutput, LossOutput
  mlir::Attribute attr; ///< scalar parameters given in `args`
  bool skipped = false; ///< Output listed in `skip`
};

/// Binds `call`'s inputs, results and `args` to the parameters of its
/// kernel; on a mismatch returns failure and sets `error` to a sentence that
/// names the parameter.
mlir::FailureOr<llvm::SmallVector<BoundParam>> bindParams(CallOp call,
                                                          std::string &error);

/// Whether `call` is a two-operand `binary` (or another kernel of its
/// parameters, `binaryToBf16`) of `kind` (its `args` entry, an enumerator
/// name of rondo::cpu::BinaryKind: "Add", "Mul", ...) with no `inits`: the
/// element-wise calls the fusion passes rewrite.
bool isBinaryOf(CallOp call, llvm::StringRef kind,
                llvm::StringRef kernel = "binary");

/// Whether `call` is a call of `kernel` (a transpose's: transpose,
/// transposeBf16, transposeToBf16) that moves the heads axis of a rank-4
/// tensor next to the batch or back ([B, T, H, D] <-> [B, H, T, D]: perm
/// [0, 2, 1, 3]), with no inits: the moves the rotary and attention fusions
/// absorb.
bool isHeadTransposeOf(CallOp call, llvm::StringRef kernel);

/// Whether `call` is a product of bf16 operands that may store its result in
/// bf16 instead (kern-bf16-storage): `matmulBf16` with one fp32 result and
/// either nothing to accumulate into or, accumulating, an init that is
/// itself such a product read by nothing else (the chains of summed input
/// gradients that kern-accumulate-products makes).
bool isStorableBf16Product(CallOp call);

/// `matmulBf16ToBf16` of `product`'s operands and arguments, built in front
/// of it (cuBLAS rounds the fp32 accumulators as it stores them); an
/// accumulating product's chain is stored first, each product adding into
/// its predecessor's bf16 result. The caller redirects the readers and
/// erases the old chain (eraseProductChain).
CallOp storeProductInBf16(CallOp product);

/// Erases `product` and the products it accumulated into, which nothing
/// else reads.
void eraseProductChain(CallOp product);

} // namespace rondo::kern

#endif // RONDO_DIALECTS_KERN_IR_KERNELTABLE_H
