#!/usr/bin/env python3
"""Checks that --log-json files hold bitwise-identical losses.

  same_losses.py LOG1 LOG2 ...

The logs print each loss as the shortest decimal that reads back as the same
double, so equal text is equal bits. Exits non-zero naming the first step and
run that differ.
"""
import json
import sys


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f
                if line.strip() and "loss" in json.loads(line)
                and "eval" not in json.loads(line)]


def main():
    runs = [losses(p) for p in sys.argv[1:]]
    first = runs[0]
    for path, run in zip(sys.argv[2:], runs[1:]):
        if len(run) != len(first):
            print("%s: %d steps, %s has %d" % (path, len(run), sys.argv[1], len(first)))
            return 1
        for step, (a, b) in enumerate(zip(first, run)):
            if repr(a) != repr(b):
                print("step %d: %s has loss %r, %s has %r" % (step, sys.argv[1], a, path, b))
                return 1
    print("%d runs, %d steps each: bitwise-identical losses" % (len(runs), len(first)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
