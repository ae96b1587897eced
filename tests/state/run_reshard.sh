#!/usr/bin/env bash
# Saves a SHARDED checkpoint on FROM ranks and loads it on TO ranks (fsdpp_reshard_tool).
# usage: run_reshard.sh FSDPP_RUN RESHARD_TOOL FROM TO
set -euo pipefail
run=$1 tool=$2 from=$3 to=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/fsdpp_reshard_${from}_${to}.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node "$from" --timeout-s 120 "$tool" save "$dir"
"$run" --nproc-per-node "$to" --timeout-s 120 "$tool" check "$dir"
