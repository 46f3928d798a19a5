#!/usr/bin/env python3
"""Attention sinks end to end on the CPU, against float64 and finite
differences.

GPT-OSS's exported attention (scores q k^T * scale + mask, the head's sink
logit expanded to one more column and concatenated, ReduceMax -> Sub ->
Softmax over S + 1 columns, the sink column sliced off, times v) as a small
ONNX graph whose q, k, v and sinks are parameters and whose loss is
sum(o * o), once with the full causal mask and once with a sliding window.
For each:
- the compiled forward (--pipeline=tg, fused into tg.attention with sinks)
  matches the same composition in float64 NumPy (out to 1e-5);
- the compiled gradient (--pipeline=train: tg.attention_grad with d sinks)
  agrees with central differences of the compiled forward along random
  directions of all parameters, and along random directions of the sinks
  alone (5e-3 of |g|·|d|, as gradcheck.py).

usage: attention_sinks_gradcheck.py RONDO_RUN WORKDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# The command line, rondo-run on a model (forward or train) and the
# finite-difference check.
from gradcheck import command_line, run, worst_slope_error

rng = np.random.default_rng(23)
B, H, T, D = 2, 2, 6, 4
SCALE = 0.5


def params():
    return {
        "q": rng.uniform(-1.5, 1.5, (B, H, T, D)).astype(np.float32),
        "k": rng.uniform(-1.5, 1.5, (B, H, T, D)).astype(np.float32),
        "v": rng.uniform(-1.0, 1.0, (B, H, T, D)).astype(np.float32),
        "sinks": rng.uniform(-1.0, 1.0, (1, H, 1, 1)).astype(np.float32),
    }


def keep_mask(window):
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    keep = j <= i
    if window:
        keep &= j > i - window
    return keep


def build(values, window):
    inits = [numpy_helper.from_array(v, n) for n, v in values.items()]
    inits += [
        numpy_helper.from_array(keep_mask(window), "keep"),
        numpy_helper.from_array(np.array(0.0, np.float32), "fzero"),
        numpy_helper.from_array(np.array(-3.4028235e38, np.float32), "ninf"),
        numpy_helper.from_array(np.array(SCALE, np.float32), "scale"),
        numpy_helper.from_array(np.array([B, 1, T, 1], np.int64), "colshape"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([-1], np.int64), "end"),
        numpy_helper.from_array(np.array([3], np.int64), "axis"),
        numpy_helper.from_array(np.array([1], np.int64), "step"),
    ]
    n = helper.make_node
    nodes = [
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["s"]),
        n("Mul", ["s", "scale"], ["ss"]),
        n("Where", ["keep", "fzero", "ninf"], ["bias"]),
        n("Add", ["ss", "bias"], ["masked"]),
        n("Expand", ["sinks", "colshape"], ["col"]),
        n("Concat", ["masked", "col"], ["cat"], axis=-1),
        n("ReduceMax", ["cat", "last"], ["mx"], keepdims=1),
        n("Sub", ["cat", "mx"], ["shifted"]),
        n("Softmax", ["shifted"], ["p"], axis=-1),
        n("Slice", ["p", "start", "end", "axis", "step"], ["pk"]),
        n("MatMul", ["pk", "v"], ["o"]),
        n("Mul", ["o", "o"], ["sq"]),
        n("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "sinks", [],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("o", TensorProto.FLOAT, [B, H, T, D])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 8
    return model


def reference(values, window):
    q, k, v = (values[n].astype(np.float64) for n in ("q", "k", "v"))
    s = q @ k.transpose(0, 1, 3, 2) * SCALE
    s = np.where(keep_mask(window), s, -np.inf)
    col = np.broadcast_to(values["sinks"].astype(np.float64), (B, H, T, 1))
    z = np.concatenate([s, col], axis=-1)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    return p[..., :-1] @ v


def main(argv):
    rondo_run, work = command_line(argv, __doc__)
    failures = 0
    for name, window in (("full", 0), ("window", 3)):
        values = params()
        path = os.path.join(work, name + ".onnx")
        onnx.save(build(values, window), path)
        run(rondo_run, path, os.path.join(work, name + ".fwd"), False)
        got = np.load(os.path.join(work, name + ".fwd", "o.npy"))
        want = reference(values, window)
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        ok = err <= 1e-5
        failures += not ok
        print("%-7s forward   %s (error %.1e)" % (name, "ok" if ok else "MISMATCH", err))

        run(rondo_run, path, os.path.join(work, name), True)
        grads = {p: np.load(os.path.join(work, name, p + ".grad.npy")).astype(np.float64)
                 for p in values}

        def loss_at(moved):
            mpath = os.path.join(work, name + ".fd.onnx")
            onnx.save(build(moved, window), mpath)
            run(rondo_run, mpath, os.path.join(work, name + ".fd"), False)
            return float(np.load(os.path.join(work, name + ".fd", "loss.npy")))

        for subset in (list(values), ["sinks"]):
            worst = worst_slope_error(rng, values, grads, subset, loss_at)
            ok = worst <= 5e-3
            failures += not ok
            print("%-7s gradient %-18s %s (worst %.1e)" % (
                name, "(sinks)" if len(subset) == 1 else "(q, k, v, sinks)",
                "ok" if ok else "MISMATCH", worst))
    print("attention sinks: %d mismatches" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
