#!/usr/bin/env python3
"""Checks that --emit=cpp makes exactly one runtime call per exec op.

  count_exec_calls.py EXEC.mlir TRAINER.cpp

For every exec.program of the --emit=exec output, counts its ops (copy,
fill_zero, launch, host_task, barrier) by kind, and the rondo_exec_* calls of
the matching `<program>_issue` function in the C++; prints one line per
program and exits non-zero if any count differs.
"""
import re
import sys

KINDS = ["copy", "fill_zero", "launch", "host_task", "barrier"]


def exec_ops(path):
    programs, current = {}, None
    for line in open(path):
        m = re.match(r"\s*exec\.program @(\w+)", line)
        if m:
            current = programs.setdefault(m.group(1), dict.fromkeys(KINDS, 0))
            continue
        m = re.match(r"\s*(?:%\w+ = )?exec\.(\w+)\b", line)
        if current is not None and m and m.group(1) in KINDS:
            current[m.group(1)] += 1
    return programs


def cpp_calls(path):
    functions, current = {}, None
    for line in open(path):
        m = re.match(r"void (\w+)_issue\(rondo_exec \*x\) \{", line)
        if m:
            current = functions.setdefault(m.group(1), dict.fromkeys(KINDS, 0))
            continue
        if line.startswith("}"):
            current = None
        m = re.match(r"\s*rondo_exec_(\w+)\(", line)
        if current is not None and m and m.group(1) in KINDS:
            current[m.group(1)] += 1
    return functions


def main():
    ops, calls = exec_ops(sys.argv[1]), cpp_calls(sys.argv[2])
    status = 0 if ops and set(ops) == set(calls) else 1
    for name in sorted(ops):
        got = calls.get(name, {})
        same = got == ops[name]
        status |= 0 if same else 1
        print("%s: %d exec ops, %d runtime calls%s" % (
            name, sum(ops[name].values()), sum(got.values()),
            "" if same else " MISMATCH %s vs %s" % (ops[name], got)))
    return status


if __name__ == "__main__":
    sys.exit(main())
