"""Checks fsdpp-train's timeline traces (docs/observability.md#timeline-traces).

    trace_check.py OUTPUT_DIR RANKS STEP [STEP...]

For each rank's traces/rank<R>.trace.json: the JSON loads as a Chrome trace; every track's
complete events nest or are disjoint; each profiled step has its event, whose duration is
within 3% (or 2 ms) of metrics.jsonl's step_ms, whose phases (data, loss_tokens, forward, backward,
clipping, optimizer) cover it, and in which every collective that the counters saw (the calls per kind
the trainer put on the step's event) has its event on a comm track, with the same bytes; every
unit ran forward and backward; every wait lies on the main track. Also
traces/merged.trace.json (scripts/merge_traces.py) holds both ranks' events.
"""
import collections
import json
import os
import sys

out, nranks, steps = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)


metrics = {}
with open(os.path.join(out, "metrics.jsonl")) as f:
    for line in f:
        if line.strip():
            j = json.loads(line)
            metrics[j["step"]] = j

for rank in range(nranks):
    path = os.path.join(out, "traces", f"rank{rank}.trace.json")
    with open(path) as f:
        trace = json.load(f)
    check(trace.get("displayTimeUnit") == "ms", f"{path}: displayTimeUnit")
    events = trace["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    check(len(procs) == 1 and procs[0]["args"]["name"] == f"rank {rank}", f"{path}: process name")
    xs = [e for e in events if e["ph"] == "X"]
    for e in xs:
        check(e["pid"] == rank and e["tid"] in names and e["dur"] >= 0 and isinstance(e["ts"], int),
              f"{path}: bad event {e}")
    main = [tid for tid, n in names.items() if n == "main"]
    check(len(main) == 1, f"{path}: one main track, got {names}")
    main = main[0] if main else None

    # Nesting: on each track, an event that starts inside another ends inside it.
    by_track = collections.defaultdict(list)
    for e in xs:
        by_track[e["tid"]].append(e)
    for tid, evs in by_track.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                outer = stack[-1]
                check(e["ts"] + e["dur"] <= outer["ts"] + outer["dur"],
                      f"rank {rank} track '{names.get(tid)}': '{e['name']}' [{e['ts']}, +{e['dur']}] "
                      f"overlaps '{outer['name']}' [{outer['ts']}, +{outer['dur']}] partially")
            stack.append(e)

    comm = [e for e in xs if names.get(e["tid"], "").startswith("comm ")]
    for s in steps:
        ev = [e for e in xs if e["name"] == f"step {s}" and e["tid"] == main]
        check(len(ev) == 1, f"rank {rank}: {len(ev)} events for step {s}")
        if not ev:
            continue
        st = ev[0]
        begin, end = st["ts"], st["ts"] + st["dur"]
        if rank == 0:
            ms = metrics[s]["step_ms"]
            check(abs(st["dur"] / 1000 - ms) <= max(0.03 * ms, 2.0),
                  f"step {s}: traced {st['dur'] / 1000:.2f} ms, metrics.jsonl step_ms {ms:.2f}")
        phases = [e for e in xs if e["tid"] == main and e["name"] in
                  ("data", "loss_tokens", "forward", "backward", "clip_grad_norm", "optimizer")
                  and begin <= e["ts"] and e["ts"] + e["dur"] <= end]
        covered = sum(e["dur"] for e in phases)
        check({e["name"] for e in phases} ==
              {"data", "loss_tokens", "forward", "backward", "clip_grad_norm", "optimizer"},
              f"rank {rank} step {s}: phases {sorted({e['name'] for e in phases})}")
        check(covered >= 0.97 * st["dur"] - 1000,
              f"rank {rank} step {s}: phases cover {covered} of {st['dur']} us")
        # Every collective the counters saw in the step is in the trace, with its bytes.
        inside = [e for e in comm if begin <= e["ts"] <= end]
        calls = collections.Counter(e["args"]["kind"] for e in inside)
        nbytes = collections.Counter()
        for e in inside:
            nbytes[e["args"]["kind"]] += e["args"]["bytes_sent"]
        want_calls = {k[len("calls_"):]: v for k, v in st["args"].items() if k.startswith("calls_")}
        want_bytes = {k[len("bytes_"):]: v for k, v in st["args"].items() if k.startswith("bytes_")}
        check(want_calls.get("all_gather", 0) > 0 and want_calls.get("reduce_scatter", 0) > 0,
              f"rank {rank} step {s}: the counters saw no FSDP collectives: {st['args']}")
        check(dict(calls) == want_calls, f"rank {rank} step {s}: traced collectives {dict(calls)}, "
              f"counted {want_calls}")
        check(dict(nbytes) == {k: v for k, v in want_bytes.items() if k in want_calls},
              f"rank {rank} step {s}: traced bytes {dict(nbytes)}, counted {want_bytes}")
        # Forward and backward of every unit (FULL_SHARD: one all-gather per unit in forward).
        units_f = {e["args"]["unit"] for e in xs if e["name"].startswith("forward ") and begin <= e["ts"] <= end}
        units_b = {e["args"]["unit"] for e in xs if e["name"].startswith("backward ") and begin <= e["ts"] <= end}
        check(len(units_f) >= 2 and units_f == units_b,
              f"rank {rank} step {s}: units forward {sorted(units_f)}, backward {sorted(units_b)}")
        # FULL_SHARD: one reduce-scatter per unit, one all-gather per unit in forward and one
        # in backward for each unit not kept gathered from its forward.
        check(want_calls.get("reduce_scatter") == len(units_f) and
              len(units_f) <= want_calls.get("all_gather", 0) <= 2 * len(units_f),
              f"rank {rank} step {s}: {len(units_f)} units but {want_calls}")
        waits = [e for e in xs if e["name"].startswith("wait ") and begin <= e["ts"] <= end]
        check(waits and all(e["tid"] == main for e in waits), f"rank {rank} step {s}: waits")
        check(all(begin <= e["ts"] and e["ts"] + e["dur"] <= end for e in inside),
              f"rank {rank} step {s}: a collective runs past the step's end")

merged_path = os.path.join(out, "traces", "merged.trace.json")
with open(merged_path) as f:
    merged = json.load(f)
pids = {e["pid"] for e in merged["traceEvents"]}
check(pids == set(range(nranks)), f"merged trace pids {pids}")
check(sum(1 for e in merged["traceEvents"] if e["ph"] == "X") ==
      sum(sum(1 for e in json.load(open(os.path.join(out, "traces", f"rank{r}.trace.json")))["traceEvents"]
              if e["ph"] == "X") for r in range(nranks)), "merged trace lost events")

if fails:
    print("\n".join("FAIL: " + f for f in fails))
    sys.exit(1)
print(f"trace ok: {nranks} ranks, steps {steps}")
