#!/usr/bin/env bash
# The distillation guide's YAML and launch commands with fsdpp-train, as a new user runs them
# (docs/config.md#the-distillation-guides-options):
#  - its "Complete FSDP Configuration Example" `training:` section, unchanged, is read; its
#    Qwen3MoeDecoderLayer is refused with a clear message (fsdpp-train builds a Llama);
#  - with [TransformerBlock], on 2 ranks launched with the guide's torchrun spellings
#    (--nproc_per_node=2 --master_port=...), plus the options the guide names elsewhere
#    (fsdp_backward_prefetch: null, fsdp_sync_module_states, dataloader_num_workers: 4,
#    dataloader_pin_memory, and its launch script's override distillation.training.fsdp=...),
#    the losses equal those of the run without them, bit for bit;
#  - pin_memory on CPU is said once; a run resumed from a checkpoint with 4 loader threads
#    continues bit for bit; fsdp_sync_module_states makes a rank that built other weights
#    train as rank 0's (and without it, it does not);
#  - the guide's two-node commands (--nnodes=2 --node_rank=k --master_addr --master_port), here
#    two launchers on this host, give the same losses again.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 60000 "$src/docs/config.md" > "$dir/corpus.txt"

# The guide's example, as printed there.
cat > "$dir/default.yaml" <<'EOF'
# conf/distillation/default.yaml

training:
  # FSDP settings
  fsdp: "full_shard"
  fsdp_config:
    fsdp_transformer_layer_cls_to_wrap: ["Qwen3MoeDecoderLayer"]
    fsdp_backward_prefetch: "backward_pre"
    fsdp_forward_prefetch: false
    fsdp_auto_wrap_policy: "TRANSFORMER_BASED_WRAP"
    fsdp_state_dict_type: "FULL_STATE_DICT"
    fsdp_offload_params: false  # We have enough GPU memory

  # Memory optimization
  gradient_checkpointing: true
  bf16: true

  # Batch settings
  per_device_train_batch_size: 2
  gradient_accumulation_steps: 8

  # Other settings
  learning_rate: 5e-5
  num_train_epochs: 3
  save_steps: 500
  logging_steps: 10
EOF
small=(data.path="$dir/corpus.txt" data.cache_dir="$dir/cache" data.seq_len=16 model.dim=32
       model.n_layers=2 model.n_heads=2 model.max_seq_len=16 training.sample_tokens=0
       training.report_to=none training.logging_steps=1 training.max_steps=6)

# 1. Read unchanged; the layer class of another model is refused, naming what to write instead.
set +e
"$train" "$dir/default.yaml" "${small[@]}" training.output_dir="$dir/qwen" > "$dir/qwen.log" 2>&1
rc=$?
set -e
cat "$dir/qwen.log"
[ "$rc" -ne 0 ] || { echo "FAIL: Qwen3MoeDecoderLayer on a Llama was accepted"; exit 1; }
grep -q "names 'Qwen3MoeDecoderLayer', which is not a module class of the model" "$dir/qwen.log"
grep -q "expected its decoder layer's class, \[TransformerBlock\]" "$dir/qwen.log"

free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# 2. The guide's options on 2 ranks against the same run without them.
llama=(training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[TransformerBlock])
"$run" --nproc_per_node=2 --master_port=$(free_port) --timeout-s 120 "$train" "$dir/default.yaml" \
  "${small[@]}" "${llama[@]}" training.output_dir="$dir/guide" training.save_steps=3 \
  training.fsdp_config.fsdp_backward_prefetch=null training.fsdp_config.fsdp_sync_module_states=true \
  training.dataloader_num_workers=4 training.dataloader_pin_memory=true \
  distillation.training.fsdp="full_shard" | tee "$dir/guide.log"
"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$dir/default.yaml" "${small[@]}" "${llama[@]}" \
  training.output_dir="$dir/plain"
[ "$(grep -c 'dataloader_pin_memory=true has no effect on CPU' "$dir/guide.log")" -eq 1 ]
grep -q "data loader: 4 threads making up to 8 batches ahead" "$dir/guide.log"
grep -q "fsdp_backward_prefetch: NO_PREFETCH" "$dir/guide/config.yaml"

# 3. Resumed from step 3 with 4 loader threads: steps 4-6 as before.
"$run" --nproc-per-node 2 --timeout-s 120 "$train" "$dir/default.yaml" "${small[@]}" "${llama[@]}" \
  training.output_dir="$dir/resumed" training.resume_from_checkpoint="$dir/guide/checkpoint-3" \
  training.dataloader_num_workers=4

# 4. fsdp_sync_module_states gives every rank rank 0's weights: rank 1 builds other ones (another
#    init_std) and the run still equals the plain one; without it, it does not.
cat > "$dir/per_rank.sh" <<'EOF'
#!/bin/sh
prog=$1; shift
if [ "$RANK" = 0 ]; then exec "$prog" "$@" model.init_std=0.02; fi
exec "$prog" "$@" model.init_std=0.05
EOF
chmod +x "$dir/per_rank.sh"
for sync in true false; do
  "$run" --nproc-per-node 2 --timeout-s 120 "$dir/per_rank.sh" "$train" "$dir/default.yaml" \
    "${small[@]}" "${llama[@]}" training.output_dir="$dir/sync_$sync" \
    training.fsdp_config.fsdp_sync_module_states=$sync > "$dir/sync_$sync.log" 2>&1 \
    || { cat "$dir/sync_$sync.log"; exit 1; }
done

# 5. The guide's two-node commands, both nodes on this host.
port=$(free_port)
pids=()
for k in 0 1; do
  "$run" --nproc_per_node=1 --nnodes=2 --node_rank=$k --master_addr=127.0.0.1 --master_port=$port \
    --timeout-s 120 "$train" "$dir/default.yaml" "${small[@]}" "${llama[@]}" \
    training.output_dir="$dir/nodes" training.dataloader_num_workers=2 > "$dir/node$k.log" 2>&1 &
  pids+=($!)
done
for k in 0 1; do
  wait "${pids[$k]}" || { cat "$dir/node$k.log"; exit 1; }
done

"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{d}/{run}/metrics.jsonl")}
guide, plain, resumed, nodes, synced, unsynced = (
    losses(r) for r in ("guide", "plain", "resumed", "nodes", "sync_true", "sync_false"))
assert sorted(guide) == list(range(1, 7)), guide
print("guide's options :", [round(guide[s], 6) for s in sorted(guide)])
print("without them    :", [round(plain[s], 6) for s in sorted(plain)])
print("resumed at 3    :", [round(resumed[s], 6) for s in sorted(resumed)])
print("2 nodes x 1 rank:", [round(nodes[s], 6) for s in sorted(nodes)])
print("rank 1 other init, synced  :", [round(synced[s], 6) for s in sorted(synced)])
print("rank 1 other init, unsynced:", [round(unsynced[s], 6) for s in sorted(unsynced)])
assert guide == plain, "the guide's options changed the losses"
assert {s: guide[s] for s in (4, 5, 6)} == {s: resumed[s] for s in (4, 5, 6)}, "resume differs"
assert nodes == plain, "two launchers differ from one"
assert synced == plain, "fsdp_sync_module_states did not give rank 1 rank 0's weights"
assert unsynced != plain, "rank 1's other weights changed nothing: the check above proves nothing"
print("ok: equal bit for bit")
PY
