#!/usr/bin/env bash
# fsdpp-train with training.fsdp_config.fsdp_offload_optimizer_state_dir (2 ranks, FULL_SHARD):
#   A: 12 steps with the AdamW state in memory, B: the same with it on disk, saving at step 6;
# then B resumed from checkpoint-6, still offloaded. Both B runs' losses equal A's bit for bit,
# and the offload directory holds no file afterwards (each rank's file is unlinked when open).
set -euo pipefail
run=$1 train=$2 src=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp -r "$src/docs" "$dir/data"  # a snapshot: the runs must read the same text
common=(data.path="$dir/data" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.logging_steps=1 training.eval_steps=0 training.sample_tokens=0
        training.warmup_steps=3 training.learning_rate=0.003 training.weight_decay=0.1
        training.fsdp=full_shard training.seed=7 training.per_device_train_batch_size=4
        training.max_steps=12 data.cache_dir="$dir/cache")
np2=("$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}")
"${np2[@]}" training.output_dir="$dir/A"
off=training.fsdp_config.fsdp_offload_optimizer_state_dir="$dir/offload"
"${np2[@]}" training.output_dir="$dir/B" "$off" training.save_steps=6 | tee "$dir/B.log"
grep -q "optimizer state offloaded to memory-mapped files in $dir/offload" "$dir/B.log"
rm -rf "$dir/B/checkpoint-12"
cp "$dir/B/metrics.jsonl" "$dir/B-straight.jsonl"
"${np2[@]}" training.output_dir="$dir/B" "$off" training.resume_from_checkpoint=latest |
  tee "$dir/B-resumed.log"
grep -q "resumed from $dir/B/checkpoint-6" "$dir/B-resumed.log"
left=$(find "$dir/offload" -type f | wc -l)
[ "$left" -eq 0 ] || { echo "FAIL: $left files left in $dir/offload"; exit 1; }
# "step loss" per line of a metrics.jsonl, whatever the order of its keys.
losses() {
  paste -d' ' <(sed -E 's/.*"step":([0-9]+).*/\1/' "$1") <(sed -E 's/.*"loss":([^,}]+).*/\1/' "$1")
}
a=$(losses "$dir/A/metrics.jsonl")
[ "$(echo "$a" | wc -l)" -eq 12 ] || { echo "FAIL: A logged $(echo "$a" | wc -l) steps"; exit 1; }
for b in "$dir/B-straight.jsonl" "$dir/B/metrics.jsonl"; do  # the second: 7..12 after the resume
  if [ "$a" != "$(losses "$b")" ]; then
    echo "FAIL: losses differ from in-memory state in $b"; diff <(echo "$a") <(losses "$b") || true
    exit 1
  fi
done
echo "disk-offloaded optimizer state: 12 steps (6 of them after a resume) equal in-memory bit for bit"
echo "$a" | tail -1
