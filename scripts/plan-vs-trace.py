#!/usr/bin/python3
"""Sets the plan's predictions beside a measured trace.

Usage: scripts/plan-vs-trace.py TRACE.json

TRACE.json is what a pipelined trainer writes with --trace: Chrome trace
events (one per executed op, args: step, job, stage, microbatch, kind,
bytes, eval) and the plan in "otherData" (program, workers, microbatches,
predictedStepSeconds, jobStages, stages[].predictedJobSeconds).

For every stage-job the measured time is the span from its first op to its
last op (uploads, compute and downloads of that job in that step), averaged
over the steps after the first (the first pays for warm-up; with one step
that step is used). The step time is the span of every op of a step,
host tasks included; the step interval is the time from one step's first op
to the next step's first op, the rate the run trains at (also from the
second step on). Evaluation batches are left out.
"""

import json
import sys
from collections import defaultdict


def fail(message):
    sys.stderr.write("plan-vs-trace: error: %s\n" % message)
    sys.exit(1)


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def ms(seconds):
    return "%.3f" % (seconds * 1e3) if seconds == seconds else "-"


def ratio(measured, predicted):
    if predicted > 0 and measured == measured:
        return "%.2f" % (measured / predicted)
    return "-"


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        sys.stderr.write(__doc__)
        return 2 if len(argv) != 2 else 0
    path = argv[1]
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))
    plan = trace.get("otherData")
    if not isinstance(plan, dict) or "stages" not in plan:
        fail("%s: no plan in otherData; was it written by --trace?" % path)
    workers = plan["workers"]
    stages = plan["stages"]
    job_stages = plan["jobStages"]

    jobs = defaultdict(lambda: [float("inf"), float("-inf")])
    compute = defaultdict(float)
    worker_of = {}
    steps = defaultdict(lambda: [float("inf"), float("-inf")])
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        args = e.get("args", {})
        if args.get("eval"):
            continue
        step = args["step"]
        start = e["ts"] * 1e-6
        end = start + e["dur"] * 1e-6
        span = steps[step]
        span[0] = min(span[0], start)
        span[1] = max(span[1], end)
        job = args.get("job", -1)
        if job < 0 or e["pid"] >= workers:
            continue
        span = jobs[(step, job)]
        span[0] = min(span[0], start)
        span[1] = max(span[1], end)
        worker_of[(step, job)] = e["pid"]
        if args.get("kind") == "launch":
            compute[(step, job)] += e["dur"] * 1e-6
    if not steps:
        fail("%s: the trace has no training ops" % path)
    all_steps = sorted(steps)
    measured_steps = all_steps[1:] if len(all_steps) > 1 else all_steps

    print("plan %s (%s optimizer): %d workers, %d microbatches of %d rows"
          % (plan.get("program", "?"), plan.get("optimizer", "?"), workers,
             plan.get("microbatches", 0), plan.get("rowsPerMicrobatch", 0)))
    print("measured over step%s %s"
          % ("s" if len(measured_steps) > 1 else "",
             ", ".join(str(s) for s in measured_steps)))
    print()
    header = ("job", "stage", "kind", "predicted ms", "measured ms",
              "compute ms", "measured/predicted")
    rows = []
    for job, stage_index in enumerate(job_stages):
        stage = stages[stage_index]
        spans = [jobs[(s, job)][1] - jobs[(s, job)][0]
                 for s in measured_steps if (s, job) in jobs]
        busy = [compute[(s, job)] for s in measured_steps if (s, job) in jobs]
        predicted = stage.get("predictedJobSeconds", 0.0)
        rows.append((str(job), stage["name"], stage.get("kind", "?"),
                     ms(predicted), ms(mean(spans)), ms(mean(busy)),
                     ratio(mean(spans), predicted)))
    step_spans = [steps[s][1] - steps[s][0] for s in measured_steps]
    # From the second step's first op on: the first step pays for warm-up
    # (half a second on one host worker here, which moved the mean of 40
    # steps' intervals by 30%).
    intervals = [steps[b][0] - steps[a][0]
                 for a, b in zip(measured_steps, measured_steps[1:])]
    predicted_step = plan.get("predictedStepSeconds", 0.0)
    rows.append(("step", "", "first to last op", ms(predicted_step),
                 ms(mean(step_spans)), "", ratio(mean(step_spans),
                                                 predicted_step)))
    if intervals:
        rows.append(("step", "", "interval", ms(predicted_step),
                     ms(mean(intervals)), "",
                     ratio(mean(intervals), predicted_step)))
    widths = [max(len(r[i]) for r in rows + [header])
              for i in range(len(header))]
    def line(r):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    print(line(header))
    print(line(tuple("-" * w for w in widths)))
    for r in rows:
        print(line(r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
