#!/usr/bin/env bash
# Restarts across nodes (fsdpp-run --max-restarts with --nnodes 2), on two hosts made of Linux
# network namespaces joined by a veth pair (as netns_hybrid.sh): a HYBRID_SHARD job of 2 nodes x
# 2 ranks, FULL checkpoints every 2 steps, where rank 3 (node 1's second worker) is SIGKILLed at
# step 5 of the first attempt (fsdpp-train-faults' FSDPP_FAULT_KILL=3:5). Both launchers must
# stop their workers, meet again through the job's store, start round 2 together
# (FSDPP_RESTART_COUNT=1), resume from checkpoint-4, and end with the losses of every step and the
# final parameters of the uninterrupted job, bit for bit (the same layout on one 4-rank node,
# which netns_hybrid.sh shows equal to two nodes bit for bit).
# Then node 1's launcher is SIGKILLed mid-run (its host "fails"): node 0 stops its workers, goes
# to the restart, and ends naming node 1, which did not come back.
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN): without it the test FAILS with that reason.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
start=$SECONDS
fail() { echo "[netns-restart] FAIL: $*" >&2; exit 1; }
source "$(dirname "$0")/two_hosts.sh"
two_hosts rs 10.78.0
port=29410

steps=8
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 model.dim=64 model.n_layers=2
        model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.max_steps=$steps
        training.logging_steps=1 training.eval_steps=0 training.sample_tokens=0 training.warmup_steps=2
        training.learning_rate=0.003 training.seed=7 training.save_steps=2
        training.fsdp_config.fsdp_state_dict_type=FULL_STATE_DICT data.cache_dir="$dir/cache"
        training.fsdp=hybrid_shard training.per_device_train_batch_size=2)

# The uninterrupted job: the same layout on one 4-rank node (2 x 2 mesh).
"$run" --nproc-per-node 4 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.fsdp_config.fsdp_hybrid_shard_group_size=2 training.output_dir="$dir/whole" \
  > "$dir/whole.log" 2>&1 || { tail -n 30 "$dir/whole.log"; fail "the uninterrupted run failed"; }

extra=()  # fsdpp-train overrides after the common ones
node() {  # NS NODE_RANK OUT LOG [fsdpp-run flags...]: one node of the job, in the background
  local ns=$1 k=$2 out=$3 log=$4
  shift 4
  ip netns exec "$ns" env FSDPP_FAULT_KILL="${KILL:-}" "$run" --nnodes 2 --node-rank "$k" --nproc-per-node 2 \
    --master-addr $addrA --master-port $port --timeout-s 60 --rdzv-timeout-s 60 --heartbeat-timeout-s 3 "$@" \
    "$train" "$src/configs/default.yaml" "${common[@]}" "${extra[@]}" training.output_dir="$out" > "$log" 2>&1 &
  pids+=($!)
  last_pid=$!
}

# ---- rank 3 killed at step 5; every node restarts once ----------------------------------------
t0=$SECONDS
KILL=3:5 node "$nsA" 0 "$dir/restarted" "$dir/r0.log" --max-restarts 1; p0=$last_pid
KILL=3:5 node "$nsB" 1 "$dir/restarted" "$dir/r1.log" --max-restarts 1; p1=$last_pid
rc0=0 rc1=0
wait $p0 || rc0=$?
wait $p1 || rc1=$?
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { tail -n 30 "$dir/r0.log" "$dir/r1.log"; fail "the restarted job failed (node 0: $rc0, node 1: $rc1)"; }
echo "[netns-restart] killed at step 5 and restarted: both nodes exited 0 after $((SECONDS - t0)) s"
for log in r0 r1; do
  grep -q "every node is back; restarting the workers of every node (attempt 2 of 2)" "$dir/$log.log" ||
    { tail -n 30 "$dir/$log.log"; fail "$log.log does not say the workers restarted together"; }
done
grep -q "FSDPP_FAULT_KILL: rank 3 sends itself SIGKILL at step 5" "$dir/r1.log" || fail "rank 3 was not killed"
grep -q "rank 3 (local 1, pid [0-9]*) was killed by signal 9 (SIGKILL)" "$dir/r1.log" || fail "node 1 did not name rank 3"
grep -Eq "\[train\] resumed from $dir/restarted/checkpoint-4 \(step 4" "$dir/r0.log" ||
  { grep train "$dir/r0.log" | tail; fail "round 2 did not resume from checkpoint-4"; }
grep "^\[fsdpp-run\]" "$dir/r0.log" "$dir/r1.log" | sed 's/^/[netns-restart]   /'

"$python" - "$dir" $steps <<'PY'
import json, sys
import torch
from safetensors.torch import load_file
d, steps = sys.argv[1], int(sys.argv[2])
def losses(run):
    return {j["step"]: j["loss"] for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
a, b = losses("whole"), losses("restarted")
assert sorted(a) == list(range(1, steps + 1)) == sorted(b), (sorted(a), sorted(b))
assert a == b, {s: (a[s], b[s]) for s in a if a[s] != b[s]}
ta = load_file(f"{d}/whole/checkpoint-{steps}/model.safetensors")
tb = load_file(f"{d}/restarted/checkpoint-{steps}/model.safetensors")
assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
print(f"[netns-restart] losses of steps 1..{steps} equal bit for bit to the uninterrupted run "
      f"({', '.join(f'{b[s]:.6f}' for s in sorted(b))}); {len(ta)} final parameters equal")
PY

# ---- node 1's launcher killed: it does not come back --------------------------------------------
extra=(training.max_steps=100000 training.save_steps=0)
node "$nsA" 0 "$dir/lost" "$dir/l0.log" --max-restarts 2; l0=$last_pid
node "$nsB" 1 "$dir/lost" "$dir/l1.log" --max-restarts 2; l1=$last_pid
for _ in $(seq 600); do
  [ -f "$dir/lost/metrics.jsonl" ] && [ "$(wc -l < "$dir/lost/metrics.jsonl")" -ge 2 ] && break
  kill -0 $l0 2> /dev/null || break
  sleep 0.1
done
[ -f "$dir/lost/metrics.jsonl" ] || { tail -n 20 "$dir/l0.log" "$dir/l1.log"; fail "the long run did not start training"; }
kill -9 $l1
t0=$SECONDS
rc=0
wait $l0 || rc=$?
[ $rc = 1 ] || { tail -n 20 "$dir/l0.log"; fail "node 0 exited $rc after node 1's launcher was killed, expected 1"; }
grep -q "restart 1 of the job: a node did not come back: node 1 (its launcher is gone" "$dir/l0.log" ||
  { tail -n 20 "$dir/l0.log"; fail "node 0 did not name node 1 as gone at the restart"; }
echo "[netns-restart] node 1's launcher killed: node 0 ended after $((SECONDS - t0)) s:"
grep "^\[fsdpp-run\]" "$dir/l0.log" | sed 's/^/[netns-restart]   /'
echo "[netns-restart] passed in $((SECONDS - start)) s"
