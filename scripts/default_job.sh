#!/usr/bin/env bash
# The default `make run` job: fsdpp-train on 2 ranks with FULL_SHARD, training a small
# Llama-style model on English text from Debian's `fortunes` package (configs/default.yaml).
set -euo pipefail
build=${1:-build}
shift || true
echo "[run] fsdpp-run --nproc-per-node 2 $build/bin/fsdpp-train configs/default.yaml $*"
exec "$build/bin/fsdpp-run" --nproc-per-node 2 "$build/bin/fsdpp-train" configs/default.yaml "$@"
