#!/usr/bin/env bash
# On a machine without a GPU (this one, CI's) the gpu tests must fail at once and say why,
# never pass by skipping: fsdpp_gpu_tests and a gpu_tests.sh run both.
set -uo pipefail
bin=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$("$bin/fsdpp_gpu_tests" 2>&1)
rc=$?
echo "$out"
[[ $rc -ne 0 ]] || { echo "FAIL: fsdpp_gpu_tests exited 0 without a GPU"; exit 1; }
grep -q "no CUDA device is visible" <<<"$out" || { echo "FAIL: the message does not name the missing GPU"; exit 1; }
out=$(bash "$src/tests/gpu/gpu_tests.sh" unit_nccl "$bin" "$src" "$work/unit" 2>&1)
rc=$?
[[ $rc -ne 0 ]] || { echo "FAIL: gpu_tests.sh unit_nccl passed without a GPU"; exit 1; }
grep -q "no CUDA device is visible" <<<"$out" || { echo "FAIL: gpu_tests.sh did not name the missing GPU: $out"; exit 1; }
echo "ok: without a GPU the gpu tests fail naming why"
