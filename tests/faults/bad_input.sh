#!/usr/bin/env bash
# Bad input to fsdpp-train, fsdpp-run and fsdpp-ckpt: every case ends in a clear one-line error
# (exit 2 for configuration, 1 for the rest and for anything through fsdpp-run; never a crash,
# a signal or a hang) and leaves good state as it was. docs/faults.md lists the cases; this
# script is what keeps that table true.
#   bad_input.sh config RUN TRAIN CKPT SRC TRAIN_FAULTS       config files, environment, data files
#   bad_input.sh checkpoint RUN TRAIN CKPT SRC TRAIN_FAULTS   checkpoints: truncated, bit-flipped, ...
# TRAIN_FAULTS is fsdpp-train-faults (tests/support/): fsdpp-train that reads FSDPP_FAULT_*.
set -euo pipefail
part=$1 run=$2 train=$3 ckpt=$4 src=$5 train_faults=$6
FAULT_DIR=$(mktemp -d)
trap 'rm -rf "$FAULT_DIR"' EXIT
source "$(dirname "$0")/lib.sh"
D=$FAULT_DIR
cfg=$src/configs/default.yaml
small_config "$src" "$D"

if [ "$part" = config ]; then
  # ---- config files ------------------------------------------------------------------------
  : > "$D/empty.yaml"
  expect_fail config_empty 2 "\[config\] $D/empty.yaml is empty; expected" -- "$train" "$D/empty.yaml"
  head -c 3000 "$train" > "$D/binary.yaml"
  expect_fail config_binary 2 "\[config\] $D/binary.yaml is not a text file \(byte 0x7f at offset 0" -- \
    "$train" "$D/binary.yaml"
  printf 'model:\n  dimm: 64\n' > "$D/unknown.yaml"
  # yaml-cpp's LoadAll never returns on this one (found by fuzz_config).
  printf '# a comment\n, training: 1\n' > "$D/comma.yaml"
  expect_fail config_parser_stuck 2 "\[config\] $D/comma.yaml is not valid YAML" -- "$train" "$D/comma.yaml"
  expect_fail config_unknown_key 2 "unknown key 'model.dimm'.*did you mean 'dim'" -- "$train" "$D/unknown.yaml"
  expect_fail config_wrong_type 2 "\[config\] model.dim='big'.*expected an integer" -- \
    "$train" "$cfg" model.dim=big
  expect_fail config_negative 2 "\[config\] .*model.dim=-5" -- "$train" "$cfg" model.dim=-5
  expect_fail config_zero_steps 2 "\[config\] training.max_steps=0" -- "$train" "$cfg" training.max_steps=0
  expect_fail config_huge_lr 2 "\[config\] training.learning_rate='1e400' .*expected a number within a double's range" -- \
    "$train" "$cfg" training.learning_rate=1e400
  expect_fail config_nan_lr 2 "\[config\] training.learning_rate=nan: expected a finite number > 0" -- \
    "$train" "$cfg" training.learning_rate=.nan
  expect_fail config_huge_seq_len 2 "\[config\] data.seq_len=1000000000000 is longer than model.max_seq_len" -- \
    "$train" "$cfg" data.seq_len=1000000000000
  expect_fail config_overflow 2 "\[config\] training.max_steps='99999999999999999999' .*expected an integer that fits in 64 bits" -- \
    "$train" "$cfg" training.max_steps=99999999999999999999
  expect_fail config_missing 2 "\[config\] config file '$D/nope.yaml' does not exist" -- "$train" "$D/nope.yaml"
  expect_fail config_directory 2 "\[config\] config file '$D' is not a regular file" -- "$train" "$D"
  expect_fail config_no_args 2 "usage: fsdpp-train CONFIG.yaml" -- "$train"

  # ---- environment -------------------------------------------------------------------------
  e=(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u LOCAL_RANK -u LOCAL_WORLD_SIZE)
  one=("$train" "$cfg" "${small[@]}" training.max_steps=1 training.output_dir="$D/env")
  expect_fail env_rank_garbage 2 "RANK='abc'" -- "${e[@]}" RANK=abc WORLD_SIZE=2 MASTER_PORT=29999 "${one[@]}"
  expect_fail env_rank_out_of_range 2 "RANK=2 is out of range; expected 0 <= RANK < WORLD_SIZE=2" -- \
    "${e[@]}" RANK=2 WORLD_SIZE=2 MASTER_PORT=29999 "${one[@]}"
  expect_fail env_world_size_zero 2 "WORLD_SIZE='?0'?" -- "${e[@]}" RANK=0 WORLD_SIZE=0 MASTER_PORT=29999 "${one[@]}"
  expect_fail env_port_garbage 2 "MASTER_PORT='http'" -- "${e[@]}" RANK=0 WORLD_SIZE=1 MASTER_PORT=http "${one[@]}"
  expect_fail env_port_range 2 "MASTER_PORT='?99999'?" -- "${e[@]}" RANK=0 WORLD_SIZE=1 MASTER_PORT=99999 "${one[@]}"
  expect_fail env_timeout_garbage 2 "FSDPP_TIMEOUT_S='soon'" -- "${e[@]}" FSDPP_TIMEOUT_S=soon "${one[@]}"
  expect_fail env_unreachable_master 1 "could not reach the rendezvous store at 127.0.0.1:1" -- \
    "${e[@]}" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 FSDPP_TIMEOUT_S=2 "${one[@]}"
  expect_fail env_collective_check 2 "FSDPP_COLLECTIVE_CHECK='yes': expected 1" -- \
    "${e[@]}" FSDPP_COLLECTIVE_CHECK=yes "${one[@]}"
  expect_fail env_restart_count 2 "FSDPP_RESTART_COUNT='-1': expected a whole number >= 0" -- \
    "${e[@]}" FSDPP_RESTART_COUNT=-1 "${one[@]}"
  expect_fail env_fault_kill 2 "FSDPP_FAULT_KILL='x': expected RANK:STEP" -- \
    "${e[@]}" FSDPP_FAULT_KILL=x "$train_faults" "${one[@]:1}"
  expect_fail env_fault_save_delay 2 "FSDPP_FAULT_SAVE_DELAY_MS='x': expected a whole number of milliseconds" -- \
    "${e[@]}" FSDPP_FAULT_SAVE_DELAY_MS=x "$train_faults" "${one[@]:1}"
  # The shipped fsdpp-train reads no fault variables: the same job trains.
  "${e[@]}" FSDPP_FAULT_KILL=x FSDPP_FAULT_NAN=1 FSDPP_FAULT_SAVE_FAIL=0 FSDPP_FAULT_SAVE_DELAY_MS=x \
    "${one[@]}" training.output_dir="$D/env-faults" \
    > "$D/env_fault_ignored.log" 2>&1 ||
    { echo "FAIL env_fault_ignored: fsdpp-train read FSDPP_FAULT_*:"; tail -n 20 "$D/env_fault_ignored.log"; exit 1; }
  [ -f "$D/env-faults/checkpoint-1/index.json" ] ||
    { echo "FAIL env_fault_ignored: no checkpoint-1 (FSDPP_FAULT_SAVE_FAIL=0 read?)"; ls "$D/env-faults"; exit 1; }
  echo "ok   env_fault_ignored: fsdpp-train trains and saves with FSDPP_FAULT_KILL=x FSDPP_FAULT_NAN=1 FSDPP_FAULT_SAVE_FAIL=0 FSDPP_FAULT_SAVE_DELAY_MS=x set"
  expect_fail launcher_bad_nproc 2 "\[fsdpp-run\] --nproc-per-node: expects a whole number, got 'two'" -- \
    "$run" --nproc-per-node two "$train" "$cfg"
  expect_fail launcher_missing_program 1 "\[fsdpp-run\] cannot execute 'no-such-program'" -- \
    "$run" --nproc-per-node 2 no-such-program

  # ---- data files --------------------------------------------------------------------------
  t=("$train" "$cfg" "${small[@]}" training.max_steps=1)
  expect_fail data_missing 2 "data.path '?$D/missing.txt'? does not exist" -- \
    "${t[@]}" data.path="$D/missing.txt" training.output_dir="$D/o1"
  : > "$D/empty.txt"
  expect_fail data_empty 2 "\[data\] text file '$D/empty.txt' is empty; expected text to tokenize" -- \
    "${t[@]}" data.path="$D/empty.txt" training.output_dir="$D/o2"
  printf 'abc' > "$D/tiny.txt"
  expect_fail data_too_small 2 "\[data\] 3 tokens make 0 windows of seq_len\+1=33 tokens" -- \
    "${t[@]}" data.path="$D/tiny.txt" training.output_dir="$D/o3"
  mkdir -p "$D/nodata" && ln -s "$cfg" "$D/nodata/link.yaml"
  expect_fail data_directory_without_files 2 "is a directory (without|with no) text files" -- \
    "${t[@]}" data.path="$D/nodata" training.output_dir="$D/o4"
  expect_fail data_not_a_file 2 "\[data\] '/dev/null' is not a regular file; expected a text file" -- \
    "${t[@]}" data.path=/dev/null training.output_dir="$D/o5"
  head -c 20000 "$train" > "$D/binary.bin"
  expect_fail data_binary 2 "\[data\] '$D/binary.bin' is not a text file: it has a NUL byte at offset" -- \
    "${t[@]}" data.path="$D/binary.bin" training.output_dir="$D/o7"
  mkdir -p "$D/unreadable" && head -c 5000 "$train" > "$D/unreadable/data.bin" && chmod 000 "$D/unreadable/data.bin"
  if [ "$(id -u)" != 0 ]; then
    expect_fail data_unreadable 1|2 "data.bin" -- "${t[@]}" data.path="$D/unreadable/data.bin" training.output_dir="$D/o6"
  else
    echo "not run: data_unreadable (root reads any file)"
  fi
  exit 0
fi

# ---- checkpoints ------------------------------------------------------------------------
[ "$part" = checkpoint ] || { echo "usage: bad_input.sh config|checkpoint ..."; exit 2; }
np2=("$run" --nproc-per-node 2 --timeout-s 60 "$train" "$cfg" "${small[@]}" training.save_steps=2)
# Good checkpoints to spoil: SHARDED (the default), FULL and LOCAL, 2 ranks, step 2.
for type in SHARDED FULL LOCAL; do
  "${np2[@]}" training.max_steps=2 training.output_dir="$D/good-$type" \
    training.fsdp_config.fsdp_state_dict_type=${type}_STATE_DICT > "$D/good-$type.log" 2>&1 ||
    { tail -n 30 "$D/good-$type.log"; exit 1; }
done
good=$D/good-SHARDED/checkpoint-2
before=$(tree_digest "$D/good-SHARDED")

# spoil NAME TYPE: a copy of the TYPE checkpoint as $D/NAME/checkpoint-2, for a resume with
# resume_from_checkpoint=latest in $D/NAME.
spoil() {
  mkdir -p "$D/$1"
  cp -r "$D/good-$2/checkpoint-2" "$D/$1/"
  cp "$D/good-$2/metrics.jsonl" "$D/good-$2/config.yaml" "$D/$1/"
}
resume=("${np2[@]}" training.max_steps=4 training.resume_from_checkpoint=latest)

spoil truncated SHARDED
f=$D/truncated/checkpoint-2/shard-1.safetensors
head -c $(( $(stat -c %s "$f") / 2 )) "$f" > "$f.cut" && mv "$f.cut" "$f"
# The run that saved it had gone on to step 4 before it died: its metrics must survive a resume
# that fails.
printf '{"step": 3, "loss": 1.0}\n{"step": 4, "loss": 1.0}\n' >> "$D/truncated/metrics.jsonl"
kept=$(tree_digest "$D/truncated")
expect_fail ckpt_truncated 1 "\[state\] '$f': tensor '[^']+': data_offsets \[[0-9, ]+\] lie outside the data area of [0-9]+ bytes.*truncated file\?" -- \
  "${resume[@]}" training.output_dir="$D/truncated"
[ "$(grep -c step "$D/truncated/metrics.jsonl")" = 4 ] || { echo "FAIL: metrics.jsonl lost lines"; exit 1; }
# (config.yaml is rewritten with the configuration of the run, and .fsdpp.lock is the lock on
# output_dir that every run takes: neither is saved state)
cp "$D/good-SHARDED/config.yaml" "$D/truncated/"
rm -f "$D/truncated/.fsdpp.lock"
[ "$kept" = "$(tree_digest "$D/truncated")" ] || { echo "FAIL: the failed resume changed its output_dir"; exit 1; }

spoil flipped SHARDED
f=$D/flipped/checkpoint-2/shard-0.safetensors
"$(dirname "$0")/flip_byte.sh" "$f" -100
expect_fail ckpt_bit_flip_data 1 "\[state\] '$f': checksum mismatch for tensor" -- \
  "${resume[@]}" training.output_dir="$D/flipped"
digest=$(tree_digest "$D/flipped/checkpoint-2")
expect_fail ckpt_bit_flip_inspect 1 "checksum mismatch" -- "$ckpt" inspect "$D/flipped/checkpoint-2"
[ "$digest" = "$(tree_digest "$D/flipped/checkpoint-2")" ]

spoil flipped_index SHARDED
f=$D/flipped_index/checkpoint-2/index.json
sed -i '0,/"row_end"/s/"row_end"/"row_enf"/' "$f"
expect_fail ckpt_bit_flip_index 1 "\[state\] .*index.json.*row_end" -- \
  "${resume[@]}" training.output_dir="$D/flipped_index"

spoil flipped_header SHARDED
f=$D/flipped_header/checkpoint-2/shard-0.safetensors
"$(dirname "$0")/flip_byte.sh" "$f" 20
expect_fail ckpt_bit_flip_header 1 "\[state\] '$f'" -- "${resume[@]}" training.output_dir="$D/flipped_header"

expect_fail ckpt_other_model 1 "\[state\] .*(shape|not in the checkpoint|lacks|missing)" -- \
  "${resume[@]}" training.output_dir="$D/other" training.resume_from_checkpoint="$good" model.dim=64

expect_fail ckpt_local_other_world_size 1 "\[state\] .*LOCAL.*(world size|2 ranks)" -- \
  "$run" --nproc-per-node 1 --timeout-s 60 "$train" "$cfg" "${small[@]}" training.max_steps=4 \
  training.per_device_train_batch_size=4 training.output_dir="$D/local1" \
  training.resume_from_checkpoint="$D/good-LOCAL/checkpoint-2"

spoil no_state SHARDED
rm "$D/no_state/checkpoint-2/trainer_state.json"
expect_fail ckpt_incomplete 1 "is not a complete checkpoint: it has no trainer_state.json" -- \
  "${np2[@]}" training.max_steps=4 training.output_dir="$D/o" training.resume_from_checkpoint="$D/no_state/checkpoint-2"

spoil bad_state SHARDED
echo '{"step": "two"}' > "$D/bad_state/checkpoint-2/trainer_state.json"
expect_fail ckpt_bad_trainer_state 1 "is not a valid trainer state" -- \
  "${resume[@]}" training.output_dir="$D/bad_state"

expect_fail ckpt_missing_dir 1 "training.resume_from_checkpoint='$D/none' is not a directory" -- \
  "${np2[@]}" training.max_steps=4 training.output_dir="$D/o" training.resume_from_checkpoint="$D/none"

# A checkpoint that is not what fsdpp writes: refused naming the file, before anything is read
# from where it should not be, or waited on forever.
spoil version SHARDED
sed -i 's/"version": 1/"version": 99/' "$D/version/checkpoint-2/index.json"
expect_fail ckpt_index_version 1 "\[state\] '$D/version/checkpoint-2/index.json' has version 99; this build of fsdpp reads version 1 only" -- \
  "${resume[@]}" training.output_dir="$D/version"
spoil escape SHARDED
mkdir -p "$D/other" && cp "$good/shard-0.safetensors" "$D/other/"
sed -i 's|"shard-0.safetensors"|"../../other/shard-0.safetensors"|g' "$D/escape/checkpoint-2/index.json"
expect_fail ckpt_piece_outside 1 "\[state\] '$D/escape/checkpoint-2/index.json' names the data file '../../other/shard-0.safetensors'; expected a file name inside the checkpoint" -- \
  "${resume[@]}" training.output_dir="$D/escape"
spoil index_dir SHARDED
rm "$D/index_dir/checkpoint-2/index.json" && mkdir "$D/index_dir/checkpoint-2/index.json"
expect_fail ckpt_index_directory 1 "\[state\] checkpoint index '$D/index_dir/checkpoint-2/index.json' is a directory; expected a regular file" -- \
  "${resume[@]}" training.output_dir="$D/index_dir"
spoil fifo SHARDED
rm "$D/fifo/checkpoint-2/shard-1.safetensors" && mkfifo "$D/fifo/checkpoint-2/shard-1.safetensors"
expect_fail ckpt_fifo_shard 1 "\[state\] '$D/fifo/checkpoint-2/shard-1.safetensors' is not a regular file" -- \
  "${resume[@]}" training.output_dir="$D/fifo"
spoil negative_step SHARDED
sed -i 's/"step": 2,/"step": -5,/' "$D/negative_step/checkpoint-2/trainer_state.json"
expect_fail ckpt_negative_step 1 "\[train\] '$D/negative_step/checkpoint-2/trainer_state.json' is not a valid trainer state: step is -5; expected a step >= 0" -- \
  "${resume[@]}" training.output_dir="$D/negative_step"
[ ! -e "$D/negative_step/checkpoint-0" ] || { echo "FAIL: a checkpoint-0 was written"; exit 1; }
spoil bad_rng SHARDED
f=$D/bad_rng/checkpoint-2/trainer_state.json
# rank 1's CPU generator state: 3 bytes instead of LibTorch's 5056
awk 'BEGIN { n = 0 } /"cpu": \[/ { inside = 1 } inside && /^ *"[A-Za-z0-9+\/=]+",?$/ { n++; if (n == 2) sub(/"[^"]+"/, "\"AAAA\"") } /\]/ { inside = 0 } { print }' "$f" > "$f.new" && mv "$f.new" "$f"
grep -q '"AAAA"' "$f" || { echo "FAIL: the test did not spoil rng.cpu[1]"; exit 1; }
expect_fail ckpt_bad_rng 1 "\[train\] '$f': rng.cpu\[1\] \(rank 1's CPU generator, 3 bytes\) is not a generator state" -- \
  "${resume[@]}" training.output_dir="$D/bad_rng"
if grep -q "frame #" "$FAULT_DIR/ckpt_bad_rng.log"; then echo "FAIL: a stack trace"; exit 1; fi

# Resuming into something else (docs/faults.md, "Resuming into something else").
expect_fail ckpt_resume_rope_theta 1 "\[train\] model.rope_theta=500000 differs from the checkpoint's 10000 \($good/model_config.json\)" -- \
  "${resume[@]}" training.output_dir="$D/rope" training.resume_from_checkpoint="$good" model.rope_theta=500000
# expect_warn NAME REGEX -- COMMAND: the run succeeds and rank 0 prints a line matching REGEX.
expect_warn() {
  local name=$1 regex=$2
  shift 3
  if ! timeout -k 5 120 "$@" > "$FAULT_DIR/$name.log" 2>&1 < /dev/null; then
    echo "FAIL $name: the run failed"; tail -n 20 "$FAULT_DIR/$name.log"; exit 1
  fi
  local line
  line=$(grep -a -E -m1 -- "$regex" "$FAULT_DIR/$name.log" || true)
  [ -n "$line" ] || { echo "FAIL $name: no line matches /$regex/"; tail -n 20 "$FAULT_DIR/$name.log"; exit 1; }
  echo "ok   $name: exit 0: ${line:0:300}"
}
spoil no_optim SHARDED
python3 - "$D/no_optim/checkpoint-2/index.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); del j["optim"]; json.dump(j, open(sys.argv[1], "w"))
PY
expect_warn ckpt_resume_no_optimizer "\[train\] warning: $D/no_optim/checkpoint-2 holds no optimizer state: AdamW starts afresh at step 3" -- \
  "${resume[@]}" training.output_dir="$D/no_optim"
expect_warn ckpt_resume_seed "\[train\] warning: training.seed=7 differs from the checkpoint's 42 .*another shuffle" -- \
  "${resume[@]}" training.output_dir="$D/seed" training.resume_from_checkpoint="$good" training.seed=7
expect_warn ckpt_resume_seq_len "\[train\] warning: data.seq_len=16 differs from the checkpoint's 32 .*windows of 16 tokens instead of 32" -- \
  "${resume[@]}" training.output_dir="$D/seq_len" training.resume_from_checkpoint="$good" data.seq_len=16
expect_warn ckpt_resume_data_path "\[train\] warning: data.path='$src/docs' differs from the checkpoint's '$src/configs'" -- \
  "${resume[@]}" training.output_dir="$D/data_path" training.resume_from_checkpoint="$good" data.path="$src/docs"
# The same configuration resumes without a word.
spoil same SHARDED
expect_warn ckpt_resume_same "resumed from $D/same/checkpoint-2" -- "${resume[@]}" training.output_dir="$D/same"
if grep -q "warning" "$FAULT_DIR/ckpt_resume_same.log"; then echo "FAIL: a warning on a plain resume"; exit 1; fi

expect_fail ckpt_tool_truncated 1 "\[state\]" -- "$ckpt" inspect "$D/truncated/checkpoint-2"
expect_fail ckpt_tool_not_a_checkpoint 1 "\[state\] '$src/configs' has no index.json; is it an fsdpp checkpoint\?" -- "$ckpt" inspect "$src/configs"

# fsdpp-ckpt never replaces what exists unless --force, and never writes inside its input.
t=$D/tool && mkdir -p "$t" && cp -r "$good" "$t/ck"
kept=$(tree_digest "$t/ck")
expect_fail ckpt_tool_consolidate_into_input 1 "\[state\] consolidate: the output '$t/ck/shard-0.safetensors' is inside the input '$t/ck'.*refused even with --force" -- \
  "$ckpt" consolidate --force "$t/ck" "$t/ck/shard-0.safetensors"
expect_fail ckpt_tool_consolidate_into_input_dotdot 1 "\[state\] consolidate: the output '$t/ck/../ck/x.safetensors' is inside the input" -- \
  "$ckpt" consolidate "$t/ck" "$t/ck/../ck/x.safetensors"
echo keep > "$t/c.safetensors"
expect_fail ckpt_tool_consolidate_exists 1 "\[state\] consolidate: the output '$t/c.safetensors' exists; give a new path, or --force to replace it" -- \
  "$ckpt" consolidate "$t/ck" "$t/c.safetensors"
[ "$(cat "$t/c.safetensors")" = keep ] || { echo "FAIL: consolidate replaced an existing file"; exit 1; }
"$ckpt" consolidate --force "$t/ck" "$t/c.safetensors" > /dev/null
expect_fail ckpt_tool_export_over_file 1 "\[state\] export-hf: the output '$t/c.safetensors' exists and is not a directory" -- \
  "$ckpt" export-hf --force "$t/ck" "$t/c.safetensors"
"$ckpt" export-hf "$t/ck" "$t/hf" > /dev/null
expect_fail ckpt_tool_export_exists 1 "\[state\] export-hf: the output '$t/hf' exists; give a new path, or --force" -- \
  "$ckpt" export-hf "$t/ck" "$t/hf"
expect_fail ckpt_tool_import_over_checkpoint 1 "\[state\] import-hf: the output '$t/ck' exists; give a new path, or --force" -- \
  "$ckpt" import-hf "$t/hf" "$t/ck"
expect_fail ckpt_tool_import_into_input 1 "\[state\] import-hf: the output '$t/hf/sub' is inside the input '$t/hf'" -- \
  "$ckpt" import-hf --force "$t/hf" "$t/hf/sub"
expect_fail ckpt_tool_reshard_over_parent 1 "\[state\] reshard: the input '$t/ck' is inside the output '$t'" -- \
  "$ckpt" reshard --force --world-size 2 "$t/ck" "$t"
expect_fail ckpt_tool_reshard_huge_world 1 "\[fsdpp-ckpt\] --world-size 99999999999: expected 1 <= N <= 65536" -- \
  "$ckpt" reshard --world-size 99999999999 "$t/ck" "$t/r"
[ "$kept" = "$(tree_digest "$t/ck")" ] || { echo "FAIL: fsdpp-ckpt changed its input"; exit 1; }
[ ! -e "$t/r" ] && [ ! -e "$t/hf/sub" ] || { echo "FAIL: a refused output was written"; exit 1; }
if compgen -G "$t/*.tmp-*" > /dev/null || compgen -G "$t/ck/*.tmp*" > /dev/null; then
  echo "FAIL: temporary files left"; exit 1
fi
"$ckpt" import-hf --force "$t/hf" "$t/ck" > /dev/null  # --force replaces, as asked
grep -q '"format": "fsdpp.full"' "$t/ck/index.json"
echo "ok   ckpt_tool_force: --force replaces an existing output"

# Nothing above touched the good checkpoints.
[ "$before" = "$(tree_digest "$D/good-SHARDED")" ] || { echo "FAIL: good-SHARDED changed"; exit 1; }
echo "ok   the good checkpoints are unchanged"
