#!/usr/bin/env bash
# make bench's harness on the tiny model, FULL_SHARD on 2 ranks, one run of each side: fsdpp's
# Llama and bench/llama_torch.py under PyTorch's own fully_shard must give the same losses from
# the same weights and batches (run_bench.py fails otherwise), and the report must be written.
set -euo pipefail
python=$1 build_dir=$2 source_dir=$3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
BENCH_QUICK=1 BENCH_CONFIGS="full_shard:2" BENCH_STEPS=2 BENCH_WARMUP=1 BENCH_REPEATS=1 \
  "$python" "$source_dir/bench/run_bench.py" --build-dir "$build_dir" --out-dir "$out"
md=$(ls "$out"/*-quick.md)
grep -q "| full_shard | 2 |" "$md"
ls "$out"/*-quick.json "$out"/*-quick.png >/dev/null
"$python" - "${md%.md}.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["configs"][0]
print(f"losses fsdpp {c['fsdpp']['losses']} pytorch {c['pytorch']['losses']}")
assert c["max_step_loss_diff"] < 1e-5, c["max_step_loss_diff"]
assert c["fsdpp"]["comm_bytes_per_step"] > 0 and c["pytorch"]["comm_bytes_per_step"] > 0
assert abs(c["estimate_error"]) < 0.15, c["estimate_error"]
PY
