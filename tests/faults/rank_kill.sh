#!/usr/bin/env bash
# A rank killed with SIGKILL in the middle of a step (FSDPP_FAULT_KILL=1:5: rank 1 kills itself
# at step 5, after its backward, on the first attempt only).
#   K: no restarts. fsdpp-run stops rank 0 and exits 1 naming rank 1 and SIGKILL, within 10 s
#      of the kill (the killed rank prints the time just before it dies).
#   A: the same job, uninterrupted, 8 steps, FULL checkpoints every 2 steps.
#   B: A's job with the kill and --max-restarts 1: attempt 2 resumes from checkpoint-4 by itself
#      (FSDPP_RESTART_COUNT=1) and ends with a checkpoint-8 whose files are byte for byte A's,
#      and the same losses at every step.
# TRAIN is fsdpp-train-faults (tests/support/): fsdpp-train that carries out FSDPP_FAULT_KILL.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
FAULT_DIR=$(mktemp -d)
trap 'rm -rf "$FAULT_DIR"' EXIT
source "$(dirname "$0")/lib.sh"
common=(data.path="$src/configs" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.logging_steps=1 training.eval_steps=0 training.save_steps=2
        training.sample_tokens=0 training.warmup_steps=2 training.learning_rate=0.003
        training.max_steps=8 training.per_device_train_batch_size=4 training.seed=3
        training.fsdp_config.fsdp_state_dict_type=FULL_STATE_DICT data.cache_dir="$FAULT_DIR/cache")
job=("$src/configs/default.yaml" "${common[@]}")

# K: the kill, no restart.
FSDPP_FAULT_KILL=1:5 expect_fail kill_no_restart 1 \
  'rank 1 \(local 1, pid [0-9]+\) was killed by signal 9 \(SIGKILL\); stopped the other 1 worker' -- \
  "$run" --nproc-per-node 2 --timeout-s 60 "$train" "${job[@]}" training.output_dir="$FAULT_DIR/K"
end=$(date +%s.%N)
killed_at=$(sed -n 's/.*FSDPP_FAULT_KILL: rank 1 sends itself SIGKILL at step 5 (t=\([0-9.]*\)).*/\1/p' \
            "$FAULT_DIR/kill_no_restart.log")
[ -n "$killed_at" ] || { echo "FAIL: the killed rank did not report the kill"; exit 1; }
stop_s=$(awk -v a="$killed_at" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
echo "measured: fsdpp-run exited $stop_s s after rank 1 was killed (limit 10 s)"
awk -v s="$stop_s" 'BEGIN { exit !(s < 10) }' || { echo "FAIL: took $stop_s s"; exit 1; }
[ -d "$FAULT_DIR/K/checkpoint-4" ] && [ ! -d "$FAULT_DIR/K/checkpoint-6" ]

# A: uninterrupted.
"$run" --nproc-per-node 2 --timeout-s 60 "$train" "${job[@]}" training.output_dir="$FAULT_DIR/A" \
  > "$FAULT_DIR/A.log" 2>&1 || { tail -n 30 "$FAULT_DIR/A.log"; exit 1; }

# B: killed at step 5, restarted once.
FSDPP_FAULT_KILL=1:5 "$run" --nproc-per-node 2 --timeout-s 60 --max-restarts 1 "$train" "${job[@]}" \
  training.output_dir="$FAULT_DIR/B" > "$FAULT_DIR/B.log" 2>&1 || { tail -n 40 "$FAULT_DIR/B.log"; exit 1; }
for want in 'FSDPP_FAULT_KILL: rank 1 sends itself SIGKILL at step 5' \
            'rank 1 \(local 1, pid [0-9]+\) was killed by signal 9' \
            'restarting workers \(attempt 2 of 2\)' \
            '\[train\] restart 1: resuming from the newest checkpoint' \
            "\[train\] resumed from $FAULT_DIR/B/checkpoint-4 \(step 4"; do
  grep -Eq -- "$want" "$FAULT_DIR/B.log" || { echo "FAIL: B's log lacks /$want/"; tail -n 40 "$FAULT_DIR/B.log"; exit 1; }
done
echo "ok   restart: attempt 2 resumed from checkpoint-4"

n=0
for f in "$FAULT_DIR"/A/checkpoint-8/*; do
  name=$(basename "$f")
  if [ "$name" = trainer_state.json ]; then  # but for the digest of metrics.jsonl, whose lines hold timings
    "$python" -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); a.pop("metrics_xxh3"); b.pop("metrics_xxh3"); sys.exit(a != b)' \
      "$f" "$FAULT_DIR/B/checkpoint-8/$name" || { echo "FAIL: checkpoint-8/$name differs"; exit 1; }
  else
    cmp "$f" "$FAULT_DIR/B/checkpoint-8/$name" || { echo "FAIL: checkpoint-8/$name differs"; exit 1; }
  fi
  n=$((n + 1))
done
[ "$n" -ge 3 ] || { echo "FAIL: only $n files in A/checkpoint-8"; exit 1; }
echo "ok   checkpoint-8 of the restarted run: $n files identical to the uninterrupted run's"
"$python" - "$FAULT_DIR" <<'PY'
import json, sys
from safetensors.torch import load_file
import torch
d = sys.argv[1]
def losses(run):
    return {j["step"]: j["loss"] for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
a, b = losses("A"), losses("B")
assert sorted(a) == list(range(1, 9)) and sorted(b) == list(range(1, 9)), (sorted(a), sorted(b))
assert a == b, {s: (a[s], b[s]) for s in a if a[s] != b[s]}
ta = load_file(f"{d}/A/checkpoint-8/model.safetensors")
tb = load_file(f"{d}/B/checkpoint-8/model.safetensors")
assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
print(f"ok   losses of steps 1..8 equal bit for bit (step 8: {b[8]!r}); {len(ta)} parameters equal")
PY
