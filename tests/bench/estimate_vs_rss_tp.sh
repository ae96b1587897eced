#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS under tensor parallelism: fsdpp-train runs the model
# of estimate_vs_rss.sh with TP 2 (2 ranks), TP 2 x FSDP 2 and TP 2 x FSDP 2 with sequence
# parallelism (4 ranks); fsdpp-estimate reads the same config and overrides (its parallelism:
# section passes through train::configured_estimate) and must be within 15% of the worst rank's
# peak RSS (metrics.jsonl's peak_rss_mb, a max over the ranks). The runtime term is fsdpp-bench
# baseline's, as make bench measures it.
set -euo pipefail
run=$1 train=$2 bench=$3 estimate=$4 python=$5 src=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$src/tests/bench/estimate_rss_lib.sh"
cp "$src/docs/estimate.md" "$dir/text.txt"  # any fixed text: the loss does not matter here
# 3.1 M parameters (the model of estimate_vs_rss.sh), 8 x 128 tokens per data-parallel rank; a
# fixed mmap threshold, so that RSS follows the live tensors.
common=(data.path="$dir/text.txt" data.seq_len=128 data.val_fraction=0.05 data.cache_dir="$dir/cache"
        model.dim=256 model.n_layers=4 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=128
        training.per_device_train_batch_size=8 training.max_steps=3 training.logging_steps=1
        training.eval_steps=0 training.save_strategy=no training.sample_tokens=0 training.warmup_steps=0
        training.malloc_mmap_threshold=65536)
status=0
for c in 2:tp2:false 4:tp2x2:false 4:tp2x2sp:true; do
  IFS=: read -r n name sp <<<"$c"
  train_and_estimate "$name" "$n" "$src/configs/default.yaml" "${common[@]}" \
    parallelism.tensor_parallel_degree=2 parallelism.enable_sequence_parallel=$sp
  check_estimate "$name" 0.15 --expect tensor_parallel=2 || status=1
done
exit $status
