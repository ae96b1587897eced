#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS for knowledge distillation: a teacher (configs/qwen3-moe-small.yaml,
# 8 experts, trained 2 steps here) and a student of the same config with 4 experts, distilled on
# 1 rank and FSDP 2; fsdpp-estimate reads the student's config with its distillation: section (the
# teacher's shape from its checkpoint's model_config.json) and must be within 15% of the worst
# rank's peak RSS (metrics.jsonl's peak_rss_mb). The runtime term is fsdpp-bench baseline's.
set -euo pipefail
run=$1 train=$2 bench=$3 estimate=$4 python=$5 src=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$src/tests/bench/estimate_rss_lib.sh"
cp "$src/docs/moe.md" "$dir/text.txt"  # any fixed text: the loss does not matter here
common=(data.path="$dir/text.txt" data.seq_len=128 data.val_fraction=0.05 data.cache_dir="$dir/cache"
        training.per_device_train_batch_size=8 training.logging_steps=1 training.eval_steps=0
        training.sample_tokens=0 training.warmup_steps=0 training.malloc_mmap_threshold=65536)
config="$src/configs/qwen3-moe-small.yaml"
"$run" --nproc-per-node 1 --timeout-s 120 "$train" "$config" "${common[@]}" training.max_steps=2 \
  training.save_steps=2 training.output_dir="$dir/teacher" > "$dir/teacher.log" 2>&1 || { cat "$dir/teacher.log"; exit 1; }
student=("${common[@]}" model.num_experts=4 training.max_steps=2 training.save_strategy=no
         distillation.teacher="$dir/teacher/checkpoint-2")
status=0
for n in 1 2; do
  train_and_estimate "d$n" "$n" "$config" "${student[@]}"
  check_estimate "d$n" 0.15 --positive teacher_bytes || status=1
done
exit $status
