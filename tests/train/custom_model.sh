#!/usr/bin/env bash
# fsdpp::train::train with a model of its own (examples/custom_model: a residual MLP regressor
# on in-memory tensors, docs/custom-models.md):
#   np2: 2 ranks, FULL_SHARD, 8 examples each, 12 steps, saving (FULL layout) every 6, evaluating
#        all 256 evaluation examples (16 per batch and rank) at steps 6 and 12;
#   np1: 1 rank, the whole 16-example batch (32 per evaluation batch): the same losses
#        (validation too) and the same final parameters and AdamW moments within 1e-6 as np2;
#   res: np2's directory without checkpoint-12, resumed at step 6: steps 7..12 and checkpoint-12
#        equal np2's bit for bit;
#   bf16: 2 ranks, bf16 mixed precision with checkpointed blocks (the root hands the loss
#        float32): the loss falls, and is within 0.05 of np2's (bf16 rounding);
#   tp : parallelism.tensor_parallel_degree=2 refused naming the key and what is accepted;
#   wrap: a fsdp_transformer_layer_cls_to_wrap class the module lacks refused naming its classes.
set -euo pipefail
run=$1 example=$2 python=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(training.max_steps=12 training.save_steps=6 training.logging_steps=1 training.eval_steps=6
        training.fsdp=full_shard training.seed=7 training.learning_rate=0.003
        training.fsdp_config.fsdp_state_dict_type=FULL_STATE_DICT training.gradient_checkpointing=true
        training.eval_max_batches=100)
"$run" --nproc-per-node 2 --timeout-s 120 "$example" "${common[@]}" \
  training.per_device_train_batch_size=8 training.per_device_eval_batch_size=16 training.output_dir="$dir/np2"
"$run" --nproc-per-node 1 --timeout-s 120 "$example" "${common[@]}" \
  training.per_device_train_batch_size=16 training.per_device_eval_batch_size=32 training.output_dir="$dir/np1"
cp -r "$dir/np2" "$dir/res"
rm -rf "$dir/res/checkpoint-12"
"$run" --nproc-per-node 2 --timeout-s 120 "$example" "${common[@]}" \
  training.per_device_train_batch_size=8 training.per_device_eval_batch_size=16 training.output_dir="$dir/res" \
  training.resume_from_checkpoint=latest 2>&1 | tee "$dir/res.log"
grep -q "resumed from .*checkpoint-6" "$dir/res.log"
grep -q "| [0-9]* ex/s |" "$dir/res.log" || { echo "the progress line does not count examples/s"; exit 1; }
"$run" --nproc-per-node 2 --timeout-s 120 "$example" "${common[@]}" training.bf16=true \
  training.per_device_train_batch_size=8 training.per_device_eval_batch_size=16 training.output_dir="$dir/bf16"
if "$run" --nproc-per-node 1 --timeout-s 60 "$example" parallelism.tensor_parallel_degree=2 \
     training.output_dir="$dir/tp" >"$dir/tp.log" 2>&1; then
  echo "tensor_parallel_degree=2 was not refused"; exit 1
fi
grep -q "parallelism.tensor_parallel_degree=2 is not available for a custom model" "$dir/tp.log"
grep -q "A custom model trains data parallel (training.fsdp full_shard" "$dir/tp.log"
if "$run" --nproc-per-node 1 --timeout-s 60 "$example" "training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[NoSuchBlock]" \
     training.output_dir="$dir/wrap" >"$dir/wrap.log" 2>&1; then
  echo "a wrap class the module lacks was not refused"; exit 1
fi
grep -q "names 'NoSuchBlock', which is no module class below custom model" "$dir/wrap.log" ||
  { cat "$dir/wrap.log"; echo "the wrap-class refusal does not name the class"; exit 1; }
grep -q "its classes are \[.*ResidualBlock" "$dir/wrap.log" ||
  { cat "$dir/wrap.log"; echo "the wrap-class refusal does not list the module's classes"; exit 1; }
"$python" - "$dir" <<'PY'
import json, sys
import torch
from safetensors.torch import load_file
d = sys.argv[1]
def lines(run):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
a, b, r = lines("np2"), lines("np1"), lines("res")
assert sorted(a) == sorted(b) == sorted(r) == list(range(1, 13)), (sorted(a), sorted(b), sorted(r))
worst = max(abs(a[s]["loss"] - b[s]["loss"]) for s in a)
print(f"losses: 2 ranks {a[1]['loss']:.6f} -> {a[12]['loss']:.6f}, 1 rank {b[1]['loss']:.6f} -> "
      f"{b[12]['loss']:.6f}, max |diff| {worst:.2e}")
assert a[12]["loss"] < 0.8 * a[1]["loss"], "the model did not learn"
assert worst < 1e-6, worst
for s in (6, 12):
    assert abs(a[s]["val_loss"] - b[s]["val_loss"]) < 1e-6, (s, a[s]["val_loss"], b[s]["val_loss"])
bad = [s for s in range(1, 13) if a[s]["loss"] != r[s]["loss"] or a[s].get("val_loss") != r[s].get("val_loss")]
assert not bad, f"resumed steps {bad} differ"
print("resumed at step 6: steps 7..12 equal the uninterrupted run bit for bit")
h = lines("bf16")
gap = max(abs(h[s]["loss"] - a[s]["loss"]) for s in a)
print(f"bf16: {h[1]['loss']:.4f} -> {h[12]['loss']:.4f}, max |diff| from float32 {gap:.2e}")
assert h[12]["loss"] < 0.8 * h[1]["loss"] and gap < 0.05, gap
n, worst = 0, 0.0
for f in ("model.safetensors", "optim.safetensors"):
    t2, t1, tr = (load_file(f"{d}/{run}/checkpoint-12/{f}") for run in ("np2", "np1", "res"))
    assert t2.keys() == t1.keys() == tr.keys(), f
    for k in t2:
        worst = max(worst, (t2[k].double() - t1[k].double()).abs().max().item())
        assert torch.equal(t2[k], tr[k]), f"{f}: {k} differs after the resume"
        n += 1
assert any(k.startswith("blocks.3.fc2") for k in load_file(f"{d}/np2/checkpoint-12/model.safetensors"))
print(f"checkpoint-12: {n} tensors; 2 ranks vs 1 rank max |diff| {worst:.2e}; resumed identical")
assert worst < 1e-6, worst
PY
