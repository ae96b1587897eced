#!/usr/bin/env bash
# train()'s memory check on a module of its own (tests/train/custom_memory_check.cpp: an MLP of
# DIM x DEPTH residual blocks, each block a unit):
#   fits: 256 x 2 on 2 ranks: the check describes 3 units (2 blocks and the root) holding the
#         module's own parameter count, and the step runs;
#   big : 2048 x 4 (134 M parameters, 0.5 GiB in fp32) on 2 ranks, each under `prlimit --data`
#         2.0 GiB: refused before its first step, naming the sizes; its per-rank parameters and
#         AdamW state equal 4 and 8 bytes x the module's count / 2 ranks. (With the check skipped
#         the same run dies in step 2: "DefaultCPUAllocator: can't allocate memory".)
set -euo pipefail
run=$1 prog=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --nproc-per-node 2 --timeout-s 120 "$prog" 256 2 training.output_dir="$dir/fits" 2>&1 | tee "$dir/fits.log"
params=$(sed -n 's/^\[rank 0\] params \([0-9]*\)$/\1/p' "$dir/fits.log")
want=$(awk -v p="$params" 'BEGIN { printf "%.4f", p / 1e6 }')
grep -q "\[train\] memory check: 3 units, $want M parameters" "$dir/fits.log" ||
  { echo "the check does not describe 3 units of $want M parameters"; exit 1; }
grep -q "\[train\] done: 1 steps" "$dir/fits.log"

limit=$((2 * 1024 * 1024 * 1024))
if prlimit --data=$limit "$run" --nproc-per-node 2 --timeout-s 120 "$prog" 2048 4 \
     training.output_dir="$dir/big" >"$dir/big.log" 2>&1; then
  cat "$dir/big.log"; echo "the 134 M parameter module was not refused under a 2 GiB data limit"; exit 1
fi
cat "$dir/big.log"
if grep -q "step     1/" "$dir/big.log"; then echo "refused only after a step"; exit 1; fi
grep -q "can't allocate memory" "$dir/big.log" && { echo "an allocation failed instead of the check"; exit 1; }
params=$(sed -n 's/^\[rank 0\] params \([0-9]*\)$/\1/p' "$dir/big.log")
line=$(grep -m1 "\[train\] this run needs an estimated" "$dir/big.log")
grep -q "the data limit (ulimit -d: 2.00 GiB" <<<"$line"
for part in "parameters 4" "optimizer state 8"; do
  name=${part% *} bytes=${part##* }
  want=$(awk -v p="$params" -v b="$bytes" 'BEGIN { printf "%.2f", p * b / 2 / 2^30 }')
  grep -q "$name $want GiB" <<<"$line" || { echo "expected $name $want GiB in: $line"; exit 1; }
done
echo "custom memory check: ok"
