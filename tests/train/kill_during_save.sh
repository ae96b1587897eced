#!/usr/bin/env bash
# A training job SIGKILLed while a checkpoint is being written, once with synchronous saves and
# once with training.async_save: FSDPP_FAULT_SAVE_DELAY_MS slows the write of each checkpoint
# file so that the kill lands while checkpoint-6's temporary directory is being filled.
# Then: checkpoint-3 is whole (fsdpp-ckpt inspect verifies every checksum), there is no
# checkpoint-6 but a checkpoint-6.tmp-* left over, resume_from_checkpoint=latest picks
# checkpoint-3, removes the leftover and trains to step 9 with the losses of a run that was
# never interrupted, bit for bit.
# TRAIN_FAULTS is fsdpp-train-faults (tests/support/): fsdpp-train that carries out
# FSDPP_FAULT_SAVE_DELAY_MS; the runs that are killed start it.
set -euo pipefail
run=$1 train=$2 ckpt=$3 python=$4 src=$5 train_faults=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 data.cache_dir="$dir/cache"
        model.dim=64 model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.logging_steps=1 training.eval_steps=0 training.save_steps=3
        training.sample_tokens=0 training.learning_rate=0.003 training.lr_scheduler_type=constant
        training.max_steps=9 training.per_device_train_batch_size=4 training.seed=3)
job=("$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}")
faulty_job=("$run" --nproc-per-node 2 --timeout-s 120 "$train_faults" "$src/configs/default.yaml" "${common[@]}")
"${job[@]}" training.output_dir="$dir/U" > "$dir/U.log"

for mode in sync async; do
  out="$dir/$mode"
  async=false; [ "$mode" = async ] && async=true
  FSDPP_FAULT_SAVE_DELAY_MS=1500 "${faulty_job[@]}" training.output_dir="$out" training.async_save=$async \
    > "$dir/$mode-killed.log" 2>&1 &
  pid=$!
  # Wait for checkpoint-3 to be complete and checkpoint-6's temporary directory to appear.
  for _ in $(seq 1 600); do
    if [ -f "$out/checkpoint-3/trainer_state.json" ] && compgen -G "$out/checkpoint-6.tmp-*" > /dev/null; then
      break
    fi
    sleep 0.05
  done
  compgen -G "$out/checkpoint-6.tmp-*" > /dev/null || { echo "no save of checkpoint-6 started"; cat "$dir/$mode-killed.log"; exit 1; }
  sleep 0.3  # inside the 1.5 s delay before the first shard file
  kill -KILL "$pid"  # fsdpp-run; its workers die with it (PR_SET_PDEATHSIG)
  wait "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do pgrep -f -- "training.output_dir=$out" > /dev/null || break; sleep 0.1; done
  echo "[$mode] killed during the save of checkpoint-6: $(cd "$out" && ls -d checkpoint-* | tr '\n' ' ')"
  [ ! -e "$out/checkpoint-6" ] || { echo "checkpoint-6 appeared though its save was killed"; exit 1; }
  compgen -G "$out/checkpoint-6.tmp-*" > /dev/null
  "$ckpt" inspect "$out/checkpoint-3" > "$dir/$mode-inspect.txt"
  grep -q '"step":3' "$dir/$mode-inspect.txt"
  echo "[$mode] checkpoint-3: $(grep checksums: "$dir/$mode-inspect.txt" | sed 's/^ *//')"

  "${job[@]}" training.output_dir="$out" training.async_save=$async training.resume_from_checkpoint=latest \
    > "$dir/$mode-resumed.log"
  grep -q "resumed from $out/checkpoint-3 (step 3" "$dir/$mode-resumed.log" || { cat "$dir/$mode-resumed.log"; exit 1; }
  if compgen -G "$out/*.tmp-*" > /dev/null; then echo "leftover temporary directories"; ls "$out"; exit 1; fi
  for s in 3 6 9; do "$ckpt" inspect "$out/checkpoint-$s" > /dev/null; done
done

"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def losses(run):
    return {j["step"]: j["loss"] for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
u = losses("U")
for mode in ("sync", "async"):
    r = losses(mode)
    assert sorted(r) == list(range(1, 10)), (mode, sorted(r))
    bad = [s for s in r if r[s] != u[s]]
    assert not bad, f"{mode}: steps {bad} differ from the uninterrupted run"
    print(f"[{mode}] killed mid-save, resumed from checkpoint-3: steps 1..9 equal the uninterrupted run bit for bit")
PY
