#!/usr/bin/env bash
# distillation.layer_projection (docs/distillation.md#intermediate-layers): a Llama teacher 64
# wide (2 layers, trained here for 4 steps) and a student 32 wide (1 layer), layer_map [0:1],
# mse, the learned 32 -> 64 projection (auto), max_grad_norm 0.3 (every step clipped: the
# projection with the student under one norm, grad_norm counting both):
#   one (1 rank x 8 sequences) against two (2 ranks x 4) and accum (1 rank, 2 accumulation batches of
#     4): the same loss, kd_loss, ce_loss,
#     layer_loss and grad_norm at every step, and the same projection weights and AdamW moments
#     in checkpoint-4, within 1e-5; the projection at step 1 is torch.nn.Linear's initial
#     values drawn in Python from torch.Generator().manual_seed(training.seed) moved by one
#     AdamW step (at most lr (1 + wd |w|) an element), and it keeps moving; the student's
#     checkpoint, and its fsdpp-ckpt export-hf, hold no tensor of the projection's shape.
#   resume: 2 ranks, 2 steps, then resumed to 4 (resume_from_checkpoint=latest): losses and the
#     projection file's tensors (weights, moments, step) bit-equal to the uninterrupted run's.
#   a checkpoint without the file (removed), and a resume with another layer_map: a warning
#     naming why, and the run goes on with seeded projections.
#   linear: the teacher distilled into itself ([0:0, 1:1]) through 2 projections 64 x 64: kd_loss
#     0, layer_loss > 0 (the maps are random, not the identity).
# Refused: layer_projection=none with different widths (naming the key to set), an unknown
# value, training.fp16 with a projection.
set -euo pipefail
run=$1 train=$2 ckpt=$3 python=$4 src=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/tests/data/moe-text.txt" "$dir/text.txt"  # a fixed text (tests/data/README.md)
config="$src/configs/default.yaml"
common=(data.path="$dir/text.txt" data.seq_len=32 data.val_fraction=0.1 data.train_fraction=0.25
        model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.logging_steps=1 training.eval_steps=0 training.save_steps=1
        training.sample_tokens=0 training.warmup_steps=2 training.learning_rate=0.003
        training.lr_scheduler_type=constant training.seed=7 training.max_grad_norm=0.3
        training.malloc_mmap_threshold=0 data.cache_dir="$dir/cache")
source "$src/tests/train/layouts_lib.sh"
go 1 teacher model.dim=64 model.n_layers=2 training.per_device_train_batch_size=8 training.max_steps=4
teacher="$dir/teacher/checkpoint-4"
student=(model.dim=32 model.n_layers=1 distillation.teacher="$teacher" "distillation.layer_map=[0:1]"
         distillation.layer_loss=mse distillation.layer_loss_weight=0.5 distillation.kd_ratio=0.5)
go 1 one "${student[@]}" training.per_device_train_batch_size=8 training.max_steps=4
grep -q "distillation.layer_projection: 1 learned projection(s) 1 x (64, 32)" "$dir/one.log" || { cat "$dir/one.log"; exit 1; }
go 2 two "${student[@]}" training.per_device_train_batch_size=4 training.max_steps=4
go 1 accum "${student[@]}" training.per_device_train_batch_size=4 training.gradient_accumulation_steps=2 \
  training.max_steps=4
np2=("${student[@]}" training.per_device_train_batch_size=4)
go 2 resumed "${np2[@]}" training.max_steps=2
cp -r "$dir/resumed" "$dir/nofile"
cp -r "$dir/resumed" "$dir/othermap"
go 2 resumed "${np2[@]}" training.max_steps=4 training.resume_from_checkpoint=latest
rm "$dir/nofile/checkpoint-2/distill_projection.pt"
go 2 nofile "${np2[@]}" training.max_steps=3 training.resume_from_checkpoint=latest
grep -q "checkpoint-2 holds no distill_projection.pt" "$dir/nofile.log" || { cat "$dir/nofile.log"; exit 1; }
go 1 othermap "${np2[@]}" "distillation.layer_map=[0:0]" training.max_steps=3 \
  training.resume_from_checkpoint=latest
grep -q "holds no projection for distillation.layer_map's pair 0:0" "$dir/othermap.log" \
  || { cat "$dir/othermap.log"; exit 1; }
# linear: a projection for pairs of equal width too (the teacher distilled into itself).
go 1 linear model.init_from="$teacher" training.max_steps=1 training.per_device_train_batch_size=8 \
  distillation.teacher="$teacher" "distillation.layer_map=[0:0, 1:1]" distillation.layer_projection=linear
grep -q "distillation.layer_projection: 2 learned projection(s) 2 x (64, 64)" "$dir/linear.log" \
  || { cat "$dir/linear.log"; exit 1; }
"$ckpt" export-hf "$dir/two/checkpoint-4" "$dir/hf" > "$dir/hf.log" 2>&1 || { cat "$dir/hf.log"; exit 1; }
"$python" - "$dir" <<'PY'
import json, math, sys
import torch
from safetensors.torch import load_file
d = sys.argv[1]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
def projection(name, step):
    m = torch.jit.load(f"{d}/{name}/checkpoint-{step}/distill_projection.pt")
    return {**dict(m.named_parameters()), **dict(m.named_buffers())}
one, two, res, acc = steps("one"), steps("two"), steps("resumed"), steps("accum")
assert sorted(one) == sorted(two) == sorted(res) == sorted(acc) == [1, 2, 3, 4], (sorted(one), sorted(two), sorted(res))
worst = 0.0
for s in one:
    for k in ("loss", "kd_loss", "ce_loss", "layer_loss", "grad_norm"):
        for other, name in ((two, "two"), (acc, "accum")):
            diff = abs(one[s][k] - other[s][k])
            worst = max(worst, diff)
            assert diff <= 1e-5, ("one vs", name, s, k, one[s][k], other[s][k])
        assert res[s][k] == two[s][k], ("resumed vs two", s, k, res[s][k], two[s][k])
assert one[4]["layer_loss"] < one[1]["layer_loss"], [one[s]["layer_loss"] for s in one]
assert all(j["grad_norm"] > 0.3 for j in one.values()), [j["grad_norm"] for j in one.values()]  # clipped
p1, p2, pa = projection("one", 4), projection("two", 4), projection("accum", 4)
assert sorted(p1) == sorted(p2) == ["0_1_exp_avg", "0_1_exp_avg_sq", "0_1_step", "0_1_weight"], sorted(p1)
pw = max((p1[k].double() - p[k].double()).abs().max().item() for k in p1 for p in (p2, pa))
assert pw <= 1e-5, pw
assert p1["0_1_weight"].shape == (64, 32) and int(p1["0_1_step"]) == 4
pr = projection("resumed", 4)
assert all(torch.equal(pr[k], p2[k]) for k in p2), [k for k in p2 if not torch.equal(pr[k], p2[k])]
# The initial values: torch.nn.Linear(32, 64)'s bound, drawn from training.seed's generator.
b = 1 / math.sqrt(32)
w0 = torch.empty(64, 32).uniform_(-b, b, generator=torch.Generator().manual_seed(7))
w1 = projection("two", 1)["0_1_weight"]
lr, wd = two[1]["lr"], 0.1  # default.yaml's weight_decay
step = (w1 - w0).abs()
assert (step <= lr * (1 + wd * w0.abs()) + 1e-7).all() and step.median() > 0.5 * lr, (lr, step.max(), step.median())
moved = (projection("two", 4)["0_1_weight"] - w1).abs().max().item()
assert moved > 0, moved
# The student's checkpoint: its own tensors only.
params = json.load(open(f"{d}/two/checkpoint-4/index.json"))["params"]
assert "tok_embeddings.weight" in params and all(p["shape"] != [64, 32] for p in params.values()), params.keys()
hf = load_file(f"{d}/hf/model.safetensors")
assert len(hf) == len(params) and all(t.shape != (64, 32) for t in hf.values()), {k: t.shape for k, t in hf.items()}
lin = steps("linear")[1]
assert lin["kd_loss"] < 1e-6 and lin["layer_loss"] > 0.1, lin  # the teacher itself, through random maps
print(f"distill_projection: 1 rank, 2 ranks and 2 accumulation batches within {worst:.1e} (losses, grad norm), projection "
      f"within {pw:.1e}; resumed bit-equal; layer_loss {one[1]['layer_loss']:.4f} -> "
      f"{one[4]['layer_loss']:.4f}; step 1 moved the seeded init by at most {step.max():.2e} (lr {lr:.2e})")
PY
bad 1 "distillation.layer_projection=none compares them as they are; set distillation.layer_projection=auto" \
  "${student[@]}" distillation.layer_projection=none training.max_steps=1
bad 1 "auto, linear, none" "${student[@]}" distillation.layer_projection=mlp training.max_steps=1
bad 1 "do not combine with training.fp16" "${student[@]}" training.fp16=true training.max_steps=1
echo "distill_projection: bad values refused"
