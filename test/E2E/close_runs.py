#!/usr/bin/env python3
"""Checks that two runs agree to a tolerance: losses, gradient norms and
tokens of their --log-json files, and the weights they exported.

  close_runs.py LOG1 LOG2 ONNX1 ONNX2 TOLERANCE

Losses and norms must agree to TOLERANCE relative, every exported weight
to TOLERANCE absolute, tokens exactly. Prints the largest differences.
"""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f
                if line.strip() and "loss" in json.loads(line)]


def weights(path):
    return {t.name: numpy_helper.to_array(t).astype(np.float64)
            for t in onnx.load(path).graph.initializer}


def main():
    log1, log2, onnx1, onnx2, tol = sys.argv[1:6]
    tol = float(tol)
    a, b = records(log1), records(log2)
    if len(a) != len(b) or not a:
        print("%d steps against %d" % (len(a), len(b)))
        return 1
    loss = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(a, b))
    norm = max(abs(x["grad_norm"] - y["grad_norm"]) / abs(y["grad_norm"])
               for x, y in zip(a, b))
    tokens = all(x["tokens"] == y["tokens"] for x, y in zip(a, b))
    w1, w2 = weights(onnx1), weights(onnx2)
    if w1.keys() != w2.keys():
        print("the exports hold different weights")
        return 1
    dw = max(float(np.max(np.abs(w1[k] - w2[k]))) for k in w1)
    ok = loss <= tol and norm <= tol and dw <= tol and tokens
    print("%d steps: losses and norms within %g relative, weights within %g: %s"
          % (len(a), tol, tol, "yes" if ok else
             "no (loss %.3g, norm %.3g, weights %.3g, tokens %s)"
             % (loss, norm, dw, "equal" if tokens else "differ")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
