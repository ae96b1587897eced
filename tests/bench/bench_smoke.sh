#!/usr/bin/env bash
# make bench's harness on the tiny model, FULL_SHARD on 2 ranks, one run of each side: fsdpp's
# Llama and bench/llama_torch.py under PyTorch's own fully_shard must give the same losses from
# the same weights and batches (run_bench.py fails otherwise), and the report must be written.
# Also one tensor-parallel row (TP 2 on 2 ranks): its bytes on the tp dim must equal the formula
# of docs/tensor-parallel.md, its loss FULL_SHARD's on the same batch, its estimate within 15%.
set -euo pipefail
python=$1 build_dir=$2 source_dir=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
BENCH_QUICK=1 BENCH_CONFIGS="full_shard:2" BENCH_TP_CONFIGS="1x2 2x1" BENCH_STEPS=2 BENCH_WARMUP=1 BENCH_REPEATS=1 \
  "$python" "$source_dir/bench/run_bench.py" --build-dir "$build_dir" --out-dir "$out"
md=$(ls "$out"/*-quick.md)
grep -q "| full_shard | 2 |" "$md"
grep -q "| TP 2 | 2 |" "$md"
grep -q "## Overlap read from the traces" "$md"
ls "$out"/*-quick.json "$out"/*-quick.png >/dev/null
"$python" - "${md%.md}.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["configs"][0]
print(f"losses fsdpp {c['fsdpp']['losses']} pytorch {c['pytorch']['losses']}")
assert c["max_step_loss_diff"] < 1e-5, c["max_step_loss_diff"]
assert c["fsdpp"]["comm_bytes_per_step"] > 0 and c["pytorch"]["comm_bytes_per_step"] > 0
# The root and the last block kept gathered (both sides) skip their backward all-gather: the
# bytes counted follow the theory less those (padding aside).
assert r["keep_ends"] and r["reduce_bucket_size"] > 0
print(f"bytes per step: fsdpp {c['fsdpp']['comm_bytes_per_step']:.0f}, theory {c['theory_bytes_per_step']:.0f}")
assert abs(c["fsdpp"]["comm_bytes_per_step"] / c["theory_bytes_per_step"] - 1) < 0.01
assert abs(c["estimate_error"]) < 0.15, c["estimate_error"]
fsdp2, tp2 = r["tp_configs"]
print(f"TP 2: {tp2['fsdpp']['comm_bytes_tp_per_step']:.0f} bytes per step on tp (formula "
      f"{tp2['tp_theory_bytes_per_step']}), loss {tp2['fsdpp']['losses']} vs FSDP 2 {fsdp2['fsdpp']['losses']}, "
      f"estimate {100 * tp2['estimate_error']:+.1f}%")
assert tp2["fsdpp"]["comm_bytes_tp_per_step"] == tp2["tp_theory_bytes_per_step"] > 0
assert tp2["fsdpp"]["comm_bytes_per_step"] == 0 and fsdp2["fsdpp"]["comm_bytes_tp_per_step"] == 0
assert tp2["max_step_loss_diff"] < 1e-5, tp2["max_step_loss_diff"]
assert abs(tp2["estimate_error"]) < 0.15, tp2["estimate_error"]
# The traced runs: every timed step of both ranks read back from their traces, one run per
# forward prefetch depth.
tr = c["traced"]
assert [t["forward_prefetch"] for t in tr] == [0, 1, 2], tr
for t in tr:
    print(f"traced, forward prefetch {t['forward_prefetch']}: step {t['step_ms']:.1f} ms, collectives ran "
          f"{t['comm_ms']:.1f} ms, exposed {t['exposed_ms']:.1f} ms")
    assert t["steps"] == 2 * r["steps"], t
    assert t["comm_ms"] > 0 and 0 <= t["exposed_ms"] < t["step_ms"], t
assert not r["problems"], r["problems"]
PY
