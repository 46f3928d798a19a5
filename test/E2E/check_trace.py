#!/usr/bin/env python3
"""Checks a trainer's --trace against the schedule it claims to run.

  check_trace.py TRACE.json [--min-stages K] [--overlap] [--stale]

Reads the plan from the trace's otherData and checks, for every training
step in the trace:
  - every op of job n of step s ran on worker (c0 + s*K + n) mod N;
  - each stage-job uploaded its parameters exactly once: its param_upload
    chunks add up to the stage's parameter image;
  - each stage-job that produces gradients downloaded them exactly once.
With --overlap: some optimizer task ran while a launch of another stage-job
was running (the optimizer hidden behind compute). With --stale (one-step-
stale updates): the update of step s starts after every parameter upload of
step s+1 has ended (they read the weights before it) and ends before the
first parameter upload of step s+2 starts (they read the weights after it).
Exits non-zero naming the first violation.
"""
import collections
import json
import sys


def main():
    path = sys.argv[1]
    min_stages = 0
    if "--min-stages" in sys.argv:
        min_stages = int(sys.argv[sys.argv.index("--min-stages") + 1])
    trace = json.load(open(path))
    plan = trace["otherData"]
    n_workers, c0, k = plan["workers"], plan["firstWorker"], plan["numJobs"]
    stages = [plan["stages"][s] for s in plan["jobStages"]]
    if k < min_stages:
        print("plan %s has %d stage-jobs, fewer than %d" % (plan["program"], k, min_stages))
        return 1
    worker_pid = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            name = e["args"]["name"]
            if name.startswith("worker "):
                worker_pid[e["pid"]] = int(name.split()[1])
    ops = [e for e in trace["traceEvents"]
           if e.get("ph") == "X" and not e["args"].get("eval")]
    uploads = collections.defaultdict(int)
    downloads = collections.defaultdict(list)
    steps = set()
    for e in ops:
        a = e["args"]
        if a["job"] < 0:
            continue
        steps.add(a["step"])
        want = (c0 + a["step"] * k + a["job"]) % n_workers
        got = worker_pid.get(e["pid"])
        if got != want:
            print("step %d job %d (%s) ran %s on worker %s, not (%d + %d*%d + %d) mod %d = %d"
                  % (a["step"], a["job"], a["stage"], e["name"], got, c0, a["step"], k,
                     a["job"], n_workers, want))
            return 1
        if a["kind"] == "param_upload":
            uploads[(a["step"], a["job"])] += a["bytes"]
        if a["kind"] == "grad_download":
            downloads[(a["step"], a["job"])].append(a["bytes"])
    jobs = 0
    for s in sorted(steps):
        for n, stage in enumerate(stages):
            jobs += 1
            if uploads[(s, n)] != stage["paramBytes"]:
                print("step %d job %d (%s): uploaded %d parameter bytes, its image has %d"
                      % (s, n, stage["name"], uploads[(s, n)], stage["paramBytes"]))
                return 1
            want = [stage["gradBytes"]] if stage["gradBytes"] else []
            if downloads[(s, n)] != want:
                print("step %d job %d (%s): gradient downloads %s, expected %s"
                      % (s, n, stage["name"], downloads[(s, n)], want))
                return 1
    print("%d steps x %d stage-jobs on %d workers: job n of step s ran on worker "
          "(%d + s*%d + n) mod %d" % (len(steps), k, n_workers, c0, k, n_workers))
    print("%d stage-jobs: parameters uploaded once each, gradients downloaded once each" % jobs)
    if "--overlap" in sys.argv:
        launches = [e for e in ops if e["args"]["kind"] == "launch"]
        hidden = 0
        for o in ops:
            if o["args"]["kind"] != "optimizer":
                continue
            t0, t1 = o["ts"], o["ts"] + o["dur"]
            if any(l["ts"] < t1 and t0 < l["ts"] + l["dur"]
                   and l["args"]["stage"] != o["args"]["stage"] for l in launches):
                hidden += 1
        if not hidden:
            print("no optimizer task overlapped a launch")
            return 1
        print("optimizer tasks overlapping compute of other stage-jobs: yes")
    if "--stale" in sys.argv:
        updates = {e["args"]["step"]: e for e in ops if e["args"]["kind"] == "optimizer"}
        ups = collections.defaultdict(list)
        for e in ops:
            if e["args"]["kind"] == "param_upload":
                ups[e["args"]["step"]].append(e)
        checked = 0
        for s, o in sorted(updates.items()):
            if s + 1 in ups:
                last = max(u["ts"] + u["dur"] for u in ups[s + 1])
                if o["ts"] < last:
                    print("the update of step %d started at %d us, before step %d's "
                          "parameter uploads ended (%d us)" % (s, o["ts"], s + 1, last))
                    return 1
                checked += 1
            if s + 2 in ups:
                first = min(u["ts"] for u in ups[s + 2])
                if first < o["ts"] + o["dur"]:
                    print("step %d's parameter uploads started at %d us, before the "
                          "update of step %d ended (%d us)" % (s + 2, first, s, o["ts"] + o["dur"]))
                    return 1
        if not checked:
            print("no update with a following step in the trace")
            return 1
        print("%d updates ran after the next step's uploads and before the one after" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
