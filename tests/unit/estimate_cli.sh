#!/usr/bin/env bash
# fsdpp-estimate's command line on what deferred initialisation changed (docs/estimate.md):
#  - --params without --units warns (one unit, gathered whole) and says so in a note; with --units
#    it does not;
#  - Llama-3 70B on 16 GPUs: "building the model" sets the peak only with --build-whole, and the
#    default's peak is the step's;
#  - --budget names where each candidate's peak is.
set -euo pipefail
est=$1
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
echo ok
