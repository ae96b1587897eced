"""Overlap read from fsdpp's own timeline traces (docs/observability.md#timeline-traces).

make bench's scaling table estimates overlap from outside (T_compute and T_comm measured in
separate runs). A traced run says it directly: per profiled step, how long the step took, how
long each process group's collectives ran (their comm track), and how long the main thread sat
in Work::wait (the `wait ...` events), i.e. the communication the step could not hide.
"""
import collections
import json
import os
import statistics


def read(trace_dir):
    """Per rank and profiled step: step_ms, comm_ms (collectives ran, all groups), exposed_ms
    (blocked in Work::wait), exposed by phase, and exposed per collective (wait event name)."""
    files = sorted(f for f in os.listdir(trace_dir) if f.startswith("rank") and f.endswith(".trace.json"))
    if not files:
        raise SystemExit(f"[bench] {trace_dir} holds no rank<R>.trace.json: the traced run wrote no trace")
    steps = []
    for f in files:
        with open(os.path.join(trace_dir, f)) as fh:
            events = json.load(fh)["traceEvents"]
        tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
        xs = [e for e in events if e.get("ph") == "X"]
        # What the main thread was doing when it waited: the outermost event around the wait
        # (fsdpp-train's phases, or in a program without them the root unit's "forward (root)"),
        # by its first word; a wait outside all of them comes after backward (the last
        # reduce-scatters, waited on in the end-of-backward callback) or before forward.
        spans = [e for e in xs if tracks.get(e["tid"]) == "main" and not e["name"].startswith(("step ", "wait "))]

        def phase_of(w, step_began):
            around = [p for p in spans if p["ts"] <= w["ts"] < p["ts"] + p["dur"]]
            if around:
                return max(around, key=lambda p: p["dur"])["name"].split()[0]
            ended = any(p["name"].startswith("backward") and step_began <= p["ts"] and p["ts"] + p["dur"] <= w["ts"]
                        for p in spans)
            return "after backward" if ended else "before forward"
        for st in (e for e in xs if e["name"].startswith("step ")):
            b, end = st["ts"], st["ts"] + st["dur"]
            inside = [e for e in xs if b <= e["ts"] < end]
            comm = sum(e["dur"] for e in inside if tracks.get(e["tid"], "").startswith("comm "))
            by_phase, by_item = collections.Counter(), collections.Counter()
            for w in (e for e in inside if tracks.get(e["tid"]) == "main" and e["name"].startswith("wait ")):
                phase = phase_of(w, b)
                by_phase[phase] += w["dur"] / 1e3
                by_item[f"{phase}: {w['name'][5:]}"] += w["dur"] / 1e3
            steps.append({"rank": st["pid"], "step": st["name"], "step_ms": st["dur"] / 1e3,
                          "comm_ms": comm / 1e3, "exposed_ms": sum(by_phase.values()),
                          "exposed_by_phase": dict(by_phase), "exposed_by_item": dict(by_item)})
    return steps


def summarize(steps):
    """Medians over every rank's profiled steps, and the collectives that waited longest (mean
    per step over ranks and steps)."""
    if not steps:
        raise SystemExit("[bench] the traced run recorded no step")
    med = lambda k: statistics.median(s[k] for s in steps)  # noqa: E731
    items, phases = collections.Counter(), collections.Counter()
    for s in steps:
        items.update(s["exposed_by_item"])
        phases.update(s["exposed_by_phase"])
    step_ms, comm_ms, exposed_ms = med("step_ms"), med("comm_ms"), med("exposed_ms")
    return {
        "steps": len(steps), "step_ms": step_ms, "comm_ms": comm_ms, "exposed_ms": exposed_ms,
        # The share of the collectives' time that compute hid, and the share of the step the
        # main thread was not blocked on communication.
        "hidden": 1 - exposed_ms / comm_ms if comm_ms > 0 else float("nan"),
        "not_waiting": 1 - exposed_ms / step_ms if step_ms > 0 else float("nan"),
        "exposed_by_phase": {k: v / len(steps) for k, v in phases.most_common()},
        "top_exposed": [(k, v / len(steps)) for k, v in items.most_common(3)],
    }
