#!/usr/bin/env bash
# Checkpoints and exact resume in fsdpp-train (2 ranks, FULL_SHARD, SHARDED checkpoints):
#   A: 20 steps straight, saving every 10;
#   B: 10 steps, saving checkpoint-10; C: resume_from_checkpoint=latest in B's directory to 20.
# C's losses at steps 11..20 equal A's bit for bit, and C's checkpoint-20 holds the same tensors
# and the same trainer_state.json (step, schedule, data position, every rank's generator state:
# draws from them after the resume equal the uninterrupted run's). D: B's 2-rank checkpoint
# resumed on 1 rank (8 sequences per rank: the same global batch) gives A's step-11 loss within
# 1e-4; D's checkpoint-10 first gets another generator state, which D's checkpoint-11 must carry
# (training itself draws nothing from the global generator), so the restore is seen to happen.
# The schedule is constant after warmup, so that a 10-step run and a 20-step run take the same
# learning rates.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.logging_steps=1 training.eval_steps=0 training.save_steps=10
        training.sample_tokens=0 training.warmup_steps=5 training.learning_rate=0.003
        training.lr_scheduler_type=constant training.fsdp=full_shard training.seed=7
        training.fsdp_config.fsdp_state_dict_type=SHARDED_STATE_DICT data.cache_dir="$dir/cache")
np2=("$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}"
     training.per_device_train_batch_size=4)
"${np2[@]}" training.max_steps=20 training.output_dir="$dir/A"
"${np2[@]}" training.max_steps=10 training.output_dir="$dir/B"
cp -r "$dir/B" "$dir/D"
"$python" - "$dir/D/checkpoint-10/trainer_state.json" <<'PY'
import base64, json, sys, torch
p = sys.argv[1]
ts = json.load(open(p))
g = torch.Generator().manual_seed(2024)
torch.rand(17, generator=g)
ts["rng"]["cpu"][0] = base64.b64encode(g.get_state().numpy().tobytes()).decode()
json.dump(ts, open(p, "w"))
PY
"${np2[@]}" training.max_steps=20 training.output_dir="$dir/B" training.resume_from_checkpoint=latest
"$run" --nproc-per-node 1 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.per_device_train_batch_size=8 training.max_steps=11 training.output_dir="$dir/D" \
  training.resume_from_checkpoint="$dir/D/checkpoint-10" training.save_steps=11
"$python" - "$dir" <<'PY'
import json, os, sys
from safetensors.torch import load_file
import torch
d = sys.argv[1]
def losses(run):
    return {j["step"]: j["loss"] for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
a, c, e = losses("A"), losses("B"), losses("D")
assert sorted(a) == list(range(1, 21)), sorted(a)
assert sorted(c) == list(range(1, 21)), sorted(c)
bad = [s for s in range(1, 21) if a[s] != c[s]]
assert not bad, f"steps {bad} differ: A {[a[s] for s in bad]} vs resumed {[c[s] for s in bad]}"
print(f"resumed on 2 ranks: steps 1..20 equal bit for bit (step 20 loss {c[20]!r})")
diff = abs(e[11] - a[11])
print(f"resumed on 1 rank: step 11 loss {e[11]:.6f} vs {a[11]:.6f} (|diff| {diff:.2e})")
assert diff < 1e-4, diff
for run in ("A", "B"):
    for name in ("checkpoint-10", "checkpoint-20"):
        assert os.path.isfile(f"{d}/{run}/{name}/trainer_state.json"), (run, name)
ts = json.load(open(f"{d}/B/checkpoint-20/trainer_state.json"))
assert ts["step"] == 20 and ts["world_size"] == 2, ts
files = sorted(f for f in os.listdir(f"{d}/A/checkpoint-20") if f.endswith(".safetensors"))
assert files == sorted(f for f in os.listdir(f"{d}/B/checkpoint-20") if f.endswith(".safetensors"))
assert any(f.startswith("shard-") for f in files), files
n = 0
for f in files:
    ta, tc = load_file(f"{d}/A/checkpoint-20/{f}"), load_file(f"{d}/B/checkpoint-20/{f}")
    assert ta.keys() == tc.keys(), f
    for k in ta:
        assert torch.equal(ta[k], tc[k]), f"{f}: {k} differs"
        n += 1
print(f"checkpoint-20: {n} tensors in {len(files)} files identical")
# trainer_state.json: the same in the resumed run as in the uninterrupted one, but for the
# digest of metrics.jsonl, whose lines hold timings (tokens/s, ms per step).
import base64
sa = json.load(open(f"{d}/A/checkpoint-20/trainer_state.json"))
sc = json.load(open(f"{d}/B/checkpoint-20/trainer_state.json"))
assert len(sa.pop("metrics_xxh3")) == 16 and len(sc.pop("metrics_xxh3")) == 16, (sa, sc)
assert sa == sc, (sa, sc)
assert sa["lr_schedule"]["type"] == "constant" and sa["lr_schedule"]["lr"] == 0.003, sa["lr_schedule"]
assert len(sa["rng"]["cpu"]) == 2, len(sa["rng"]["cpu"])
def gen(b64):
    g = torch.Generator()
    g.set_state(torch.frombuffer(bytearray(base64.b64decode(b64)), dtype=torch.uint8))
    return g
for r in range(2):
    x = torch.randn(1000, generator=gen(sa["rng"]["cpu"][r]))
    y = torch.randn(1000, generator=gen(sc["rng"]["cpu"][r]))
    assert torch.equal(x, y), r
fresh = torch.Generator().manual_seed(7)  # what the trainer seeds: training.seed
assert torch.equal(gen(sa["rng"]["cpu"][0]).get_state(), fresh.get_state())
print("trainer_state.json of checkpoint-20 identical; generator draws after resume equal the uninterrupted run's")
# D restored the generator state put into its checkpoint-10 (and saved it again at step 11).
g = torch.Generator().manual_seed(2024)
torch.rand(17, generator=g)
sd = json.load(open(f"{d}/D/checkpoint-11/trainer_state.json"))
assert len(sd["rng"]["cpu"]) == 1 and sd["world_size"] == 1
assert torch.equal(gen(sd["rng"]["cpu"][0]).get_state(), g.get_state()), "D did not restore the generator"
assert sd["step"] == 11 and sd["windows_consumed"] == 88, sd
print("resumed on 1 rank: the checkpoint's generator state was restored")
PY
