#!/usr/bin/env bash
# Does distillation beat cross-entropy for a compressed MoE? The experiment of
# docs/distillation.md "Does it help? Measured on tinyshakespeare", end to end:
#
#   1. a teacher Qwen3-MoE (configs/qwen3-moe-small.yaml, 8 experts per layer) trained on DATA
#   2. fsdpp-ckpt compress: the student keeps the EXPERTS most used experts of each layer
#   3. the student's validation loss before any training (one step at learning rate 1e-12)
#   4. the student trained on cross-entropy alone for STUDENT_STEPS (distillation.teacher empty)
#   5. the student distilled for the same steps (configs/distill-moe.yaml's distillation: section)
#   6. with VARIANT=1, the same with kd_ratio 1.0 (KD only)
#
# Usage: scripts/distill_experiment.sh BUILD_DIR DATA.txt [WORK_DIR]
#   e.g. scripts/distill_experiment.sh build ../shared/data/tinyshakespeare.txt /tmp/distill-exp
# Writes WORK_DIR/results.md (the table), WORK_DIR/<run>.log and the runs' directories.
# Knobs (environment): TEACHER_STEPS=500 STUDENT_STEPS=400 EXPERTS=4 NPROC=2 STUDENT_LR=5e-4
#   EVAL_STEPS=100 VARIANT=1. About 9 to 15 minutes on 2 busy CPU cores with the defaults.
#
# Every student run has the same data order (training.seed), batch (8 sequences of 128 tokens
# per rank), schedule and world size, and every run (the teacher's too) evaluates on the whole
# validation split (the last 5% of DATA) in the same windows: the losses are comparable.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  sed -n '12,17p' "$0" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
data=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
work=${3:-runs/distill-experiment}
repo=$(cd "$(dirname "$0")/.." && pwd)

teacher_steps=${TEACHER_STEPS:-500}
student_steps=${STUDENT_STEPS:-400}
experts=${EXPERTS:-4}
nproc=${NPROC:-2}
student_lr=${STUDENT_LR:-5e-4}
eval_steps=${EVAL_STEPS:-100}
variant=${VARIANT:-1}

[[ -f "$data" ]] || { echo "[experiment] no data file $data" >&2; exit 2; }
for tool in fsdpp-run fsdpp-train fsdpp-ckpt; do
  [[ -x "$build/bin/$tool" ]] || { echo "[experiment] no $build/bin/$tool: build it first" >&2; exit 2; }
done
if [[ -e "$work" && -n "$(ls -A "$work")" ]]; then
  echo "[experiment] $work exists and is not empty; give a new WORK_DIR" >&2
  exit 2
fi
mkdir -p "$work/bin"
work=$(cd "$work" && pwd)
# Private copies of the tools: a rebuild of the build directory during the half hour this takes
# would otherwise hand later runs another binary (or none, mid-link).
cp "$build/bin/fsdpp-run" "$build/bin/fsdpp-train" "$build/bin/fsdpp-ckpt" "$work/bin/"
bin=$work/bin

# The whole validation split, in batches that divide each rank's windows (217 of 128 tokens per
# rank on 2 ranks for tinyshakespeare: 7 batches of 31); eval_max_batches only caps it.
eval_args=(training.eval_steps="$eval_steps" training.eval_max_batches=100000
           training.per_device_eval_batch_size=31)

# run NAME ARGS...: fsdpp-train on NPROC ranks, its output in NAME.log, its wall time and the
# machine's load average (what else was running) in timings.tsv.
run() {
  local name=$1; shift
  local load0 t0 t1
  load0=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  echo "[experiment] $(date -u +%H:%M:%S) $name: fsdpp-train $*"
  if ! "$bin/fsdpp-run" --nproc-per-node "$nproc" --no-prefix "$bin/fsdpp-train" "$@" \
        training.output_dir="$work/$name" >"$work/$name.log" 2>&1; then
    tail -20 "$work/$name.log" >&2
    echo "[experiment] $name failed; its output: $work/$name.log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  printf '%s\t%.1f\t%s\t%s\n' "$name" "$(awk "BEGIN{print $t1 - $t0}")" "$load0" \
    "$(cut -d' ' -f1 /proc/loadavg)" >>"$work/timings.tsv"
  grep -E '^\[train\] done' "$work/$name.log" || true
}

echo "[experiment] work directory $work; load average now $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. The teacher: configs/qwen3-moe-small.yaml as it is, on DATA, for TEACHER_STEPS.
run teacher "$repo/configs/qwen3-moe-small.yaml" data.path="$data" \
  training.max_steps="$teacher_steps" training.sample_tokens=0 "${eval_args[@]}"
teacher=$work/teacher/checkpoint-$teacher_steps

# 2. The student: the EXPERTS most used experts per layer on the first 4096 bytes of DATA.
echo "[experiment] $(date -u +%H:%M:%S) compress: $experts experts per layer"
"$bin/fsdpp-ckpt" compress --num-experts "$experts" --calibration "$data" "$teacher" \
  "$work/student" | tee "$work/compress.log"

# The student's runs: configs/distill-moe.yaml (the student from model.init_from, its
# distillation: section), with the teacher's training regime instead of the guide's (whose lr
# 5e-5 and 32-sequence steps would need thousands of steps here): float32, no activation
# checkpointing, 8 sequences per rank, no accumulation, cosine from STUDENT_LR after 20 warmup
# steps, no checkpoints written.
student=("$repo/configs/distill-moe.yaml" model.init_from="$work/student" data.path="$data"
         distillation.teacher="$teacher" training.bf16=false training.gradient_checkpointing=false
         training.per_device_train_batch_size=8 training.gradient_accumulation_steps=1
         training.warmup_steps=20 training.lr_scheduler_type=cosine
         training.save_strategy=no training.save_steps=0 training.sample_tokens=0
         training.logging_steps=10 "${eval_args[@]}")

# 3. Before training: one step at learning rate 1e-12 (an AdamW step moves no float32 weight
#    by a visible amount), then the validation loss. distillation.teacher empty: distillation off.
run untrained "${student[@]}" distillation.teacher= training.max_steps=1 \
  training.learning_rate=1e-12 training.warmup_steps=0 training.eval_steps=0
# 4. Cross-entropy only: distillation off (an empty teacher), everything else the same.
run ce_only "${student[@]}" distillation.teacher= training.max_steps="$student_steps" \
  training.learning_rate="$student_lr"
# 5. Distilled: the config's distillation: section (forward KL, temperature 2, kd_ratio 0.5, a
#    bfloat16 teacher).
run distilled "${student[@]}" training.max_steps="$student_steps" training.learning_rate="$student_lr"
# 6. KD only.
if [[ "$variant" == 1 ]]; then
  run distilled_kd1 "${student[@]}" training.max_steps="$student_steps" \
    training.learning_rate="$student_lr" distillation.kd_ratio=1.0
fi

python3 - "$work" "$teacher_steps" "$student_steps" "$experts" "$nproc" "$student_lr" <<'PY'
import json, os, sys

work, teacher_steps, student_steps, experts, nproc, lr = sys.argv[1:]
rows = {}
for line in open(os.path.join(work, "timings.tsv")):
    name, wall, load0, load1 = line.rstrip("\n").split("\t")
    rows[name] = dict(wall=float(wall), load=f"{load0} / {load1}")

def metrics(name):
    with open(os.path.join(work, name, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]

params = json.load(open(os.path.join(work, "student", "compress.json")))["parameters"]
labels = {
    "teacher": f"teacher ({params['teacher']:,} parameters, 8 experts), after its {teacher_steps} steps",
    "untrained": f"student ({params['student']:,} parameters, {experts} experts), compressed, untrained",
    "ce_only": "student, cross-entropy only",
    "distilled": "student, distilled (forward KL, T 2, kd_ratio 0.5)",
    "distilled_kd1": "student, distilled (forward KL, T 2, kd_ratio 1.0)",
}
evals = sorted({m["step"] for n in ("ce_only", "distilled") if n in rows
                for m in metrics(n) if "val_loss" in m})
out = []
out.append(f"Validation loss (nats per byte, the whole validation split) on {nproc} ranks; "
           f"students {student_steps} steps at lr {lr}:\n")
out.append("| run | " + " | ".join(f"step {s}" for s in evals) +
           " | final val loss | ms/step (median) | wall s | load avg start / end |")
out.append("|---|" + "---:|" * (len(evals) + 4))
for name in ("teacher", "untrained", "ce_only", "distilled", "distilled_kd1"):
    if name not in rows:
        continue
    ms = metrics(name)
    val = {m["step"]: m["val_loss"] for m in ms if "val_loss" in m}
    final = val[max(val)]
    per = sorted(m["step_ms"] for m in ms)
    cells = [f"{val[s]:.4f}" if s in val and name not in ("teacher", "untrained") else ""
             for s in evals]
    out.append(f"| {labels[name]} | " + " | ".join(cells) +
               f" | **{final:.4f}** | {per[len(per) // 2]:.0f} | {rows[name]['wall']:.0f} | "
               f"{rows[name]['load']} |")
text = "\n".join(out) + "\n"
open(os.path.join(work, "results.md"), "w").write(text)
print(text)
PY
echo "[experiment] results: $work/results.md"
