#!/usr/bin/env bash
# Reliability, third pass (docs/faults.md, issue 29): what a third round of trying to break runs
# found, each case with what fsdpp must do now.
#   third_pass.sh config RUN TRAIN CKPT GENERATE SRC TRAIN_FAULTS   (faults.third_pass_config)
#     config_*          errors that surfaced late (the memory check, model build, the first
#                       forward) or with a truncated number: [config] naming the keys, before
#                       output_dir exists; distillation keys without a teacher; the mesh as it is
#     message_*         messages that said the wrong thing (NaN "negative", a list "expected a
#                       list", '5X' of '5XB', a binary calibration file accepted, ...)
#     launcher_setsid*  a worker's child that called setsid() does not outlive the job
#   third_pass.sh zbv RUN TRAIN CKPT GENERATE SRC TRAIN_FAULTS      (faults.third_pass_zbv, slow)
#     zbv               fsdpp-train with ZBVZeroBubble at 2 and 4 blocks and 8, 4, 2 microbatches,
#                       twice each: no run hangs (before: 5 of 6 hung in step 1 until
#                       --timeout-s). Pipeline.ZbvOnFreshGroupsNeverStalls (dist.pipeline.np2/4)
#                       loops the runtime itself 32 times in seconds for make test.
#   third_pass.sh jobs RUN TRAIN CKPT GENERATE SRC TRAIN_FAULTS     (faults.third_pass_jobs)
#     teacher_*         a teacher of another tokenizer (same vocabulary size) is refused naming
#                       both; the same tokenizer is accepted
#     output_dir_*      a finished run is neither overwritten nor mixed with a new one; metrics
#                       of a resumed run never follow another run's lines
#     resume_*          a resume that changes the tokenizer is refused; one that drops or changes
#                       the teacher says so
#     frames_*          no c10d stack frames when rank 0 (the store's host) dies first
#     heartbeat_*       evaluation and the sample beat the heartbeat and stop on SIGTERM
# Exit codes as bad_input.sh's: 2 for configuration from fsdpp-train itself, 1 through fsdpp-run.
set -euo pipefail
part=$1 run=$2 train=$3 ckpt=$4 generate=$5 src=$6 train_faults=$7
FAULT_DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$FAULT_DIR"' EXIT
source "$(dirname "$0")/lib.sh"
D=$FAULT_DIR
cfg=$src/configs/default.yaml
small_config "$src" "$D"
small+=(training.report_to=none)
job=("$train" "$cfg" "${small[@]}")

no_frames() {  # LOG: no C++ stack frames in it (c10's "frame #3: ..." lines)
  if grep -Eq 'frame #[0-9]+' "$1"; then
    echo "FAIL: C++ stack frames in $1:"; grep -E -m5 'frame #' "$1"; exit 1
  fi
}
run_digest() {  # DIR: its files' digest, but for the lock (which names its latest holder)
  (cd "$1" && find . -type f ! -name .fsdpp.lock -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
absent() {  # NAME PATH: nothing was written
  [ ! -e "$2" ] || { echo "FAIL $1: $2 was written before the refusal"; ls -la "$2"; exit 1; }
}

if [ "$part" = config ]; then
  # ---- configuration errors named with their keys, before anything is written ----------------
  expect_fail config_ep_experts 1 \
    "\[config\] model.num_experts=3 with parallelism.expert_parallel_degree=2: Qwen3MoeConfig.num_experts=3 is not divisible by the expert-parallel degree 2" -- \
    "$run" --nproc-per-node 2 "${job[@]}" model.architecture=qwen3_moe model.num_experts=3 \
    model.num_experts_per_tok=1 parallelism.expert_parallel_degree=2 training.output_dir="$D/c1"
  absent config_ep_experts "$D/c1"
  expect_fail config_tp_kv_heads 2 \
    "\[config\] model.n_heads=4, model.n_kv_heads=1 with parallelism.tensor_parallel_degree=2: Llama: n_kv_heads=1 is smaller than the tensor-parallel degree 2" -- \
    "${job[@]}" model.n_kv_heads=1 parallelism.tensor_parallel_degree=2 \
    training.skip_memory_check=true training.output_dir="$D/c2"
  absent config_tp_kv_heads "$D/c2"
  expect_fail config_sp_seq_len 2 \
    "\[config\] data.seq_len=31 with parallelism.enable_sequence_parallel=true and tensor_parallel_degree=2: each rank of the tp group holds an equal share of the sequence; use a data.seq_len divisible by 2 \(such as 30\)" -- \
    "${job[@]}" data.seq_len=31 parallelism.tensor_parallel_degree=2 \
    parallelism.enable_sequence_parallel=true training.output_dir="$D/c3"
  absent config_sp_seq_len "$D/c3"
  expect_fail config_huge_degree 2 \
    "\[config\] parallelism.pipeline_parallel_degree=99999999999: expected a number of ranks, at most 1048576" -- \
    "${job[@]}" parallelism.pipeline_parallel_degree=99999999999 training.output_dir="$D/c4"
  absent config_huge_degree "$D/c4"
  expect_fail config_degree_world 1 \
    "\[config\] parallelism.pipeline_parallel_degree=3 x data_parallel_replicate_degree=1 x data_parallel_shard_degree=-1 x tensor_parallel_degree=1 cannot fill 2 ranks" -- \
    "$run" --nproc-per-node 2 "${job[@]}" parallelism.pipeline_parallel_degree=3 training.output_dir="$D/c5"
  absent config_degree_world "$D/c5"

  # distillation keys without a teacher: said, not ignored
  "${job[@]}" training.max_steps=1 distillation.kd_ratio=0.9 distillation.loss=reverse_kl \
    training.output_dir="$D/c6" > "$D/c6.log" 2>&1 || { cat "$D/c6.log"; echo "FAIL config_distill_unused"; exit 1; }
  line=$(grep -E -m1 "\[train\] warning: distillation.loss=reverse_kl, distillation.kd_ratio=0.9 are set but distillation.teacher is not: distillation is off, and they are not used" "$D/c6.log") ||
    { cat "$D/c6.log"; echo "FAIL config_distill_unused: no warning"; exit 1; }
  echo "ok   config_distill_unused: ${line:0:200}"

  # the mesh as it is under TP 2 (before: "FULL_SHARD over 2 ranks" with a shard degree of 1)
  "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=1 parallelism.tensor_parallel_degree=2 \
    training.output_dir="$D/c7" > "$D/c7.log" 2>&1 || { cat "$D/c7.log"; echo "FAIL config_mesh"; exit 1; }
  line=$(grep -E -m1 "\[train\] mesh: pp 1 x dp_replicate 1 x dp_shard 1 x tp 2 x ep 1; fsdp: FULL_SHARD over dp_shard 1, " "$D/c7.log") ||
    { grep '\[train\]' "$D/c7.log"; echo "FAIL config_mesh"; exit 1; }
  echo "ok   config_mesh: ${line:0:200}"

  # model.init_from a Qwen3-MoE under a Llama config: the wrap class of the model built
  "${job[@]}" model.architecture=qwen3_moe model.num_experts=4 model.num_experts_per_tok=2 \
    training.max_steps=1 training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[Qwen3MoeDecoderLayer] \
    training.output_dir="$D/moe" > "$D/moe.log" 2>&1 || { cat "$D/moe.log"; echo "FAIL: Qwen3-MoE source"; exit 1; }
  expect_fail config_init_from_wrap_class 2 \
    "names 'TransformerBlock', which is not a module class of the model fsdpp-train builds \(Qwen3Moe: .*expected its decoder layer's class, \[Qwen3MoeDecoderLayer\] \(model.init_from='$D/moe/checkpoint-1' made the model qwen3_moe\)" -- \
    "${job[@]}" model.init_from="$D/moe/checkpoint-1" training.max_steps=1 training.output_dir="$D/c8"

  # ---- messages that said the wrong thing ------------------------------------------------------
  expect_fail message_temperature_nan 2 "--temperature: expected a finite number in \[0, 100\] \(0: greedy\), got 'nan'" -- \
    "$generate" "$D/moe/checkpoint-1" --prompt x --temperature nan
  expect_fail message_top_p_zero 2 "--top-p: expected a probability in \(0, 1\] \(1: every token\), got '0'" -- \
    "$generate" "$D/moe/checkpoint-1" --prompt x --top-p 0
  expect_fail message_profile_range 2 "\[config\] training.profile_steps has '3-1' \(override 'training.profile_steps=\[3-1\]'\): expected a list of integers or ranges .*; a range runs upwards, such as 1-3" -- \
    "${job[@]}" "training.profile_steps=[3-1]"
  expect_fail message_profile_beyond 2 "\[config\] training.profile_steps has 500, beyond training.max_steps=3: that step never runs" -- \
    "${job[@]}" training.max_steps=3 "training.profile_steps=[2,500]"
  expect_fail message_shard_size 1 "\[fsdpp-ckpt\] --max-shard-size '5XB': expected a whole number of bytes >= 1, optionally with a unit" -- \
    "$ckpt" export-hf --max-shard-size 5XB "$D/moe/checkpoint-1" "$D/exported"
  expect_fail message_calibration_binary 1 "\[compress\] --calibration '/bin/ls' is not a text file: it has a NUL byte at offset [0-9]+" -- \
    "$ckpt" compress --num-experts 2 --calibration /bin/ls "$D/moe/checkpoint-1" "$D/compressed"
  absent message_calibration_binary "$D/compressed"

  # ---- a worker's child that left its process group ----------------------------------------------
  for how in ok fail; do
    code=0; [ "$how" = fail ] && code=3
    set +e
    "$run" --nproc-per-node 1 --grace-s 1 bash -c "setsid sleep 300 & echo \$! > $D/setsid.pid; sleep 0.2; exit $code" \
      > "$D/setsid_$how.log" 2>&1
    set -e
    sleep 0.3
    pid=$(cat "$D/setsid.pid")
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone)
    if [ "$state" != gone ] && [ "$state" != Z ]; then
      kill -9 "$pid"; echo "FAIL launcher_setsid_$how: the setsid child $pid still runs"; cat "$D/setsid_$how.log"; exit 1
    fi
  done
  grep -q "stopped 1 process that left its worker's process group (setsid)" "$D/setsid_ok.log" ||
    { cat "$D/setsid_ok.log"; echo "FAIL launcher_setsid_ok: not reported"; exit 1; }
  echo "ok   launcher_setsid: a child that called setsid() is stopped with the job, after success and after failure"
  exit 0
fi

if [ "$part" = zbv ]; then
# ZBVZeroBubble: before, 5 of 6 runs hung in step 1 (a finished recv behind a send); now every
# run ends, and a stall would be named with the schedule long before --timeout-s.
zbv=0
for layers in 2 4; do
  for mbs in 1 2 4; do  # 8, 4 and 2 microbatches of the 8 sequences
    for rep in 1 2; do
      log="$D/zbv_${layers}_${mbs}_$rep.log"
      start=$(date +%s.%N)
      if ! timeout -k 5 60 "$run" --nproc-per-node 2 --timeout-s 5 "${job[@]}" model.n_layers="$layers" \
          training.per_device_train_batch_size=8 training.max_steps=3 \
          parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_schedule=ZBVZeroBubble \
          parallelism.pipeline_parallel_microbatch_size="$mbs" training.output_dir="$D/zbv" \
          training.overwrite_output_dir=true > "$log" 2>&1; then
        echo "FAIL zbv: $layers blocks, microbatches of $mbs, run $rep"; tail -n 20 "$log"; exit 1
      fi
      grep -q 'done: 3 steps' "$log" || { tail -n 20 "$log"; echo "FAIL zbv: not done"; exit 1; }
      zbv=$((zbv + 1))
    done
  done
done
echo "ok   zbv: $zbv runs of ZBVZeroBubble (2 and 4 blocks, 8, 4 and 2 microbatches) each finished its 3 steps"
exit 0
fi

# ---- jobs ----------------------------------------------------------------------------------------

# ---- a teacher that speaks another tokenizer ----------------------------------------------------
"${job[@]}" data.tokenizer=sentencepiece data.tokenizer_vocab_size=256 training.max_steps=1 \
  training.output_dir="$D/spm_teacher" > "$D/spm_teacher.log" 2>&1 ||
  { tail "$D/spm_teacher.log"; echo "FAIL: the sentencepiece teacher did not train"; exit 1; }
"${job[@]}" training.max_steps=1 training.output_dir="$D/byte_teacher" > "$D/byte_teacher.log" 2>&1 ||
  { tail "$D/byte_teacher.log"; echo "FAIL: the byte teacher did not train"; exit 1; }
expect_fail teacher_other_tokenizer 1 \
  "\[train\] distillation.teacher='$D/spm_teacher/checkpoint-1' speaks another tokenizer than the student: the teacher's is sentencepiece \(model [0-9a-f]{16}, $D/spm_teacher/checkpoint-1/fsdpp_tokenizer.json\), the student's byte \(data.tokenizer=byte\)" -- \
  "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=1 distillation.teacher="$D/spm_teacher/checkpoint-1" \
  training.output_dir="$D/student_bad"
no_frames "$D/teacher_other_tokenizer.log"
"$run" --nproc-per-node 2 "${job[@]}" training.max_steps=2 training.save_steps=1 \
  distillation.teacher="$D/byte_teacher/checkpoint-1" training.output_dir="$D/student" > "$D/student.log" 2>&1 ||
  { tail "$D/student.log"; echo "FAIL teacher_same_tokenizer: refused"; exit 1; }
echo "ok   teacher_same_tokenizer: a byte teacher distils a byte student"
# The teacher's Hugging Face export carries tokenizer.json (and fsdpp's files): recognised too.
"$ckpt" export-hf "$D/byte_teacher/checkpoint-1" "$D/byte_teacher_hf" > /dev/null
rm -f "$D/byte_teacher_hf/fsdpp_tokenizer.json"
"${job[@]}" training.max_steps=1 distillation.teacher="$D/byte_teacher_hf" training.output_dir="$D/student_hf" \
  > "$D/student_hf.log" 2>&1 || { tail "$D/student_hf.log"; echo "FAIL teacher_hf_tokenizer_json: refused"; exit 1; }
echo "ok   teacher_hf_tokenizer_json: an exported teacher's tokenizer.json is recognised as the student's"

# ---- resume drift ---------------------------------------------------------------------------------
"${job[@]}" training.max_steps=3 training.resume_from_checkpoint=latest training.output_dir="$D/student" \
  > "$D/resume_teacher_dropped.log" 2>&1 || { tail "$D/resume_teacher_dropped.log"; echo "FAIL resume_teacher_dropped"; exit 1; }
line=$(grep -E -m1 "\[train\] warning: $D/student/checkpoint-2 was distilled from '.*byte_teacher/checkpoint-1' and this run has no distillation.teacher: from step 3 the loss is the cross-entropy alone" \
       "$D/resume_teacher_dropped.log") ||
  { tail "$D/resume_teacher_dropped.log"; echo "FAIL resume_teacher_dropped: no warning"; exit 1; }
echo "ok   resume_teacher_dropped: ${line:0:200}"
expect_fail resume_other_tokenizer 2 \
  "\[train\] this run's tokenizer, byte \(data.tokenizer=byte\), is not the one $D/spm_teacher/checkpoint-1 was trained with: sentencepiece \(model [0-9a-f]{16}, .*\)\. .*data.tokenizer=sentencepiece data.tokenizer_model=$D/spm_teacher/checkpoint-1/tokenizer.model" -- \
  "${job[@]}" training.max_steps=2 training.resume_from_checkpoint=latest training.output_dir="$D/spm_teacher"

# ---- output_dir: a finished run is not overwritten or mixed ---------------------------------------
"$run" --nproc-per-node 2 "${job[@]}" training.max_steps=4 training.save_steps=2 \
  training.output_dir="$D/runs" > "$D/first.log" 2>&1 || { tail "$D/first.log"; echo "FAIL: first run"; exit 1; }
before=$(run_digest "$D/runs")
expect_fail output_dir_earlier_run 1 \
  "\[train\] training.output_dir='$D/runs' holds an earlier run \(checkpoint-2, checkpoint-4 and metrics.jsonl \(4 lines\)\): a new run there would overwrite its checkpoints and metrics or mix with them. Resume it with training.resume_from_checkpoint=latest, choose another output_dir, or set training.overwrite_output_dir=true to replace it" -- \
  "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=2 training.save_steps=2 training.output_dir="$D/runs"
no_frames "$D/output_dir_earlier_run.log"
[ "$(run_digest "$D/runs")" = "$before" ] || { echo "FAIL output_dir_earlier_run: the first run's files changed"; exit 1; }
"$run" --nproc-per-node 2 "${job[@]}" training.max_steps=2 training.save_steps=2 training.seed=5 \
  training.overwrite_output_dir=true training.output_dir="$D/runs" > "$D/second.log" 2>&1 ||
  { tail "$D/second.log"; echo "FAIL output_dir_overwrite: refused"; exit 1; }
grep -q "\[train\] training.overwrite_output_dir=true: removed the earlier run in $D/runs (checkpoint-2, checkpoint-4 and metrics.jsonl (4 lines))" "$D/second.log" ||
  { grep '\[train\]' "$D/second.log"; echo "FAIL output_dir_overwrite: no note"; exit 1; }
[ ! -e "$D/runs/checkpoint-4" ] && [ "$(grep -c . "$D/runs/metrics.jsonl")" = 2 ] ||
  { ls "$D/runs"; echo "FAIL output_dir_overwrite: the first run's checkpoint-4 or lines remain"; exit 1; }
echo "ok   output_dir_overwrite: overwrite_output_dir=true replaces the earlier run, saying so"
# A resume continues the second run: its checkpoint-2, its two lines, then its own.
"$run" --nproc-per-node 2 "${job[@]}" training.max_steps=4 training.save_steps=2 training.seed=5 \
  training.resume_from_checkpoint=latest training.output_dir="$D/runs" > "$D/third.log" 2>&1 ||
  { tail "$D/third.log"; echo "FAIL output_dir_resume: refused"; exit 1; }
grep -q "resumed from $D/runs/checkpoint-2 (step 2" "$D/third.log" &&
  [ "$(python3 -c "import json,sys; print([json.loads(l)['step'] for l in open(sys.argv[1])])" "$D/runs/metrics.jsonl")" = "[1, 2, 3, 4]" ] ||
  { grep '\[train\]' "$D/third.log"; cat "$D/runs/metrics.jsonl"; echo "FAIL output_dir_resume"; exit 1; }
echo "ok   output_dir_resume: resume_from_checkpoint=latest continues the run in output_dir, steps 1-4 in order"
# Another run's checkpoint copied in: its metrics are not appended to this run's lines.
cp -r "$D/student/checkpoint-2" "$D/runs/checkpoint-9"
"$run" --nproc-per-node 2 "${job[@]}" training.max_steps=4 training.save_steps=100 \
  training.resume_from_checkpoint=latest training.output_dir="$D/runs" > "$D/copied.log" 2>&1 ||
  { tail "$D/copied.log"; echo "FAIL output_dir_metrics_other_run"; exit 1; }
line=$(grep -E -m1 "\[train\] warning: $D/runs/metrics.jsonl is not the one the checkpoint's run wrote .*kept as $D/runs/metrics.jsonl.other-[0-9]+, and this run's lines start after step 2" "$D/copied.log") ||
  { grep '\[train\]' "$D/copied.log"; echo "FAIL output_dir_metrics_other_run: no warning"; exit 1; }
[ "$(python3 -c "import json,sys; print([json.loads(l)['step'] for l in open(sys.argv[1])])" "$D/runs/metrics.jsonl")" = "[3, 4]" ] ||
  { cat "$D/runs/metrics.jsonl"; echo "FAIL output_dir_metrics_other_run: lines"; exit 1; }
echo "ok   output_dir_metrics_other_run: ${line:0:220}"

# ---- no c10d frames when rank 0, the store's host, dies or exits first ---------------------------
FSDPP_FAULT_KILL=0:3 "$run" --nproc-per-node 2 --timeout-s 10 --grace-s 1 "$train_faults" "$cfg" "${small[@]}" \
  training.max_steps=20 parallelism.pipeline_parallel_degree=2 training.output_dir="$D/pp_kill" \
  > "$D/frames_pp.log" 2>&1 && { echo "FAIL frames_pp: the job succeeded"; exit 1; }
no_frames "$D/frames_pp.log"
grep -q "rank 0 (local 0, pid [0-9]*) was killed by signal 9 (SIGKILL)" "$D/frames_pp.log" ||
  { tail "$D/frames_pp.log"; echo "FAIL frames_pp: no verdict"; exit 1; }
echo "ok   frames_pp: rank 0 killed under PP: $(grep -c . "$D/frames_pp.log") lines, no stack frames"
"$run" --nproc-per-node 2 --progress-timeout-s 0.001 --grace-s 1 "${job[@]}" training.max_steps=20 \
  training.output_dir="$D/tight" > "$D/frames_progress.log" 2>&1 && { echo "FAIL frames_progress: succeeded"; exit 1; }
no_frames "$D/frames_progress.log"
echo "ok   frames_progress: --progress-timeout-s 0.001: $(grep -c . "$D/frames_progress.log") lines, no stack frames"

# ---- the heartbeat and SIGTERM during evaluation and the sample ----------------------------------
# A healthy run whose evaluation and sample each take several times --progress-timeout-s: a model
# of width 128 evaluates 20 batches of 32 windows of docs/, about 18 GFLOP (configs/ at width 32,
# 0.4 GFLOP, was evaluated on CI's machine between two polls of the heartbeat file).
long_eval=(data.path="$src/docs" model.dim=128 training.eval_steps=2 training.eval_max_batches=20
           training.per_device_eval_batch_size=32 data.val_fraction=0.5 training.sample_tokens=600)
"$run" --nproc-per-node 2 --progress-timeout-s 2 "${job[@]}" "${long_eval[@]}" training.max_steps=2 \
  training.output_dir="$D/beats" > "$D/beats.log" 2>&1 ||
  { tail "$D/beats.log"; echo "FAIL heartbeat_eval_sample: a healthy run was stopped"; exit 1; }
echo "ok   heartbeat_eval_sample: evaluation and the sample, each longer than --progress-timeout-s 2, beat the heartbeat"
for phase in evaluating sampling; do
  log="$D/term_$phase.log"
  FSDPP_HEARTBEAT_FILE="$D/beat_$phase" "${job[@]}" "${long_eval[@]}" training.max_steps=2 \
    training.output_dir="$D/term_$phase" > "$log" 2>&1 &
  pid=$!
  for ((i = 0; i < 3000; i++)); do
    grep -q "^$phase" "$D/beat_$phase" 2>/dev/null && break
    sleep 0.02
  done
  grep -q "^$phase" "$D/beat_$phase" || { echo "FAIL heartbeat_sigterm_$phase: never $phase"; cat "$log"; exit 1; }
  t0=$(date +%s.%N)
  kill -TERM "$pid"
  set +e; wait "$pid"; rc=$?; set -e
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  [ "$rc" = 143 ] || { echo "FAIL heartbeat_sigterm_$phase: exit $rc"; tail "$log"; exit 1; }
  awk -v s="$secs" 'BEGIN { exit !(s < 5) }' || { echo "FAIL heartbeat_sigterm_$phase: took $secs s"; exit 1; }
  want="after step 2"; [ "$phase" = sampling ] && want="during the sample after step 2"
  line=$(grep -E -m1 "\[train\] stopped by (Terminated|SIGTERM) $want of 2" "$log") ||
    { tail "$log"; echo "FAIL heartbeat_sigterm_$phase: no stop line"; exit 1; }
  echo "ok   heartbeat_sigterm_$phase: exit 143 after $secs s: ${line:0:160}"
done
