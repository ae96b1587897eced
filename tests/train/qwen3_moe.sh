#!/usr/bin/env bash
# fsdpp-train with model.architecture=qwen3_moe (docs/moe.md#fsdpp-train) against one process:
#   one: 1 rank, 8 sequences per step; fsdp2: FULL_SHARD on 2 ranks; ep2: expert parallelism
#   over 2 ranks; ep2x2: EP 2 x FSDP 2 on 4 ranks (2 sequences per rank);
# every step's loss, grad norm and load-balancing loss equal one's within 1e-5, the expert load
# figures equal, the same sample. ep2x2's checkpoint-3 resumes on 1 rank with one's losses.
# configs/qwen3-moe-small.yaml trains (its loss falls over 30 steps), and bad combinations are
# [config] errors naming the keys.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/tests/data/moe-text.txt" "$dir/text.txt"  # a fixed text (tests/data/README.md)
common=(data.path="$dir/text.txt" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.head_dim=16 model.max_seq_len=32
        model.num_experts=4 model.num_experts_per_tok=2 model.moe_intermediate_size=48
        training.logging_steps=1 training.eval_steps=0 training.save_steps=3 training.max_steps=6
        training.sample_tokens=16 training.warmup_steps=2 training.learning_rate=0.001
        training.lr_scheduler_type=constant training.seed=7 training.malloc_mmap_threshold=0
        training.output_dir="$dir/unused" data.cache_dir="$dir/cache")
config="$src/configs/qwen3-moe-small.yaml"
source "$src/tests/train/layouts_lib.sh"
go 1 one training.per_device_train_batch_size=8
go 2 fsdp2 training.per_device_train_batch_size=4
go 2 ep2 training.per_device_train_batch_size=4 parallelism.expert_parallel_degree=2
go 4 ep2x2 training.per_device_train_batch_size=2 parallelism.expert_parallel_degree=2
grep -q "expert parallel: 4 experts over ep 2 x efsdp 2 (2 per rank)" "$dir/ep2x2.log"
cp -r "$dir/ep2x2" "$dir/r1"
rm -rf "$dir/r1/checkpoint-6" "$dir/r1/sample.txt"
go 1 r1 training.per_device_train_batch_size=8 training.resume_from_checkpoint="$dir/r1/checkpoint-3"
# The example config as it is, shortened: its loss falls.
"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$config" data.path="$dir/text.txt" \
  data.cache_dir="$dir/cache" training.max_steps=30 training.warmup_steps=5 training.eval_steps=0 \
  training.logging_steps=1 training.sample_tokens=0 training.save_steps=0 \
  training.output_dir="$dir/example" > "$dir/example.log" 2>&1 || { cat "$dir/example.log"; exit 1; }
"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
one = steps("one")
assert sorted(one) == list(range(1, 7)), sorted(one)
worst = 0.0
for name in ("fsdp2", "ep2", "ep2x2", "r1"):
    got = steps(name)
    assert sorted(got) == list(range(1, 7)), (name, sorted(got))
    for s, j in got.items():
        for k in ("loss", "grad_norm", "aux_loss"):
            diff = abs(j[k] - one[s][k])
            worst = max(worst, diff)
            assert diff < 1e-5, (name, s, k, j[k], one[s][k])
        for k in ("expert_load_min", "expert_load_max"):
            assert j[k] == one[s][k], (name, s, k, j[k], one[s][k])
    if name != "r1":
        assert open(f"{d}/{name}/sample.txt", "rb").read() == open(f"{d}/one/sample.txt", "rb").read(), name
print(f"qwen3_moe: 4 layouts x 6 steps equal one process, worst difference {worst:.2e}; "
      f"step 6 aux_loss {one[6]['aux_loss']:.4f}, expert load {one[6]['expert_load_min']}.."
      f"{one[6]['expert_load_max']} (cv {one[6]['expert_load_cv']:.3f})")
ex = steps("example")
first, last = ex[1]["loss"], ex[30]["loss"]
print(f"qwen3_moe: configs/qwen3-moe-small.yaml, loss {first:.3f} at step 1 -> {last:.3f} at step 30, "
      f"aux_loss {ex[30]['aux_loss']:.4f}, expert load cv {ex[30]['expert_load_cv']:.3f}")
assert last < first - 1.0, (first, last)
PY
bad 2 "parallelism.expert_parallel_degree=2 needs experts: model.architecture=qwen3_moe" \
  model.architecture=llama parallelism.expert_parallel_degree=2 \
  training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[TransformerBlock]
bad 2 "is not divisible by the expert-parallel degree 3" parallelism.expert_parallel_degree=3
bad 2 "num_experts=5" model.num_experts=5 parallelism.expert_parallel_degree=2
bad 1 "fsdp_transformer_layer_cls_to_wrap names 'TransformerBlock'" \
  training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[TransformerBlock]
echo "qwen3_moe: bad combinations refused"
