#!/usr/bin/env bash
# fsdpp-train's start-up checks and messages (issue 15):
# 1. A validation split too small for the world size (fewer windows of seq_len+1 tokens than
#    ranks) stops the run at start-up, naming the split, before any training step: no
#    metrics.jsonl, no checkpoint. (It used to fail at the first evaluation, after the steps.)
# 2. One rank and one unit read "over 1 rank, 1 unit" ("1 ranks", "1 units" before).
# usage: startup_checks.sh FSDPP_RUN FSDPP_TRAIN SOURCE_DIR
set -euo pipefail
run=$1 train=$2 src=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
# A corpus of a fixed size (the byte tokenizer: 4,893 tokens), not a folder of the project that
# grows: data.val_fraction=0.01 of it is 48 tokens, one window of 33 tokens for 2 ranks.
seq 1 1200 > "$d/corpus.txt"
job=("$src/configs/default.yaml" "data.path=$d/corpus.txt" data.seq_len=32 model.max_seq_len=32
     model.dim=32 model.n_layers=2 training.sample_tokens=0 "data.cache_dir=$d/cache")

# 1. One window of 33 tokens for 2 ranks.
if "$run" --nproc-per-node 2 --timeout-s 120 "$train" "${job[@]}" data.val_fraction=0.01 \
     training.max_steps=5 "training.output_dir=$d/small-val" >"$d/log" 2>&1; then
  cat "$d/log"; echo "FAIL: a validation split of one window on 2 ranks was accepted"; exit 1
fi
grep -q "\[train\] the validation split (data.val_fraction=0.01) has [0-9]* tokens: 1 window of seq_len+1=33 tokens for 2 ranks" "$d/log" \
  || { cat "$d/log"; echo "FAIL: no start-up error naming the validation split"; exit 1; }
if grep -q "step  *1/" "$d/log" || [ -e "$d/small-val/metrics.jsonl" ]; then
  cat "$d/log"; echo "FAIL: training steps ran before the validation split was refused"; exit 1
fi
echo "a validation split of 1 window on 2 ranks: refused at start-up, before step 1"
# The same split on one rank is enough.
"$train" "${job[@]}" data.val_fraction=0.01 training.max_steps=1 "training.output_dir=$d/one" \
  training.fsdp_config.fsdp_auto_wrap_policy=NO_WRAP >"$d/log1" 2>&1 \
  || { cat "$d/log1"; echo "FAIL: one window for one rank was refused"; exit 1; }

# 2. counts
grep -q "\[train\] mesh: pp 1 x dp_replicate 1 x dp_shard 1 x tp 1 x ep 1; fsdp: FULL_SHARD over dp_shard 1, 1 unit (NO_WRAP)" "$d/log1" \
  || { cat "$d/log1"; echo "FAIL: the mesh and fsdp line does not read 'dp_shard 1, 1 unit'"; exit 1; }
if grep -Eq "\b1 (ranks|units|windows)\b" "$d/log1"; then
  cat "$d/log1"; echo "FAIL: a plural after 1"; exit 1
fi
grep -q "validation loss [0-9]" "$d/log1" || { cat "$d/log1"; echo "FAIL: no validation loss"; exit 1; }
echo "one rank, one unit: 'over 1 rank, 1 unit'; its one validation window evaluated"
echo "startup_checks: OK"
