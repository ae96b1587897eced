"""Checks a run's picture (run.svg) against the metrics.jsonl it was drawn from: it parses as
XML; each series (loss, validation loss, each rank's RSS, the peak) is one polyline with one
point per metrics line that has the value, at the step's x; and its y are one straight-line map
of the values (the same axis for the whole panel), so every point is where its value says.

  python run_plot_check.py RUN.svg metrics.jsonl RANKS
"""
import json
import sys
import xml.etree.ElementTree as ET

svg_path, metrics_path, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = [json.loads(l) for l in open(metrics_path) if l.strip()]
root = ET.parse(svg_path).getroot()
ns = "{http://www.w3.org/2000/svg}"
series = {}
for p in root.iter(ns + "polyline"):
    pts = [tuple(map(float, xy.split(","))) for xy in p.get("points").split()]
    series[p.get("data-series")] = pts


def values(key, rank=None):
    out = []
    for l in lines:
        v = l.get(key)
        if v is None:
            continue
        out.append((l["step"], v if rank is None else v[rank]))
    return out


def linear(pts, vals, what):
    """x: one map of the steps (shared by all series); y: one map of the values (per panel)."""
    assert len(pts) == len(vals), f"{what}: {len(pts)} points drawn, {len(vals)} in metrics.jsonl"
    return list(zip(pts, vals))


def check_panel(pairs_by_series, what):
    """Every ((x, y), (step, value)) of the panel on one map step -> x and one value -> y, the
    maps taken from the extreme steps and values."""
    pairs = [pv for s in pairs_by_series for pv in s]
    lo_s, hi_s = min(pairs, key=lambda pv: pv[1][0]), max(pairs, key=lambda pv: pv[1][0])
    lo_v, hi_v = min(pairs, key=lambda pv: pv[1][1]), max(pairs, key=lambda pv: pv[1][1])
    ax = (hi_s[0][0] - lo_s[0][0]) / (hi_s[1][0] - lo_s[1][0])
    ay = (hi_v[0][1] - lo_v[0][1]) / (hi_v[1][1] - lo_v[1][1]) if hi_v[1][1] != lo_v[1][1] else 0
    assert ax > 0 and ay <= 0, f"{what}: later steps go right, larger values up"
    for (x, y), (s, v) in pairs:
        assert abs(lo_s[0][0] + ax * (s - lo_s[1][0]) - x) < 0.11, f"{what}: step {s} at x={x}"
        assert abs(lo_v[0][1] + ay * (v - lo_v[1][1]) - y) < 0.11, \
            f"{what}: value {v} at step {s} drawn at y={y}"


loss_panel = [linear(series["loss"], values("loss"), "loss"),
              linear(series["validation loss"], values("val_loss"), "validation loss")]
assert len(values("val_loss")) >= 1, "the run logged no validation loss"
check_panel(loss_panel, "loss panel")
rank_series = [k for k in series if k and k.startswith("rank ")]
assert len(rank_series) == ranks, f"memory lines {rank_series}, expected {ranks} ranks"
memory_panel = [linear(series[f"rank {r} RSS"], values("rss_mb_per_rank", r), f"rank {r}")
                for r in range(ranks)]
memory_panel.append(linear(series["peak, max of ranks"], values("peak_rss_mb"), "peak"))
check_panel(memory_panel, "memory panel")
for l in lines:
    assert max(l["rss_mb_per_rank"]) <= l["peak_rss_mb"] + 1e-9, "a rank's RSS above the peak"
print(f"run_plot_check: ok ({len(lines)} lines, {len(values('val_loss'))} validation points, "
      f"{ranks} ranks)")
