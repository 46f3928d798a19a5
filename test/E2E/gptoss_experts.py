#!/usr/bin/env python3
"""GPT-OSS's experts (layer 0 of gptoss-dev-tiny, whose attention needs sinks)
on their own: the exported router + experts block, from the router Gemm's
input to the slots' ReduceSum, as a model.

  gptoss_experts.py extract MODEL.onnx OUT.onnx X.npy   the block, an input
  gptoss_experts.py check OUT.onnx X.npy Y.npy          Y against float64

The float64 reference is GPT-OSS's MoE written out: router logits + bias,
top-2, softmax over the two, per slot x·W_gate_up[e] + b, gate/up
interleaved (even/odd columns), gate clamped above at `limit`, up to
[-limit, limit], (up + 1) · gate · sigmoid(alpha · gate), · W_down[e] + b.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FIRST, LAST = "node_linear_4", "node_sum_1"
SCALE = 60.0


def extract(model_path, out_path, x_path):
    g = onnx.load(model_path).graph
    names = [n.name for n in g.node]
    body = list(g.node)[names.index(FIRST):names.index(LAST) + 1]
    x_name, y_name = body[0].input[0], body[-1].output[0]
    used = {i for n in body for i in n.input}
    inits = [i for i in g.initializer if i.name in used]
    graph = helper.make_graph(
        body, "gptoss_experts",
        [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, [None, 64])],
        [helper.make_tensor_value_info(y_name, TensorProto.FLOAT, [None, 64])],
        initializer=inits)
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    onnx.save(model, out_path)
    np.random.seed(0)
    # Large enough that the clamps at +-limit bite.
    np.save(x_path, (SCALE * np.random.randn(64, 64)).astype(np.float32))
    return 0


def check(model_path, x_path, y_path):
    m = onnx.load(model_path)
    w = {i.name: numpy_helper.to_array(i).astype(np.float64)
         for i in m.graph.initializer}
    nodes = {n.name: n for n in m.graph.node}
    router_w, router_b = nodes[FIRST].input[1], nodes[FIRST].input[2]
    gathers = [n for n in m.graph.node if n.op_type == "GatherND"]
    gate_up, gate_up_b, down, down_b = (w[n.input[0]] for n in gathers)
    alpha = next(w[i] for n in m.graph.node if n.op_type == "Mul"
                 for i in n.input if i in w and w[i].shape == ())
    # The gate's clamp has no lower bound (the routing ids' clamp has one).
    limit = next(w[n.input[2]] for n in m.graph.node if n.op_type == "Clip"
                 and len(n.input) > 2 and not n.input[1])
    x = np.load(x_path).astype(np.float64)
    h = np.einsum("tk,ekm->tem", x, gate_up)
    clamped = float(np.mean(np.abs(h) > limit))
    if clamped < 0.05:
        print("only %.1f%% of the gate/up values reach the clamp" %
              (100 * clamped))
        return 1
    logits = x @ w[router_w].T + w[router_b]
    idx = np.argsort(-logits, axis=1, kind="stable")[:, :2]
    val = np.take_along_axis(logits, idx, 1)
    p = np.exp(val - val.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(2):
            e = idx[t, j]
            h = x[t] @ gate_up[e] + gate_up_b[e]
            gate = np.minimum(h[0::2], limit)
            up = np.clip(h[1::2], -limit, limit)
            glu = gate / (1 + np.exp(-alpha * gate))
            y[t] += p[t, j] * (((up + 1) * glu) @ down[e] + down_b[e])
    got = np.load(y_path).astype(np.float64)
    err = float(np.max(np.abs(got - y)) / np.max(np.abs(y)))
    if err > 1e-5:
        print("GPT-OSS experts: max relative error %.2e > 1e-5" % err)
        return 1
    print("GPT-OSS experts match the float64 reference (alpha %g, limit %g)"
          % (alpha, limit))
    return 0


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    sys.exit(extract(*args) if cmd == "extract" else check(*args))
