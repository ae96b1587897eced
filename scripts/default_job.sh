#!/usr/bin/env bash
# The default `make run` job: fsdpp-train on 2 ranks with FULL_SHARD, training a small
# Llama-style model on English text from Debian's `fortunes` package (configs/default.yaml).
set -euo pipefail
build=${1:-build}
shift || true
# A second `make run` replaces the first run in runs/default once it has ended (fsdpp-train
# refuses an output_dir holding another run otherwise); while the first still runs, the second is
# refused, naming it: overwrite_output_dir replaces a finished run, never a live one. ARGS come
# after, so training.resume_from_checkpoint=latest continues it instead.
# GPUs this process may use: CUDA_VISIBLE_DEVICES's entries when it is set, else nvidia-smi's.
visible_gpus() {
  if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
    local list=${CUDA_VISIBLE_DEVICES//[[:space:]]/}
    [[ -z "$list" ]] && echo 0 || awk -F, '{print NF}' <<< "$list"
  elif command -v nvidia-smi > /dev/null; then
    nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true
  else
    echo 0
  fi
}
# One GPU: NCCL takes one rank per GPU, so the two ranks share it over Gloo instead of the second
# rank stopping for want of a GPU (docs/gpus.md). FSDPP_DEVICE or FSDPP_BACKEND set: as given.
cuda_build=1
if [[ -f "$build/CMakeCache.txt" ]] && ! grep -q '^FSDPP_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
  cuda_build=0
fi
if [[ -z "${FSDPP_DEVICE:-}${FSDPP_BACKEND:-}" && $cuda_build == 1 && "$(visible_gpus)" == 1 ]]; then
  export FSDPP_DEVICE=cuda:0 FSDPP_BACKEND=gloo
  echo "[run] one GPU: the 2 ranks share cuda:0 over Gloo (FSDPP_DEVICE=cuda:0 FSDPP_BACKEND=gloo)"
fi
echo "[run] fsdpp-run --nproc-per-node 2 $build/bin/fsdpp-train configs/default.yaml training.overwrite_output_dir=true $*"
exec "$build/bin/fsdpp-run" --nproc-per-node 2 "$build/bin/fsdpp-train" configs/default.yaml \
  training.overwrite_output_dir=true "$@"
