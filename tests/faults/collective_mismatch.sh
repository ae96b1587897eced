#!/usr/bin/env bash
# Ranks that issue different collectives, in a real FSDP job over 2 processes
# (tests/faults/mismatch_driver.cpp: three equal Linear units and a root). The collective
# timeout is 30 s; each case must end well within it, with an error that names the divergence.
#   skip-unit: rank 1 skips unit 'layers.1' in step 2. Its all_gather for 'layers.2' pairs with
#              rank 0's for 'layers.1' (same size: Gloo cannot tell); a few collectives later
#              the sizes differ and Gloo's transport thread aborts rank 1, which publishes its
#              trace on the way out, sees rank 0's and names collective #N: rank 0 'layers.1',
#              rank 1 'layers.2'.
#   reorder:   rank 1 runs 'layers.2' before 'layers.1': both ranks stall, compare their traces
#              after 5 s (a fifth of the timeout, at most 5 s) and name the same collective.
#   the same two with FSDPP_COLLECTIVE_CHECK=1: found before the collective runs, by both ranks.
#   hang:      rank 1 stops issuing collectives; rank 0 times out (5 s here) naming itself, the
#              collective and module it waited on, and rank 1 as the one that published nothing.
set -euo pipefail
run=$1 driver=$2
FAULT_DIR=$(mktemp -d)
trap 'rm -rf "$FAULT_DIR"' EXIT
source "$(dirname "$0")/lib.sh"

sentence="the ranks disagree at collective #[0-9]+: rank 0 issued all_gather of \[[0-9]+\] Float for module 'layers.1'; rank 1 issued all_gather of \[[0-9]+\] Float for module 'layers.2'"
for check in 0 1; do
  for mode in skip-unit reorder; do
    FSDPP_COLLECTIVE_CHECK=$check expect_fail "$mode.check$check" 1 "$sentence" -- \
      "$run" --nproc-per-node 2 --timeout-s 30 "$driver" "$mode"
    echo "measured: $mode (FSDPP_COLLECTIVE_CHECK=$check): the job ended after $LAST_SECS s, start-up included (timeout 30 s)"
    awk -v s="$LAST_SECS" 'BEGIN { exit !(s < 20) }' || { echo "FAIL: $LAST_SECS s"; exit 1; }
    # Where both ranks live to tell, both name it, each well before the timeout.
    if [ "$mode" = reorder ] || [ "$check" = 1 ]; then
      for r in 0 1; do
        line=$(grep -E "\[driver\] rank $r caught after [0-9.]+ s: .*$sentence" "$FAULT_DIR/$mode.check$check.log" || true)
        [ -n "$line" ] || { echo "FAIL: rank $r did not name the divergence"; cat "$FAULT_DIR/$mode.check$check.log"; exit 1; }
        s=$(echo "$line" | sed -E 's/.*caught after ([0-9.]+) s.*/\1/')
        echo "measured: $mode (FSDPP_COLLECTIVE_CHECK=$check): rank $r named it $s s into the run"
      done
    fi
  done
done

expect_fail hang 1 \
  "rank 0 \(group '[^']+', 0 of 2\): collective #[0-9]+, all_gather of [0-9]+ B Float for module '[^']+'.*rank 1 published no trace" -- \
  "$run" --nproc-per-node 2 --timeout-s 5 "$driver" hang
