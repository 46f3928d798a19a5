#!/usr/bin/env python3
"""Runs every input in a corpus directory through the normal importer and
checks that it fails cleanly: exit status 1, an `error:` diagnostic on
stderr, and no crash, abort, sanitizer report or hang.

usage: run_crashers.py TOOL CORPUS_DIR [extra tool arguments...]
TOOL is rondo-translate (run with --import-onnx) or rondo-compile (--emit=tg).
"""
import os
import subprocess
import sys

tool, corpus, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
files = sorted(f for f in os.listdir(corpus) if not f.startswith("."))
if not files:
    sys.exit("no inputs in %s" % corpus)
mode = ["--emit=tg"] if os.path.basename(tool).startswith("rondo-compile") else ["--import-onnx"]
bad = 0
for name in files:
    path = os.path.join(corpus, name)
    cmd = [tool] + mode + [path, "--batch", "2", "--seq-len", "3", "-o", os.devnull] + extra
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=60)
    except subprocess.TimeoutExpired:
        print("FAIL %s: timed out" % name)
        bad += 1
        continue
    err = p.stderr
    crashed = any(s in err for s in ("Stack dump", "PLEASE submit", "Assertion", "Sanitizer", "LLVM ERROR", "terminate called"))
    if p.returncode != 1 or "error:" not in err or crashed:
        print("FAIL %s: exit status %d\n%s" % (name, p.returncode, err[-2000:]))
        bad += 1
    else:
        print("ok %s: %s" % (name, err.strip().splitlines()[0][:200]))
print("%d of %d inputs failed cleanly" % (len(files) - bad, len(files)))
sys.exit(1 if bad else 0)
