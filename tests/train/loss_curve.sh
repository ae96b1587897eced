#!/usr/bin/env bash
# 20 steps of fsdpp-train (within the first epoch of the docs/ text) on 2 ranks (FULL_SHARD, 4 sequences each) and on 1 rank (8 sequences):
# the same global batches, so the same loss curve within 1e-4. Once more on 2 ranks with the
# root and the last block kept gathered and the gradients in small reduce buckets: the same
# curve, fewer bytes (no backward all-gather of those two units).
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.max_steps=20 training.logging_steps=1 training.eval_steps=0
        training.sample_tokens=0 training.warmup_steps=5 training.learning_rate=0.003
        training.fsdp=full_shard training.seed=7 data.cache_dir="$dir/cache")
"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.per_device_train_batch_size=4 training.output_dir="$dir/np2"
"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.per_device_train_batch_size=4 training.output_dir="$dir/np2k" \
  training.fsdp_config.fsdp_keep_ends_gathered=true training.fsdp_config.fsdp_reduce_bucket_size=5000
"$run" --nproc-per-node 1 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.per_device_train_batch_size=8 training.output_dir="$dir/np1"
"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{d}/{run}/metrics.jsonl")]
a, b = losses("np1"), losses("np2")
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x - y) for x, y in zip(a, b))
print(f"1 rank : {a[0]:.5f} -> {a[-1]:.5f}\n2 ranks: {b[0]:.5f} -> {b[-1]:.5f}\nmax |diff| {worst:.2e}")
assert worst < 1e-4, f"loss curves differ by {worst}"
assert a[-1] < a[0] - 0.5, "the loss did not fall"
c = losses("np2k")
kept = max(abs(x - y) for x, y in zip(b, c))
print(f"2 ranks, ends kept and buckets: {c[0]:.5f} -> {c[-1]:.5f}, max |diff| to 2 ranks {kept:.2e}")
assert len(c) == 20 and kept < 1e-6, f"loss curves differ by {kept}"
def comm(run):
    return [json.loads(l)["comm_bytes"] for l in open(f"{d}/{run}/metrics.jsonl")][-1]
print(f"bytes per step: {comm('np2')} every unit resharded, {comm('np2k')} ends kept")
assert 0 < comm("np2k") < comm("np2"), (comm("np2k"), comm("np2"))
PY
