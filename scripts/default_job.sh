#!/usr/bin/env bash
# The default `make run` job: fsdpp-train on 2 ranks with FULL_SHARD, training a small
# Llama-style model on English text from Debian's `fortunes` package (configs/default.yaml).
set -euo pipefail
build=${1:-build}
shift || true
# A second `make run` replaces the first run in runs/default (fsdpp-train refuses an output_dir
# holding another run otherwise); ARGS come after, so training.resume_from_checkpoint=latest
# continues it instead.
echo "[run] fsdpp-run --nproc-per-node 2 $build/bin/fsdpp-train configs/default.yaml training.overwrite_output_dir=true $*"
exec "$build/bin/fsdpp-run" --nproc-per-node 2 "$build/bin/fsdpp-train" configs/default.yaml \
  training.overwrite_output_dir=true "$@"
