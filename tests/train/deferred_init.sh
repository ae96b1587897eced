#!/usr/bin/env bash
# model.deferred_init in fsdpp-train (docs/fully-shard.md#models-larger-than-one-device), on 2 ranks:
#  - exact (the default) gives the loss curve of off (the whole model built, then sharded), bit for
#    bit, for the Llama under FULL_SHARD and TP 2, and for Qwen3-MoE under EP 2;
#  - per_shard trains (its initial loss near ln(vocab)), from other weights than exact;
#  - model.init_from of a Hugging Face export, read row by row into the shards, gives the curve of
#    the same directory loaded whole (off), and the distillation teacher likewise;
#  - a bad value is refused by name.
set -euo pipefail
run=$1 train=$2 ckpt=$3 python=$4 src=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=3 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 model.vocab_size=300
        training.max_steps=4 training.logging_steps=1 training.eval_steps=0
        training.sample_tokens=0 training.warmup_steps=0 training.learning_rate=0.003
        training.per_device_train_batch_size=2 training.seed=7 data.cache_dir="$dir/cache")
train2() { "$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" "$@"; }

train2 training.output_dir="$dir/off" model.deferred_init=off training.save_steps=4 > "$dir/off.log"
train2 training.output_dir="$dir/exact" > "$dir/exact.log"
grep -q 'model.deferred_init=exact: each rank drew its shards' "$dir/exact.log"
train2 training.output_dir="$dir/per_shard" model.deferred_init=per_shard > /dev/null
train2 training.output_dir="$dir/tp_off" model.deferred_init=off parallelism.tensor_parallel_degree=2 > /dev/null
train2 training.output_dir="$dir/tp_exact" parallelism.tensor_parallel_degree=2 > /dev/null
moe=(model.architecture=qwen3_moe model.num_experts=4 model.head_dim=16 parallelism.expert_parallel_degree=2
     "training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[Qwen3MoeDecoderLayer]")
train2 training.output_dir="$dir/moe_off" model.deferred_init=off "${moe[@]}" > /dev/null
train2 training.output_dir="$dir/moe_exact" "${moe[@]}" > /dev/null

# A Hugging Face directory of the trained model, into a fresh run each way.
"$ckpt" export-hf "$dir/off/checkpoint-4" "$dir/hf" > /dev/null
train2 training.output_dir="$dir/hf_off" model.init_from="$dir/hf" model.deferred_init=off > /dev/null
train2 training.output_dir="$dir/hf_rows" model.init_from="$dir/hf" > "$dir/hf_rows.log"
grep -q 'weights from .*hf (model.init_from)' "$dir/hf_rows.log"
teacher=(distillation.teacher="$dir/hf" distillation.kd_ratio=0.5)
train2 training.output_dir="$dir/kd_off" "${teacher[@]}" model.deferred_init=off > /dev/null
train2 training.output_dir="$dir/kd_rows" "${teacher[@]}" > /dev/null

if train2 training.output_dir="$dir/bad" model.deferred_init=lazy > "$dir/bad.log" 2>&1; then
  echo "FAIL: model.deferred_init=lazy was accepted"; exit 1
fi
grep -q "model.deferred_init" "$dir/bad.log" && grep -q "exact, per_shard" "$dir/bad.log" ||
  { echo "FAIL: the error does not name the key and the choices:"; cat "$dir/bad.log"; exit 1; }

"$python" - "$dir" <<'PY'
import json, math, sys
d = sys.argv[1]
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{d}/{run}/metrics.jsonl")]
for a, b in [("off", "exact"), ("tp_off", "tp_exact"), ("moe_off", "moe_exact"), ("hf_off", "hf_rows"),
             ("kd_off", "kd_rows")]:
    x, y = losses(a), losses(b)
    print(f"{a:8s} {' '.join(f'{v:.6f}' for v in x)}\n{b:8s} {' '.join(f'{v:.6f}' for v in y)}")
    assert len(x) == len(y) == 4 and x == y, f"{b} differs from {a}"
p = losses("per_shard")
print(f"per_shard {' '.join(f'{v:.6f}' for v in p)}")
assert p != losses("exact"), "per_shard drew the exact values"
assert abs(p[0] - math.log(300)) < 0.5 and p[-1] < p[0], p
assert losses("hf_rows")[0] < losses("exact")[0], "init_from did not start from the trained weights"
PY
