#!/usr/bin/env bash
# fsdpp-estimate's command line on what deferred initialisation changed (docs/estimate.md):
#  - --params without --units warns (one unit, gathered whole) and says so in a note; with --units
#    it does not;
#  - Llama-3 70B on 16 GPUs: "building the model" sets the peak only with --build-whole, and the
#    default's peak is the step's;
#  - --budget names where each candidate's peak is;
#  - an HSDP replicate degree that does not divide the data-parallel ranks is refused as fsdpp-train
#    refuses it (exit 2, the key named; before: the default shard group, silently), one that divides
#    them is played; fsdpp-plan (the second argument), which lays the cluster out itself, plans
#    with such a config and names each row's own replicate degree.
set -euo pipefail
est=$1
plan=${2:-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$("$est" --params 7e9 --world-size 8 2>&1)
grep -q 'warning: --params without --units' <<<"$out" || { echo "FAIL: no warning"; echo "$out"; exit 1; }
grep -q 'note: one FSDP unit' <<<"$out" || { echo "FAIL: no note"; echo "$out"; exit 1; }
out=$("$est" --params 7e9 --units 33 --world-size 8 2>&1)
! grep -q 'warning' <<<"$out" || { echo "FAIL: warned with --units"; echo "$out"; exit 1; }
shape=(--vocab-size 128256 --dim 8192 --n-layers 80 --n-heads 64 --n-kv-heads 8 --ffn-hidden 28672
       --max-seq-len 8192 -b 1 -t 4096 --mixed-precision bf16 --activation-checkpointing --device cuda)
whole=$("$est" "${shape[@]}" -n 16 --build-whole --json)
deferred=$("$est" "${shape[@]}" -n 16 --json)
python3 - "$whole" "$deferred" <<'PY'
import json, sys
w, d = (json.loads(a)["estimates"][0] for a in sys.argv[1:3])
gib = 2 ** 30
print(f"70B on 16: built whole {w['total_bytes'] / gib:.1f} GiB at {w['peak_at']}; deferred "
      f"{d['total_bytes'] / gib:.1f} GiB at {d['peak_at']}")
assert w["peak_at"] == "building the model", w["peak_at"]
assert "building" not in d["peak_at"] and "initialising" not in d["peak_at"], d["peak_at"]
assert w["total_bytes"] > 4 * 70e9 and d["total_bytes"] < w["total_bytes"] / 3, (w["total_bytes"], d["total_bytes"])
PY
out=$("$est" "${shape[@]}" -n 16 --budget 80)
grep -q 'fits: .* peak at ' <<<"$out" || { echo "FAIL: --budget names no peak"; echo "$out"; exit 1; }
hsdp=("$src/configs/default.yaml" training.fsdp=hybrid_shard)
for extra in "" "--budget 80"; do
  rc=0
  # shellcheck disable=SC2086
  out=$("$est" "${hsdp[@]}" parallelism.data_parallel_replicate_degree=3 -n 8 $extra 2>&1) || rc=$?
  [[ $rc == 2 ]] && grep -qF "[estimate] parallelism.data_parallel_replicate_degree=3 cannot fill 8 data-parallel \
ranks (the world size): HSDP's replicas are equal shard groups, so the replicate degree must divide the \
data-parallel ranks; expected a degree that divides 8 (1: no replicas)" <<<"$out" ||
    { echo "FAIL: replicate degree 3 on 8 ranks $extra: exit $rc"; echo "$out"; exit 1; }
done
rc=0
out=$("$est" "${hsdp[@]}" parallelism.data_parallel_replicate_degree=2 parallelism.data_parallel_shard_degree=2 \
      -n 8 2>&1) || rc=$?
[[ $rc == 2 ]] && grep -qF "replicate_degree=2 x data_parallel_shard_degree=2 is 4 data-parallel ranks but there \
are 8" <<<"$out" || { echo "FAIL: replicate 2 x shard 2 on 8 ranks: exit $rc"; echo "$out"; exit 1; }
for n in 2 4 8; do
  out=$("$est" "${hsdp[@]}" parallelism.data_parallel_replicate_degree=$n -n 8 --json)
  python3 -c 'import json, sys; s = json.loads(sys.argv[1])["estimates"][0]["shard_world"]
assert s == 8 // int(sys.argv[2]), (s, sys.argv[2])' "$out" $n ||
    { echo "FAIL: replicate degree $n on 8 ranks"; exit 1; }
done
if [[ -n $plan ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$plan" "${hsdp[@]}" parallelism.data_parallel_replicate_degree=3 --cluster cpu --world-size 16 --global-batch 16 \
      --json "$tmp/plan.json" >"$tmp/plan.txt" 2>&1 ||
    { echo "FAIL: fsdpp-plan with a replicate degree of 3 on 16 ranks"; cat "$tmp/plan.txt"; exit 1; }
  python3 - "$tmp/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert "answer" in p, p.keys()
hybrid = 0
for r in p["fitting"]:
    degrees = [k.split("=")[1] for k in r["overrides"] if k.startswith("parallelism.data_parallel_replicate_degree=")]
    hybrid += r["strategy"] == "HYBRID_SHARD"
    assert degrees == ["2" if r["strategy"] == "HYBRID_SHARD" else "1"], (r["layout"], r["overrides"])
assert hybrid > 0, [r["layout"] for r in p["fitting"]]
assert not any("replicate_degree" in r["rejected"] for r in p.get("rejected", [])), p["rejected"]
print(f"fsdpp-plan: {len(p['fitting'])} layouts ({hybrid} HSDP) past a replicate degree of 3")
PY
fi
echo ok
