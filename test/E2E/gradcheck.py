#!/usr/bin/env python3
"""Every gradient rule the compiler builds, checked by finite differences.

Each case is a one-op ONNX graph whose float operands are initializers
(parameters) and whose loss is sum(y * y). rondo-run differentiates it with
the compiler's own rules (--pipeline=train), and the derivative along random
directions is compared with central differences of the compiled forward
(two extra rondo-run calls per direction). A wrong rule is off by O(1); the
tolerance (5e-3 of |g|·|d|) only absorbs fp32 rounding.

usage: gradcheck.py RONDO_RUN WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(11)


def f32(*shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype(np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


# (name, op, attrs, [(param name, value) | ("const", value)], ids or None)
CASES = [
    ("add-broadcast", "Add", {}, [("a", f32(2, 3)), ("b", f32(3))]),
    ("sub-broadcast", "Sub", {}, [("a", f32(2, 1)), ("b", f32(3))]),
    ("mul-broadcast", "Mul", {}, [("a", f32(2, 3)), ("b", f32(1, 3))]),
    ("div", "Div", {}, [("a", f32(2, 3)), ("b", f32(3, low=1.0, high=2.0))]),
    ("pow", "Pow", {}, [("a", f32(2, 3, low=0.5, high=1.5)), ("b", f32(3, low=1.0, high=2.0))]),
    ("max", "Max", {}, [("a", f32(2, 3)), ("b", f32(2, 3))]),
    ("min", "Min", {}, [("a", f32(2, 3)), ("b", f32(2, 3))]),
    ("matmul-batch", "MatMul", {}, [("a", f32(2, 3, 4)), ("b", f32(4, 5))]),
    ("matmul-broadcast", "MatMul", {}, [("a", f32(2, 1, 3, 4)), ("b", f32(2, 4, 2))]),
    ("gemm-trans", "Gemm", {"transA": 1, "transB": 1, "alpha": 0.5},
     [("a", f32(4, 3)), ("b", f32(5, 4)), ("c", f32(5))]),
    ("transpose", "Transpose", {"perm": [1, 0, 2]}, [("a", f32(2, 3, 4))]),
    ("reshape", "Reshape", {}, [("a", f32(2, 3, 4)), ("const", i64(6, 4))]),
    ("expand", "Expand", {}, [("a", f32(1, 3)), ("const", i64(2, 3))]),
    ("slice-step", "Slice", {}, [("a", f32(4, 6)), ("const", i64(1)), ("const", i64(6)),
                                 ("const", i64(1)), ("const", i64(2))]),
    ("concat", "Concat", {"axis": 1}, [("a", f32(2, 3)), ("b", f32(2, 2))]),
    ("reduce-mean", "ReduceMean", {"keepdims": 0}, [("a", f32(2, 3, 4)), ("const", i64(1))]),
    ("reduce-sum", "ReduceSum", {"keepdims": 1}, [("a", f32(2, 3, 4)), ("const", i64(0, 2))]),
    ("softmax", "Softmax", {"axis": -1}, [("a", f32(3, 5))]),
    ("layer-norm", "LayerNormalization", {"epsilon": 1e-5},
     [("a", f32(3, 6)), ("w", f32(6)), ("b", f32(6))]),
    ("gather", "Gather", {}, [("t", f32(5, 3)), ("const", i64(4, 0, 4, 2))]),
]
for op in ["Neg", "Exp", "Sigmoid", "Tanh", "Abs", "Sin", "Cos", "Relu", "Reciprocal"]:
    low = 0.5 if op == "Reciprocal" else -1.0
    CASES.append((op.lower(), op, {}, [("a", f32(2, 3, low=low))]))
CASES.append(("log", "Log", {}, [("a", f32(2, 3, low=0.5, high=2.0))]))
CASES.append(("sqrt", "Sqrt", {}, [("a", f32(2, 3, low=0.5, high=2.0))]))
CASES.append(("gelu-tanh", "Gelu", {"approximate": "tanh"}, [("a", f32(2, 3))]))
CASES.append(("gelu-erf", "Gelu", {}, [("a", f32(2, 3))]))


# A float initializer that reaches the data only through Sin/Cos is a rotary
# frequency buffer, not a parameter: the Sin/Cos cases first multiply their
# operand by a data input (ones) so that it stays a parameter.
THROUGH_DATA = {"Sin", "Cos"}


def build(op, attrs, operands, values):
    inits, names, nodes, inputs = [], [], [], []
    for k, (name, value) in enumerate(operands):
        tensor_name = "k%d" % k if name == "const" else name
        inits.append(numpy_helper.from_array(values.get(tensor_name, value), tensor_name))
        names.append(tensor_name)
    if op in THROUGH_DATA:
        shape = list(operands[0][1].shape)
        inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, shape))
        nodes.append(helper.make_node("Mul", [names[0], "x"], ["ax"]))
        names[0] = "ax"
    nodes += [helper.make_node(op, names, ["y"], **attrs),
             helper.make_node("Mul", ["y", "y"], ["sq"]),
             helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "case", inputs, [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 8
    return model


def run(rondo_run, model, out, train, ones=None):
    args = [rondo_run, model, "--weights-from-model", "--output-dir", out]
    if ones:
        args += ["--input", "x=" + ones]
    args += ["--pipeline=train", "--loss=output:loss"] if train else ["--pipeline=tg"]
    subprocess.run(args, check=True)


def worst_slope_error(rng, values, grads, subset, loss_at):
    """The worst relative error, over two random unit directions d of the
    parameters in SUBSET, between grads . d and the central difference of
    LOSS_AT (the compiled forward's loss for a dict of moved VALUES)."""
    worst = 0.0
    for _ in range(2):
        d = {p: rng.standard_normal(values[p].shape) for p in subset}
        norm = np.sqrt(sum(float(np.sum(x * x)) for x in d.values()))
        d = {p: x / norm for p, x in d.items()}
        h = 1e-2
        losses = []
        for sign in (1, -1):
            moved = dict(values)
            for p in subset:
                moved[p] = (values[p] + sign * h * d[p]).astype(np.float32)
            losses.append(loss_at(moved))
        fd = (losses[0] - losses[1]) / (2 * h)
        gd = sum(float(np.sum(grads[p] * d[p])) for p in subset)
        scale = max(np.sqrt(sum(float(np.sum(grads[p] * grads[p])) for p in subset)), 1e-3)
        worst = max(worst, abs(fd - gd) / scale)
    return worst


def command_line(argv, usage):
    """RONDO_RUN and WORKDIR (created) from ARGV; exits with status 2, USAGE
    printed, when they are not all it holds."""
    if len(argv) != 3:
        print(usage)
        sys.exit(2)
    os.makedirs(argv[2], exist_ok=True)
    return argv[1], argv[2]


def main(argv):
    rondo_run, work = command_line(argv, __doc__)
    failures = 0
    for name, op, attrs, operands in CASES:
        params = {n: v for n, v in operands if n != "const"}
        path = os.path.join(work, name + ".onnx")
        onnx.save(build(op, attrs, operands, {}), path)
        ones = None
        if op in THROUGH_DATA:
            ones = os.path.join(work, name + ".ones.npy")
            np.save(ones, np.ones(operands[0][1].shape, dtype=np.float32))
        run(rondo_run, path, os.path.join(work, name), True, ones)
        grads = {p: np.load(os.path.join(work, name, p + ".grad.npy")).astype(np.float64) for p in params}

        def loss_at(moved):
            mpath = os.path.join(work, name + ".fd.onnx")
            onnx.save(build(op, attrs, operands, moved), mpath)
            run(rondo_run, mpath, os.path.join(work, name + ".fd"), False, ones)
            return float(np.load(os.path.join(work, name + ".fd", "loss.npy")))

        worst = worst_slope_error(rng, params, grads, list(params), loss_at)
        ok = worst <= 5e-3
        failures += not ok
        print("%-18s %-20s %s (worst %.1e)" % (name, op, "ok" if ok else "MISMATCH", worst))
    print("%d of %d gradient rules agree with finite differences" % (len(CASES) - failures, len(CASES)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
