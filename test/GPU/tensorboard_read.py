#!/usr/bin/env python3
"""Reads a trainer's --tensorboard directory with TensorBoard's own reader
(the `tensorboard` package, on the GPU machines) and prints every scalar
tag with its count and step range. Exits 1 when a tag the trainer writes
is missing, a tag's steps are not one point per step from 1 on without a
gap, or (given the run's --log-json) a value differs from the log's.

  python3 test/GPU/tensorboard_read.py DIR [LOG.json]

CI checks the same files with a reader of its own
(test/E2E/tensorboard_events.py); this one checks that TensorBoard agrees.
"""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

REQUIRED = ["train/loss", "train/learning_rate", "train/grad_norm",
            "train/tokens_per_second", "memory/host_rss_gb",
            "memory/host_peak_gb"]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    directory = sys.argv[1]
    log = sys.argv[2] if len(sys.argv) > 2 else None
    # size_guidance 0: every point, not TensorBoard's default sample.
    acc = EventAccumulator(directory, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    problems = []
    for tag in sorted(tags):
        points = acc.Scalars(tag)
        steps = [p.step for p in points]
        print("%-28s %4d points, steps %d to %d" %
              (tag, len(points), min(steps), max(steps)))
        if tag in REQUIRED and steps != list(range(1, len(steps) + 1)):
            problems.append("%s: steps %r are not 1 to %d" % (tag, steps, len(steps)))
    for tag in REQUIRED:
        if tag not in tags:
            problems.append("%s: missing" % tag)
    if log and not problems:
        values = {tag: {p.step: p.value for p in acc.Scalars(tag)} for tag in tags}
        records = [json.loads(line) for line in open(log)]
        for r in records:
            if "step" not in r:
                continue
            step = r["step"] + 1
            want = {"train/loss": r["loss"], "train/learning_rate": r["lr"],
                    "train/grad_norm": r["grad_norm"]}
            for tag, value in want.items():
                got = values[tag].get(step)
                if got is None or f32(got) != f32(value):
                    problems.append("step %d %s: %r in TensorBoard, %r in %s" %
                                    (step, tag, got, value, log))
        print("%d steps of %s compared" % (sum("step" in r for r in records), log))
    for p in problems[:20]:
        print("problem: " + p)
    print("tensorboard_read: %s" % ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
