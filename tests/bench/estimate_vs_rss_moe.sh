#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS for Qwen3-MoE: fsdpp-train runs configs/qwen3-moe-small.yaml
# (1.84 M parameters, 8 experts top-2 in each of 4 sparse layers) on 1 rank, FSDP 2, EP 2 (2 ranks),
# EP 2 x FSDP 2 (4 ranks), TP 2 x EP 2 (2 ranks) and PP 2 x EP 2 (4 ranks); fsdpp-estimate reads the same config and overrides (its model: and
# parallelism.expert_parallel_degree pass through train::configured_estimate) and must be within
# 10% of the worst rank's peak RSS (metrics.jsonl's peak_rss_mb, a max over the ranks). The runtime
# term is fsdpp-bench baseline's, as make bench measures it.
set -euo pipefail
run=$1 train=$2 bench=$3 estimate=$4 python=$5 src=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$src/tests/bench/estimate_rss_lib.sh"
cp "$src/docs/estimate.md" "$dir/text.txt"  # any fixed text: the loss does not matter here
# 8 x 128 tokens per rank; a fixed mmap threshold, so that RSS follows the live tensors.
common=(data.path="$dir/text.txt" data.seq_len=128 data.val_fraction=0.05 data.cache_dir="$dir/cache"
        training.per_device_train_batch_size=8 training.max_steps=3 training.logging_steps=1
        training.eval_steps=0 training.save_strategy=no training.sample_tokens=0 training.warmup_steps=0
        training.malloc_mmap_threshold=65536)
status=0
# N:name:ep:tp; tp 2 x ep 2 places the experts whole over ep, each tp rank routing its chunk
# (TP 2 alone and PP 2 alone: EstimateVsParallelize, against counted tensors).
for c in 1:one:1:1 2:fsdp2:1:1 2:ep2:2:1 4:ep2x2:2:1 2:tp2ep2:2:2; do
  IFS=: read -r n name ep tp <<<"$c"
  # The trainer's own memory check runs on the same estimate (it no longer skips qwen3_moe).
  train_and_estimate "$name" "$n" "$src/configs/qwen3-moe-small.yaml" "${common[@]}" \
    parallelism.expert_parallel_degree=$ep parallelism.tensor_parallel_degree=$tp
  check_estimate "$name" 0.10 --expect expert_parallel=$ep --expect tensor_parallel=$tp --fewer-active || status=1
done
# Pipeline: 2 stages (1F1B, 4 microbatches of 2) x EP 2 on 4 ranks.
for c in 4:pp2ep2:2; do
  IFS=: read -r n name ep <<<"$c"
  train_and_estimate "$name" "$n" "$src/configs/qwen3-moe-small.yaml" "${common[@]}" \
    parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_microbatch_size=2 \
    parallelism.expert_parallel_degree=$ep
  check_estimate "$name" 0.10 --expect pipeline_parallel=2 --expect expert_parallel=$ep --fewer-active || status=1
done
exit $status
