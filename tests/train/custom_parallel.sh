#!/usr/bin/env bash
# fsdpp::train::train with tensor and pipeline parallelism for a model of its own
# (examples/custom_model/sequential.cpp: a torch::nn::Sequential and parallel::sequential_plan):
#   np1 : 1 process, the whole 16-example batch;
#   pp2 : parallelism.pipeline_parallel_degree=2 on 2 ranks (1F1B, 4 microbatches of 4);
#   tp2 : parallelism.tensor_parallel_degree=2 on 2 ranks (units 3 COLWISE, 5 ROWWISE);
#   pp2tp2: both on 4 ranks (each stage split over its tp pair); the memory check describes
#         rank 0's stage and tp slices;
#   every step's loss and grad norm equal np1's within 1e-5 over 6 AdamW steps clipped at 0.05;
#   fp16: training.fp16 on one process and on pp2: the same loss scale every step, losses and
#         grad norms within fp16's rounding (the microbatches' sums in another order);
#   res : pp2's directory without checkpoint-6, resumed at step 3 (pipelined, DCP layout): steps
#         4..6 equal pp2's bit for bit;
#   the refusals: sequence parallelism (the chain has no sequence) and expert parallelism, each
#   naming its key; a cut that does not fit the schedule, naming the chain's units (not layers).
set -euo pipefail
run=$1 example=$2 python=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(training.max_steps=6 training.save_steps=3 training.logging_steps=1 training.eval_steps=3
        training.seed=7 training.learning_rate=0.01 training.warmup_steps=0 training.max_grad_norm=0.05
        training.per_device_train_batch_size=16 training.per_device_eval_batch_size=16
        training.eval_max_batches=2 parallelism.pipeline_parallel_microbatch_size=4
        training.gradient_checkpointing=true)
"$run" --nproc-per-node 1 --timeout-s 120 "$example" "${common[@]}" training.output_dir="$dir/np1"
"$run" --nproc-per-node 2 --timeout-s 120 "$example" "${common[@]}" training.output_dir="$dir/pp2" \
  parallelism.pipeline_parallel_degree=2 2>&1 | tee "$dir/pp2.log"
grep -q "pipeline parallel: pp 2 x dp_replicate 1 x dp_shard 1 x tp 1 x ep 1; 1F1B, 2 stages of 4+4 units, 4 microbatches" "$dir/pp2.log"
"$run" --nproc-per-node 2 --timeout-s 120 "$example" "${common[@]}" training.output_dir="$dir/tp2" \
  parallelism.tensor_parallel_degree=2 2>&1 | tee "$dir/tp2.log"
grep -q "tensor parallel: pp 1 x dp_replicate 1 x dp_shard 1 x tp 2 x ep 1 (the sequential-regressor plan" "$dir/tp2.log"
"$run" --nproc-per-node 4 --timeout-s 180 "$example" "${common[@]}" training.output_dir="$dir/pp2tp2" \
  parallelism.pipeline_parallel_degree=2 parallelism.tensor_parallel_degree=2 2>&1 | tee "$dir/pp2tp2.log"
grep -q "pipeline parallel: pp 2 x dp_replicate 1 x dp_shard 1 x tp 2 x ep 1; 1F1B, 2 stages of 4+4 units" "$dir/pp2tp2.log"
# The memory check describes rank 0's part: stage 0 (units 0-3) in 2 FSDP units, the root's
# Linear(16, 64) and its tp half of Linear(64, 256) COLWISE (64*16+64 + 128*64+128 = 9408) and
# ResidualBlock(64) whole (2*64 + 64*64+64 = 4288): 13696 parameters of the model's 43012.
grep -q "memory check: 2 units, 0.0137 M parameters (this rank's stage(s) of pp 2, slices of tp 2, FSDP over 1 data-parallel rank(s))" "$dir/pp2tp2.log"
"$run" --nproc-per-node 1 --timeout-s 120 "$example" "${common[@]}" training.fp16=true \
  training.output_dir="$dir/np1_fp16"
"$run" --nproc-per-node 2 --timeout-s 120 "$example" "${common[@]}" training.fp16=true \
  training.output_dir="$dir/pp2_fp16" parallelism.pipeline_parallel_degree=2
cp -r "$dir/pp2" "$dir/res"
rm -rf "$dir/res/checkpoint-6"
"$run" --nproc-per-node 2 --timeout-s 120 "$example" "${common[@]}" training.output_dir="$dir/res" \
  parallelism.pipeline_parallel_degree=2 training.resume_from_checkpoint=latest 2>&1 | tee "$dir/res.log"
grep -q "resumed from .*checkpoint-3" "$dir/res.log"
refused() {  # refused LOG KEY ARGS...: the run fails naming KEY
  local log=$1 key=$2; shift 2
  if "$run" --nproc-per-node 2 --timeout-s 60 "$example" training.output_dir="$dir/refused" "$@" >"$log" 2>&1; then
    echo "$* was not refused"; exit 1
  fi
  grep -q "$key" "$log" || { echo "the refusal of $* does not name $key:"; cat "$log"; exit 1; }
}
refused "$dir/sp.log" "parallelism.enable_sequence_parallel=true: sequential_plan 'sequential-regressor' has no sequence dimension" \
  parallelism.tensor_parallel_degree=2 parallelism.enable_sequence_parallel=true
refused "$dir/ep.log" "parallelism.expert_parallel_degree=2 is not available for a custom model" \
  parallelism.expert_parallel_degree=2
refused "$dir/cut.log" "8 units (the children of sequential_plan 'sequential-regressor') in stages of 3 make 3 stages, but schedule 1F1B on 2 pipeline ranks needs 2" \
  parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_layers_per_stage=3
if grep -qi "layers\b\|embedding" <(grep "\[parallel\]" "$dir/cut.log"); then
  echo "the cut's refusal speaks of a language model:"; cat "$dir/cut.log"; exit 1
fi
"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def lines(run):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
one, pp, tp, res = lines("np1"), lines("pp2"), lines("tp2"), lines("res")
pptp, one16, pp16 = lines("pp2tp2"), lines("np1_fp16"), lines("pp2_fp16")
for run in (pp, tp, res, pptp, one16, pp16):
    assert sorted(run) == sorted(one) == list(range(1, 7)), (sorted(one), sorted(run))
assert all(one[s]["grad_norm"] > 0.05 for s in one), "clipping was not exercised"
for name, run in (("pp2", pp), ("tp2", tp), ("pp2tp2", pptp)):
    dl = max(abs(run[s]["loss"] - one[s]["loss"]) for s in one)
    dg = max(abs(run[s]["grad_norm"] - one[s]["grad_norm"]) for s in one)
    dv = max(abs(run[s]["val_loss"] - one[s]["val_loss"]) for s in (3, 6))
    print(f"{name}: loss {run[1]['loss']:.6f} -> {run[6]['loss']:.6f}; max |diff| from one process: "
          f"loss {dl:.2e}, grad norm {dg:.2e}, val loss {dv:.2e}")
    assert dl < 1e-5 and dg < 1e-5 and dv < 1e-5, (name, dl, dg, dv)
assert one[6]["loss"] < one[1]["loss"], "the model did not learn"
# fp16: one loss scale (the scaler's steps agree over the stages), the values within its rounding.
assert all(pp16[s]["loss_scale"] == one16[s]["loss_scale"] for s in one16), \
    [(s, pp16[s]["loss_scale"], one16[s]["loss_scale"]) for s in one16]
dl = max(abs(pp16[s]["loss"] - one16[s]["loss"]) for s in one16)
dg = max(abs(pp16[s]["grad_norm"] - one16[s]["grad_norm"]) / max(1.0, one16[s]["grad_norm"]) for s in one16)
dv = max(abs(pp16[s]["val_loss"] - one16[s]["val_loss"]) for s in (3, 6))
print(f"pp2 fp16: loss {pp16[1]['loss']:.6f} -> {pp16[6]['loss']:.6f}, loss scale {pp16[6]['loss_scale']:g}; "
      f"max |diff| from one process in fp16: loss {dl:.2e}, grad norm {dg:.2e}, val loss {dv:.2e}; "
      f"from fp32: loss {max(abs(one16[s]['loss'] - one[s]['loss']) for s in one):.2e}")
# fp16's epsilon is 9.8e-4: 4 microbatches of 4 round apart from one batch of 16 (measured: loss
# 5.7e-4, grad norm 9.3e-4; fp16 against fp32, 2.3e-3). Two epsilons.
assert dl < 2e-3 and dg < 2e-3 and dv < 2e-3, (dl, dg, dv)
assert pp16[6]["loss"] < pp16[1]["loss"], "the fp16 pipeline did not learn"
bad = [s for s in range(1, 7) if any(pp[s].get(k) != res[s].get(k) for k in ("loss", "grad_norm", "val_loss"))]
assert not bad, f"resumed steps {bad} differ"
print("pp2 resumed at step 3: steps 4..6 equal the uninterrupted run bit for bit")
PY
