#!/usr/bin/env bash
# fsdpp-train's layouts that parallel::parallelize composes (docs/parallelize.md#fsdpp-train)
# against one process, for what the trainer used to refuse:
#   parallelize.sh RUN TRAIN PYTHON SRC moe    (train.parallelize_moe: a Qwen3-MoE of 2 layers and 4
#     experts, 2 microbatches of 4 sequences per step, 6 AdamW steps with clipping: pp 2 (1F1B),
#     pp 2 x EP 2 x FSDP 2, pp 2 x HSDP 2x1, EP 2 x HSDP 2x2 (hybrid_shard), TP 2 (experts split
#     over tp): every step's loss, grad norm and aux_loss equal one's within 1e-5, the expert
#     load figures equal)
#   parallelize.sh RUN TRAIN PYTHON SRC offload (train.parallelize_offload, slow: the same model
#     with offload (parameters, AdamW state on disk) on pp 2 x EP 2 and TP 2, and a LOCAL
#     checkpoint of pp 2 x FSDP 2 resumed in its layout: the same bound)
#   parallelize.sh RUN TRAIN PYTHON SRC fp16   (train.parallelize_fp16: training.fp16 with
#     TP 2, pp 2 (the Llama) and EP 2 (the Qwen3-MoE) against fp16 on one process: the same
#     loss scale and skipped steps every step, losses and grad norms within fp16's rounding)
set -euo pipefail
run=$1 train=$2 python=$3 src=$4 mode=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/tests/data/moe-text.txt" "$dir/text.txt"  # a fixed text (tests/data/README.md)
moe=(data.seq_len=32 model.dim=64 model.n_layers=2 model.n_heads=4 model.n_kv_heads=2
     model.head_dim=16 model.max_seq_len=32 model.num_experts=4 model.num_experts_per_tok=2
     model.moe_intermediate_size=48)
common=(data.path="$dir/text.txt" data.val_fraction=0.1 training.logging_steps=1
        training.eval_steps=0 training.save_strategy=no training.max_steps=6 training.sample_tokens=0
        training.warmup_steps=2 training.learning_rate=0.001 training.max_grad_norm=0.5
        training.lr_scheduler_type=constant training.seed=7 training.malloc_mmap_threshold=0
        data.cache_dir="$dir/cache")
config="$src/configs/qwen3-moe-small.yaml"
source "$src/tests/train/layouts_lib.sh"
pp2=(parallelism.pipeline_parallel_degree=2)
hsdp=(training.fsdp=hybrid_shard parallelism.data_parallel_replicate_degree=2)
if [[ $mode == moe || $mode == offload ]]; then
  common+=("${moe[@]}")
  # The load-balancing loss is per microbatch (over the global microbatch): every layout steps
  # 2 microbatches of 4 sequences, one process's gradient accumulation.
  common+=(training.gradient_accumulation_steps=2)
  go 1 one training.per_device_train_batch_size=4
fi
if [[ $mode == moe ]]; then
  go 2 pp2 training.per_device_train_batch_size=4 "${pp2[@]}" parallelism.pipeline_parallel_microbatch_size=4
  grep -q "pipeline parallel: pp 2 x dp_replicate 1 x dp_shard 1 x tp 1 x ep 1; 1F1B, 2 stages of 2+2 units, 2 microbatches" "$dir/pp2.log"
  go 4 pp2_ep2 training.per_device_train_batch_size=2 "${pp2[@]}" parallelism.expert_parallel_degree=2 \
    parallelism.pipeline_parallel_microbatch_size=2
  go 4 pp2_hsdp training.per_device_train_batch_size=2 "${pp2[@]}" "${hsdp[@]}" \
    parallelism.pipeline_parallel_microbatch_size=2
  go 4 ep2_hsdp training.per_device_train_batch_size=1 "${hsdp[@]}" parallelism.expert_parallel_degree=2
  grep -q "expert parallel: 4 experts over ep 2 x efsdp 1 (2 per rank)" "$dir/ep2_hsdp.log"
  go 2 tp2 training.per_device_train_batch_size=4 parallelism.tensor_parallel_degree=2
  names=(pp2 pp2_ep2 pp2_hsdp ep2_hsdp tp2)
  tol=1e-5
elif [[ $mode == offload ]]; then
  # Offload (parameters, and the AdamW state on disk) with PP x EP and with TP: per rank, on what
  # the rank holds.
  offload=(training.fsdp_config.fsdp_offload_params=true
           training.fsdp_config.fsdp_offload_optimizer_state_dir="$dir/offload")
  go 4 pp2_ep2_offload training.per_device_train_batch_size=2 "${pp2[@]}" \
    parallelism.expert_parallel_degree=2 parallelism.pipeline_parallel_microbatch_size=2 "${offload[@]}"
  go 2 tp2_offload training.per_device_train_batch_size=4 parallelism.tensor_parallel_degree=2 "${offload[@]}"
  # A LOCAL checkpoint of pp 2 x FSDP 2 resumes in the same layout (its own shards).
  go 4 pp2_local training.per_device_train_batch_size=2 "${pp2[@]}" parallelism.pipeline_parallel_microbatch_size=2 \
    training.save_strategy=steps training.save_steps=3 training.fsdp_config.fsdp_state_dict_type=LOCAL_STATE_DICT
  cp -r "$dir/pp2_local" "$dir/pp2_local_r"
  rm -rf "$dir/pp2_local_r/checkpoint-6"
  go 4 pp2_local_r training.per_device_train_batch_size=2 "${pp2[@]}" parallelism.pipeline_parallel_microbatch_size=2 \
    training.fsdp_config.fsdp_state_dict_type=LOCAL_STATE_DICT \
    training.resume_from_checkpoint="$dir/pp2_local_r/checkpoint-3"
  grep -q "resumed from .*checkpoint-3 (step 3" "$dir/pp2_local_r.log"
  names=(pp2_ep2_offload tp2_offload pp2_local pp2_local_r)
  tol=1e-5
else
  # fp16 on one process and in each layout: the same dynamic loss scale.
  fp16=(training.fp16=true)
  llama=(model.architecture=llama data.seq_len=32 model.dim=64 model.n_layers=2 model.n_heads=4
         model.n_kv_heads=2 model.max_seq_len=32 model.vocab_size=259
         training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[TransformerBlock])
  go 1 one training.per_device_train_batch_size=8 "${llama[@]}" "${fp16[@]}"
  go 2 tp2 training.per_device_train_batch_size=8 "${llama[@]}" "${fp16[@]}" parallelism.tensor_parallel_degree=2
  go 2 pp2 training.per_device_train_batch_size=8 "${llama[@]}" "${fp16[@]}" "${pp2[@]}" \
    parallelism.pipeline_parallel_microbatch_size=2
  go 1 moe_one training.per_device_train_batch_size=8 "${moe[@]}" "${fp16[@]}"
  go 2 moe_ep2 training.per_device_train_batch_size=4 "${moe[@]}" "${fp16[@]}" parallelism.expert_parallel_degree=2
  names=(tp2 pp2 moe_ep2)
  tol=2e-4
fi
"$python" - "$dir" "$tol" "${names[@]}" <<'PY'
import json, sys
d, tol, names = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
for name in names:
    one = steps("moe_one" if name.startswith("moe_") else "one")
    got = steps(name)
    # A resumed run's metrics.jsonl: the saved run's steps 1-3, then its own 4-6.
    assert sorted(got) == sorted(one) == list(range(1, 7)), (name, sorted(got))
    worst = {}
    for s, j in got.items():
        # aux_loss and expert_load_*: the Qwen3-MoE's, pipelined too (the last stage's).
        for k in ("expert_load_min", "expert_load_max"):
            if k in one[s]:
                assert j.get(k) == one[s][k], (name, s, k, j.get(k), one[s][k])
        for k in ("loss", "grad_norm", "loss_scale", "aux_loss"):
            if k not in one[s] or one[s][k] is None:
                continue
            diff = abs(j[k] - one[s][k]) / (1 if k == "loss" else max(1.0, abs(one[s][k])))
            worst[k] = max(worst.get(k, 0.0), diff)
            assert diff < (0 if k == "loss_scale" else tol) or diff == 0, (name, s, k, j[k], one[s][k])
    print(f"parallelize: {name} x {len(got)} steps equal one process: " +
          ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
PY
