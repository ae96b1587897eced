"""fsdpp-estimate's figure against the peak RSS fsdpp-train measured (metrics.jsonl's peak_rss_mb,
a max over the ranks): prints both, the error and the estimate's terms, and fails beyond the
tolerance. Options check that the config's sections reached the estimate.

  python estimate_check.py METRICS.jsonl EST.json NAME TOLERANCE [--expect FIELD=VALUE]...
         [--positive FIELD]... [--fewer-active] [--record FILE]

--expect: an integer field of the estimate (tensor_parallel=2); --positive: a field above 0
(teacher_bytes); --fewer-active: fewer active parameters per token than in total (MoE);
--record: appends "NAME measured estimate" to FILE.
"""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("metrics")
ap.add_argument("estimate")
ap.add_argument("name")
ap.add_argument("tolerance", type=float)
ap.add_argument("--expect", action="append", default=[])
ap.add_argument("--positive", action="append", default=[])
ap.add_argument("--fewer-active", action="store_true")
ap.add_argument("--record")
a = ap.parse_args()

rows = [json.loads(l) for l in open(a.metrics) if l.strip()]
meas = max(r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r)
j = json.load(open(a.estimate))
e = j["estimates"][0]
for item in a.expect:
    field, value = item.split("=")
    assert e[field] == int(value), f"{field} = {e[field]}, expected {value}: the config did not reach the estimate"
for field in a.positive:
    assert e[field] > 0, f"{field} = {e[field]}: the config did not reach the estimate"
if a.fewer_active:
    assert j["num_active_params"] < j["num_params"], j
est = e["total_bytes"] / 2**20
err = (est - meas) / meas
terms = ", ".join(f"{k[:-6]} {e[k] / 2**20:.1f}" for k in
                  ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "unsharded_bytes",
                   "activations_bytes", "allocator_bytes", "runtime_bytes", "teacher_bytes") if e.get(k))
stages = "; ".join(f"stage {s['stage']} (rank {s['rank']}) in flight {s['in_flight']}, W {s['held_weight_grads']}"
                   for s in e.get("stages") or [])
print(f"{a.name}: measured peak RSS {meas:.0f} MiB, estimate {est:.0f} MiB ({100 * err:+.1f}%; {terms}; "
      f"peak at {e['peak_at']}{'; ' + stages if stages else ''})")
if a.record:
    with open(a.record, "a") as f:
        f.write(f"{a.name} {meas} {est}\n")
sys.exit(0 if abs(err) < a.tolerance else 1)
