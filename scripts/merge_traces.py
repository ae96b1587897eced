#!/usr/bin/env python3
"""Merge the per-rank Chrome traces that fsdpp writes (rank<R>.trace.json) into one timeline.

    python3 scripts/merge_traces.py runs/default/traces              # -> runs/default/traces/merged.trace.json
    python3 scripts/merge_traces.py a/rank0.trace.json a/rank1.trace.json -o all.json
    python3 scripts/merge_traces.py runs/default/traces --summary    # + exposed communication per step

Each rank's events keep their pid (the rank), so Perfetto and chrome://tracing show one process
per rank, one above the other. Ranks of one host share the steady clock their timestamps use;
files from several hosts are shifted onto the Unix clock each file records
(otherData.unix_minus_steady_us), which is as good as the hosts' clock synchronisation.
Standard library only: runs with any Python 3.
"""
import argparse
import collections
import json
import os
import sys


def load(path):
    with open(path) as f:
        try:
            trace = json.load(f)
        except ValueError as e:  # a file cut short by a killed run
            sys.exit(f"[trace] {path} is not JSON: {e}")
    if not isinstance(trace, dict) or "traceEvents" not in trace:
        sys.exit(f"[trace] {path} is not a Chrome trace (no traceEvents)")
    return trace


def collect(inputs):
    """The files that inputs name (rank<R>.trace.json files, directories of them, or a merged
    file), their ranks and hosts, and all their events, on one clock."""
    paths = []
    for p in inputs:
        if os.path.isdir(p):
            found = sorted(f for f in os.listdir(p) if f.startswith("rank") and f.endswith(".trace.json"))
            if not found:
                sys.exit(f"[trace] {p} holds no rank<R>.trace.json files")
            paths += [os.path.join(p, f) for f in found]
        elif os.path.isfile(p):
            paths.append(p)
        else:
            sys.exit(f"[trace] {p} does not exist (a run writes <output_dir>/traces after its last profiled step)")
    traces = [load(p) for p in paths]
    ranks = [t.get("otherData", {}).get("rank") for t in traces]
    if len(set(ranks)) != len(ranks):
        sys.exit(f"[trace] two files hold the same rank: {dict(zip(paths, ranks))}")
    hosts = {t.get("otherData", {}).get("host") for t in traces}
    events = []
    for t in traces:
        shift = 0
        if len(hosts) > 1:
            shift = t.get("otherData", {}).get("unix_minus_steady_us", 0)
        for e in t["traceEvents"]:
            if shift and "ts" in e:
                e = dict(e, ts=e["ts"] + shift)
            events.append(e)
    return paths, ranks, hosts, events


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="rank<R>.trace.json files, or a directory of them")
    ap.add_argument("-o", "--output", help="the merged file (default: merged.trace.json beside the inputs)")
    ap.add_argument("--summary", action="store_true",
                    help="print, per rank and profiled step, the step time, the time the main "
                         "track blocked in Work::wait (exposed communication) per unit, and the "
                         "time each group's collectives ran")
    args = ap.parse_args()
    paths, ranks, hosts, events = collect(args.inputs)
    out = args.output or os.path.join(os.path.dirname(paths[0]) or ".", "merged.trace.json")
    merged = {
        "displayTimeUnit": "ms",
        "otherData": {"ranks": sorted(r for r in ranks if r is not None), "hosts": sorted(h for h in hosts if h),
                      "clock": "unix" if len(hosts) > 1 else "steady"},
        "traceEvents": events,
    }
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(merged, f)
    os.replace(tmp, out)
    print(f"[trace] merged {len(paths)} ranks ({len(events)} events) into {out}")
    if args.summary:
        summarize(events)


# loss_tokens: the all-reduce of the global batch's loss-bearing tokens, between data and forward.
PHASES = ("data", "loss_tokens", "forward", "backward", "clip_grad_norm", "optimizer")


def step_waits(events):
    """Per rank and profiled step, in rank and time order: the step event, how long its phases
    took, how long each group's collectives ran (their comm track), and the time the main track
    blocked in Work::wait (the exposed communication) by phase and by (phase, collective).

    A wait's phase is the outermost event around it on the main track: fsdpp-train's phases, or
    in a program without them the root unit's `forward (root)` / `backward (root)`, by its first
    word. A wait outside all of them comes after backward (the last reduce-scatters, waited on in
    the end-of-backward callback) or before forward."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    xs = [e for e in events if e["ph"] == "X"]
    out = []
    for st in sorted((e for e in xs if e["name"].startswith("step ")), key=lambda e: (e["pid"], e["ts"])):
        pid, b, end = st["pid"], st["ts"], st["ts"] + st["dur"]
        inside = [e for e in xs if e["pid"] == pid and b <= e["ts"] < end]
        main = [e for e in inside if names.get((pid, e["tid"])) == "main"]
        spans = [e for e in main if not e["name"].startswith(("step ", "wait "))]
        took, comm = collections.Counter(), collections.Counter()
        for e in spans:
            if e["name"] in PHASES:
                took[e["name"]] += e["dur"]
        for e in inside:
            track = names.get((pid, e["tid"]), "")
            if track.startswith("comm "):
                comm[track[5:]] += e["dur"]
        by_phase, by_item = collections.Counter(), collections.Counter()
        for w in (e for e in main if e["name"].startswith("wait ")):
            around = [p for p in spans if p["ts"] <= w["ts"] < p["ts"] + p["dur"]]
            if around:
                phase = max(around, key=lambda p: p["dur"])["name"].split()[0]
            elif any(p["name"].startswith("backward") and p["ts"] + p["dur"] <= w["ts"] for p in spans):
                phase = "after backward"
            else:
                phase = "before forward"
            by_phase[phase] += w["dur"]
            by_item[(phase, w["name"][5:])] += w["dur"]
        out.append({"step": st, "took": took, "comm": comm, "exposed_by_phase": by_phase,
                    "exposed_by_item": by_item})
    return out


def summarize(events):
    """Per rank and profiled step: the step, its phases, the time the main track blocked in
    Work::wait (the exposed communication) by phase, and how long each group's collectives ran;
    then, per rank, the mean exposed time per unit and phase over the profiled steps."""
    per_unit = collections.defaultdict(collections.Counter)  # pid -> (phase, unit)
    nsteps = collections.Counter()
    for s in step_waits(events):
        st, took, exposed = s["step"], s["took"], s["exposed_by_phase"]
        nsteps[st["pid"]] += 1
        per_unit[st["pid"]].update(s["exposed_by_item"])
        print(f"rank {st['pid']} {st['name']}: {st['dur'] / 1000:.1f} ms ("
              + ", ".join(f"{k} {took[k] / 1000:.1f}" for k in PHASES if k in took)
              + f"); exposed communication {sum(exposed.values()) / 1000:.1f} ms ("
              + ", ".join(f"{k} {v / 1000:.1f}" for k, v in exposed.items())
              + "); collectives ran " + ", ".join(f"{g} {v / 1000:.1f} ms" for g, v in s["comm"].items()))
    for pid, waits in sorted(per_unit.items()):
        print(f"rank {pid}: mean exposed communication per step over {nsteps[pid]} steps, by phase and collective:")
        for (phase, what), v in sorted(waits.items(), key=lambda kv: -kv[1]):
            if v / nsteps[pid] >= 50:
                print(f"    {phase:<15} {what:<34} {v / nsteps[pid] / 1000:7.2f} ms")


if __name__ == "__main__":
    main()
