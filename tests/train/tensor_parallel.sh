#!/usr/bin/env bash
# fsdpp-train's parallelism: section (docs/tensor-parallel.md#fsdpp-train) against one process:
#   one: 1 rank, 8 sequences per step;
#   tp2: TP 2 on 2 ranks (one data-parallel rank: 8 sequences);
#   tp2x2: TP 2 x FSDP 2 with sequence parallelism on 4 ranks (4 sequences per dp rank);
# every step's loss and grad norm equal one's within 1e-5, and so does the sample text. Then
# tp2x2's checkpoint-3 (saved under TP x FSDP) resumes on 1 rank and on TP 2 to step 6 with one's
# losses, its checkpoint-6 exports to Hugging Face's layout with one's tensors (within 1e-5),
# and bad combinations are [config] errors naming the keys.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/tests/data/tp-text.txt" "$dir/text.txt"  # a fixed text (tests/data/README.md)
common=(data.path="$dir/text.txt" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 model.vocab_size=259
        training.logging_steps=1 training.eval_steps=0 training.save_steps=3 training.max_steps=6
        training.sample_tokens=16 training.warmup_steps=2 training.learning_rate=0.001
        training.lr_scheduler_type=constant training.seed=7 training.malloc_mmap_threshold=0
        training.fsdp_config.fsdp_state_dict_type=SHARDED_STATE_DICT data.cache_dir="$dir/cache")
config="$src/configs/default.yaml"
source "$src/tests/train/layouts_lib.sh"
go 1 one training.per_device_train_batch_size=8
go 2 tp2 training.per_device_train_batch_size=8 parallelism.tensor_parallel_degree=2
go 4 tp2x2 training.per_device_train_batch_size=4 parallelism.tensor_parallel_degree=2 \
  parallelism.enable_sequence_parallel=true
grep -q "tensor parallel: pp 1 x dp_replicate 1 x dp_shard 2 x tp 2 (sequence parallel) x ep 1" "$dir/tp2x2.log"
# Activation checkpointing under TP x FSDP: the same losses, and no memory carried from step to
# step (torchtitan#2763): the peak RSS stops growing once the first steps have allocated.
go 4 tp2x2_ac training.per_device_train_batch_size=4 parallelism.tensor_parallel_degree=2 \
  parallelism.enable_sequence_parallel=true training.gradient_checkpointing=true \
  training.max_steps=16 training.save_steps=0 training.sample_tokens=0
# Resumed from the TP 2 x FSDP 2 checkpoint, on other layouts.
for layout in "1 r1 8" "2 r_tp2 8 parallelism.tensor_parallel_degree=2"; do
  set -- $layout
  n=$1 out=$2 b=$3
  shift 3
  cp -r "$dir/tp2x2" "$dir/$out"
  rm -rf "$dir/$out/checkpoint-6" "$dir/$out/sample.txt"
  go "$n" "$out" training.per_device_train_batch_size="$b" \
    training.resume_from_checkpoint="$dir/$out/checkpoint-3" "$@"
done
ckpt=$(dirname "$train")/fsdpp-ckpt
"$ckpt" export-hf "$dir/one/checkpoint-6" "$dir/hf_one" > /dev/null
"$ckpt" export-hf "$dir/tp2x2/checkpoint-6" "$dir/hf_tp2x2" > /dev/null
"$python" - "$dir" <<'PY'
import json, sys
from safetensors.torch import load_file
d = sys.argv[1]
a, b = load_file(f"{d}/hf_one/model.safetensors"), load_file(f"{d}/hf_tp2x2/model.safetensors")
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for k in a:
    assert a[k].shape == b[k].shape and (a[k] - b[k]).abs().max().item() < 1e-5, k
print(f"tensor_parallel: Hugging Face export of the TP 2 x FSDP 2 checkpoint: {len(a)} tensors as one process's")
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
one = steps("one")
assert sorted(one) == list(range(1, 7)), sorted(one)
worst = 0.0
for name in ("tp2", "tp2x2", "r1", "r_tp2"):
    got = steps(name)
    assert sorted(got) == list(range(1, 7)), (name, sorted(got))
    for s, j in got.items():
        for k in ("loss", "grad_norm"):
            diff = abs(j[k] - one[s][k])
            worst = max(worst, diff)
            assert diff < 1e-5, (name, s, k, j[k], one[s][k])
    if name.startswith("tp"):
        assert all(j["comm_bytes_tp"] > 0 for j in got.values()), name
        sample = open(f"{d}/{name}/sample.txt", "rb").read()
        assert sample == open(f"{d}/one/sample.txt", "rb").read(), (name, sample)
print(f"tensor_parallel: 4 layouts x 6 steps equal one process, worst difference {worst:.2e}")
ac = steps("tp2x2_ac")
for s in range(1, 7):
    assert abs(ac[s]["loss"] - one[s]["loss"]) < 1e-5, ("checkpointed", s, ac[s]["loss"], one[s]["loss"])
growth = ac[16]["peak_rss_mb"] - ac[6]["peak_rss_mb"]
print(f"tensor_parallel: activation checkpointing, peak RSS {ac[6]['peak_rss_mb']:.1f} MB at step 6, "
      f"{ac[16]['peak_rss_mb']:.1f} MB at step 16")
assert growth < 2.0, ("peak RSS grew under TP with activation checkpointing", growth)
PY
# Bad combinations: the error names the keys.
bad 2 "cannot fill 2 ranks" parallelism.tensor_parallel_degree=4 model.n_kv_heads=4
bad 2 "[config] model.n_heads=4, model.n_kv_heads=2 with parallelism.tensor_parallel_degree=3: Llama: n_heads=4 is not divisible by the tensor-parallel degree 3" \
  parallelism.tensor_parallel_degree=3
bad 2 "is 4 ranks but the world has 2" parallelism.tensor_parallel_degree=2 parallelism.data_parallel_shard_degree=2
bad 1 "parallelism.enable_sequence_parallel=true needs parallelism.tensor_parallel_degree > 1" \
  parallelism.enable_sequence_parallel=true
bad 2 "needs training.fsdp hybrid_shard or hybrid_shard_zero2" parallelism.data_parallel_replicate_degree=2
bad 2 "n_kv_heads=1 is smaller than the tensor-parallel degree 2" parallelism.tensor_parallel_degree=2 \
  model.n_kv_heads=1
echo "tensor_parallel: bad combinations refused"
