#!/usr/bin/env bash
# Chaos: fsdpp's strongest promise, that a run killed anywhere resumes to the same bits, as a
# make-test case (faults.chaos, issue 43).
#   A: the default model (configs/default.yaml: dim 128, 4 layers, fortunes text) on 2 ranks,
#      uninterrupted: 30 steps, a checkpoint every 5, the validation loss every 15.
#   B: the same job under fsdpp-run --max-restarts, with a rank SIGKILLed from outside at random
#      moments, 3 times, each after a checkpoint exists: at a random step of the current
#      attempt (after its resume), a random 0-499 ms into it (inside a step, an evaluation or a
#      save), a random rank (0 is the store's host). Each restart resumes from the newest complete
#      checkpoint by itself.
#   Then every file of B's final checkpoint (every parameter's and optimizer tensor's shard, the
#   index, the tokenizer) is byte for byte A's, and B's metrics.jsonl holds every step once with
#   the same loss, validation loss, learning rate and gradient norm as A's, bit for bit.
# The moments come from one seed, printed first: FSDPP_CHAOS_SEED=N replays the same choices
# (the same steps, delays and ranks; the machine's timing may still move a kill within its step).
#   chaos.sh RUN TRAIN PYTHON SRC
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
D=$(mktemp -d)
launcher=
trap '[ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$D"' EXIT
seed=${FSDPP_CHAOS_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
echo "chaos seed $seed (FSDPP_CHAOS_SEED=$seed replays it)"
RANDOM=$seed
STEPS=${FSDPP_CHAOS_STEPS:-30} SAVE=5 KILLS=${FSDPP_CHAOS_KILLS:-3}
job=("$train" "$src/configs/default.yaml" training.max_steps=$STEPS training.save_steps=$SAVE
     training.eval_steps=15 training.logging_steps=1 training.sample_tokens=0
     training.report_to=none data.cache_dir="$D/cache")

# rank_pid LAUNCHER RANK: that worker's pid, if it runs.
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; then echo "$p"; return; fi
  done
}
# The step of metrics.jsonl's last line (0 when there is none).
last_step() {
  local line
  line=$(tail -n 1 "$1" 2>/dev/null || true)
  [[ $line =~ \"step\":([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo 0
}

start=$(date +%s.%N)
"$run" --nproc-per-node 2 --timeout-s 60 "${job[@]}" training.output_dir="$D/A" > "$D/A.log" 2>&1 ||
  { echo "FAIL: the uninterrupted run failed"; tail -n 30 "$D/A.log"; exit 1; }
a_secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# The kill steps, ascending, each after the first checkpoint and early enough (10 steps before
# the end) that the attempt is still running when the kill comes.
targets=()
for ((i = 0; i < KILLS; i++)); do targets+=($((SAVE + 1 + RANDOM % (STEPS - SAVE - 10)))); done
mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -n)
start=$(date +%s.%N)
"$run" --nproc-per-node 2 --timeout-s 60 --grace-s 2 --max-restarts "$KILLS" "${job[@]}" \
  training.output_dir="$D/B" > "$D/B.log" 2>&1 &
launcher=$!
metrics="$D/B/metrics.jsonl"
done_kills=0 resumes=0 floor=0
for target in "${targets[@]}"; do
  delay_ms=$((RANDOM % 500)) rank=$((RANDOM % 2))
  want=$((target > floor ? target : floor + 1))
  # This attempt at the target step (its own lines: a resume cuts metrics.jsonl back first).
  for ((t = 0; t < 1200; t++)); do
    kill -0 "$launcher" 2>/dev/null || break
    [ "$(last_step "$metrics")" -ge "$want" ] && break
    sleep 0.1
  done
  kill -0 "$launcher" 2>/dev/null || { echo "FAIL: the job ended before kill $((done_kills + 1))"; tail -n 30 "$D/B.log"; exit 1; }
  sleep "$(awk -v m="$delay_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
  pid=$(rank_pid "$launcher" "$rank")
  [ -n "$pid" ] || { echo "FAIL: no rank $rank to kill at step $want"; tail -n 30 "$D/B.log"; exit 1; }
  at=$(last_step "$metrics")
  kill -9 "$pid"
  done_kills=$((done_kills + 1))
  echo "kill $done_kills: rank $rank (pid $pid) at step $at (target $want, +$delay_ms ms)"
  # The next attempt's resume: its step is the floor of the next target.
  for ((t = 0; t < 1200; t++)); do
    n=$(grep -c '\[train\] resumed from ' "$D/B.log" || true)
    [ "$n" -gt "$resumes" ] && break
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  resumes=$(grep -c '\[train\] resumed from ' "$D/B.log" || true)
  [ "$resumes" -ge "$done_kills" ] || { echo "FAIL: no resume after kill $done_kills"; tail -n 30 "$D/B.log"; exit 1; }
  floor=$(grep -o '\[train\] resumed from [^ ]* (step [0-9]*' "$D/B.log" | tail -n 1 | grep -o '[0-9]*$')
  echo "      resumed from step $floor"
done
set +e; wait "$launcher"; rc=$?; set -e
launcher=
b_secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ "$rc" = 0 ] || { echo "FAIL: the killed job exited $rc"; tail -n 40 "$D/B.log"; exit 1; }
[ "$done_kills" -ge 2 ] || { echo "FAIL: only $done_kills kills"; exit 1; }
restarts=$(grep -c 'restarting workers (attempt' "$D/B.log" || true)
[ "$restarts" = "$done_kills" ] || { echo "FAIL: $restarts restarts for $done_kills kills"; tail -n 40 "$D/B.log"; exit 1; }

final="checkpoint-$STEPS"
n=0
for f in "$D/A/$final"/*; do
  name=$(basename "$f")
  if [ "$name" = trainer_state.json ]; then  # but for the digest of metrics.jsonl, whose lines hold timings
    "$python" -c 'import json, sys; a, b = (json.load(open(p)) for p in sys.argv[1:]); a.pop("metrics_xxh3"); b.pop("metrics_xxh3"); sys.exit(a != b)' \
      "$f" "$D/B/$final/$name" || { echo "FAIL: $final/$name differs"; exit 1; }
  else
    cmp "$f" "$D/B/$final/$name" || { echo "FAIL: $final/$name differs after $done_kills kills (seed $seed)"; exit 1; }
  fi
  n=$((n + 1))
done
[ -z "$(ls "$D/B/$final" | grep -vxF -f <(ls "$D/A/$final"))" ] || { echo "FAIL: B's $final has other files"; exit 1; }
"$python" - "$D" "$STEPS" "$final" <<'PY'
import glob, json, os, sys
from safetensors import safe_open
d, steps, final = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def lines(run):
    out = {}
    for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl")):
        assert j["step"] not in out, f"{run}: step {j['step']} logged twice"
        out[j["step"]] = {k: j.get(k) for k in ("loss", "val_loss", "lr", "grad_norm")}
    assert sorted(out) == list(range(1, steps + 1)), f"{run}: steps {sorted(out)}"
    return out
a, b = lines("A"), lines("B")
diff = {s: (a[s], b[s]) for s in a if a[s] != b[s]}
assert not diff, f"logged values differ: {diff}"
values = sum(v is not None for s in a.values() for v in s.values())
tensors = 0
for f in glob.glob(f"{d}/B/{final}/*.safetensors"):
    with safe_open(f, "pt") as t:
        tensors += len(list(t.keys()))
print(f"ok   {len(a)} steps: {values} logged values (loss, val_loss, lr, grad_norm) bit-identical; "
      f"{tensors} tensors (parameters and AdamW state, every shard) in byte-identical files")
PY
echo "ok   chaos: $done_kills SIGKILLs, $restarts restarts; uninterrupted run $a_secs s, killed run $b_secs s; $n files of $final identical"
