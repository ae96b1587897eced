#!/usr/bin/env bash
# Timeline traces (training.profile_steps, docs/observability.md#timeline-traces), 2 ranks,
# FULL_SHARD, a tiny model: each rank writes traces/rank<R>.trace.json after the last profiled
# step; trace_check.py checks that they load, nest, hold every collective the counters saw and
# the step time metrics.jsonl has, and scripts/merge_traces.py joins them into one timeline;
# scripts/trace_svg.py draws a step, where trace_svg_check.py finds every event of it.
# FSDPP_PROFILE_STEPS (the library's variable) gives the trainer its steps too; a malformed
# value is refused naming the variable, and a step 0 in training.profile_steps naming the key.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
small=(data.path="$src/configs" data.seq_len=32 data.val_fraction=0.1 model.dim=32 model.n_layers=3
       model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.logging_steps=1
       training.sample_tokens=0 training.per_device_train_batch_size=2 training.report_to=none
       training.save_strategy=no training.eval_steps=0 data.cache_dir="$dir/cache")
np2=("$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${small[@]}")

"${np2[@]}" training.max_steps=5 training.profile_steps=3-4 training.output_dir="$dir/A" \
  > "$dir/A.log" 2>&1 || { cat "$dir/A.log"; exit 1; }
"$python" "$src/scripts/merge_traces.py" "$dir/A/traces"
"$python" "$src/tests/train/trace_check.py" "$dir/A" 2 3 4
"$python" "$src/scripts/trace_svg.py" "$dir/A/traces" --step 3 -o "$dir/A/step3.svg"
"$python" "$src/tests/train/trace_svg_check.py" "$dir/A/traces" "$dir/A/step3.svg" 3
if "$python" "$src/scripts/trace_svg.py" "$dir/A/traces" --step 99 -o "$dir/A/x.svg" > "$dir/E.log" 2>&1; then
  echo "FAIL: trace_svg.py --step 99 was accepted"; exit 1
fi
grep -q "\[trace\] step 99 is not in the traces of every rank: they hold steps 3, 4$" "$dir/E.log" ||
  { echo "FAIL: trace_svg.py --step 99"; cat "$dir/E.log"; exit 1; }

# The environment variable, as a program using the library directly sets it.
FSDPP_PROFILE_STEPS=2 "${np2[@]}" training.max_steps=3 training.output_dir="$dir/B" \
  > "$dir/B.log" 2>&1 || { cat "$dir/B.log"; exit 1; }
"$python" "$src/scripts/merge_traces.py" "$dir/B/traces" -o "$dir/B/traces/merged.trace.json"
"$python" "$src/tests/train/trace_check.py" "$dir/B" 2 2

if FSDPP_PROFILE_STEPS=2,x "${np2[@]}" training.max_steps=1 training.output_dir="$dir/C" \
     > "$dir/C.log" 2>&1; then
  echo "FAIL: FSDPP_PROFILE_STEPS=2,x was accepted"; exit 1
fi
grep -q "\[trace\] FSDPP_PROFILE_STEPS='2,x': 'x' is not a step" "$dir/C.log" ||
  { echo "FAIL: FSDPP_PROFILE_STEPS=2,x"; cat "$dir/C.log"; exit 1; }
if "$train" "$src/configs/default.yaml" "${small[@]}" training.profile_steps=[0,2] \
     training.output_dir="$dir/D" > "$dir/D.log" 2>&1; then
  echo "FAIL: training.profile_steps=[0,2] was accepted"; exit 1
fi
grep -q "\[config\] training.profile_steps has 0: expected steps >= 1" "$dir/D.log" ||
  { echo "FAIL: training.profile_steps=[0,2]"; cat "$dir/D.log"; exit 1; }
echo "trace.sh: ok"
