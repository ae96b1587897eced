#!/usr/bin/env bash
# A bfloat16 Qwen3-MoE student on the CPU (training.bf16: bf16 parameters in the forward and
# backward, float32 master weights) over 100 steps: its RSS, read by fsdpp-train at every step,
# must stop growing once the first steps have made AdamW's moments and the allocator's pools and
# oneDNN has compiled its kernels. docs/distillation.md#memory once recorded it growing every step
# (463, 510, 546 MiB over 3 steps); the experts' matmuls change their row counts with each batch's
# routing, and on a CPU with native bf16 (AVX-512 BF16) oneDNN compiles and caches a kernel per
# shape: before the experts' rows were padded to a bounded set of sizes (qwen3_moe.cpp), RSS grew
# from 468 to 880 MiB between steps 10 and 100 there, until the caches' 1024 entries were full.
# The batches here route 512 tokens x 2 to 4 experts, so the rows of each expert's three matmuls
# take well over a hundred sizes. Allowed: 4 MiB between step 50 and step 100 (the padded sizes
# are all met by step 50: 458 MiB from there to step 400 when measured).
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/tests/data/moe-text.txt" "$dir/text.txt"  # a fixed text (tests/data/README.md)
"$run" --nproc-per-node 1 --timeout-s 240 "$train" "$src/configs/qwen3-moe-small.yaml" \
  data.path="$dir/text.txt" data.cache_dir="$dir/cache" data.seq_len=64 model.max_seq_len=64 \
  model.dim=32 model.n_layers=1 model.n_heads=2 model.n_kv_heads=1 model.head_dim=16 \
  model.num_experts=4 model.num_experts_per_tok=2 model.moe_intermediate_size=32 \
  training.bf16=true training.per_device_train_batch_size=8 training.max_steps=100 \
  training.logging_steps=1 training.eval_steps=0 training.save_steps=0 training.save_strategy=no \
  training.sample_tokens=0 training.warmup_steps=5 training.output_dir="$dir/run" \
  > "$dir/run.log" 2>&1 || { cat "$dir/run.log"; exit 1; }
"$python" - "$dir/run/metrics.jsonl" <<'PY'
import json, sys
rss = {j["step"]: j["rss_mb_per_rank"][0] for j in map(json.loads, open(sys.argv[1])) if "loss" in j}
assert sorted(rss) == list(range(1, 101)), sorted(rss)
growth = max(rss[s] for s in range(50, 101)) - rss[50]
print(f"moe_bf16_rss: RSS {rss[1]:.1f} MiB at step 1, {rss[50]:.1f} at step 50, "
      f"{rss[100]:.1f} at step 100 (most above step 50: {growth:.1f} MiB)")
assert growth <= 4.0, f"RSS grew {growth:.1f} MiB from step 50 to step 100: {rss}"
PY
