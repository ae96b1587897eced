#!/usr/bin/env bash
# training.fp8 in fsdpp-train (docs/float8.md): 30 steps of a small Llama on 2 ranks (FULL_SHARD)
# without float8, with tensorwise and with rowwise (filter all: every projection), the same
# batches. Float8's losses follow the run without it (the mean of the last 10 within 3%, every
# step within 6%), its log names the projections converted (2 layers x 7), and float8 with tensor
# parallelism is refused with the reason.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.max_steps=30 training.logging_steps=1 training.eval_steps=0
        training.sample_tokens=0 training.warmup_steps=5 training.learning_rate=0.003
        training.per_device_train_batch_size=4 training.seed=7 data.cache_dir="$dir/cache")
for recipe in off tensorwise rowwise; do
  "$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
    training.fp8=$recipe training.fp8_filter=all training.output_dir="$dir/$recipe" \
    > "$dir/$recipe.log" 2>&1 || { cat "$dir/$recipe.log"; exit 1; }
done
for recipe in tensorwise rowwise; do
  grep -q "\[train\] float8 ($recipe, filter all): 14 projections, e.g. layers.0.attention.wq" \
    "$dir/$recipe.log" || { echo "no float8 line in the $recipe run's log:"; cat "$dir/$recipe.log"; exit 1; }
done
if "$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
    training.fp8=tensorwise parallelism.tensor_parallel_degree=2 training.output_dir="$dir/tp" \
    > "$dir/tp.log" 2>&1; then
  echo "float8 with tp=2 was not refused"; exit 1
fi
grep -q "float8 (tensorwise) with tp=2: not built for tensor parallelism yet" "$dir/tp.log" ||
  { echo "the tp refusal does not say why:"; cat "$dir/tp.log"; exit 1; }
"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    return [json.loads(l)["loss"] for l in open(f"{d}/{run}/metrics.jsonl") if "loss" in json.loads(l)]
base = losses("off")
assert len(base) == 30, len(base)
for recipe in ("tensorwise", "rowwise"):
    f8 = losses(recipe)
    assert len(f8) == 30, (recipe, len(f8))
    worst = max(abs(a - b) / b for a, b in zip(f8, base))
    tail = abs(sum(f8[-10:]) - sum(base[-10:])) / sum(base[-10:])
    print(f"{recipe:10s}: {f8[0]:.4f} -> {f8[-1]:.4f} (off: {base[0]:.4f} -> {base[-1]:.4f}); "
          f"worst step {worst:.2%}, last 10 steps' mean {tail:.2%}")
    assert worst < 0.06 and tail < 0.03, recipe
PY
