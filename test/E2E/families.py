#!/usr/bin/env python3
"""Decoder families without PyTorch references, checked against float64.

For each family this builds a one-layer miniature with onnx.helper in the
form PyTorch's exporter emits it (GPT-2: learned positions, LayerNorm with
bias, fused c_attn with Split, boolean causal Where, tanh-GELU polynomial,
tied head; Phi-3: decomposed RMSNorm, fused qkv and gate_up projections cut
with Slice/Split, rotary tables from a frequency buffer, additive mask), runs
the same model in NumPy float64, differentiates it there by central finite
differences, then compiles it with rondo-compile, runs one step of the
trainer with --dump-gradients and compares:
  loss: relative error <= 1e-5; every gradient: max|g - g_ref| / max|g_ref| <= 1e-4.

usage: families.py RONDO_COMPILE WORKDIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

B, T, V, D, H = 2, 6, 16, 8, 2
HD = D // H
rng = np.random.default_rng(7)


def rand(*shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.counter = [], [], 0

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def const(self, array):
        self.counter += 1
        return self.init("c%d" % self.counter, array)

    def op(self, op_type, inputs, n_out=1, **attrs):
        self.counter += 1
        outs = ["t%d_%d" % (self.counter, k) for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, output):
        g = helper.make_graph(
            self.nodes, "mini",
            [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", "seq", V])],
            self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
        m.ir_version = 8
        return m


def i64(*v):
    return np.array(v, dtype=np.int64)


# --------------------------------------------------------------------------
# GPT-2
# --------------------------------------------------------------------------
def gpt2_params():
    return {
        "wte": rand(V, D), "wpe": rand(T, D),
        "ln1_w": 1 + rand(D, scale=0.1), "ln1_b": rand(D, scale=0.1),
        "attn_w": rand(D, 3 * D), "attn_b": rand(3 * D, scale=0.1),
        "proj_w": rand(D, D), "proj_b": rand(D, scale=0.1),
        "ln2_w": 1 + rand(D, scale=0.1), "ln2_b": rand(D, scale=0.1),
        "fc_w": rand(D, 4 * D), "fc_b": rand(4 * D, scale=0.1),
        "out_w": rand(4 * D, D), "out_b": rand(D, scale=0.1),
        "lnf_w": 1 + rand(D, scale=0.1), "lnf_b": rand(D, scale=0.1),
    }


def gpt2_onnx(p):
    g = Graph()
    for k, v in p.items():
        g.init(k, v)
    shape = g.op("Shape", ["input_ids"])
    seq = g.op("Gather", [shape, g.const(np.array(1, dtype=np.int64))], axis=0)
    pos = g.op("Range", [g.const(np.array(0, dtype=np.int64)), seq, g.const(np.array(1, dtype=np.int64))])
    h = g.op("Add", [g.op("Gather", ["wte", "input_ids"]), g.op("Gather", ["wpe", pos])])

    def ln(x, w, b):
        return g.op("LayerNormalization", [x, w, b], axis=-1, epsilon=1e-5)

    def heads(x):  # [B,T,D] -> [B,H,T,HD]
        r = g.op("Reshape", [x, g.const(i64(0, 0, H, HD))])
        return g.op("Transpose", [r], perm=[0, 2, 1, 3])

    a = ln(h, "ln1_w", "ln1_b")
    qkv = g.op("Add", [g.op("MatMul", [a, "attn_w"]), "attn_b"])
    q, k, v = g.op("Split", [qkv], n_out=3, axis=2, num_outputs=3)
    q, k, v = heads(q), heads(k), heads(v)
    s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    s = g.op("Div", [s, g.const(np.array(np.sqrt(HD), dtype=np.float32))])
    ones = g.op("ConstantOfShape", [g.op("Concat", [g.op("Unsqueeze", [seq, g.const(i64(0))]),
                                                    g.op("Unsqueeze", [seq, g.const(i64(0))])], axis=0)],
                value=numpy_helper.from_array(np.array([1], dtype=np.int64)))
    causal = g.op("Cast", [g.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
    s = g.op("Where", [causal, s, g.const(np.array(-3.4e38, dtype=np.float32))])
    o = g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])
    o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.const(i64(0, 0, D))])
    h = g.op("Add", [h, g.op("Add", [g.op("MatMul", [o, "proj_w"]), "proj_b"])])
    m = g.op("Add", [g.op("MatMul", [ln(h, "ln2_w", "ln2_b"), "fc_w"]), "fc_b"])
    cube = g.op("Pow", [m, g.const(np.array(3.0, dtype=np.float32))])
    inner = g.op("Add", [m, g.op("Mul", [g.const(np.array(0.044715, dtype=np.float32)), cube])])
    t = g.op("Tanh", [g.op("Mul", [g.const(np.array(np.sqrt(2 / np.pi), dtype=np.float32)), inner])])
    gelu = g.op("Mul", [g.op("Mul", [g.const(np.array(0.5, dtype=np.float32)), m]),
                        g.op("Add", [g.const(np.array(1.0, dtype=np.float32)), t])])
    h = g.op("Add", [h, g.op("Add", [g.op("MatMul", [gelu, "out_w"]), "out_b"])])
    logits = g.op("MatMul", [ln(h, "lnf_w", "lnf_b"), g.op("Transpose", ["wte"], perm=[1, 0])])
    return g.model(logits)


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def attention(q, k, v, additive):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(HD)
    mask = np.tril(np.ones((T, T), dtype=bool))
    s = s + np.where(mask, 0.0, -np.inf) if additive else np.where(mask, s, -3.4e38)
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return (e / e.sum(-1, keepdims=True)) @ v


def split_heads(x):
    return x.reshape(B, T, H, HD).transpose(0, 2, 1, 3)


def merge_heads(x):
    return x.transpose(0, 2, 1, 3).reshape(B, T, D)


def gpt2_forward(p, ids):
    h = p["wte"][ids] + p["wpe"][np.arange(T)]
    qkv = layer_norm(h, p["ln1_w"], p["ln1_b"]) @ p["attn_w"] + p["attn_b"]
    q, k, v = (split_heads(x) for x in np.split(qkv, 3, axis=-1))
    h = h + merge_heads(attention(q, k, v, additive=False)) @ p["proj_w"] + p["proj_b"]
    m = layer_norm(h, p["ln2_w"], p["ln2_b"]) @ p["fc_w"] + p["fc_b"]
    gelu = 0.5 * m * (1 + np.tanh(np.sqrt(2 / np.pi) * (m + 0.044715 * m ** 3)))
    h = h + gelu @ p["out_w"] + p["out_b"]
    return layer_norm(h, p["lnf_w"], p["lnf_b"]) @ p["wte"].T


# --------------------------------------------------------------------------
# Phi-3
# --------------------------------------------------------------------------
def phi3_params():
    return {
        "embed": rand(V, D), "in_norm": 1 + rand(D, scale=0.1),
        "qkv": rand(D, 3 * D), "o": rand(D, D), "post_norm": 1 + rand(D, scale=0.1),
        "gate_up": rand(D, 4 * D), "down": rand(2 * D, D), "final_norm": 1 + rand(D, scale=0.1),
        "head": rand(D, V),
    }


INV_FREQ = (1.0 / (10000 ** (np.arange(0, HD, 2) / HD))).astype(np.float32)


def phi3_onnx(p):
    g = Graph()
    for k, v in p.items():
        g.init(k, v)
    g.init("inv_freq", INV_FREQ.reshape(1, HD // 2, 1))
    shape = g.op("Shape", ["input_ids"])
    seq = g.op("Gather", [shape, g.const(np.array(1, dtype=np.int64))], axis=0)
    pos = g.op("Cast", [g.op("Range", [g.const(np.array(0, dtype=np.int64)), seq,
                                       g.const(np.array(1, dtype=np.int64))])], to=TensorProto.FLOAT)
    freqs = g.op("Transpose", [g.op("MatMul", ["inv_freq", g.op("Unsqueeze", [pos, g.const(i64(0, 1))])])],
                 perm=[0, 2, 1])
    emb = g.op("Concat", [freqs, freqs], axis=-1)
    cos = g.op("Unsqueeze", [g.op("Cos", [emb]), g.const(i64(1))])
    sin = g.op("Unsqueeze", [g.op("Sin", [emb]), g.const(i64(1))])

    def rms(x, w):
        ms = g.op("ReduceMean", [g.op("Pow", [x, g.const(np.array(2.0, dtype=np.float32))]), g.const(i64(-1))])
        r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.const(np.array(1e-6, dtype=np.float32))])])])
        return g.op("Mul", [w, g.op("Mul", [x, r])])

    def heads(x):
        r = g.op("Reshape", [x, g.const(i64(0, 0, H, HD))])
        return g.op("Transpose", [r], perm=[0, 2, 1, 3])

    def rope(x):
        half = HD // 2
        x1 = g.op("Slice", [x, g.const(i64(0)), g.const(i64(half)), g.const(i64(3))])
        x2 = g.op("Slice", [x, g.const(i64(half)), g.const(i64(HD)), g.const(i64(3))])
        rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rot, sin])])

    h = g.op("Gather", ["embed", "input_ids"])
    qkv = g.op("MatMul", [rms(h, "in_norm"), "qkv"])
    q = g.op("Slice", [qkv, g.const(i64(0)), g.const(i64(D)), g.const(i64(2))])
    k = g.op("Slice", [qkv, g.const(i64(D)), g.const(i64(2 * D)), g.const(i64(2))])
    v = g.op("Slice", [qkv, g.const(i64(2 * D)), g.const(i64(3 * D)), g.const(i64(2))])
    q, k, v = rope(heads(q)), rope(heads(k)), heads(v)
    s = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                     g.const(np.array(1 / np.sqrt(HD), dtype=np.float32))])
    rows = g.op("Unsqueeze", [g.op("Range", [g.const(np.array(0, dtype=np.int64)), seq,
                                             g.const(np.array(1, dtype=np.int64))]), g.const(i64(1))])
    cols = g.op("Unsqueeze", [g.op("Range", [g.const(np.array(0, dtype=np.int64)), seq,
                                             g.const(np.array(1, dtype=np.int64))]), g.const(i64(0))])
    bias = g.op("Where", [g.op("LessOrEqual", [cols, rows]), g.const(np.array(0.0, dtype=np.float32)),
                          g.const(np.array(-3.4e38, dtype=np.float32))])
    o = g.op("MatMul", [g.op("Softmax", [g.op("Add", [s, bias])], axis=-1), v])
    o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.const(i64(0, 0, D))])
    h = g.op("Add", [h, g.op("MatMul", [o, "o"])])
    gu = g.op("MatMul", [rms(h, "post_norm"), "gate_up"])
    gate, up = g.op("Split", [gu], n_out=2, axis=-1, num_outputs=2)
    act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
    h = g.op("Add", [h, g.op("MatMul", [act, "down"])])
    logits = g.op("MatMul", [rms(h, "final_norm"), "head"])
    return g.model(logits)


def rms_norm(x, w):
    return w * x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)


def phi3_forward(p, ids):
    freqs = np.arange(T)[:, None] * INV_FREQ.astype(np.float64)[None, :]
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb), np.sin(emb)

    def rope(x):
        rot = np.concatenate([-x[..., HD // 2:], x[..., :HD // 2]], -1)
        return x * cos + rot * sin

    h = p["embed"][ids]
    qkv = rms_norm(h, p["in_norm"]) @ p["qkv"]
    q, k, v = (split_heads(x) for x in np.split(qkv, 3, axis=-1))
    h = h + merge_heads(attention(rope(q), rope(k), v, additive=True)) @ p["o"]
    gate, up = np.split(rms_norm(h, p["post_norm"]) @ p["gate_up"], 2, axis=-1)
    h = h + (gate / (1 + np.exp(-gate)) * up) @ p["down"]
    return rms_norm(h, p["final_norm"]) @ p["head"]


# --------------------------------------------------------------------------
def causal_lm_loss(logits, ids):
    z = logits[:, :-1].reshape(-1, V)
    y = ids[:, 1:].reshape(-1)
    z = z - z.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    return float(np.mean(lse - z[np.arange(len(y)), y]))


def fd_grads(forward, p, ids, eps=1e-6):
    p64 = {k: v.astype(np.float64) for k, v in p.items()}
    grads = {}
    for name, w in p64.items():
        g = np.zeros_like(w)
        for idx in np.ndindex(w.shape):
            old = w[idx]
            w[idx] = old + eps
            up = causal_lm_loss(forward(p64, ids), ids)
            w[idx] = old - eps
            down = causal_lm_loss(forward(p64, ids), ids)
            w[idx] = old
            g[idx] = (up - down) / (2 * eps)
        grads[name] = g
    return grads


def check(name, params, build, forward, rondo_compile, work):
    ids = rng.integers(0, V, size=(B, T)).astype(np.int64)
    model_path = os.path.join(work, name + ".onnx")
    onnx.save(build(params), model_path)
    np.save(os.path.join(work, name + ".ids.npy"), ids)
    trainer = os.path.join(work, name + ".trainer")
    subprocess.run([rondo_compile, model_path, "--batch", str(B), "--seq-len", str(T), "-o", trainer],
                   check=True)
    dump, log = os.path.join(work, name + ".grads.onnx"), os.path.join(work, name + ".log")
    subprocess.run([trainer, "--data", os.path.join(work, name + ".ids.npy"), "--steps", "1",
                    "--quiet", "--dump-gradients", dump, "--log-json", log], check=True)
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    ref_loss = causal_lm_loss(forward(p64, ids), ids)
    loss = json.loads(open(log).readline())["loss"]
    ok = abs(loss - ref_loss) <= 1e-5 * abs(ref_loss)
    print("%s: loss %.8f, float64 reference %.8f%s" % (name, loss, ref_loss, "" if ok else "  MISMATCH"))
    got = {t.name: numpy_helper.to_array(t) for t in onnx.load(dump).graph.initializer}
    ref = fd_grads(forward, params, ids)
    if set(ref) - set(got):
        print("%s: missing gradients %s" % (name, sorted(set(ref) - set(got))))
        return False
    worst = 0.0
    for pname, r in ref.items():
        err = float(np.max(np.abs(got[pname] - r)) / max(np.max(np.abs(r)), 1e-30))
        worst = max(worst, err)
        if err > 1e-4:
            print("%s: gradient of %s differs: %.3e" % (name, pname, err))
            ok = False
    print("%s: %d gradients match finite differences in float64 (worst %.2e)" % (name, len(ref), worst))
    return ok


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    os.makedirs(argv[2], exist_ok=True)
    ok = check("gpt2", gpt2_params(), gpt2_onnx, gpt2_forward, argv[1], argv[2])
    ok &= check("phi3", phi3_params(), phi3_onnx, phi3_forward, argv[1], argv[2])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
