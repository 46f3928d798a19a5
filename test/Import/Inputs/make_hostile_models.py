#!/usr/bin/env python3
"""Writes small hostile ONNX models into DIR for test/Import/hostile-*.test.

Each model is valid protobuf but lies somewhere: about its initializers'
sizes, its dimensions, where its external data lives, or how deeply its
subgraphs nest. Run with Debian's /usr/bin/python3 (onnx and numpy).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def model(nodes, inits, inputs=None, outputs=None, opset=18):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def save(name, m):
    with open(os.path.join(out, name), "wb") as f:
        f.write(m.SerializeToString())


matmul = [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")]


def weight(**kw):
    """A [3, 4] float parameter 'w' with the fields given."""
    t = TensorProto()
    t.name = "w"
    t.data_type = kw.pop("data_type", TensorProto.FLOAT)
    t.dims.extend(kw.pop("dims", [3, 4]))
    for k, v in kw.items():
        if k == "float_data":
            t.float_data.extend(v)
        elif k == "external":
            t.data_location = TensorProto.EXTERNAL
            for key, value in v.items():
                e = t.external_data.add()
                e.key, e.value = key, value
        else:
            setattr(t, k, v)
    return t


# Header against data.
save("raw-length.onnx", model(matmul, [weight(raw_data=b"\0" * 20)]))
save("float-count.onnx", model(matmul, [weight(float_data=[1.0] * 11)]))
shape = helper.make_tensor("shape", TensorProto.INT64, [2], [3, 2])
shape.ClearField("int64_data")
shape.int64_data.extend([3, 2, 1])
save("int64-count.onnx", model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], [shape]))

# Absurd dimensions.
save("negative-dim.onnx", model(matmul, [weight(dims=[3, -4], float_data=[])]))
save("zero-dim.onnx", model(matmul, [weight(dims=[3, 0], float_data=[])]))
save("overflow-dim.onnx", model(matmul, [weight(dims=[1 << 32, 1 << 32, 1 << 32])]))
save("overflow-input.onnx", model(
    [helper.make_node("Relu", ["x"], ["y"], name="relu")], [],
    inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1 << 40, 1 << 40])]))
cos = helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill")
save("constant-of-shape.onnx", model(
    [cos, helper.make_node("Add", ["x", "c"], ["y"], name="add")],
    [helper.make_tensor("s", TensorProto.INT64, [2], [2, -3])]))
save("range-huge.onnx", model(
    [helper.make_node("Range", ["a", "b", "d"], ["r"], name="range"),
     helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
     helper.make_node("Add", ["x", "rf"], ["y"], name="add")],
    [helper.make_tensor("a", TensorProto.FLOAT, [], [0.0]),
     helper.make_tensor("b", TensorProto.FLOAT, [], [1e30]),
     helper.make_tensor("d", TensorProto.FLOAT, [], [1e-30])]))

# External data that escapes the model's directory.
save("external-dotdot.onnx", model(matmul, [weight(external={"location": "../../etc/passwd"})]))
save("external-absolute.onnx", model(matmul, [weight(external={"location": "/etc/passwd"})]))
save("external-length.onnx", model(matmul, [weight(external={"location": "w.bin", "length": "7"})]))
save("external-offset.onnx", model(matmul, [weight(external={"location": "w.bin", "offset": "-8"})]))

# Subgraphs nested 40 levels deep in If branches.
def nested_if(depth):
    body_out = helper.make_tensor_value_info("z%d" % depth, TensorProto.FLOAT, None)
    if depth == 0:
        return helper.make_graph([helper.make_node("Identity", ["x"], ["z0"])], "leaf", [], [body_out])
    node = helper.make_node("If", ["cond"], ["z%d" % depth], name="if_%d" % depth,
                            then_branch=nested_if(depth - 1), else_branch=nested_if(0))
    return helper.make_graph([node], "level%d" % depth, [], [body_out])

deep = nested_if(40)
top = helper.make_node("If", ["cond"], ["y"], name="if_top",
                       then_branch=deep, else_branch=nested_if(0))
save("deep-if.onnx", model(
    [top], [helper.make_tensor("cond", TensorProto.BOOL, [], [True])]))

# ONNX text with If branches nested LEVELS deep (argv[2], default 200):
# deeper than ONNX's recursive-descent parser should be asked to go.
levels = int(sys.argv[2]) if len(sys.argv) > 2 else 200
leaf = "z = Identity(x)"
body = leaf
for k in range(levels):
    body = ("z = If<then_branch = t%d () => (float[2] z) { %s }, "
            "else_branch = e%d () => (float[2] z) { %s }>(c)" % (k, body, k, leaf))
with open(os.path.join(out, "deep-text.onnxtxt"), "w") as f:
    f.write('<ir_version: 8, opset_import: ["" : 18]>\n')
    f.write("g (float[2] x, bool c) => (float[2] z) { %s }\n" % body)
