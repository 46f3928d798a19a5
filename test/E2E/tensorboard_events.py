#!/usr/bin/env python3
"""Reads a --tensorboard directory without TensorBoard: the TFRecord frames
(both masked CRC32Cs checked) and the few tensorflow.Event fields the
trainer writes, decoded by hand; merges the files as TensorBoard does (in
name order; a SessionLog START at step S drops the steps >= S read before
it), requires one value per step and tag after that, and checks the scalars
against the --log-json of the same runs: every
step's loss, learning rate, gradient norm and tok/s equal to the log's
values as float32, memory positive and at most its peak, evaluations
likewise. Prints a summary for FileCheck; exits 1 on any mismatch.

  tensorboard_events.py DIR LOG.json
"""
import json
import math
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise ValueError("%s: a record header cut short at byte %d" % (path, pos))
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if masked(header) != length_crc:
            raise ValueError("%s: bad length CRC at byte %d" % (path, pos))
        data = blob[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if len(data) != length or masked(data) != data_crc:
            raise ValueError("%s: bad data CRC at byte %d" % (path, pos))
        yield data
        pos += 16 + length


def varint(data, pos):
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(data):
    """(field number, wire type, value) of a protobuf message."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError("wire type %d" % wire)
        yield number, wire, value


def event(data):
    """Event{wall_time=1, step=2, file_version=3, summary=5, session_log=7}."""
    e = {"step": 0, "scalars": {}}
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            e["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            e["step"] = value - (1 << 64) if value >> 63 else value
        elif number == 3 and wire == 2:
            e["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            for n, w, v in fields(value):  # Summary.value
                assert n == 1 and w == 2
                tag, simple = None, None
                for vn, vw, vv in fields(v):  # Summary.Value{tag=1, simple_value=2}
                    if vn == 1 and vw == 2:
                        tag = vv.decode()
                    elif vn == 2 and vw == 5:
                        simple = struct.unpack("<f", vv)[0]
                e["scalars"][tag] = simple
        elif number == 7 and wire == 2:
            e["session_log"] = dict((n, v) for n, _, v in fields(value))
    return e


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    directory, log = sys.argv[1:3]
    # The CRC's check value (RFC 3720), so that this reader cannot share a
    # mistake with the writer.
    assert crc32c(b"123456789") == 0xE3069283
    names = sorted(n for n in os.listdir(directory) if "tfevents" in n)
    scalars = {}  # step -> {tag: value}, merged as TensorBoard merges
    starts = []
    for name in names:
        evs = [event(r) for r in records(os.path.join(directory, name))]
        if evs[0].get("file_version") != "brain.Event:2":
            print("%s: the first record is not file_version brain.Event:2" % name)
            return 1
        for e in evs[1:]:
            if "session_log" in e and e["session_log"].get(1) == 1:  # START
                starts.append(e["step"])
                for s in [s for s in scalars if s >= e["step"]]:
                    del scalars[s]
            for tag, value in e["scalars"].items():
                scalars.setdefault(e["step"], {}).setdefault(tag, []).append(value)
    steps, evals = {}, {}
    for line in open(log):
        r = json.loads(line)
        if "step" in r:
            steps[r["step"] + 1] = r
        else:
            evals[r["eval_step"]] = r
    bad = []
    # A step recorded twice (a resumed run's without a START purging the
    # interrupted run's) would show as two points in TensorBoard.
    for step, tags in sorted(scalars.items()):
        for tag, values in tags.items():
            if len(values) != 1:
                bad.append("step %d %s: %d values %r" % (step, tag, len(values), values))
            tags[tag] = values[-1]
    for step, r in sorted(steps.items()):
        got = scalars.get(step, {})
        want = {"train/loss": r["loss"], "train/learning_rate": r["lr"],
                "train/grad_norm": r["grad_norm"],
                "train/tokens_per_second":
                    r["tokens"] / r["seconds"] if r["seconds"] > 0 else 0.0}
        for tag, value in want.items():
            if got.get(tag) != f32(value):
                bad.append("step %d %s: %r in the events, %r in the log" %
                           (step, tag, got.get(tag), value))
        rss, peak = got.get("memory/host_rss_gb"), got.get("memory/host_peak_gb")
        if not (rss and peak and 0 < rss <= peak * 1.0001):
            bad.append("step %d memory: rss %r, peak %r" % (step, rss, peak))
    for step, r in sorted(evals.items()):
        got = scalars.get(step, {})
        if got.get("eval/loss") != f32(r["eval_loss"]) or \
                got.get("eval/perplexity") != f32(math.exp(r["eval_loss"])):
            bad.append("eval at step %d: %r in the events, %r in the log" %
                       (step, got, r))
    logged = set(steps) | set(evals)
    extra = sorted(s for s in scalars if s not in logged)
    if extra:
        bad.append("steps in the events but not in the log: %r" % extra)
    for line in bad[:10]:
        print(line)
    if bad:
        return 1
    print("%d event file%s, START at steps %s, CRCs valid" %
          (len(names), "" if len(names) == 1 else "s",
           ", ".join(map(str, starts))))
    print("steps %d to %d: loss, learning rate, grad norm and tok/s equal to "
          "the JSON log; memory positive" % (min(steps), max(steps)))
    if evals:
        print("evaluations at steps %s equal to the JSON log" %
              ", ".join(map(str, sorted(evals))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
