#!/usr/bin/env bash
# The run's picture (docs/observability.md#pictures): a 2-rank run writes run.svg beside
# metrics.jsonl; run_plot_check.py reads it back as XML and checks every drawn point against
# metrics.jsonl. `fsdpp-train plot` draws an interrupted run's file (a half-written last line)
# and refuses a file with no step in it, naming it.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
small=(data.path="$src/configs" data.seq_len=32 data.val_fraction=0.1 model.dim=32 model.n_layers=2
       model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.logging_steps=1
       training.sample_tokens=0 training.per_device_train_batch_size=2 training.report_to=none
       training.save_strategy=no training.eval_steps=3 data.cache_dir="$dir/cache")
"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${small[@]}" \
  training.max_steps=7 training.output_dir="$dir/A" > "$dir/A.log" 2>&1 || { cat "$dir/A.log"; exit 1; }
"$python" "$src/tests/train/run_plot_check.py" "$dir/A/run.svg" "$dir/A/metrics.jsonl" 2

# Interrupted: the last line cut in half.
mkdir "$dir/B"
head -n 5 "$dir/A/metrics.jsonl" > "$dir/B/metrics.jsonl"
sed -n 6p "$dir/A/metrics.jsonl" | head -c 40 >> "$dir/B/metrics.jsonl"
"$train" plot "$dir/B" "$dir/B/picture.svg" > "$dir/B.log" 2>&1 || { cat "$dir/B.log"; exit 1; }
grep -q "wrote $dir/B/picture.svg: 5 steps logged, 1 with a validation loss, memory of 2 ranks" "$dir/B.log" ||
  { echo "FAIL: plot of the cut file"; cat "$dir/B.log"; exit 1; }
head -n 5 "$dir/A/metrics.jsonl" > "$dir/B/whole.jsonl"
"$python" "$src/tests/train/run_plot_check.py" "$dir/B/picture.svg" "$dir/B/whole.jsonl" 2

mkdir "$dir/C" && : > "$dir/C/metrics.jsonl"
if "$train" plot "$dir/C" > "$dir/C.log" 2>&1; then echo "FAIL: an empty metrics.jsonl was drawn"; exit 1; fi
grep -q "\[plot\] $dir/C/metrics.jsonl holds no line with a step and a loss" "$dir/C.log" ||
  { echo "FAIL: empty metrics.jsonl"; cat "$dir/C.log"; exit 1; }
echo "run_plot.sh: ok"
