#!/usr/bin/env python3
"""Checks a trace that KILN_PROFILE wrote (debug/profiler.hpp) against the Chrome trace event
format and against itself, for the Fashion-MNIST example's profile (examples/CMakeLists.txt):

    check_trace.py trace.json

- a JSON object with a "traceEvents" array; every event an object with a string "name", "ph"
  "X" (complete: numeric "ts" and "dur" >= 0, integer "pid" and "tid", "cat" plan or kernel,
  "args" with the plan "call") or "M" (metadata);
- every kernel row of a plan call inside that call's span, on its thread;
- the rows of the training step (the plan with the most time) sum to its calls' time within 5%;
- waiting for data (the loader's "(waiting for data)" rows) is at most 1% of the steps' time.
Prints the figures; exit status 0 when all hold.
"""
import collections
import json
import sys


def main():
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    bad = []
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        print("check_trace.py: no traceEvents array")
        return 1
    plans, rows, waits = {}, collections.defaultdict(list), []
    for e in events:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or e.get("ph") not in ("X", "M"):
            bad.append(f"not an event of the format: {e!r:.200}")
            continue
        if e["ph"] == "M":
            continue
        ok = all(isinstance(e.get(k), (int, float)) and e[k] >= 0 for k in ("ts", "dur")) and \
            all(isinstance(e.get(k), int) for k in ("pid", "tid")) and e.get("cat") in ("plan", "kernel") and \
            isinstance(e.get("args"), dict) and isinstance(e["args"].get("call"), int)
        if not ok:
            bad.append(f"a complete event without its fields: {e!r:.200}")
            continue
        call = e["args"]["call"]
        if e["name"] == "(waiting for data)":
            waits.append(e)
        elif e["cat"] == "plan":
            plans[call] = e
        else:
            rows[call].append(e)
    for call, rs in rows.items():
        p = plans.get(call)
        if p is None:
            bad.append(f"kernel rows of call {call}, which has no plan event")
            continue
        for r in rs:
            if r["ts"] < p["ts"] - 1e-3 or r["ts"] + r["dur"] > p["ts"] + p["dur"] + 1e-3 or r["tid"] != p["tid"]:
                bad.append(f"row {r['name']} of call {call} outside its call's span or thread")
                break
    by_plan = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for call, p in plans.items():
        t = by_plan[p["name"]]
        t[0] += p["dur"]
        t[1] += sum(r["dur"] for r in rows.get(call, []))
        t[2] += 1
    step, (plan_us, row_us, calls) = max(by_plan.items(), key=lambda kv: kv[1][0])
    wait_us = sum(w["dur"] for w in waits)
    share = row_us / plan_us if plan_us else 0
    print(f"check_trace.py: {len(events)} events; the step, {step}: {calls} calls, {plan_us / 1e3:.1f} ms, "
          f"its rows {share:.1%} of it; waiting for data {wait_us / 1e3:.2f} ms ({wait_us / plan_us:.2%} of the steps)")
    if share < 0.95 or share > 1.0 + 1e-6:
        bad.append(f"the step's rows are {share:.1%} of its time (not within 5%)")
    if wait_us > 0.01 * plan_us:
        bad.append(f"waiting for data is {wait_us / plan_us:.2%} of the steps' time (more than 1%)")
    for b in bad[:20]:
        print("  FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
