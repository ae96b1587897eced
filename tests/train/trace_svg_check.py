"""Checks scripts/trace_svg.py's picture of a step against the traces it was drawn from.

    trace_svg_check.py TRACE_DIR SVG STEP

Every complete event of the step's window on every rank (starting within the rank's `step N`
event) has exactly one rectangle on that rank's rows, in its track's group, whose <title> names
it and its start; no rectangle is left over; the rectangles' x follow one linear map from ts
(within 0.2 px: coordinates are rounded to 0.1 px) and their widths max(dur * scale, 0.5) px;
the ranks' rows do not overlap.
"""
import collections
import json
import os
import sys
import xml.etree.ElementTree as ET

trace_dir, svg_path, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
NS = "{http://www.w3.org/2000/svg}"
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)


events, names = [], {}
for f in sorted(os.listdir(trace_dir)):
    if f.startswith("rank") and f.endswith(".trace.json"):
        with open(os.path.join(trace_dir, f)) as fh:
            for e in json.load(fh)["traceEvents"]:
                if e["ph"] == "X":
                    events.append(e)
                elif e["ph"] == "M" and e["name"] == "thread_name":
                    names[(e["pid"], e["tid"])] = e["args"]["name"]
steps = {e["pid"]: e for e in events if e["name"] == f"step {step}"}
check(len(steps) >= 2, f"step {step} on {len(steps)} ranks")
window = [e for e in events if e["pid"] in steps
          and steps[e["pid"]]["ts"] <= e["ts"] <= steps[e["pid"]]["ts"] + steps[e["pid"]]["dur"]]
t0 = min(s["ts"] for s in steps.values())

# Rectangles with a title, by (rank, track, name, start as the title writes it).
rects = collections.defaultdict(list)
ys = collections.defaultdict(list)
root = ET.parse(svg_path).getroot()
for g in root.iter(NS + "g"):
    if g.get("class") != "rank":
        continue
    rank = int(g.get("data-rank"))
    for t in g.iter(NS + "g"):
        if t.get("class") != "track":
            continue
        for r in t.iter(NS + "rect"):
            title = r.find(NS + "title")
            if title is None:
                continue
            lines = title.text.split("\n")
            start = lines[1].split(" at ")[1] if len(lines) > 1 and " at " in lines[1] else "?"
            rects[(rank, t.get("data-track"), lines[0], start)].append(r)
            ys[rank].append(float(r.get("y")))
check(sorted(ys) == sorted(steps), f"rank groups {sorted(ys)}, traces have ranks {sorted(steps)}")

pairs = []  # (event, rect)
for e in window:
    key = (e["pid"], names[(e["pid"], e["tid"])], e["name"], f"+{(e['ts'] - t0) / 1000:.3f} ms")
    found = rects.pop(key, [])
    check(len(found) == 1, f"rank {e['pid']} {e['name']} at ts {e['ts']}: {len(found)} rectangles {key}")
    if len(found) == 1:
        pairs.append((e, found[0]))
check(not rects, f"rectangles for no event of step {step}: {list(rects)[:5]}")

# One linear map ts -> x, fitted by least squares; the width from dur on its scale.
if len(pairs) >= 2:
    ts = [e["ts"] - t0 for e, _ in pairs]
    xs = [float(r.get("x")) for _, r in pairs]
    mt, mx = sum(ts) / len(ts), sum(xs) / len(xs)
    scale = sum((t - mt) * (x - mx) for t, x in zip(ts, xs)) / sum((t - mt) ** 2 for t in ts)
    off = mx - scale * mt
    check(scale > 0, f"scale {scale}")
    for (e, r), t, x in zip(pairs, ts, xs):
        check(abs(x - (off + scale * t)) <= 0.2,
              f"rank {e['pid']} {e['name']}: x {x}, the map gives {off + scale * t:.2f}")
        w, want = float(r.get("width")), max(e["dur"] * scale, 0.5)
        check(abs(w - want) <= 0.2, f"rank {e['pid']} {e['name']}: width {w}, dur {e['dur']} gives {want:.2f}")
order = sorted(ys)
for a, b in zip(order, order[1:]):
    check(max(ys[a]) < min(ys[b]), f"rank {a}'s rows reach rank {b}'s")

if fails:
    print(f"trace_svg_check: {len(fails)} failures")
    for f in fails[:20]:
        print("  " + f)
    sys.exit(1)
print(f"trace_svg_check: ok ({len(pairs)} events of step {step} on {len(steps)} ranks)")
