#!/usr/bin/env bash
# fsdpp-train's pipeline keys (docs/pipeline.md#fsdpp-train) against one process: a Llama of 6
# blocks (8 units), 8 sequences per step (4 x 2 accumulation steps), six AdamW steps with
# clipping; pp 2 and pp 4 (microbatches of 2: m = 4) and pp 2 x FSDP 2 on 4 ranks (4 sequences
# per dp rank, microbatches of 1: m = 4), with the schedules given: every step's loss and grad
# norm equal one's within 1e-5, and so do the validation loss and the sample text.
#   pipeline.sh RUN TRAIN PYTHON SRC 1F1B GPipe        (train.pipeline)
#   pipeline.sh RUN TRAIN PYTHON SRC Interleaved1F1B   (train.pipeline_interleaved: then ZBH1 on
#                                                       pp 2 x FSDP 2, 1F1B on pp 2 x TP 2 with
#                                                       sequence parallelism, layers_per_stage
#                                                       on pp 3)
#   pipeline.sh RUN TRAIN PYTHON SRC resume            (train.pipeline_resume: pp 2 x FSDP 2's
#                                                       SHARDED checkpoint-3, saved with
#                                                       async_save, resumes on one
#                                                       process, pp 4 and FSDP 4 with one's
#                                                       losses; model.init_from it on pp 2 x
#                                                       FSDP 2 equals one process)
#   pipeline.sh RUN TRAIN PYTHON SRC resume_full       (train.pipeline_resume_full: its FULL one
#                                                       on one process, pp 2 x FSDP 2, pp 2 x TP 2)
#   pipeline.sh RUN TRAIN PYTHON SRC bad               (train.pipeline_config: bad combinations
#                                                       are [config] errors naming the keys)
set -euo pipefail
run=$1 train=$2 python=$3 src=$4
shift 4
schedules=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/tests/data/tp-text.txt" "$dir/text.txt"  # a fixed text (tests/data/README.md)
common=(data.path="$dir/text.txt" data.seq_len=16 data.val_fraction=0.1 model.dim=32
        model.n_layers=6 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=16 model.vocab_size=259
        training.logging_steps=1 training.eval_steps=3 training.eval_max_batches=2
        training.per_device_eval_batch_size=4 training.save_strategy=no training.max_steps=6
        training.sample_tokens=8 training.warmup_steps=2 training.learning_rate=0.001
        training.max_grad_norm=0.5 training.lr_scheduler_type=constant training.seed=7
        training.malloc_mmap_threshold=0 training.report_to=none data.cache_dir="$dir/cache"
        training.gradient_accumulation_steps=2)
config="$src/configs/default.yaml"
source "$src/tests/train/layouts_lib.sh"
if [[ "${schedules[0]}" == resume* ]]; then
  go 1 one training.per_device_train_batch_size=4
  pp2x2=(parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_microbatch_size=1
         training.per_device_train_batch_size=2 training.per_device_eval_batch_size=2)
  save=(training.save_strategy=steps training.save_steps=3)
  # resume: the SHARDED checkpoint into one process, pp 4 and FSDP 4; resume_full: the FULL one
  # into one process, pp 2 x TP 2 and pp 2 x FSDP 2 (dist.pipeline_state moves both kinds
  # everywhere, bit for bit).
  if [[ "${schedules[0]}" == resume ]]; then
    from=sharded
    # Saved in the background (training.async_save): the same checkpoint.
    go 4 src_$from "${pp2x2[@]}" "${save[@]}" training.async_save=true
    layouts=("1 one 4" "4 pp4 4 parallelism.pipeline_parallel_degree=4 parallelism.pipeline_parallel_microbatch_size=2"
             "4 fsdp4 1")
  else
    from=full
    go 4 src_$from "${pp2x2[@]}" "${save[@]}" training.fsdp_config.fsdp_state_dict_type=FULL_STATE_DICT
    layouts=("1 one 4" "4 pp2x2 2 ${pp2x2[*]}"
             "4 pp2xtp2 4 parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_microbatch_size=2 parallelism.tensor_parallel_degree=2")
  fi
  names=()
  for layout in "${layouts[@]}"; do
    set -- $layout
    n=$1 out=r_${from}_$2 b=$3
    shift 3
    go "$n" "$out" training.per_device_train_batch_size="$b" \
      training.resume_from_checkpoint="$dir/src_$from/checkpoint-3" "$@"
    names+=("$out")
  done
  "$python" - "$dir" "${names[@]}" <<'PY'
import json, sys
d, names = sys.argv[1], sys.argv[2:]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
one = steps("one")
worst = 0.0
for name in names:
    got = steps(name)
    assert sorted(got) == [4, 5, 6], (name, sorted(got))
    for s, j in got.items():
        for k in ("loss", "grad_norm"):
            diff = abs(j[k] - one[s][k])
            worst = max(worst, diff)
            assert diff < 1e-5, (name, s, k, j[k], one[s][k])
print(f"pipeline: pp 2 x FSDP 2 checkpoint resumed in {len(names)} layouts ({', '.join(names)}) "
      f"continue with one process's losses, worst difference {worst:.2e}")
PY
  if [[ "${schedules[0]}" == resume ]]; then
    # model.init_from a pipelined run's checkpoint: fine-tuning on pp 2 x FSDP 2 equals it on
    # one process (new run: step 1, fresh optimizer).
    init=(model.init_from="$dir/src_sharded/checkpoint-3" training.max_steps=3)
    go 1 i_one training.per_device_train_batch_size=4 "${init[@]}"
    go 4 i_pp2x2 "${pp2x2[@]}" "${init[@]}"
    grep -q "weights from .*src_sharded/checkpoint-3 (model.init_from)" "$dir/i_pp2x2.log"
    "$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
a, b, fresh = steps("i_one"), steps("i_pp2x2"), steps("one")
assert sorted(a) == sorted(b) == [1, 2, 3], (sorted(a), sorted(b))
assert a[1]["loss"] < fresh[1]["loss"] - 0.01, ("init_from did not load", a[1]["loss"], fresh[1]["loss"])
for s in a:
    for k in ("loss", "grad_norm"):
        assert abs(a[s][k] - b[s][k]) < 1e-5, (s, k, a[s][k], b[s][k])
print("pipeline: model.init_from the pp 2 x FSDP 2 checkpoint trains on pp 2 x FSDP 2 as on one process")
PY
  fi
  exit 0
fi
if [[ "${schedules[0]}" != bad ]]; then
go 1 one training.per_device_train_batch_size=4
names=()
for sched in "${schedules[@]}"; do
  go 2 "pp2_$sched" training.per_device_train_batch_size=4 parallelism.pipeline_parallel_degree=2 \
    parallelism.pipeline_parallel_microbatch_size=2 parallelism.pipeline_parallel_schedule=$sched
  go 4 "pp4_$sched" training.per_device_train_batch_size=4 parallelism.pipeline_parallel_degree=4 \
    parallelism.pipeline_parallel_microbatch_size=2 parallelism.pipeline_parallel_schedule=$sched
  # Each dp rank evaluates half of one's validation windows.
  go 4 "pp2x2_$sched" training.per_device_train_batch_size=2 parallelism.pipeline_parallel_degree=2 \
    parallelism.pipeline_parallel_microbatch_size=1 parallelism.pipeline_parallel_schedule=$sched \
    training.per_device_eval_batch_size=2
  names+=("pp2_$sched" "pp4_$sched" "pp2x2_$sched")
done
interleaved=false
[[ " ${schedules[*]} " == *" Interleaved1F1B "* ]] && interleaved=true
if $interleaved; then
  grep -q "pipeline parallel: pp 2 x dp_replicate 1 x dp_shard 2 x tp 1 x ep 1; Interleaved1F1B, 4 stages of 2+2+2+2 units, 4 microbatches" \
    "$dir/pp2x2_Interleaved1F1B.log"
  # A zero-bubble schedule (backward split into I and W) with FSDP stages.
  go 4 pp2x2_ZBH1 training.per_device_train_batch_size=2 parallelism.pipeline_parallel_degree=2 \
    parallelism.pipeline_parallel_microbatch_size=1 parallelism.pipeline_parallel_schedule=ZBH1 \
    training.per_device_eval_batch_size=2
  # Tensor parallelism inside the stages, with sequence parallelism: pp 2 x TP 2.
  go 4 pp2xtp2_sp training.per_device_train_batch_size=4 parallelism.pipeline_parallel_degree=2 \
    parallelism.pipeline_parallel_microbatch_size=2 parallelism.tensor_parallel_degree=2 \
    parallelism.enable_sequence_parallel=true
  grep -q "pipeline parallel: pp 2 x dp_replicate 1 x dp_shard 1 x tp 2 (sequence parallel) x ep 1; 1F1B" "$dir/pp2xtp2_sp.log"
  # pipeline_parallel_layers_per_stage: 3 + 3 + 2 units.
  go 3 pp3_layers training.per_device_train_batch_size=4 parallelism.pipeline_parallel_degree=3 \
    parallelism.pipeline_parallel_microbatch_size=4 parallelism.pipeline_parallel_layers_per_stage=3
  grep -q "1F1B, 3 stages of 3+3+2 units, 2 microbatches" "$dir/pp3_layers.log"
  names+=(pp2x2_ZBH1 pp2xtp2_sp pp3_layers)
fi
"$python" - "$dir" "${names[@]}" <<'PY'
import json, sys
d, names = sys.argv[1], sys.argv[2:]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
one = steps("one")
assert sorted(one) == list(range(1, 7)), sorted(one)
sample = open(f"{d}/one/sample.txt", "rb").read()
worst = 0.0
for name in names:
    got = steps(name)
    assert sorted(got) == list(range(1, 7)), (name, sorted(got))
    for s, j in got.items():
        for k in ("loss", "grad_norm", "val_loss"):
            if k not in one[s]:
                assert k not in j, (name, s, k)
                continue
            diff = abs(j[k] - one[s][k])
            worst = max(worst, diff)
            assert diff < 1e-5, (name, s, k, j[k], one[s][k])
    assert open(f"{d}/{name}/sample.txt", "rb").read() == sample, name
print(f"pipeline: {len(names)} layouts x 6 steps equal one process (loss, grad norm, validation "
      f"loss, sample), worst difference {worst:.2e}")
PY
exit 0
fi
# Bad combinations: the error names the keys.
bad 2 "parallelism.pipeline_parallel_schedule='1F2B' is not a schedule; expected GPipe, 1F1B" \
  parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_schedule=1F2B
bad 2 "parallelism.pipeline_parallel_microbatch_size=3 does not divide the 8 sequences" \
  training.per_device_train_batch_size=4 parallelism.pipeline_parallel_degree=2 \
  parallelism.pipeline_parallel_microbatch_size=3
bad 2 "in stages of 2 make 4 stages, but schedule 1F1B on 2 pipeline ranks needs 2 (1 per rank)" \
  parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_layers_per_stage=2
bad 2 "is 3 ranks but the world has 2" parallelism.pipeline_parallel_degree=3 \
  parallelism.data_parallel_shard_degree=1
bad 2 "model.tie_embeddings=true with parallelism.pipeline_parallel_degree=2" \
  parallelism.pipeline_parallel_degree=2 model.tie_embeddings=true
echo "pipeline: bad combinations refused"
