#!/usr/bin/env bash
# Two hosts on this machine: Linux network namespaces joined by a veth pair (10.77.0.1/24 and
# 10.77.0.2/24), one fsdpp-run node in each with 2 ranks, master on the first. fsdpp-train runs
# HYBRID_SHARD (shard inside a node, replicate across the two; node 0 finds its network
# interface by the route to MASTER_ADDR, node 1 is given it with FSDPP_SOCKET_IFNAME).
# Node 1 is started as the seeds write it (RANK=2 WORLD_SIZE=4 MASTER_ADDR MASTER_PORT exported,
# fsdpp-run --nproc-per-node 2 only). The job must equal
#   - the same job as one 4-rank node on the host (2x2 mesh by fsdp_hybrid_shard_group_size=2):
#     every loss and every final parameter bit for bit;
#   - one process on the whole batch: losses within 1e-4, parameters within 1e-4 (relative to
#     max(1, |p|); AdamW turns the rounding differences of the reduction order into up to ~5e-5).
# The traffic between the nodes must have crossed the veth: its byte counters grow by at least the
# replicate-group bytes the trainer counted (comm_bytes_inter) and by less than what a layout
# sharding across the nodes would need. Then failures across the namespaces: a node that never
# arrives is named within --rdzv-timeout-s, and killing one node's launcher mid-training stops
# the other within seconds, naming the node.
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN): without it the test FAILS with that reason, it never
# skips. Names carry this process's id, so concurrent runs do not clash; everything is removed on
# exit, whatever happens.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
start=$SECONDS

fail() { echo "[multinode] FAIL: $*" >&2; exit 1; }
source "$(dirname "$0")/two_hosts.sh"
two_hosts mn 10.77.0
port=29400

veth_bytes() {  # NS IF: bytes sent + received on that veth end
  ip netns exec "$1" sh -c "echo \$((\$(cat /sys/class/net/$2/statistics/tx_bytes) + \$(cat /sys/class/net/$2/statistics/rx_bytes)))"
}

steps=6
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 model.dim=64
        model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.max_steps=$steps training.logging_steps=1 training.eval_steps=0
        training.eval_max_batches=2 training.sample_tokens=0 training.warmup_steps=2
        training.learning_rate=0.003 training.seed=7 training.save_steps=$steps
        training.fsdp_config.fsdp_state_dict_type=FULL_STATE_DICT data.cache_dir="$dir/cache")
hybrid=(training.fsdp=hybrid_shard training.per_device_train_batch_size=2)

# The tokenized corpus is made once, outside the timing of the two-node run.
"$run" --nproc-per-node 1 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  training.fsdp=full_shard training.per_device_train_batch_size=8 \
  training.output_dir="$dir/single" > "$dir/single.log" 2>&1 || { cat "$dir/single.log"; fail "the 1-process run failed"; }

# ---- the two-node job ------------------------------------------------------------------------
# NS NODE_RANK OUT_DIR IFNAME [fsdpp-run flags...] -- one node of the job, in the background. Node 0
# is placed by flags; node 1 by the environment-variable recipe of the seeds (docs/multi-node.md):
# RANK=2 (its first rank), WORLD_SIZE=4, MASTER_ADDR, MASTER_PORT, and only --nproc-per-node.
node() {
  local ns=$1 k=$2 out=$3 ifname=$4
  shift 4
  local placement=(--nnodes 2 --node-rank 0 --master-addr $addrA --master-port $port) vars=()
  [ "$k" = 0 ] || { placement=(); vars=(RANK=$((2 * k)) WORLD_SIZE=4 MASTER_ADDR=$addrA MASTER_PORT=$port); }
  ip netns exec "$ns" env FSDPP_SOCKET_IFNAME="$ifname" "${vars[@]}" "$run" "${placement[@]}" --nproc-per-node 2 \
    --timeout-s 60 "$@" "$train" "$src/configs/default.yaml" "${common[@]}" \
    "${hybrid[@]}" training.output_dir="$out" > "$dir/node$k.log" 2>&1 &
  pids+=($!)
  last_pid=$!
}
before=$(veth_bytes "$nsA" "$vethA")
t0=$SECONDS
# Node 0's ranks find their interface by the route to MASTER_ADDR; node 1's are told it.
node "$nsA" 0 "$dir/netns" "" --rdzv-timeout-s 30; p0=$last_pid
node "$nsB" 1 "$dir/netns" "$vethB" --rdzv-timeout-s 30; p1=$last_pid
rc0=0 rc1=0
wait $p0 || rc0=$?
wait $p1 || rc1=$?
two_node_s=$((SECONDS - t0))
after=$(veth_bytes "$nsA" "$vethA")
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { tail -n 30 "$dir/node0.log" "$dir/node1.log"; fail "the two-node run failed (node 0: $rc0, node 1: $rc1)"; }
grep -q "RANK/WORLD_SIZE set by hand (its workers get RANK 2-3 and LOCAL_RANK 0-1): node 1 of 2" "$dir/node1.log" ||
  { grep "^\[fsdpp-run\]" "$dir/node1.log"; fail "node 1's launcher did not read RANK=2 WORLD_SIZE=4 as node 1 of 2"; }

# ---- the same job on one 4-rank node ----------------------------------------------------------
"$run" --nproc-per-node 4 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}" \
  "${hybrid[@]}" training.fsdp_config.fsdp_hybrid_shard_group_size=2 \
  training.output_dir="$dir/host4" > "$dir/host4.log" 2>&1 || { tail -n 30 "$dir/host4.log"; fail "the 4-rank run on one node failed"; }

"$python" - "$dir" $steps $((after - before)) "$two_node_s" <<'PY'
import json, os, sys
import torch
from safetensors.torch import load_file
d, steps, veth, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def metrics(run):
    return [json.loads(l) for l in open(f"{d}/{run}/metrics.jsonl")]
def params(run):
    ck = f"{d}/{run}/checkpoint-{steps}"
    out = {}
    for f in sorted(os.listdir(ck)):
        if f.endswith(".safetensors") and "optim" not in f:
            out.update(load_file(f"{ck}/{f}"))
    assert out, f"no model tensors in {ck}: {os.listdir(ck)}"
    return out
nn, h4, one = metrics("netns"), metrics("host4"), metrics("single")
assert [m["step"] for m in nn] == list(range(1, steps + 1)), [m["step"] for m in nn]
ln, lh, l1 = [m["loss"] for m in nn], [m["loss"] for m in h4], [m["loss"] for m in one]
print(f"[multinode] two nodes x 2 ranks (netns, {secs} s): losses {', '.join(f'{x:.6f}' for x in ln)}")
print(f"[multinode] one node  x 4 ranks (host)       : losses {', '.join(f'{x:.6f}' for x in lh)}")
print(f"[multinode] one process                      : losses {', '.join(f'{x:.6f}' for x in l1)}")
assert ln == lh, f"two nodes and one 4-rank node differ: {ln} vs {lh}"
worst = max(abs(a - b) for a, b in zip(ln, l1))
print(f"[multinode] losses: equal bit for bit to the 4-rank node; max |diff| to 1 process {worst:.2e}")
assert worst < 1e-4, worst
pn, ph, p1 = params("netns"), params("host4"), params("single")
assert pn.keys() == ph.keys() == p1.keys(), (sorted(pn), sorted(p1))
for k in pn:
    assert torch.equal(pn[k], ph[k]), f"final parameter {k} differs between two nodes and one"
rel = max(((pn[k] - p1[k]).abs().max() / p1[k].abs().max().clamp(min=1)).item() for k in pn)
print(f"[multinode] final parameters: {len(pn)} tensors equal bit for bit to the 4-rank node; "
      f"max relative diff to 1 process {rel:.2e}")
assert rel < 1e-4, rel
# Traffic: rank 0's counters per step; ranks 0 and 1 of node 0 each send as much across.
inter = sum(m["comm_bytes_inter"] for m in nn)
intra = sum(m["comm_bytes_intra"] for m in nn)
assert all(m["comm_bytes_inter"] > 0 and m["comm_bytes_intra"] > 0 for m in nn), nn
assert inter == sum(m["comm_bytes_inter"] for m in h4) and intra == sum(m["comm_bytes_intra"] for m in h4)
# Theory per rank per step (S padded parameter bytes, F = 2 ranks per shard group, R = 2 groups):
# intra 3*S*(F-1)/F = 1.5 S, inter 2*(S/F)*(R-1)/R = 0.5 S, so intra = 3 x inter, plus the one
# all-reduce of a double by clip_grad_norm_ inside the shard group (2*8*(F-1)/F = 8 B) and the
# step's loss-token count, an int64 all-reduced inside the shard group (8 B) and across the
# replicas (2*8*(R-1)/R = 8 B): intra = 3 x (inter - 8) + 16. The last step also evaluates
# (all-gathers only, inside the node), so it is left out.
for m in nn[:-1]:
    assert m["comm_bytes_intra"] == 3 * (m["comm_bytes_inter"] - 8) + 16, m
per_step = nn[0]
print(f"[multinode] per step rank 0 sent {per_step['comm_bytes_intra']} B inside its node and "
      f"{per_step['comm_bytes_inter']} B across: intra = 3 x (inter - 8) + 16 as theory says "
      f"(S = {(per_step['comm_bytes_inter'] - 8) * 2} B); {steps} steps: {intra} B intra, {inter} B inter")
node_across = 2 * inter  # node 0's two ranks, each to its replica on node 1, and back as much
print(f"[multinode] veth {veth} B in+out during the run; node 0's ranks sent {node_across} B "
      f"across by the counters (x2 with what node 1 sent back = {2 * node_across} B)")
assert veth >= 2 * node_across, "less traffic crossed the veth than the replicate all-reduces need"
# TCP/IP headers, acknowledgements, the store's and the metrics' few bytes: a few percent more.
# Had the shard groups spanned the nodes, the 1.5 S per rank per step would cross as well (4x).
print(f"[multinode] veth / counted = {veth / (2 * node_across):.3f}")
assert veth < 1.25 * 2 * node_across, "more traffic crossed the veth than the layout explains"
PY

# ---- failures across the namespaces ----------------------------------------------------------
# Node 1 never arrives: node 0 names it within its --rdzv-timeout-s.
t0=$SECONDS
rc=0
ip netns exec "$nsA" "$run" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr $addrA \
  --master-port $port --rdzv-timeout-s 3 "$train" "$src/configs/default.yaml" > "$dir/alone.log" 2>&1 || rc=$?
alone_s=$((SECONDS - t0))
[ $rc = 1 ] || { cat "$dir/alone.log"; fail "node 0 alone exited $rc, expected 1"; }
grep -q "node rank(s) 1 of 2 did not arrive (arrived: 0)" "$dir/alone.log" || { cat "$dir/alone.log"; fail "node 0 alone did not name node 1"; }
[ $alone_s -le 8 ] || fail "node 0 alone took $alone_s s with --rdzv-timeout-s 3"
echo "[multinode] node 1 never arrived: node 0 said so after $alone_s s: $(grep -o 'rendezvous at.*arrive (arrived: 0)' "$dir/alone.log")"

# Node 1's launcher is SIGKILLed mid-training: node 0 stops and names node 1.
long=(training.max_steps=100000 training.save_steps=0)
ip netns exec "$nsA" "$run" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr $addrA \
  --master-port $port --timeout-s 60 --heartbeat-timeout-s 3 "$train" "$src/configs/default.yaml" \
  "${common[@]}" "${hybrid[@]}" "${long[@]}" training.output_dir="$dir/killed" > "$dir/k0.log" 2>&1 &
k0=$!; pids+=($k0)
ip netns exec "$nsB" "$run" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr $addrA \
  --master-port $port --timeout-s 60 --heartbeat-timeout-s 3 "$train" "$src/configs/default.yaml" \
  "${common[@]}" "${hybrid[@]}" "${long[@]}" training.output_dir="$dir/killed" > "$dir/k1.log" 2>&1 &
k1=$!; pids+=($k1)
for _ in $(seq 300); do  # until a few steps are logged
  [ -f "$dir/killed/metrics.jsonl" ] && [ "$(wc -l < "$dir/killed/metrics.jsonl")" -ge 3 ] && break
  kill -0 $k0 2> /dev/null || break
  sleep 0.1
done
[ -f "$dir/killed/metrics.jsonl" ] || { cat "$dir/k0.log" "$dir/k1.log"; fail "the long run did not start training"; }
kill -9 $k1
t0=$(date +%s.%N)
rc=0
wait $k0 || rc=$?
stop_s=$("$python" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
[ $rc = 1 ] || { tail -n 20 "$dir/k0.log"; fail "node 0 exited $rc after node 1's launcher was killed, expected 1"; }
grep -q "node 1's launcher" "$dir/k0.log" || { tail -n 20 "$dir/k0.log"; fail "node 0's launcher did not name node 1"; }
"$python" -c "import sys; sys.exit(0 if float(sys.argv[1]) < 10 else 1)" "$stop_s" ||
  { tail -n 20 "$dir/k0.log"; fail "node 0 took $stop_s s to stop after node 1's launcher was killed"; }
echo "[multinode] node 1's launcher killed: node 0 exited 1 after $stop_s s:"
grep "^\[fsdpp-run\]" "$dir/k0.log" | sed 's/^/[multinode]   /'
echo "[multinode] passed in $((SECONDS - start)) s"
