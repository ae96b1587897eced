#!/usr/bin/env bash
# fsdpp-train with a sentencepiece BPE tokenizer trained on the corpus (no model file given),
# size-based wrapping and SHARD_GRAD_OP on 2 ranks: the tokenizer is trained once, cached, and
# the run trains, evaluates and samples.
set -euo pipefail
run=$1 train=$2 src=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/llama-small.yaml" \
  data.path="$src/docs" data.tokenizer_vocab_size=400 data.seq_len=32 data.cache_dir="$dir/cache" \
  model.dim=32 model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 \
  training.fsdp=shard_grad_op training.fsdp_config.fsdp_min_num_params=3000 \
  training.max_steps=4 training.logging_steps=1 training.warmup_steps=1 \
  training.per_device_train_batch_size=4 training.sample_tokens=8 training.output_dir="$dir/out" | tee "$dir/log"
grep -q "tokenizer sentencepiece:" "$dir/log"
grep -q "SIZE_BASED_WRAP" "$dir/log"
ls "$dir"/cache/spm-bpe-400-*.model > /dev/null
[ "$(wc -l < "$dir/out/metrics.jsonl")" -eq 4 ]
