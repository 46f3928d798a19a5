"""Checks of the trainer's --export-safetensors (test/E2E/hf-export.test).

  same EXPORTED REFERENCE       every tensor of REFERENCE (a model.safetensors
                                that Hugging Face's save_pretrained wrote) is in
                                EXPORTED with the same shape and bits
  trained EXPORTED ONNX         EXPORTED holds the weights of the ONNX model
                                (the same run's --export-onnx) under PyTorch's
                                names, nn.Linear weights transposed back
  merged EXPORTED ONNX          as `trained`, for a LoRA trainer's merged model
"""
import json
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        assert v["dtype"] == "F32", (name, v["dtype"])
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(body[b:e], dtype=np.float32).reshape(v["shape"])
    return out, header.get("__metadata__", {})


def same(exported, reference):
    got, meta = read_safetensors(exported)
    ref, _ = read_safetensors(reference)
    bad = 0
    for name, r in ref.items():
        if name not in got:
            print("MISMATCH: %s missing" % name)
            bad += 1
        elif got[name].shape != r.shape or not np.array_equal(got[name], r):
            print("MISMATCH: %s %s vs %s" % (name, got[name].shape, r.shape))
            bad += 1
    extra = sorted(set(got) - set(ref))
    print("%d of %d tensors of the Hugging Face checkpoint are bit-identical; extra: %s; format %s"
          % (len(ref) - bad, len(ref), ", ".join(extra) or "none", meta.get("format")))


def trained(exported, onnx_path):
    got, _ = read_safetensors(exported)
    model = onnx.load(onnx_path)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
               if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 1}
    # Match by value: every exported tensor is one initializer, as it is or
    # transposed (the names differ: val_92 is model.layers.0...q_proj.weight).
    transposed = matched = 0
    for name, g in sorted(got.items()):
        hits = [n for n, w in weights.items() if w.shape == g.shape and np.array_equal(w, g)]
        hits_t = [n for n, w in weights.items()
                  if w.ndim == 2 and w.T.shape == g.shape and np.array_equal(w.T, g)]
        if name in weights and name not in hits:
            print("MISMATCH: %s differs from the initializer of that name" % name)
        elif hits or hits_t:
            matched += 1
            transposed += 0 if hits else 1
        else:
            print("MISMATCH: %s %s is no initializer of %s" % (name, g.shape, onnx_path))
    print("%d tensors are the ONNX model's weights (%d transposed back)" % (matched, transposed))


if __name__ == "__main__":
    {"same": same, "trained": trained, "merged": trained}[sys.argv[1]](*sys.argv[2:])
