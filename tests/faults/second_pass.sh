#!/usr/bin/env bash
# Reliability, second pass (docs/faults.md): what a demanding user found by trying to break a
# run, each case with what fsdpp must do now.
#   hung_rank0*        rank 0 (the store's host) frozen with SIGSTOP: rank 1 names it within the
#                      timeout, fsdpp-run stops the job, and --max-restarts restarts it
#   launcher_*         a frozen worker with no peer to notice it; a worker's leftover child
#   metrics_*          metrics.jsonl on a full disk, or deleted with its directory mid-run
#   output_dir_*       a second job on a held output_dir; output_dir that is a file
#   master_addr_bad    MASTER_ADDR that names no host
#   memory_*           a model that cannot fit, refused before it is allocated
#   sigterm_*          SIGTERM during a run with an async save in flight
#   rerun_finished     a finished job started again with resume 'latest'
# Exit codes as bad_input.sh's: 2 for configuration from fsdpp-train itself, 1 through fsdpp-run.
set -euo pipefail
run=$1 train=$2 src=$3
FAULT_DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$FAULT_DIR"' EXIT
source "$(dirname "$0")/lib.sh"
D=$FAULT_DIR
small_config "$src" "$D"
job=("$train" "$src/configs/default.yaml" "${small[@]}")

# wait_for FILE REGEX [SECONDS]: until a line of FILE matches (the job is under way).
wait_for() {
  local i
  for ((i = 0; i < ${3:-60} * 10; i++)); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "FAIL: no /$2/ in $1 after ${3:-60} s"; tail -n 20 "$1"; exit 1
}
# rank_pid LAUNCHER_PID RANK: the pid of that worker of the launcher.
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2"; then echo "$p"; return; fi
  done
}
secs_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- a frozen rank 0 ----------------------------------------------------------------------
# Before: rank 1 blocked for good in TCPStore::add (the hang detector's store read), no output.
hung() {  # NAME RESTARTS STEPS
  local log="$D/$1.log"
  "$run" --nproc-per-node 2 --timeout-s 5 --grace-s 1 --max-restarts "$2" "${job[@]}" \
    training.max_steps="$3" training.logging_steps=50 training.save_steps=100 \
    training.output_dir="$D/$1" > "$log" 2>&1 &
  local launcher=$!
  wait_for "$log" 'step +1/'
  sleep 1
  local r0
  r0=$(rank_pid "$launcher" 0)
  [ -n "$r0" ] || { echo "FAIL $1: no rank 0 under launcher $launcher"; exit 1; }
  local t0
  t0=$(date +%s.%N)
  kill -STOP "$r0"
  set +e
  wait "$launcher"
  HUNG_RC=$?
  set -e
  HUNG_SECS=$(secs_since "$t0")
  HUNG_LOG=$log
}
hung hung_rank0 0 100000
[ "$HUNG_RC" = 1 ] || { echo "FAIL hung_rank0: exit $HUNG_RC, expected 1"; tail -n 20 "$HUNG_LOG"; exit 1; }
line=$(grep -E -m1 '\[rank 1\] .*the rendezvous store \(hosted by rank 0 at [0-9.]+:[0-9]+\) has not answered' "$HUNG_LOG") ||
  { echo "FAIL hung_rank0: rank 1 did not name rank 0's store"; tail -n 20 "$HUNG_LOG"; exit 1; }
grep -Eq 'rank 0 \(pid [0-9]+\) was stopped by SIGSTOP' "$HUNG_LOG" ||
  { echo "FAIL hung_rank0: fsdpp-run did not name the stopped rank 0"; tail -n 20 "$HUNG_LOG"; exit 1; }
awk -v s="$HUNG_SECS" 'BEGIN { exit !(s < 15) }' || { echo "FAIL hung_rank0: took $HUNG_SECS s (timeout 5 s)"; exit 1; }
echo "ok   hung_rank0: exit 1 after $HUNG_SECS s (timeout 5 s): ${line:0:300}"

hung hung_rank0_restart 1 400
[ "$HUNG_RC" = 0 ] || { echo "FAIL hung_rank0_restart: exit $HUNG_RC"; tail -n 30 "$HUNG_LOG"; exit 1; }
grep -q 'restarting workers (attempt 2 of 2)' "$HUNG_LOG" && grep -q '\[train\] done: 400 steps' "$HUNG_LOG" ||
  { echo "FAIL hung_rank0_restart: no restart or no finish"; tail -n 30 "$HUNG_LOG"; exit 1; }
echo "ok   hung_rank0_restart: --max-restarts 1 restarted and finished 400 steps, $HUNG_SECS s after the stop"

# ---- the launcher ---------------------------------------------------------------------------
expect_fail launcher_stopped_worker 1 \
  'rank 0 \(local 0, pid [0-9]+\) has been stopped by signal 19 \(SIGSTOP\) for [0-9.]+ s' -- \
  "$run" --nproc-per-node 1 --timeout-s 1 --grace-s 1 bash -c 'kill -STOP $$; sleep 30'
awk -v s="$LAST_SECS" 'BEGIN { exit !(s < 6) }' || { echo "FAIL: took $LAST_SECS s"; exit 1; }
"$run" --nproc-per-node 1 --grace-s 1 bash -c "sleep 300 & echo \$! > $D/leftover.pid" \
  > "$D/leftover.log" 2>&1
sleep 0.3
state=$(awk '{print $3}' "/proc/$(cat "$D/leftover.pid")/stat" 2>/dev/null || echo gone)
if [ "$state" != gone ] && [ "$state" != Z ]; then
  echo "FAIL launcher_leftover_child: the worker's background child still runs"; exit 1
fi
grep -q 'stopped the processes that 1 of them left running' "$D/leftover.log" ||
  { echo "FAIL launcher_leftover_child: not reported"; cat "$D/leftover.log"; exit 1; }
echo "ok   launcher_leftover_child: a worker's background child is stopped after a successful job"

# ---- metrics.jsonl --------------------------------------------------------------------------
mkdir -p "$D/full"
ln -s /dev/full "$D/full/metrics.jsonl"
expect_fail metrics_disk_full 1 \
  "\[train\] cannot write '$D/full/metrics.jsonl': No space left on device" -- \
  "$run" --nproc-per-node 2 --timeout-s 20 "${job[@]}" training.max_steps=3 training.output_dir="$D/full"
grep -q 'frame #' "$D/metrics_disk_full.log" && { echo "FAIL: c10d frames in the output"; exit 1; }
grep -Eq '\[rank 1\] \[dist\] rank 1 stopped: rank 0 failed while writing metrics.jsonl' "$D/metrics_disk_full.log" ||
  { echo "FAIL metrics_disk_full: rank 1 did not stop with one line"; cat "$D/metrics_disk_full.log"; exit 1; }

log="$D/metrics_deleted.log"
"$run" --nproc-per-node 2 --timeout-s 20 "${job[@]}" training.max_steps=100000 \
  training.output_dir="$D/gone" > "$log" 2>&1 &
launcher=$!
wait_for "$log" 'step +3/'
rm -rf "$D/gone"
set +e; wait "$launcher"; rc=$?; set -e
[ "$rc" = 1 ] && grep -Eq "\[train\] '$D/gone/metrics.jsonl' was deleted or replaced while the run wrote it" "$log" ||
  { echo "FAIL metrics_deleted: exit $rc"; tail -n 10 "$log"; exit 1; }
echo "ok   metrics_deleted: exit 1: $(grep -m1 -o "\[train\] '$D/gone/metrics.jsonl' was deleted[^;]*" "$log")"

# ---- output_dir ------------------------------------------------------------------------------
log="$D/holder.log"
"$run" --nproc-per-node 1 "${job[@]}" training.max_steps=100000 training.logging_steps=1000 \
  training.output_dir="$D/shared" training.seed=1 > "$log" 2>&1 &
holder=$!
wait_for "$log" 'step +1/'
hpid=$(rank_pid "$holder" 0)
expect_fail output_dir_locked 1 \
  "\[train\] training.output_dir='$D/shared' is in use by another job \(pid $hpid on host .*\); wait for it" -- \
  "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=2 training.output_dir="$D/shared" training.seed=2
grep -q 'frame #' "$D/output_dir_locked.log" && { echo "FAIL: c10d frames in the output"; exit 1; }
# overwrite_output_dir replaces a finished run, never a live one (issue 43: before, it warned and
# wrote into the live job's directory, cutting its metrics.jsonl and replacing its config.yaml).
expect_fail output_dir_overwrite 1 \
  "\[train\] training.output_dir='$D/shared' is in use by another job \(pid $hpid on host .*\); training.overwrite_output_dir=true replaces a finished run, never a live one" -- \
  "$run" --nproc-per-node 1 "${job[@]}" training.max_steps=2 training.output_dir="$D/shared" \
  training.overwrite_output_dir=true
kill -9 "$hpid"; wait "$holder" || true
# The killed job's lock does not stay: overwrite_output_dir now replaces what it left.
"$run" --nproc-per-node 1 "${job[@]}" training.max_steps=3 training.output_dir="$D/shared" \
  training.overwrite_output_dir=true > "$D/after_crash.log" 2>&1 &&
  ! grep -q "in use by another job" "$D/after_crash.log" ||
  { echo "FAIL: a killed job's lock was left behind"; tail "$D/after_crash.log"; exit 1; }
echo "ok   output_dir_after_crash: the lock of a SIGKILLed job does not stay"
: > "$D/a_file"
expect_fail output_dir_is_file 1 \
  "\[train\] training.output_dir='$D/a_file' exists and is not a directory" -- \
  "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=2 training.output_dir="$D/a_file"
grep -q 'frame #' "$D/output_dir_is_file.log" && { echo "FAIL: c10d frames in the output"; exit 1; }
[ "$(wc -l < "$D/output_dir_is_file.log")" -le 4 ] || { echo "FAIL: more than 4 lines"; cat "$D/output_dir_is_file.log"; exit 1; }
expect_fail output_dir_is_file_direct 2 \
  "\[train\] training.output_dir='$D/a_file' exists and is not a directory" -- \
  "${job[@]}" training.max_steps=2 training.output_dir="$D/a_file"
expect_fail output_dir_too_long 1 "\[train\] training.output_dir='.*' cannot be created: File name too long" -- \
  "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=2 training.output_dir="$D/$(printf 'x%.0s' {1..300})"

# ---- environment ----------------------------------------------------------------------------
e=(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u LOCAL_RANK -u LOCAL_WORLD_SIZE)
expect_fail master_addr_bad 2 "\[dist\] MASTER_ADDR='256.1.1.1' is not a usable address" -- \
  "${e[@]}" RANK=1 WORLD_SIZE=2 MASTER_ADDR=256.1.1.1 MASTER_PORT=29999 "${job[@]}" \
  training.max_steps=1 training.output_dir="$D/env"
awk -v s="$LAST_SECS" 'BEGIN { exit !(s < 10) }' || { echo "FAIL: took $LAST_SECS s"; exit 1; }

# ---- memory ---------------------------------------------------------------------------------
# 16384 wide, 8 layers: 26 G parameters, 103 GB in fp32 built whole, under an 8 GB address-space
# limit (before: SIGABRT from c10's allocator, or the OOM killer's SIGKILL without a word).
expect_fail memory_too_big 2 '\[train\] this run needs an estimated [0-9.]+ GiB per rank .*can get at most' -- \
  bash -c 'ulimit -v 8000000; exec "$@"' _ "${job[@]}" model.dim=16384 model.n_heads=16 \
  model.n_kv_heads=16 model.n_layers=8 training.max_steps=1 training.output_dir="$D/mem"

# ---- SIGTERM --------------------------------------------------------------------------------
log="$D/sigterm.log"
"$run" --nproc-per-node 2 --grace-s 20 "${job[@]}" training.max_steps=100000 training.save_steps=5 \
  training.async_save=true training.output_dir="$D/term" > "$log" 2>&1 &
launcher=$!
wait_for "$log" 'step +12/'
kill -TERM "$launcher"
set +e; wait "$launcher"; rc=$?; set -e
[ "$rc" = 143 ] || { echo "FAIL sigterm: exit $rc, expected 143"; tail -n 20 "$log"; exit 1; }
line=$(grep -E -m1 '\[train\] stopped by (Terminated|SIGTERM) after step [0-9]+ of 100000; the newest checkpoint is' "$log") ||
  { echo "FAIL sigterm: no stop line"; tail -n 20 "$log"; exit 1; }
grep -q 'SIGKILL' "$log" && { echo "FAIL sigterm: a worker needed SIGKILL"; tail -n 20 "$log"; exit 1; }
newest=$(ls -d "$D"/term/checkpoint-* | sort -t- -k2 -n | tail -n 1)
[ -f "$newest/trainer_state.json" ] || { echo "FAIL sigterm: $newest is incomplete"; exit 1; }
echo "ok   sigterm: exit 143, ${line:0:200}"

# ---- a finished job run again ---------------------------------------------------------------
"$run" --nproc-per-node 1 "${job[@]}" training.max_steps=3 training.save_steps=3 \
  training.output_dir="$D/fin" > /dev/null 2>&1
"$run" --nproc-per-node 1 "${job[@]}" training.max_steps=3 training.save_steps=3 \
  training.resume_from_checkpoint=latest training.output_dir="$D/fin" > "$D/rerun.log" 2>&1
grep -q 'final loss 0.0000' "$D/rerun.log" && { echo "FAIL rerun_finished: reports a loss of 0"; exit 1; }
grep -q '\[train\] nothing to train: resumed at step 3 and the run has 3 steps' "$D/rerun.log" ||
  { echo "FAIL rerun_finished"; cat "$D/rerun.log"; exit 1; }
echo "ok   rerun_finished: says there is nothing to train"

# ---- a worker that runs but makes no progress -----------------------------------------------
expect_fail launcher_no_progress 1 \
  "rank 1 \(local 1, pid [0-9]+\) made no progress for [0-9.]+ s \(no heartbeat; its last one said 'step 1 of 9'" -- \
  "$run" --nproc-per-node 2 --progress-timeout-s 1.5 --grace-s 1 bash -c \
  'echo "step 1 of 9" > "$FSDPP_HEARTBEAT_FILE"; [ "$RANK" = 1 ] && sleep 30; for i in $(seq 40); do echo "step $i" > "$FSDPP_HEARTBEAT_FILE"; sleep 0.2; done'
grep -q 'stopped the other 1 worker' "$D/launcher_no_progress.log" || { echo "FAIL: count"; cat "$D/launcher_no_progress.log"; exit 1; }
"$run" --nproc-per-node 2 --progress-timeout-s 2 "${job[@]}" training.max_steps=60 training.logging_steps=30 \
  training.output_dir="$D/beats" > "$D/beats.log" 2>&1 || { echo "FAIL: a healthy run tripped --progress-timeout-s"; tail "$D/beats.log"; exit 1; }
echo "ok   launcher_progress_healthy: fsdpp-train's per-step heartbeat keeps a healthy run alive"
expect_fail launcher_bad_progress_timeout 2 '\[fsdpp-run\] --progress-timeout-s must be between 0 \(off\) and 604800 seconds, got -1' -- \
  "$run" --progress-timeout-s -1 true

# ---- a SentencePiece cache shared by runs on two corpora ------------------------------------
mkdir -p "$D/corpus_a" "$D/corpus_b"
cp "$src"/configs/*.yaml "$D/corpus_a/"
cp "$src"/docs/*.md "$D/corpus_b/"
for c in a b; do
  "$run" --nproc-per-node 1 "${job[@]}" data.path="$D/corpus_$c" data.tokenizer=sentencepiece \
    data.tokenizer_vocab_size=300 data.cache_dir="$D/spm_cache" training.max_steps=1 \
    training.output_dir="$D/spm_$c" > "$D/spm_$c.log" 2>&1 || { echo "FAIL spm $c"; tail "$D/spm_$c.log"; exit 1; }
done
n=$(ls "$D"/spm_cache/spm-bpe-300-*.model | wc -l)
[ "$n" = 2 ] && grep -q 'training a sentencepiece BPE tokenizer' "$D/spm_b.log" ||
  { echo "FAIL spm_cache_per_corpus: $n models; the second corpus reused the first one's"; exit 1; }
echo "ok   spm_cache_per_corpus: two corpora in one cache_dir get two tokenizers"
