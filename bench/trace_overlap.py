"""Overlap read from fsdpp's own timeline traces (docs/observability.md#timeline-traces).

make bench's scaling table estimates overlap from outside (T_compute and T_comm measured in
separate runs). A traced run says it directly: per profiled step, how long the step took, how
long each process group's collectives ran (their comm track), and how long the main thread sat
in Work::wait (the `wait ...` events), i.e. the communication the step could not hide.
"""
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import merge_traces  # noqa: E402


def read(trace_dir):
    """Per rank and profiled step: step_ms, comm_ms (collectives ran, all groups), exposed_ms
    (blocked in Work::wait), exposed by phase, and exposed per "phase: collective"."""
    _, _, _, events = merge_traces.collect([trace_dir])
    ms = lambda counter: {k: v / 1e3 for k, v in counter.items()}  # noqa: E731
    return [{"rank": s["step"]["pid"], "step": s["step"]["name"], "step_ms": s["step"]["dur"] / 1e3,
             "comm_ms": sum(s["comm"].values()) / 1e3, "exposed_ms": sum(s["exposed_by_phase"].values()) / 1e3,
             "exposed_by_phase": ms(s["exposed_by_phase"]),
             "exposed_by_item": {f"{phase}: {what}": v / 1e3 for (phase, what), v in s["exposed_by_item"].items()}}
            for s in merge_traces.step_waits(events)]


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
