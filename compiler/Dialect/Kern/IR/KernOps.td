//===- KernOps.td - kern ops --------------------------------*- tablegen -*-===//
//
// Part of the Rondo project.
//
//===----------------------------------------------------------------------===//

#ifndef RONDO_KERN_OPS
#define RONDO_KERN_OPS

include "KernDialect.td"
include "mlir/IR/BuiltinAttributes.td"

class Kern_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kern_Dialect, mnemonic, traits>;

def Kern_CallOp : Kern_Op<"call", [AttrSizedOperandSegments]> {
  let summary = "One call of a kernel of KernelList.def";
  let description = [{
    Calls kernel `@kernel` with its parameters bound in the order of its
    declaration in runtime/kernels/cpu/KernelList.def:

    - a view parameter (`CFView`, `IView`) takes the next of `inputs`; an
      array parameter (`const CFView *` with its count) takes all of them;
    - a result parameter (`FView`, `MIView`, or `float *` for a loss sum)
      is the next result;
    - a scalar parameter is the entry of `args` with its name; a `float`
      without an entry takes the next input instead, a one-element tensor
      read on the host (the loss scale of a backward stage);
    - an error flag (`int *`) takes nothing: generated code passes null.

    `inits` give the first results an initial value that the kernel
    accumulates into (the call reuses their buffers, so each init must have
    this call as its only use). Results listed in `skip` are not computed:
    the kernel gets a view with null data (only for kernels that document
    it; the result must be unused).

    ```mlir
    %y = kern.call @rmsNorm(%x, %w) args {eps = 1.0e-06 : f32}
        : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %z = kern.call @fill() args {value = 0.0 : f32} : () -> tensor<512x64xf32>
    %g = kern.call @gatherRowsBackward(%ids, %dy) inits(%z)
        : (tensor<2x8xi64>, tensor<2x8x64xf32>, tensor<512x64xf32>)
          -> tensor<512x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel,
                       Variadic<AnyRankedTensor>:$inputs,
                       Variadic<AnyRankedTensor>:$inits,
                       OptionalAttr<DictionaryAttr>:$args,
                       OptionalAttr<DenseI64ArrayAttr>:$skip);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = [{
    $kernel `(` $inputs `)` (`inits` `(` $inits^ `)`)? (`args` $args^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // RONDO_KERN_OPS
