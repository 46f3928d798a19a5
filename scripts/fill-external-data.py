#!/usr/bin/env python3
"""Gives a graph-only ONNX model fp32 weights in one external-data file.

Graph-only exports (scripts/export-hf-onnx.py --graph-only) point every
initializer into an absent `<model>.data` file. This writes that file with
random fp32 weights, streamed in chunks so that it may be larger than
memory, and a copy of the graph whose external initializers are fp32 at
64-byte-aligned offsets (what `trainer --map-weights` maps in place).
Inline parameters (`*.weight`, `*.bias`) are filled too: graph-only exports
inline small ones with uninitialised bytes. Other inline initializers
(buffers such as inv_freq) are real and kept.
1-D weights (norms) are ones; others are normal with std --std.

    python3 scripts/fill-external-data.py qwen3-8b.onnx -o big/qwen3-8b.onnx

Writes OUT and OUT.data. Needs numpy and onnx (both on this machine).
"""
import argparse
import os
import sys

import numpy as np
import onnx

CHUNK = 1 << 24  # elements per write (64 MB)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--std", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    model = onnx.load(a.model, load_external_data=False)
    data_name = os.path.basename(a.out) + ".data"
    data_path = os.path.join(os.path.dirname(os.path.abspath(a.out)), data_name)
    rng = np.random.default_rng(a.seed)
    offset = 0
    tmp = data_path + ".tmp"
    with open(tmp, "wb") as f:
        for init in model.graph.initializer:
            # Module parameters and whatever points into the absent file get
            # weights (a graph-only export inlines small parameters with
            # uninitialised bytes); other inline data (buffers such as
            # inv_freq) is real and kept.
            is_param = init.name.endswith((".weight", ".bias"))
            if (init.data_location != onnx.TensorProto.EXTERNAL and not is_param) or \
                    init.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.BFLOAT16,
                                           onnx.TensorProto.FLOAT16):
                continue
            count = int(np.prod(init.dims)) if init.dims else 1
            pad = (-offset) % 64
            f.write(b"\0" * pad)
            offset += pad
            left = count
            while left:
                n = min(left, CHUNK)
                block = (np.ones(n, np.float32) if len(init.dims) == 1 else
                         rng.standard_normal(n, dtype=np.float32) * np.float32(a.std))
                f.write(block.tobytes())
                left -= n
            init.data_type = onnx.TensorProto.FLOAT
            init.ClearField("raw_data")
            init.ClearField("float_data")
            del init.external_data[:]
            init.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)),
                               ("length", str(count * 4))):
                entry = init.external_data.add()
                entry.key, entry.value = key, value
            offset += count * 4
    os.replace(tmp, data_path)
    onnx.save(model, a.out)
    print("fill-external-data: wrote %s and %s (%.2f GB of fp32 weights)"
          % (a.out, data_path, offset / 1e9))


if __name__ == "__main__":
    sys.exit(main())
