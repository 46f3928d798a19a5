#!/usr/bin/env python3
"""Checks the losses of a one-step-stale run against the synchronous run.

  stale_losses.py SYNC.log STALE.log

Both runs train on the same batch every step. Step s+1 of the stale run
runs on the weights before step s's update, so its first two losses are
the initial weights' (the synchronous step 0), its third is the loss after
one update (the synchronous step 1), and from the fourth on the update it
runs on was computed from a gradient one step old: the losses differ from
the synchronous ones and still decrease. Equal means bitwise equal (the
logs print the shortest decimal that reads back as the same double).
"""
import sys

from same_losses import losses


def main():
    sync, stale = losses(sys.argv[1]), losses(sys.argv[2])
    if len(stale) < 5 or len(sync) < len(stale):
        print("need at least 5 stale steps and as many synchronous ones")
        return 1
    expect = [(0, 0), (1, 0), (2, 1)]
    for s, k in expect:
        if repr(stale[s]) != repr(sync[k]):
            print("stale step %d: loss %r, expected the synchronous step %d's %r"
                  % (s, stale[s], k, sync[k]))
            return 1
    for s in range(3, len(stale)):
        if repr(stale[s]) == repr(sync[s]):
            print("stale step %d: loss %r equals the synchronous one: no delay" % (s, stale[s]))
            return 1
        if not stale[s] < stale[s - 1]:
            print("stale step %d: loss %r does not decrease (step %d: %r)"
                  % (s, stale[s], s - 1, stale[s - 1]))
            return 1
    print("stale steps 0-2 equal synchronous steps 0, 0, 1; steps 3-%d are one "
          "update behind and decrease" % (len(stale) - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
