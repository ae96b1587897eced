#!/usr/bin/env bash
# The long run (label slow): configs/tinyshakespeare.yaml on 2 ranks with byte tokens; prints
# the final validation loss.
set -euo pipefail
run=$1 train=$2 src=$3
data="$src/../shared/data/tinyshakespeare.txt"
[ -f "$data" ] || { echo "missing $data (../shared beside the project)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node 2 "$train" "$src/configs/tinyshakespeare.yaml" data.path="$data" \
  training.output_dir="$dir/out"
grep val_loss "$dir/out/metrics.jsonl"
cp "$dir/out/metrics.jsonl" "${FSDPP_SLOW_METRICS:-/dev/null}" 2>/dev/null || true
