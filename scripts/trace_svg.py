#!/usr/bin/env python3
"""Draw one profiled step of fsdpp's Chrome traces (rank<R>.trace.json) as an SVG timeline.

    python3 scripts/trace_svg.py runs/default/traces                       # first step -> runs/default/traces/step11.svg
    python3 scripts/trace_svg.py runs/default/traces --step 11 -o runs/default/step-11.svg
    python3 scripts/trace_svg.py runs/default/traces/merged.trace.json --width 1800

The same events Perfetto shows, laid out as it does: a group of rows per rank, in it the main
track with nested events stacked by depth (step, phases, units, waits) and a row per comm track,
all ranks on one time axis (0 = the earliest start of the step among the ranks). Each event is a
rectangle coloured by kind, with a <title> (name, duration, start, args) that a browser shows on
hover, and its name inside when it fits. For pages and machines without Perfetto; standard
library only, the inputs as scripts/merge_traces.py takes them.
"""
import argparse
import collections
import math
import os
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import merge_traces  # noqa: E402

# kind -> (fill, legend text); the same for every rank.
KINDS = {
    "step": ("#c9ccd1", "step"), "data": ("#9e9e9e", "data"),
    "forward": ("#4e79a7", "forward"), "backward": ("#f28e2b", "backward"),
    "recompute": ("#b07aa1", "recompute"), "wait": ("#e15759", "wait (exposed)"),
    "all_gather": ("#59a14f", "all_gather"), "reduce_scatter": ("#76b7b2", "reduce_scatter"),
    "all_reduce": ("#edc948", "all_reduce"), "clip": ("#ff9da7", "clip_grad_norm"),
    "optimizer": ("#9c755f", "optimizer"), "eval": ("#6b6b8f", "eval / checkpoint"),
    "other": ("#bab0ac", "other"),
}
# Labels that do not fit are shortened so, then cut to their last word, then left out.
SHORT = {"forward": "fwd", "backward": "bwd", "recompute": "rcp", "all_gather": "AG",
         "reduce_scatter": "RS", "all_reduce": "AR"}
ROW, GAP, HEAD, LEFT, RIGHT, TOP = 17, 6, 20, 112, 16, 46
FONT = 10
CHAR = 0.6 * FONT  # width of a character of the sans-serif font, roughly


def kind(name):
    first = name.split(" ", 1)[0]
    if first in ("step", "data", "forward", "backward", "recompute", "wait", "optimizer",
                 "all_gather", "reduce_scatter", "all_reduce"):
        return first
    if first == "loss_tokens":  # the count of the batch's loss tokens, part of getting the data
        return "data"
    if first.startswith("clip"):
        return "clip"
    if first.startswith(("eval", "checkpoint")):
        return "eval"
    return "other"


def text_colour(fill):
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#fff"


def depths(evs):
    """Row within its track of each event: how many events of the track it lies inside."""
    out, stack = {}, []
    for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        out[id(e)] = len(stack)
        stack.append(e)
    return out


def nice_tick(span_ms, want=12):
    raw = max(span_ms / want, 1e-3)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def select(events, step):
    """The step to draw, its event per rank, every rank's events in its window, track names."""
    xs = []
    for e in events:
        if e.get("ph") != "X":
            continue
        if not (isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))
                and isinstance(e.get("name"), str) and "pid" in e and "tid" in e):
            sys.exit(f"[trace] malformed event (needs ts, dur, name, pid, tid): {e}")
        xs.append(e)
    steps = collections.defaultdict(dict)  # step -> pid -> event
    for e in xs:
        if e["name"].startswith("step ") and e["name"][5:].isdigit():
            steps[int(e["name"][5:])][e["pid"]] = e
    ranks = sorted({e["pid"] for e in xs})
    everywhere = sorted(s for s, by in steps.items() if len(by) == len(ranks))
    if not everywhere:
        sys.exit(f"[trace] no step is on every rank (ranks {ranks}, steps {sorted(steps)})")
    if step is None:
        step = everywhere[0]
    elif step not in everywhere:
        sys.exit(f"[trace] step {step} is not in the traces of every rank: they hold steps "
                 + ", ".join(map(str, everywhere)))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    window = {}
    for pid, st in steps[step].items():
        window[pid] = [e for e in xs if e["pid"] == pid and st["ts"] <= e["ts"] <= st["ts"] + st["dur"]]
    return step, steps[step], window, names


def draw(step, by_rank, window, names, width):
    t0 = min(st["ts"] for st in by_rank.values())
    t1 = max(e["ts"] + e["dur"] for evs in window.values() for e in evs)
    plot = width - LEFT - RIGHT
    scale = plot / max(t1 - t0, 1)  # px per µs
    bg, body, y = [], [], TOP
    for pid in sorted(window):
        tracks = collections.defaultdict(list)
        for e in window[pid]:
            tracks[names.get((pid, e["tid"]), f"thread {e['tid']}")].append(e)
        order = sorted(tracks, key=lambda n: (n != "main", not n.startswith("comm "), n))
        rows = {n: depths(tracks[n]) for n in order}
        height = HEAD + sum((max(rows[n].values()) + 1) * ROW + GAP for n in order)
        body.append(f'<g class="rank" data-rank="{pid}">')
        bg.append(f'<rect x="0" y="{y}" width="{width}" height="{height}" fill="{"#f4f5f7" if pid % 2 == 0 else "#fff"}"/>')
        body.append(f'<text x="6" y="{y + 14}" font-weight="bold">rank {pid}</text>'
                    f'<text x="{LEFT}" y="{y + 14}" fill="#555">{escape(by_rank[pid]["name"])}: '
                    f'{by_rank[pid]["dur"] / 1000:.1f} ms</text>')
        y += HEAD
        for n in order:
            nrows = max(rows[n].values()) + 1
            body.append(f'<g class="track" data-track="{escape(n)}">')
            body.append(f'<text x="14" y="{y + 12}" fill="#333">{escape(n)}</text>')
            for e in sorted(tracks[n], key=lambda e: (e["ts"], -e["dur"])):
                body.append(event_svg(e, t0, scale, y + rows[n][id(e)] * ROW))
            body.append("</g>")
            y += nrows * ROW + GAP
        body.append("</g>")
    axis = axis_svg(t0, t1, scale, y)
    legend = legend_svg(y + 8, width)
    total = y + 8 + 2 * 16 + 8
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total}" '
            f'viewBox="0 0 {width} {total}" font-family="sans-serif" font-size="{FONT}">'
            f'<rect width="{width}" height="{total}" fill="#fff"/>'
            f'<text x="6" y="16" font-size="13" font-weight="bold">step {step}, {len(window)} ranks'
            f' (fsdpp trace; hover a bar for its name, duration and args)</text>')
    return "\n".join([head] + bg + [axis] + body + [legend, "</svg>", ""])


def event_svg(e, t0, scale, y):
    k = kind(e["name"])
    fill = KINDS[k][0]
    x, w = (e["ts"] - t0) * scale + LEFT, max(e["dur"] * scale, 0.5)
    args = "".join(f"\n{a}: {v}" for a, v in (e.get("args") or {}).items())
    title = f"{e['name']}\n{e['dur'] / 1000:.3f} ms at +{(e['ts'] - t0) / 1000:.3f} ms{args}"
    out = (f'<rect x="{x:.1f}" y="{y + 1}" width="{w:.1f}" height="{ROW - 2}" fill="{fill}">'
           f"<title>{escape(title)}</title></rect>")
    short = " ".join(SHORT.get(w, w) for w in e["name"].split(" "))
    for label in (e["name"], short, short.rsplit(" ", 1)[-1]):
        if len(label) * CHAR + 4 <= w:
            out += (f'<text x="{x + 2:.1f}" y="{y + 12}" fill="{text_colour(fill)}" '
                    f'pointer-events="none">{escape(label)}</text>')
            break
    return out


def axis_svg(t0, t1, scale, bottom):
    span = (t1 - t0) / 1000
    tick = nice_tick(span)
    out = [f'<line x1="{LEFT}" y1="{TOP - 6}" x2="{LEFT + span * 1000 * scale:.1f}" y2="{TOP - 6}" stroke="#555"/>']
    i = 0
    while i * tick <= span + 1e-9:
        x = LEFT + i * tick * 1000 * scale
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 10}" x2="{x:.1f}" y2="{bottom}" stroke="#ddd"/>'
                   f'<text x="{x:.1f}" y="{TOP - 13}" text-anchor="middle" fill="#333">{i * tick:g} ms</text>')
        i += 1
    return "\n".join(out)


def legend_svg(y, width):
    out, x = [], LEFT
    for fill, text in KINDS.values():
        w = 16 + len(text) * CHAR + 14
        if x + w > width - RIGHT:
            x, y = LEFT, y + 16
        out.append(f'<rect x="{x:.1f}" y="{y}" width="12" height="12" fill="{fill}"/>'
                   f'<text x="{x + 16:.1f}" y="{y + 10}">{escape(text)}</text>')
        x += w
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", help="rank<R>.trace.json files, a directory of them, or a merged file")
    ap.add_argument("--step", type=int, help="the profiled step to draw (default: the first on every rank)")
    ap.add_argument("-o", "--output", help="the SVG (default: step<N>.svg beside the inputs)")
    ap.add_argument("--width", type=int, default=1400, help="width in pixels (default 1400)")
    args = ap.parse_args()
    if args.width < LEFT + RIGHT + 100:
        sys.exit(f"[trace] --width {args.width} leaves no room for the timeline (>= {LEFT + RIGHT + 100})")
    paths, _, _, events = merge_traces.collect(args.inputs)
    step, by_rank, window, names = select(events, args.step)
    out = args.output or os.path.join(os.path.dirname(paths[0]) or ".", f"step{step}.svg")
    svg = draw(step, by_rank, window, names, args.width)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(svg)
    os.replace(tmp, out)
    n = sum(len(v) for v in window.values())
    print(f"[trace] drew step {step} of {len(window)} ranks ({n} events) into {out}")


if __name__ == "__main__":
    main()
