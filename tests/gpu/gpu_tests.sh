#!/usr/bin/env bash
# The GPU tests, one run per name (docs/gpus.md): CTest's gpu.<name> and scripts/gpu_check.sh
# both call this. Each fails, naming why, where no CUDA device is visible.
#   gpu_tests.sh NAME BIN_DIR SOURCE_DIR WORK_DIR
#   gpu_tests.sh --list
# NAME:
#   unit_nccl       fsdpp_gpu_tests on one rank: NCCL at world size 1
#   unit_gloo2      fsdpp_gpu_tests on two ranks over Gloo on the one device (NCCL refuses two
#                   ranks on one GPU), CUDA tensors staged through host memory
#   default_job     configs/default.yaml for 50 steps on the GPU (fp32, then bf16) against the
#                   same run on the CPU: the loss curves within fp32 / bf16 tolerance; the GPU
#                   run's metrics carry CUDA memory and MFU; steps/s of both in WORK_DIR
#   parallel_gloo2  tensor, pipeline and expert parallelism (2 ranks, Gloo, one GPU) against
#                   the same runs on the CPU, 20 steps each
#   train_paths     CPU offload (pinned host shards) and a distillation teacher on the GPU against
#                   the same runs on the CPU; a GPU run resumed from its step-3 checkpoint against
#                   the uninterrupted run; the GPU's checkpoint as the CPU run's teacher
#   make_run        `make run`'s script (scripts/default_job.sh, 2 ranks) for 20 steps: with one
#                   GPU visible its ranks share it over Gloo and the run's metrics carry CUDA memory
#   distill_pp      a teacher under a pipeline (2 ranks, Gloo, one GPU) with on-policy batches
#                   (distillation.lmbda: the student's samples drawn through the stages) and
#                   with the teacher's own samples (seq_kd), against the same runs on the CPU
#   custom_model    fsdpp::train::train with a module of one's own (the examples): the MLP on one
#                   rank over NCCL, the Sequential under PP 2 and TP 2 over Gloo, against the CPU
# FSDPP_DATA: the text to train on (default: configs/default.yaml's data.path).
set -euo pipefail
names=(unit_nccl unit_gloo2 default_job parallel_gloo2 train_paths make_run distill_pp custom_model)
if [[ "${1:-}" == --list ]]; then
  printf '%s\n' "${names[@]}"
  exit 0
fi
name=$1 bin=$2 src=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
data=()
if [[ -n "${FSDPP_DATA:-}" ]]; then data=("data.path=$FSDPP_DATA"); fi
python=${FSDPP_GPU_PYTHON:-python3}

# Trains configs/default.yaml in WORK/<tag> with the given device settings and overrides.
train() {
  local tag=$1 nproc=$2 device=$3 backend=$4
  shift 4
  FSDPP_DEVICE=$device FSDPP_BACKEND=$backend "$bin/fsdpp-run" --nproc-per-node "$nproc" \
    "$bin/fsdpp-train" "$src/configs/default.yaml" "${data[@]}" training.output_dir="$work/$tag" \
    training.report_to=none training.sample_tokens=0 training.save_strategy=no \
    training.logging_steps=1 "$@" > "$work/$tag.log" 2>&1 ||
    { tail -n 30 "$work/$tag.log"; echo "[gpu] $name: the run '$tag' failed (log: $work/$tag.log)"; return 1; }
}

# Runs an example of a model of one's own (examples/custom_model) in WORK/<tag>, as train() does.
example() {
  local tag=$1 program=$2 nproc=$3 device=$4 backend=$5
  shift 5
  FSDPP_DEVICE=$device FSDPP_BACKEND=$backend "$bin/fsdpp-run" --nproc-per-node "$nproc" \
    "$bin/$program" training.output_dir="$work/$tag" training.report_to=none \
    training.logging_steps=1 "$@" > "$work/$tag.log" 2>&1 ||
    { tail -n 30 "$work/$tag.log"; echo "[gpu] $name: the run '$tag' failed (log: $work/$tag.log)"; return 1; }
}

# The loss curves of two runs' metrics.jsonl agree within a relative tolerance.
compare() {
  "$python" - "$work/$1/metrics.jsonl" "$work/$2/metrics.jsonl" "$3" "$name: $1 vs $2" <<'PY'
import json, sys
def losses(path):
    return {j["step"]: j["loss"] for j in map(json.loads, open(path)) if "loss" in j}
a, b, tol, what = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
assert a and a.keys() == b.keys(), f"{what}: steps differ: {sorted(a)} vs {sorted(b)}"
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in a)
print(f"[gpu] {what}: {len(a)} losses, largest relative difference {worst:.2e} (tolerance {tol:g})")
assert worst <= tol, f"{what}: the loss curves differ by {worst:.2e} > {tol:g}"
PY
}

case "$name" in
  unit_nccl)
    "$bin/fsdpp-run" --nproc-per-node 1 "$bin/fsdpp_gpu_tests"
    ;;
  unit_gloo2)
    FSDPP_BACKEND=gloo FSDPP_DEVICE=cuda:0 "$bin/fsdpp-run" --nproc-per-node 2 "$bin/fsdpp_gpu_tests"
    ;;
  default_job)
    steps=(training.max_steps=50 training.eval_steps=0)
    train gpu 1 cuda nccl "${steps[@]}"  # the GPU runs first: without a GPU this fails at once
    train gpu_bf16 1 cuda nccl "${steps[@]}" training.bf16=true
    train cpu 1 cpu gloo "${steps[@]}"
    train cpu_bf16 1 cpu gloo "${steps[@]}" training.bf16=true
    compare gpu cpu 1e-2
    compare gpu_bf16 cpu 5e-2
    "$python" - "$work" <<'PY'
import json, sys, statistics
work = sys.argv[1]
def lines(tag):
    return [json.loads(l) for l in open(f"{work}/{tag}/metrics.jsonl")]
gpu = lines("gpu")
for key in ("cuda_peak_allocated_mb", "cuda_peak_reserved_mb", "mfu"):
    assert all(key in j for j in gpu), f"default_job: the GPU run's metrics.jsonl lacks {key}"
assert all(key not in j for j in lines("cpu") for key in ("cuda_peak_allocated_mb", "mfu"))
rates = {}
for tag in ("cpu", "gpu", "cpu_bf16", "gpu_bf16"):
    ms = [j["step_ms"] for j in lines(tag)][5:]  # past the first steps
    rates[tag] = 1000.0 / statistics.median(ms)
json.dump({"steps_per_s": rates, "gpu_peak_allocated_mb": gpu[-1]["cuda_peak_allocated_mb"],
           "gpu_mfu": gpu[-1]["mfu"]}, open(f"{work}/steps_per_s.json", "w"), indent=1)
print("[gpu] default job steps/s: " + ", ".join(f"{k} {v:.1f}" for k, v in rates.items()))
PY
    ;;
  parallel_gloo2)
    common=(training.max_steps=20 training.eval_steps=0)
    train tp_gpu 2 cuda:0 gloo "${common[@]}" parallelism.tensor_parallel_degree=2
    train tp_cpu 2 cpu gloo "${common[@]}" parallelism.tensor_parallel_degree=2
    compare tp_gpu tp_cpu 1e-2
    train pp_gpu 2 cuda:0 gloo "${common[@]}" parallelism.pipeline_parallel_degree=2
    train pp_cpu 2 cpu gloo "${common[@]}" parallelism.pipeline_parallel_degree=2
    compare pp_gpu pp_cpu 1e-2
    moe=(model.architecture=qwen3_moe model.num_experts=4 model.num_experts_per_tok=2
         model.moe_intermediate_size=64 parallelism.expert_parallel_degree=2
         training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=Qwen3MoeDecoderLayer)
    train ep_gpu 2 cuda:0 gloo "${common[@]}" "${moe[@]}"
    train ep_cpu 2 cpu gloo "${common[@]}" "${moe[@]}"
    compare ep_gpu ep_cpu 1e-2
    ;;
  train_paths)
    short=(training.max_steps=6 training.eval_steps=0)
    train offload_gpu 1 cuda nccl "${short[@]}" training.fsdp_config.fsdp_offload_params=true
    train offload_cpu 1 cpu gloo "${short[@]}" training.fsdp_config.fsdp_offload_params=true
    compare offload_gpu offload_cpu 1e-2
    saves=(training.save_strategy=steps training.save_steps=3)
    train whole_gpu 1 cuda nccl "${short[@]}" "${saves[@]}"
    train resumed_gpu 1 cuda nccl "${short[@]}" "${saves[@]}" \
      training.resume_from_checkpoint="$work/whole_gpu/checkpoint-3"
    "$python" - "$work/resumed_gpu/metrics.jsonl" "$work/whole_gpu/metrics.jsonl" <<'PY'
import json, sys
def losses(path):
    return {j["step"]: j["loss"] for j in map(json.loads, open(path)) if "loss" in j}
resumed, whole = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(resumed) == [4, 5, 6], f"train_paths: the resumed run logged steps {sorted(resumed)}, not 4-6"
worst = max(abs(resumed[s] - whole[s]) / abs(whole[s]) for s in resumed)
print(f"[gpu] train_paths: resumed at step 3 vs uninterrupted: steps 4-6, largest relative difference {worst:.2e} (tolerance 1e-5)")
assert worst <= 1e-5, f"train_paths: the resumed GPU run differs from the uninterrupted one by {worst:.2e}"
PY
    teacher=(distillation.teacher="$work/whole_gpu/checkpoint-6")
    train distill_gpu 1 cuda nccl "${short[@]}" "${teacher[@]}"
    train distill_cpu 1 cpu gloo "${short[@]}" "${teacher[@]}"
    compare distill_gpu distill_cpu 1e-2
    ;;
  make_run)
    (cd "$src" && bash scripts/default_job.sh "$bin/.." "${data[@]}" training.output_dir="$work/make_run" \
      training.max_steps=20 training.logging_steps=1 training.eval_steps=0 training.sample_tokens=0 \
      training.save_strategy=no training.report_to=none > "$work/make_run.log" 2>&1) ||
      { tail -n 30 "$work/make_run.log"; echo "[gpu] make_run: scripts/default_job.sh failed"; exit 1; }
    head -n 3 "$work/make_run.log"
    "$python" - "$work/make_run/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len([j for j in lines if "loss" in j]) == 20, "make_run: the default job did not log 20 steps"
assert all("cuda_peak_allocated_mb" in j for j in lines if "loss" in j), "make_run: the default job ran on the CPU"
print(f"[gpu] make_run: 20 steps on the GPU, last loss {[j for j in lines if 'loss' in j][-1]['loss']:.4f}")
PY
    ;;
  distill_pp)
    short=(training.max_steps=6 training.eval_steps=0)
    train teacher 1 cuda nccl "${short[@]}" training.save_strategy=steps training.save_steps=6
    pp=(parallelism.pipeline_parallel_degree=2 distillation.teacher="$work/teacher/checkpoint-6"
        distillation.max_new_tokens=16)
    train onpolicy_gpu 2 cuda:0 gloo "${short[@]}" "${pp[@]}" distillation.lmbda=0.5
    train onpolicy_cpu 2 cpu gloo "${short[@]}" "${pp[@]}" distillation.lmbda=0.5
    compare onpolicy_gpu onpolicy_cpu 1e-2
    train seqkd_gpu 2 cuda:0 gloo "${short[@]}" "${pp[@]}" distillation.seq_kd=true
    train seqkd_cpu 2 cpu gloo "${short[@]}" "${pp[@]}" distillation.seq_kd=true
    compare seqkd_gpu seqkd_cpu 1e-2
    "$python" - "$work" <<'PY'
import json, sys
def sampled(tag, key):
    return sum(j.get(key, 0) for j in map(json.loads, open(f"{sys.argv[1]}/{tag}/metrics.jsonl")))
student, teacher = sampled("onpolicy_gpu", "student_sampled_batches"), sampled("seqkd_gpu", "teacher_sampled_batches")
print(f"[gpu] distill_pp: batches sampled on the GPU: {student} by the student, {teacher} by the teacher")
assert student > 0 and teacher > 0, "distill_pp: the GPU runs sampled nothing"
PY
    ;;
  custom_model)
    steps=(training.max_steps=20 training.eval_steps=0)
    example mlp_gpu fsdpp-example-mlp 1 cuda nccl "${steps[@]}"
    example mlp_cpu fsdpp-example-mlp 1 cpu gloo "${steps[@]}"
    compare mlp_gpu mlp_cpu 1e-2
    example seq_pp_gpu fsdpp-example-sequential 2 cuda:0 gloo "${steps[@]}" parallelism.pipeline_parallel_degree=2
    example seq_pp_cpu fsdpp-example-sequential 2 cpu gloo "${steps[@]}" parallelism.pipeline_parallel_degree=2
    compare seq_pp_gpu seq_pp_cpu 1e-2
    example seq_tp_gpu fsdpp-example-sequential 2 cuda:0 gloo "${steps[@]}" parallelism.tensor_parallel_degree=2
    example seq_tp_cpu fsdpp-example-sequential 2 cpu gloo "${steps[@]}" parallelism.tensor_parallel_degree=2
    compare seq_tp_gpu seq_tp_cpu 1e-2
    ;;
  *)
    echo "[gpu] unknown test '$name'; expected one of: ${names[*]}" >&2
    exit 2
    ;;
esac
