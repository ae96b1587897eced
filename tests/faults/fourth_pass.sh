#!/usr/bin/env bash
# Reliability, fourth pass (docs/faults.md#fourth-pass, issue 43): what a fourth round of trying to
# break runs found, each case with what fsdpp must do now.
#   fourth_pass.sh config RUN TRAIN CKPT GENERATE SRC EXAMPLE PLAN ESTIMATE   (faults.fourth_pass_config)
#     config_*     layouts and distillation settings refused by name before anything is written;
#                  model.init_from deciding the architecture before the degrees are checked;
#                  fsdpp::train::train's programs (exit 2, not restarted; ignored keys said;
#                  a batch larger than the data refused)
#   fourth_pass.sh jobs ...                                                   (faults.fourth_pass_jobs)
#     output_dir_* a live job's output_dir is never shared, whatever overwrite_output_dir says, and
#                  a live job stops when its files are changed under it
#     start_*      cluster starts: ranks that disagree on the world size, two processes claiming
#                  a rank, the launcher's line for one Kubeflow pod, torchrun's --nnodes N:N
#   fourth_pass.sh tools ...                                                  (faults.fourth_pass_tools)
#     plan_*, estimate_*, message_*   the offline tools' ranges, header and messages
# Exit codes as bad_input.sh's: 2 for configuration from a program itself, 1 through fsdpp-run.
set -euo pipefail
part=$1 run=$2 train=$3 ckpt=$4 generate=$5 src=$6 example=$7 plan=$8 estimate=$9
FAULT_DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$FAULT_DIR"' EXIT
source "$(dirname "$0")/lib.sh"
D=$FAULT_DIR
cfg=$src/configs/default.yaml
small_config "$src" "$D"
small+=(training.report_to=none)
job=("$train" "$cfg" "${small[@]}")

absent() {  # NAME PATH: nothing was written
  [ ! -e "$2" ] || { echo "FAIL $1: $2 was written before the refusal"; ls -la "$2"; exit 1; }
}
wait_for() {  # FILE REGEX [SECONDS]: until a line of FILE matches
  local i
  for ((i = 0; i < ${3:-60} * 10; i++)); do
    grep -Eq -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "FAIL: no /$2/ in $1 after ${3:-60} s"; tail -n 20 "$1"; exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_exit() {  # PID SECONDS: waits for the background job PID to end (its status in $rc)
  local i
  for ((i = 0; i < $2 * 10; i++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$1" 2>/dev/null && { echo "FAIL: job $1 still runs after $2 s"; kill -9 "$1"; exit 1; }
  set +e; wait "$1"; rc=$?; set -e
}
# A Qwen3-MoE checkpoint of one step, for model.init_from and distillation.teacher.
moe_checkpoint() {
  "${job[@]}" model.architecture=qwen3_moe model.num_experts=4 model.num_experts_per_tok=2 \
    training.max_steps=1 training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[Qwen3MoeDecoderLayer] \
    training.output_dir="$D/moe" > "$D/moe.log" 2>&1 || { cat "$D/moe.log"; echo "FAIL: Qwen3-MoE source"; exit 1; }
}

if [ "$part" = config ]; then
  # ---- weak spot 3: an expert degree that does not divide dp_shard x tp ----------------------
  moe=(model.architecture=qwen3_moe model.num_experts=4 model.num_experts_per_tok=2
       training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[Qwen3MoeDecoderLayer])
  expect_fail config_ep_pp_tp 1 \
    "\[config\] parallelism.expert_parallel_degree=4 does not divide dp_shard x tp = 1 x 2 = 2, the ranks of one pipeline stage's replica" -- \
    "$run" --nproc-per-node 4 "${job[@]}" "${moe[@]}" parallelism.pipeline_parallel_degree=2 \
    parallelism.tensor_parallel_degree=2 parallelism.expert_parallel_degree=4 training.output_dir="$D/c1"
  absent config_ep_pp_tp "$D/c1"
  expect_fail config_ep_hsdp 1 \
    "\[config\] parallelism.expert_parallel_degree=4 does not divide dp_shard x tp = 2 x 1 = 2" -- \
    "$run" --nproc-per-node 4 "${job[@]}" "${moe[@]}" training.fsdp=hybrid_shard \
    parallelism.data_parallel_replicate_degree=2 parallelism.expert_parallel_degree=4 training.output_dir="$D/c2"
  absent config_ep_hsdp "$D/c2"

  # ---- weak spot 4: model.init_from decides the architecture before the degrees are checked ----
  moe_checkpoint
  "$run" --nproc-per-node 2 "${job[@]}" model.init_from="$D/moe/checkpoint-1" parallelism.expert_parallel_degree=2 \
    training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[Qwen3MoeDecoderLayer] training.max_steps=1 \
    training.output_dir="$D/c3" > "$D/c3.log" 2>&1 || { tail -n 20 "$D/c3.log"; echo "FAIL config_init_from_ep: refused"; exit 1; }
  grep -q "model.init_from: model.architecture: llama in the config, qwen3_moe in" "$D/c3.log" ||
    { tail -n 20 "$D/c3.log"; echo "FAIL config_init_from_ep: no note"; exit 1; }
  echo "ok   config_init_from_ep: a Qwen3-MoE model.init_from trains under the default config with expert_parallel_degree=2"
  "${job[@]}" training.max_steps=1 training.output_dir="$D/llama" > "$D/llama.log" 2>&1 || { cat "$D/llama.log"; exit 1; }
  expect_fail config_init_from_llama_ep 1 \
    "\[config\] parallelism.expert_parallel_degree=2 needs experts: model.architecture=qwen3_moe \(got llama\) \(model.init_from='$D/llama/checkpoint-1' made the model llama\)" -- \
    "$run" --nproc-per-node 2 "${job[@]}" "${moe[@]}" model.init_from="$D/llama/checkpoint-1" \
    parallelism.expert_parallel_degree=2 training.output_dir="$D/c4"
  absent config_init_from_llama_ep "$D/c4"

  # ---- weak spot 5: on-policy distillation that trains nothing -------------------------------
  expect_fail config_on_policy_nothing 2 \
    "\[config\] distillation.lmbda=1 with distillation.kd_ratio=0: the batches the student samples are trained on by the KD loss alone .*; with lmbda=1 and max_new_tokens=32 = data.seq_len the prompt is one token, so no position of any batch trains" -- \
    "${job[@]}" distillation.teacher="$D/moe/checkpoint-1" distillation.lmbda=1 distillation.max_new_tokens=32 \
    distillation.kd_ratio=0 training.output_dir="$D/c5"
  absent config_on_policy_nothing "$D/c5"
  expect_fail config_on_policy_no_prompt 2 \
    "\[config\] distillation.lmbda=1 with distillation.max_new_tokens=32 = data.seq_len: every batch is the student's samples after a one-token prompt, so no position has a real next token and the cross-entropy \(weight 1 - kd_ratio = 0.5\) averages over none" -- \
    "${job[@]}" distillation.teacher="$D/moe/checkpoint-1" distillation.lmbda=1 distillation.max_new_tokens=32 \
    distillation.kd_ratio=0.5 training.output_dir="$D/c6"
  expect_fail config_on_policy_sampled_nothing 2 \
    "\[config\] distillation.lmbda=0.5 with distillation.kd_ratio=0: .*: they would train nothing" -- \
    "${job[@]}" distillation.teacher="$D/moe/checkpoint-1" distillation.lmbda=0.5 distillation.max_new_tokens=8 \
    distillation.kd_ratio=0 training.output_dir="$D/c7"
  expect_fail message_layer_map_twice 2 \
    "\[config\] distillation.layer_map: student layer 0 appears twice \('0:0' and '0:1'\); each student layer maps to one teacher layer" -- \
    "${job[@]}" "distillation.layer_map=[0:0, 0:1]" training.output_dir="$D/c8"

  # ---- weak spot 6: programs built on fsdpp::train::train ----------------------------------------
  expect_fail config_custom_not_restarted 1 \
    "\[fsdpp-run\] not restarting: exit code 2 is a usage or configuration error" -- \
    "$run" --nproc-per-node 2 --max-restarts 2 "$example" training.max_steps=0 training.output_dir="$D/c9"
  if grep -q "restarting workers" "$D/config_custom_not_restarted.log"; then
    echo "FAIL config_custom_not_restarted: the refusal was restarted"; cat "$D/config_custom_not_restarted.log"; exit 1
  fi
  grep -Eq "\[rank [01]\] \[config\] training.max_steps=0" "$D/config_custom_not_restarted.log" ||
    { cat "$D/config_custom_not_restarted.log"; echo "FAIL: the refusal is not said"; exit 1; }
  "$run" --nproc-per-node 2 "$example" training.max_steps=2 model.dim=99999999 data.path=/nonexistent \
    training.output_dir="$D/c10" > "$D/c10.log" 2>&1 || { tail -n 20 "$D/c10.log"; echo "FAIL config_custom_ignored: exit $?"; exit 1; }
  line=$(grep -E -m1 "\[train\] warning: model.dim=99999999, data.path=/nonexistent are set, but fsdpp::train::train trains custom model 'mlp-regressor' on its own data and reads no model: or data: key: they are ignored" "$D/c10.log") ||
    { tail -n 20 "$D/c10.log"; echo "FAIL config_custom_ignored: no warning"; exit 1; }
  echo "ok   config_custom_ignored: ${line:0:200}"
  expect_fail config_custom_batch 1 \
    "\[train\] training.per_device_train_batch_size=2000 is larger than the 1024 examples the training source gives each of the 2 data-parallel ranks per epoch" -- \
    "$run" --nproc-per-node 2 "$example" training.per_device_train_batch_size=2000 training.output_dir="$D/c11"
  exit 0
fi

if [ "$part" = jobs ]; then
  # ---- bug 1: a live job's output_dir ------------------------------------------------------------
  log="$D/live.log"
  "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=100000 training.save_steps=20 \
    training.output_dir="$D/odc" > "$log" 2>&1 &
  live=$!
  wait_for "$D/odc/metrics.jsonl" '"step":3[,}]'
  config_before=$(sha256sum < "$D/odc/config.yaml")
  expect_fail output_dir_live_overwrite 1 \
    "\[train\] training.output_dir='$D/odc' is in use by another job \(pid [0-9]+ on host .*\); training.overwrite_output_dir=true replaces a finished run, never a live one: wait for it to end or choose another output_dir" -- \
    "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=2 training.output_dir="$D/odc" \
    training.overwrite_output_dir=true
  [ "$(sha256sum < "$D/odc/config.yaml")" = "$config_before" ] || { echo "FAIL: config.yaml replaced"; exit 1; }
  head -n 1 "$D/odc/metrics.jsonl" | grep -q '"step":1[,}]' || { echo "FAIL: metrics.jsonl cut"; head -n 2 "$D/odc/metrics.jsonl"; exit 1; }
  [ ! -d "$D/odc/checkpoint-2" ] || { echo "FAIL: the second job saved into the live job's directory"; exit 1; }
  kill -0 "$live" || { echo "FAIL: the live job stopped"; tail "$log"; exit 1; }
  echo "ok   output_dir_live_untouched: the live job's config.yaml, metrics.jsonl and checkpoints are as they were"
  # A live job whose metrics.jsonl is cut in place (what the second job's open did before) stops.
  : > "$D/odc/metrics.jsonl"
  wait_exit "$live" 60
  line=$(grep -E -m1 "\[train\] '$D/odc/metrics.jsonl' was changed by someone else while the run wrote it: it holds 0 bytes where this run wrote [0-9]+" "$log") ||
    { tail -n 20 "$log"; echo "FAIL output_dir_metrics_truncated: exit $rc"; exit 1; }
  [ "$rc" = 1 ] || { echo "FAIL output_dir_metrics_truncated: exit $rc"; exit 1; }
  echo "ok   output_dir_metrics_truncated: exit 1: ${line:0:200}"
  # config.yaml replaced, and the lock file removed: the same.
  for what in config lock; do
    log="$D/live_$what.log"
    "$run" --nproc-per-node 2 "${job[@]}" training.max_steps=100000 training.output_dir="$D/odc_$what" > "$log" 2>&1 &
    live=$!
    wait_for "$D/odc_$what/metrics.jsonl" '"step":2[,}]'
    if [ "$what" = config ]; then
      echo "# another job's" > "$D/odc_$what/config.yaml.tmp" && mv "$D/odc_$what/config.yaml.tmp" "$D/odc_$what/config.yaml"
      want="\[train\] '$D/odc_$what/config.yaml' was removed, replaced or changed while this run held training.output_dir"
    else
      rm "$D/odc_$what/.fsdpp.lock"
      want="\[train\] '$D/odc_$what/.fsdpp.lock' was removed or replaced while this run held it: another job may be writing into training.output_dir"
    fi
    wait_exit "$live" 60
    line=$(grep -E -m1 "$want" "$log") || { tail -n 20 "$log"; echo "FAIL output_dir_${what}_changed: exit $rc"; exit 1; }
    [ "$rc" = 1 ] || { echo "FAIL output_dir_${what}_changed: exit $rc"; exit 1; }
    echo "ok   output_dir_${what}_changed: exit 1: ${line:0:180}"
  done

  # ---- weak spot 7: cluster starts ---------------------------------------------------------------
  e=(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u LOCAL_RANK -u LOCAL_WORLD_SIZE FSDPP_TIMEOUT_S=20)
  port=$(free_port)
  "${e[@]}" RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${job[@]}" training.max_steps=1 \
    training.output_dir="$D/ws" > "$D/ws0.log" 2>&1 &
  first=$!
  wait_for "$D/ws0.log" '^\[dist\] '  # rank 0 says where it was placed, then hosts the store
  sleep 1
  expect_fail start_world_size_disagree 2 \
    "\[dist\] the processes of this job disagree on the world size: rank 1 \(pid [0-9]+ on host .*\) was started for 3 ranks, rank 0 \(pid [0-9]+ on host .*\) for 2" -- \
    "${e[@]}" RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${job[@]}" training.max_steps=1 \
    training.output_dir="$D/ws"
  wait_exit "$first" 30
  grep -Eq "\[dist\] the processes of this job disagree on the world size: .* \(seen by rank 0" "$D/ws0.log" ||
    { cat "$D/ws0.log"; echo "FAIL start_world_size_disagree: rank 0 did not say it"; exit 1; }
  [ "$rc" = 2 ] || { echo "FAIL: rank 0 exited $rc"; exit 1; }
  echo "ok   start_world_size_disagree: rank 0 says it too, exit 2"
  port=$(free_port)
  "${e[@]}" FSDPP_TIMEOUT_S=4 RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${job[@]}" \
    training.max_steps=1 training.output_dir="$D/r0" > "$D/r0.log" 2>&1 &
  first=$!
  wait_for "$D/r0.log" '^\[dist\] '
  sleep 1
  expect_fail start_two_rank0 2 \
    "\[dist\] rank 0 cannot host the rendezvous store on 127.0.0.1:$port \(MASTER_ADDR/MASTER_PORT\): rank 0 of an fsdpp job already hosts it there \(pid [0-9]+ on host .*\), and this process \(pid [0-9]+ .*\) was started as rank 0 too" -- \
    "${e[@]}" RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${job[@]}" training.max_steps=1 \
    training.output_dir="$D/r0"
  wait_exit "$first" 30
  grep -Eq "\[dist\] rank 0 \(pid [0-9]+ .*\): 1 of the 2 ranks reached the rendezvous store within 4000 ms" "$D/r0.log" ||
    { cat "$D/r0.log"; echo "FAIL start_two_rank0: the first rank 0 did not say who came"; exit 1; }
  echo "ok   start_two_rank0: the first rank 0 names the ranks that came (exit $rc)"
  port=$(free_port)
  pids=()
  for r in 0 1; do  # a job under way: both ranks are past the rendezvous
    "${e[@]}" RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${job[@]}" training.max_steps=100000 \
      training.output_dir="$D/dup" > "$D/dup$r.log" 2>&1 &
    pids+=($!)
  done
  wait_for "$D/dup/metrics.jsonl" '"step":1[,}]'
  expect_fail start_rank_claimed_twice 2 \
    "\[dist\] rank 1 is claimed by two processes: pid [0-9]+ on host .* and this one \(pid [0-9]+ on host" -- \
    "${e[@]}" RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${job[@]}" training.max_steps=1 \
    training.output_dir="$D/dup2"
  kill "${pids[@]}"; wait "${pids[@]}" || true
  # One Kubeflow pod: the line names the store its workers use, not the MASTER_ADDR they ignore.
  "${e[@]}" PET_NNODES=1 PET_NODE_RANK=0 PET_NPROC_PER_NODE=1 MASTER_ADDR=no-such-host.invalid MASTER_PORT=23456 \
    "$run" true > "$D/kf.log" 2>&1 || { cat "$D/kf.log"; echo "FAIL start_kubeflow_one_pod"; exit 1; }
  line=$(grep -E -m1 "^\[fsdpp-run\] Kubeflow: node 0 of 1 .*one node: its workers meet on 127.0.0.1 at a free port \(MASTER_ADDR=no-such-host.invalid, MASTER_PORT=23456 not used\)" "$D/kf.log") ||
    { cat "$D/kf.log"; echo "FAIL start_kubeflow_one_pod: the line"; exit 1; }
  grep -q "store at no-such-host" "$D/kf.log" && { cat "$D/kf.log"; echo "FAIL: names the unused store"; exit 1; }
  echo "ok   start_kubeflow_one_pod: ${line:0:200}"
  "$run" --nnodes 1:1 --nproc-per-node 1 true > "$D/nn.log" 2>&1 || { cat "$D/nn.log"; echo "FAIL start_nnodes_range"; exit 1; }
  echo "ok   start_nnodes_range: --nnodes 1:1 is one node"
  expect_fail start_nnodes_elastic 2 "\[fsdpp-run\] --nnodes: expects a whole number, or torchrun's MIN:MAX with MIN = MAX such as 2:2 \(elastic ranges are not supported\), got '1:4'" -- \
    "$run" --nnodes 1:4 true
  exit 0
fi

if [ "$part" = tools ]; then
  # ---- bug 2: fsdpp-plan states what it ranks with, and refuses impossible values --------------
  p=("$plan" "$src/examples/plan/llama-3-8b/config.json" --cluster h100-sxm --world-size 8 --global-batch 16
     --seq-len 8192 --mixed-precision bf16)
  "${p[@]}" --compute-efficiency 0.3 --memory-gb 40 > "$D/plan.log" 2>&1 || { cat "$D/plan.log"; exit 1; }
  line=$(head -n 1 "$D/plan.log")
  [[ $line == *"40.0 GiB each: --memory-gb; compute efficiency 0.30: --compute-efficiency"* ]] ||
    { echo "FAIL plan_header: $line"; exit 1; }
  [[ $line != *"80 GB"* && $line != *"0.60"* ]] || { echo "FAIL plan_header: the preset's numbers: $line"; exit 1; }
  echo "ok   plan_header: ${line:0:220}"
  "${p[@]}" > "$D/plan0.log" 2>&1 || { cat "$D/plan0.log"; exit 1; }
  grep -q "79.6 GiB each: 80 GB HBM3 as the driver reports it; compute efficiency 0.60: assumed" "$D/plan0.log" ||
    { head -n 1 "$D/plan0.log"; echo "FAIL plan_header_preset"; exit 1; }
  expect_fail plan_efficiency_2 2 "\[fsdpp-plan\] --compute-efficiency 2: expected the fraction of the peak the matmuls reach, in \(0, 1\]" -- \
    "${p[@]}" --compute-efficiency 2
  expect_fail plan_efficiency_nan 2 "\[fsdpp-plan\] --compute-efficiency.*nan" -- "${p[@]}" --compute-efficiency nan
  expect_fail plan_memory_0 2 "\[fsdpp-plan\] --memory-gb 0: expected a device's memory in GiB, in \(0, 1000000\]" -- \
    "${p[@]}" --memory-gb 0
  expect_fail plan_seq_len_negative 2 "\[fsdpp-plan\] --seq-len -5: expected a number of tokens in \[1, 1073741824\]" -- \
    "$plan" "$src/examples/plan/llama-3-8b/config.json" --world-size 8 --global-batch 16 --seq-len -5
  expect_fail plan_world_nan 2 "\[fsdpp-plan\] .*--world-size.*nan" -- \
    "$plan" "$src/examples/plan/llama-3-8b/config.json" --world-size nan --global-batch 16

  # ---- weak spot 8: fsdpp-estimate's ranges and a million layers ------------------------------
  expect_fail estimate_params_inf 2 "\[estimate\] --params 'inf' is not a count of parameters this estimate can hold" -- \
    "$estimate" --params inf --world-size 8
  expect_fail estimate_budget_negative 2 "\[estimate\] --budget -1: expected the memory per rank in GiB, a number > 0" -- \
    "$estimate" --params 7B --units 33 --world-size 8 --budget -1
  expect_fail estimate_budget_nan 2 "--budget.*nan" -- \
    "$estimate" --params 7B --units 33 --world-size 8 --budget nan
  start=$(date +%s.%N)
  "$estimate" --dim 64 --n-layers 1000000 --n-heads 4 --vocab-size 256 --seq-len 32 --batch 1 --world-size 8 \
    > "$D/million.log" 2>&1 || { cat "$D/million.log"; echo "FAIL estimate_million_layers"; exit 1; }
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  grep -q "1000000 layers" "$D/million.log" || { head "$D/million.log"; echo "FAIL: not the model asked for"; exit 1; }
  awk -v s="$secs" 'BEGIN { exit !(s < 30) }' || { echo "FAIL estimate_million_layers: $secs s"; exit 1; }
  echo "ok   estimate_million_layers: $secs s (limit 30 s; before: minutes)"

  # ---- weak spot 9: messages -------------------------------------------------------------------
  "${job[@]}" training.max_steps=1 training.output_dir="$D/g" > "$D/g.log" 2>&1 || { cat "$D/g.log"; exit 1; }
  expect_fail message_top_k_negative 2 "--top-k: expected a whole number of tokens >= 0 \(0: all\), got '-1'" -- \
    "$generate" "$D/g/checkpoint-1" --prompt x --top-k -1
  if grep -Eq '[0-9]{30}' "$D/message_top_k_negative.log"; then echo "FAIL: a bound of 30+ digits"; exit 1; fi
  expect_fail message_seed_range 2 "--seed: expected a whole number in \[0, 18446744073709551615\], got '99999999999999999999'" -- \
    "$generate" "$D/g/checkpoint-1" --prompt x --seed 99999999999999999999
  mkdir "$D/bad"
  cp -r "$D/g/checkpoint-1/." "$D/bad/"
  shard="$D/bad/shard-0.safetensors"
  printf '\x04\x00\x00\x00\x00\x00\x00\x00{"\xff\x01' > "$shard"
  expect_fail message_header_bytes 1 "the header is not valid JSON: .*last read: '\"\\\\xff'" -- \
    "$ckpt" inspect "$D/bad"
  if LC_ALL=C grep -q $'\xff' "$D/message_header_bytes.log"; then echo "FAIL: raw byte 0xff in the message"; exit 1; fi
  exit 0
fi

echo "unknown part '$part'"
exit 2
