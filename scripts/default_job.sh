#!/usr/bin/env bash
# The default `make run` job: the quickstart example on 2 ranks with FULL_SHARD.
set -euo pipefail
build=${1:-build}
echo "[run] fsdpp-run --nproc-per-node 2 $build/bin/fsdpp-quickstart"
exec "$build/bin/fsdpp-run" --nproc-per-node 2 "$build/bin/fsdpp-quickstart" "${STEPS:-300}"
