#!/usr/bin/env python3
"""A device spec calibrated on Rondo's own kernels, from one measured run.

The cost model (docs/CostModel.md) prices every op from a few rates: the
GEMM efficiency and its rows curve, the attention efficiency, the memory
bandwidth, the host optimizer's rate and the host link. bench/measure_device.py
measures what the hardware does under PyTorch; this script measures what
Rondo's trainer does, so that the plans predict what runs:

  * PROFILE: the trainer's stderr with RONDO_PROFILE_KERNELS=1 (GPU time per
    kernel over --profile-steps steps);
  * TEMPLATE: the op-timings.json that `rondo-compile --explain=DIR` wrote
    for the same plan (every op with its analytic seconds and count);
  * TRACE: the --trace of an unprofiled run of the same plan (its compute
    per step: the profile's own overhead is scaled away);
  * OTHER TRACE (optional): a --trace of the same model at another M,
    streamed: the compute the two differ by beyond the GEMM rows curve is
    the per-op overhead (kernel_launch_seconds), and its host AdamW and
    copies give the host optimizer's rate and the host link.

Each kernel category's measured time per step is set against the model's
prediction for the ops of that category, and the category's rate is scaled
by the ratio: GEMMs (matmul_efficiency), fused attention
(attention_efficiency), memory-bound work (memory_efficiency, which also
sets the device AdamW rate). The fused LM head + cross-entropy, one op each
way, gets op_timings entries with its measured seconds.

    python3 bench/calibrate_spec.py --profile w1-profile.txt --profile-steps 4 \\
        --template plans/auto/op-timings.json --trace w1-rondo-planner-trace.json \\
        --other-trace w1-rondo-streamed-trace.json --base h100 \\
        --out bench/specs/h100-rondo.json
"""
import argparse
import collections
import json
import re
import sys

# The rates of the built-in spec the TEMPLATE was costed with
# (compiler/CostModel/DeviceSpec.cpp): the script scales these, so they must be
# the built-in values at the time the template was written. These are the
# h100's since its calibration of 2026-11-26 (the h200 inherits them); the
# first calibration scaled the measured-PyTorch rates 0.75 / 0.48 / 0.89.
BASE = {
    "h100": dict(matmul_efficiency=0.48, attention_efficiency=0.14,
                 memory_efficiency=1.0, memory_bandwidth=3.35e12),
    "h200": dict(matmul_efficiency=0.48, attention_efficiency=0.14,
                 memory_efficiency=1.0, memory_bandwidth=4.8e12),
}

OPTIMIZER_KERNELS = {"adamwUpdate", "allFinite", "gradNormPartials", "sumParts"}


def kernel_category(name):
    if name.startswith("matmul"):
        return "matmul"
    if name.startswith("attention"):
        return "attention"
    if name.startswith("linearCrossEntropy"):
        return "lce"
    if name in OPTIMIZER_KERNELS:
        return "optimizer"
    return "other"


def op_category(op):
    name = op.split(" ")[0]
    if name in ("tg.matmul", "tg.expert_matmul", "tg.expert_matmul_wgrad"):
        return "matmul"
    if name.startswith("tg.attention"):
        return "attention"
    if name.startswith("tg.linear_cross_entropy"):
        return "lce"
    return "other"


def read_profile(path, steps):
    """Milliseconds per step by kernel category, and per LCE kernel."""
    per_step = collections.defaultdict(float)
    lce = {}
    started = False
    for line in open(path):
        if "GPU time per kernel (RONDO_PROFILE_KERNELS)" in line:
            started = True
            continue
        if not started:
            continue
        m = re.match(r"\s*([0-9.]+)\s+([0-9]+)\s+[0-9.]+\s+(?:[0-9.]+\s+)?(\S.*)$", line)
        if not m:
            continue
        ms, kernel = float(m.group(1)), m.group(3).strip()
        base = kernel.split(" ")[0]
        per_step[kernel_category(base)] += ms / steps
        if base.startswith("linearCrossEntropy"):
            lce[base] = lce.get(base, 0) + ms / steps
    if not started:
        sys.exit("%s: no RONDO_PROFILE_KERNELS table" % path)
    return per_step, lce


def read_template(path):
    """The model's milliseconds per step by category (launch excluded), the
    LM head's op keys, and op executions per microbatch by category."""
    t = json.load(open(path))
    per_step = collections.defaultdict(float)
    ops = collections.defaultdict(int)
    lce_keys = {}
    for e in t["op_timings"]:
        cat = op_category(e["op"])
        if e["seconds"] <= 0:
            continue  # materialised once (constants, tables): no launch
        per_step[cat] += 1e3 * (e["seconds"] - 5e-6) * e["count"]
        ops[cat] += e["count"]
        ops["all"] += e["count"]
        if cat == "lce":
            lce_keys[e["op"]] = e
    return per_step, lce_keys, ops


def read_trace(path, first_step=2):
    """What a --trace measured per step from `first_step` on: the worker's
    compute, the host AdamW rate and the host link, and the plan's M."""
    t = json.load(open(path))
    tasks = collections.defaultdict(lambda: [0.0, 0.0])  # seconds, bytes
    steps = set()
    for e in t["traceEvents"]:
        if e.get("ph") != "X" or e["args"].get("eval"):
            continue
        step = e["args"].get("step", 0)
        if step < first_step:
            continue
        steps.add(step)
        kind = e["args"].get("kind") or e.get("cat") or e["name"].split(" ")[0]
        tasks[kind][0] += e["dur"] / 1e6
        tasks[kind][1] += e["args"].get("bytes", 0)
    n = len(steps)
    out = {"microbatches": t["otherData"]["microbatches"],
           "compute_ms": 1e3 * sum(v[0] for k, v in tasks.items()
                                   if k not in ("optimizer", "param_upload",
                                                "grad_download", "input_upload",
                                                "loss_download", "load_batch",
                                                "fill_zero")) / n}
    # Every parameter streams and trains in the runs this is for: the stages'
    # fp32 images hold each one once.
    params = sum(st["paramBytes"] for st in t["otherData"]["stages"]) / 4
    if tasks["optimizer"][0] > 0 and tasks["param_upload"][0] > 0:
        out["optimizer_params_per_second"] = params * n / tasks["optimizer"][0]
    moved = [tasks[k] for k in ("param_upload", "grad_download") if tasks[k][0] > 0]
    if moved:
        out["host_link_bandwidth"] = sum(b for _, b in moved) / sum(s for s, _ in moved)
    return out


def rows_curve(rows, half=808.0, exponent=1.5):
    """The GEMM rows curve of the built-in specs (CostModel.cpp)."""
    return 1.0 / (1.0 + (half / rows) ** exponent)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--profile-steps", type=int, required=True)
    p.add_argument("--template", required=True)
    p.add_argument("--trace", required=True,
                   help="the profiled plan's own --trace (an unprofiled run)")
    p.add_argument("--other-trace",
                   help="a --trace of the same model at another M, streamed "
                        "(per-op overhead, host AdamW, host link)")
    p.add_argument("--tokens", type=float, default=65536,
                   help="tokens per step")
    p.add_argument("--base", default="h100", choices=sorted(BASE))
    p.add_argument("--name")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    measured, lce = read_profile(a.profile, a.profile_steps)
    template, lce_keys, ops = read_template(a.template)
    own = read_trace(a.trace)
    base = BASE[a.base]
    spec = {"name": a.name or a.base + "-rondo", "base": a.base}
    m_a = own["microbatches"]
    rows_a = a.tokens / m_a
    # The profile's own overhead: scale its kernel times to the traced
    # compute of an unprofiled run.
    kernels = sum(v for k, v in measured.items() if k != "optimizer")
    scale = own["compute_ms"] / kernels
    work = {k: v * scale for k, v in measured.items()}
    # Per-op overhead (launches, small kernels' latency), from two runs of
    # different M: the compute they differ by beyond the GEMM rows curve.
    launch = 5e-6
    if a.other_trace:
        other = read_trace(a.other_trace)
        m_b = other["microbatches"]
        curve = rows_curve(rows_a) / rows_curve(a.tokens / m_b)
        delta = own["compute_ms"] - other["compute_ms"] - work["matmul"] * (1 - curve)
        launch = max(delta / 1e3 / ((m_a - m_b) * ops["all"]), 0.0)
        spec["kernel_launch_seconds"] = launch
        for key in ("optimizer_params_per_second", "host_link_bandwidth"):
            if key in other:
                spec[key] = other[key]
    for cat in ("matmul", "attention", "other"):
        work[cat] -= 1e3 * m_a * ops[cat] * launch
        if template[cat] <= 0 or work[cat] <= 0:
            sys.exit("no %s work in the profile or the template" % cat)
    # The template prices every op at the whole batch (rows = tokens).
    spec["matmul_efficiency"] = round(
        base["matmul_efficiency"] * template["matmul"] * rows_curve(a.tokens)
        / (rows_curve(rows_a) * work["matmul"]), 4)
    spec["attention_efficiency"] = round(
        base["attention_efficiency"] * template["attention"] / work["attention"], 4)
    # The memory-bound ops' analytic bytes overcount what the kernels move;
    # past the full bandwidth the per-op overhead takes the rest.
    spec["memory_efficiency"] = round(min(
        base["memory_efficiency"] * template["other"] / work["other"], 1.0), 4)
    # The fused LM head and loss: one op forward, one backward, measured.
    timings = []
    for op, entry in sorted(lce_keys.items()):
        kernel = ("linearCrossEntropyBackward" if "_grad" in op.split(" ")[0]
                  else "linearCrossEntropy")
        if kernel in lce:
            timings.append({"op": op, "seconds": lce[kernel] * scale / 1e3 / entry["count"]})
    if timings:
        spec["op_timings"] = timings
    calibration = {
        "measured_ms_per_step": {k: round(v, 1) for k, v in sorted(measured.items())},
        "work_ms_per_step": {k: round(v, 1) for k, v in sorted(work.items())},
        "model_ms_per_step_before": {k: round(v, 1) for k, v in sorted(template.items())},
        "profile": a.profile, "template": a.template, "trace": a.trace,
        "other_trace": a.other_trace,
    }
    json.dump(spec, open(a.out, "w"), indent=2)
    with open(a.out, "a") as f:
        f.write("\n")
    json.dump(calibration, sys.stdout, indent=2)
    print("\nwrote", a.out)


if __name__ == "__main__":
    main()
