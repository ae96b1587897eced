#!/usr/bin/env bash
# fsdpp against PyTorch's own fully_shard on 2 ranks: same weights, batches and strategy.
set -euo pipefail
python=$1 run=$2 fsdpp_bin=$3 script=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" "$script" prepare "$dir"
"$run" --nproc-per-node 2 --timeout-s 120 "$python" "$script" train "$dir"
"$run" --nproc-per-node 2 --timeout-s 120 "$fsdpp_bin" "$dir"
"$python" "$script" compare "$dir"
