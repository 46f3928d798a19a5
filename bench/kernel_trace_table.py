#!/usr/bin/env python3
"""Per-step kernel time by category from bench/kernel_trace.cpp's files.

    python3 bench/kernel_trace_table.py NAME=TRACE[@STEP_MS] [...]

Each TRACE covers a window of a run's last GPU work, which need not hold a
whole number of steps. With @STEP_MS (the run's measured step) the window
holds its span over the step (the GPU is busy throughout a step); without
it, its attention forward calls over --per-step (W1: 28 layers x 8
microbatches = 224), which counts a partial step's forward as a whole step.
Every category is divided by that count. GEMMs include the LM head's (their
kernels are the layers' kernels, so a trace cannot tell them apart).
Prints a markdown table, and with --json FILE writes the numbers.
"""
import argparse
import json
import re

CATEGORIES = [
    ("attention", re.compile(r"sdpa|fmha|flash|attention|cudnn", re.I)),
    ("GEMMs (LM head included)", re.compile(r"nvjet|gemm|xmma|cutlass|sm90_xmma", re.I)),
    ("AdamW", re.compile(r"adam", re.I)),
    ("cross-entropy", re.compile(r"Loss_cu|softmax|nll", re.I)),
]
OTHER = "elementwise, norms, copies, reductions"
FORWARD_ATTENTION = re.compile(r"fprop|flash_fwd|attentionFwd|FwdKernel", re.I)


def load(path):
    rows = []
    span = None
    for line in open(path):
        if line.startswith("# window"):
            span = float(line.split()[2])
        if line.startswith("# sequence"):
            break  # KERNEL_TRACE_SEQUENCE's launch-order listing follows
        if line.startswith("#") or line.split()[:1] == ["ms"]:
            continue
        ms, calls, _, _, _, name = line.split(None, 5)
        rows.append((float(ms), int(calls), name.strip()))
    return rows, span


def category(name):
    for cat, pattern in CATEGORIES:
        if pattern.search(name):
            return cat
    return OTHER


def per_step(rows, span, calls_per_step, step_ms=None):
    if step_ms:
        steps = span / step_ms
    else:
        forward = sum(c for _, c, n in rows if FORWARD_ATTENTION.search(n))
        steps = forward / calls_per_step
    if steps <= 0:
        raise SystemExit("no attention forward kernel in the trace")
    cats = {}
    for ms, _, name in rows:
        cats[category(name)] = cats.get(category(name), 0.0) + ms
    return steps, {k: v / steps for k, v in cats.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("traces", nargs="+", metavar="NAME=TRACE")
    p.add_argument("--per-step", type=float, default=224,
                   help="attention forward calls per step (layers x microbatches)")
    p.add_argument("--json")
    a = p.parse_args()
    runs = {}
    for spec in a.traces:
        name, path = spec.split("=", 1)
        step_ms = None
        if "@" in path:
            path, step_ms = path.rsplit("@", 1)
            step_ms = float(step_ms)
        rows, span = load(path)
        steps, cats = per_step(rows, span, a.per_step, step_ms)
        runs[name] = {"steps_in_window": steps, "ms_per_step": cats}
    order = [c for c, _ in CATEGORIES] + [OTHER]
    names = list(runs)
    print("| ms per step | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for c in order:
        print("| %s | " % c + " | ".join(
            "%.1f" % runs[n]["ms_per_step"].get(c, 0.0) for n in names) + " |")
    print("| all kernels | " + " | ".join(
        "%.1f" % sum(runs[n]["ms_per_step"].values()) for n in names) + " |")
    print("| steps in the window | " + " | ".join(
        "%.2f" % runs[n]["steps_in_window"] for n in names) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
