#!/usr/bin/env bash
# Where does distillation pay? The experiment of docs/distillation.md "Does it help? Measured on
# tinyshakespeare", end to end, in the regime where it is expected to: a student that sees a
# small part (FRACTION) of the data its teacher learned from all of.
#
#   1. the teacher: configs/qwen3-moe-small.yaml (TEACHER_LAYERS layers, 8 experts) trained on
#      the whole training split for TEACHER_STEPS
#   2. the student: fsdpp-ckpt compress keeps STUDENT_LAYERS of its layers and EXPERTS experts
#   3. the offline teacher: fsdpp-train teacher-logits over the student's windows (top CACHE_K)
#   4. the student, STUDENT_STEPS each, data.train_fraction=FRACTION, the same data order, batch,
#      schedule and token budget: untrained; cross-entropy only; distilled off-policy (the live
#      teacher on the data); offline (the cache); on-policy (lmbda LMBDA: the student's samples
#      scored by the teacher); with VARIANT=1 also off-policy with layer_map [auto]
#   5. the trend: cross-entropy and off-policy again at each of TREND_FRACTIONS
#
# Usage: scripts/distill_experiment.sh BUILD_DIR DATA.txt [WORK_DIR]
#   e.g. scripts/distill_experiment.sh build ../shared/data/tinyshakespeare.txt /tmp/distill-exp
# Writes WORK_DIR/results.md (the tables), WORK_DIR/<run>.log and the runs' directories.
# Knobs (environment): TEACHER_STEPS=500 TEACHER_LAYERS=4 STUDENT_LAYERS=2 EXPERTS=4
#   STUDENT_STEPS=200 FRACTION=0.05 TREND_FRACTIONS="0.25" NPROC=2 STUDENT_LR=1e-3
#   KD_RATIO=0.5 KD_T=1 LMBDA=0.5 MAX_NEW_TOKENS=32 CACHE_K=64 EVAL_STEPS=100 VARIANT=1;
#   TEACHER_RUN=DIR: a teacher trained before (the output_dir of step 1's command, holding
#   checkpoint-TEACHER_STEPS) instead of training one.
#
# Every run evaluates on the whole validation split (the last 5% of DATA, which no run trains
# on) in the same windows: the losses are comparable.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  sed -n '16,22p' "$0" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
data=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
work=${3:-runs/distill-experiment}
repo=$(cd "$(dirname "$0")/.." && pwd)

teacher_steps=${TEACHER_STEPS:-500}
teacher_layers=${TEACHER_LAYERS:-4}
student_layers=${STUDENT_LAYERS:-2}
experts=${EXPERTS:-4}
student_steps=${STUDENT_STEPS:-200}
fraction=${FRACTION:-0.05}
trend=${TREND_FRACTIONS-0.25}
nproc=${NPROC:-2}
student_lr=${STUDENT_LR:-1e-3}
kd_ratio=${KD_RATIO:-0.5}
kd_t=${KD_T:-1}
lmbda=${LMBDA:-0.5}
max_new=${MAX_NEW_TOKENS:-32}
cache_k=${CACHE_K:-64}
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

# timed NAME COMMAND...: its output in NAME.log, its wall time and the machine's load average
# (what else was running) in timings.tsv.
timed() {
  local name=$1; shift
  local load0 t0 t1
  load0=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  echo "[experiment] $(date -u +%H:%M:%S) $name"
  if ! "$@" >"$work/$name.log" 2>&1; then
    tail -20 "$work/$name.log" >&2
    echo "[experiment] $name failed; its output: $work/$name.log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  printf '%s\t%.1f\t%s\t%s\n' "$name" "$(awk "BEGIN{print $t1 - $t0}")" "$load0" \
    "$(cut -d' ' -f1 /proc/loadavg)" >>"$work/timings.tsv"
}
# run NAME ARGS...: fsdpp-train on NPROC ranks into WORK/NAME.
run() {
  local name=$1; shift
  timed "$name" "$bin/fsdpp-run" --nproc-per-node "$nproc" --no-prefix "$bin/fsdpp-train" "$@" \
    training.output_dir="$work/$name"
  grep -E '^\[train\] done' "$work/$name.log" || true
}

echo "[experiment] work directory $work; load average now $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. The teacher: configs/qwen3-moe-small.yaml with TEACHER_LAYERS layers, on all of DATA.
if [[ -n "${TEACHER_RUN:-}" ]]; then
  [[ -d "$TEACHER_RUN/checkpoint-$teacher_steps" ]] || {
    echo "[experiment] TEACHER_RUN=$TEACHER_RUN has no checkpoint-$teacher_steps" >&2; exit 2; }
  ln -s "$(cd "$TEACHER_RUN" && pwd)" "$work/teacher"
  # Its wall time from its own metrics (the load it ran under is not known here).
  printf 'teacher\t%s\tn/a\tn/a\n' "$(python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["elapsed_s"])' "$work/teacher/metrics.jsonl")" >>"$work/timings.tsv"
else
  run teacher "$repo/configs/qwen3-moe-small.yaml" data.path="$data" model.n_layers="$teacher_layers" \
    training.max_steps="$teacher_steps" training.sample_tokens=0 "${eval_args[@]}"
fi
teacher=$work/teacher/checkpoint-$teacher_steps

# 2. The student: STUDENT_LAYERS of its layers, the EXPERTS most used experts of each (measured
#    on the first 4096 bytes of DATA).
echo "[experiment] $(date -u +%H:%M:%S) compress: $student_layers layers, $experts experts"
"$bin/fsdpp-ckpt" compress --num-layers "$student_layers" --num-experts "$experts" \
  --calibration "$data" "$teacher" "$work/student" | tee "$work/compress.log"

# The student's runs: configs/distill-moe.yaml (the student from model.init_from, its
# distillation: section) with the teacher's regime instead of the guide's (whose lr 5e-5 and
# 32-sequence steps would need thousands of steps here): float32, 8 sequences per rank, cosine
# from STUDENT_LR after 20 warmup steps, no checkpoints; the KD loss forward KL at KD_T with
# kd_ratio KD_RATIO, a bfloat16 teacher (as the config has it).
student=("$repo/configs/distill-moe.yaml" model.init_from="$work/student" data.path="$data"
         distillation.teacher="$teacher" training.bf16=false training.gradient_checkpointing=false
         training.per_device_train_batch_size=8 training.gradient_accumulation_steps=1
         training.warmup_steps=20 training.lr_scheduler_type=cosine
         training.learning_rate="$student_lr" training.max_steps="$student_steps"
         training.save_strategy=no training.save_steps=0 training.sample_tokens=0
         training.logging_steps=10 distillation.temperature="$kd_t"
         distillation.kd_ratio="$kd_ratio" "${eval_args[@]}")

# 3. The offline teacher over the windows of FRACTION (what the offline student trains on).
timed cache "$bin/fsdpp-run" --nproc-per-node "$nproc" --no-prefix "$bin/fsdpp-train" \
  teacher-logits "${student[@]}" data.train_fraction="$fraction" training.output_dir="$work/cache-run" \
  "$work/cache" --top-k "$cache_k"
grep "wrote" "$work/cache.log"

# 4. The students at FRACTION.
at=(data.train_fraction="$fraction")
run untrained "${student[@]}" "${at[@]}" distillation.teacher= training.max_steps=1 \
  training.learning_rate=1e-12 training.warmup_steps=0 training.eval_steps=0
run ce_only "${student[@]}" "${at[@]}" distillation.teacher=
run off_policy "${student[@]}" "${at[@]}"
run offline "${student[@]}" "${at[@]}" distillation.teacher_cache="$work/cache" distillation.teacher=
run on_policy "${student[@]}" "${at[@]}" distillation.lmbda="$lmbda" \
  distillation.max_new_tokens="$max_new"
if [[ "$variant" == 1 ]]; then
  run layers "${student[@]}" "${at[@]}" distillation.layer_map=[auto]
fi
# 5. The trend with the data fraction.
for f in $trend; do
  run "ce_only_f$f" "${student[@]}" data.train_fraction="$f" distillation.teacher=
  run "off_policy_f$f" "${student[@]}" data.train_fraction="$f"
done

python3 - "$work" "$fraction" "$trend" "$teacher_steps" "$student_steps" "$nproc" <<'PY'
import json, os, sys

work, fraction, trend, teacher_steps, student_steps, nproc = sys.argv[1:]
rows = {}
for line in open(os.path.join(work, "timings.tsv")):
    name, wall, load0, load1 = line.rstrip("\n").split("\t")
    rows[name] = dict(wall=float(wall), load=f"{load0} / {load1}")

def metrics(name):
    with open(os.path.join(work, name, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]

params = json.load(open(os.path.join(work, "student", "compress.json")))["parameters"]
cache = json.load(open(os.path.join(work, "cache", "cache.json")))
cache_bytes = sum(s["bytes"] for s in cache["shards"])
labels = {
    "teacher": f"teacher ({params['teacher']:,} parameters), {teacher_steps} steps on all the data",
    "untrained": f"student ({params['student']:,} parameters), compressed, untrained",
    "ce_only": "cross-entropy only",
    "off_policy": "off-policy: the live teacher on the data",
    "offline": f"offline: the cache (top {cache['top_k']}, {cache['dtype']})",
    "on_policy": "on-policy: the student's samples, lmbda " + os.environ.get("LMBDA", "0.5"),
    "layers": "off-policy + layer_map [auto] (cosine)",
}
names = [n for n in labels if n in rows]
evals = sorted({m["step"] for n in ("ce_only", "off_policy") if n in rows
                for m in metrics(n) if "val_loss" in m})

def row(name, label):
    ms = metrics(name)
    val = {m["step"]: m["val_loss"] for m in ms if "val_loss" in m}
    final = val[max(val)]
    per = sorted(m["step_ms"] for m in ms)
    cells = [f"{val[s]:.4f}" if s in val and name not in ("teacher", "untrained") else ""
             for s in evals]
    extra = ""
    gen = [m["generate_ms"] for m in ms if m.get("generate_ms", 0) > 0]  # the sampled steps
    if gen:
        extra = f" (sampling {sorted(gen)[len(gen) // 2]:.0f})"
    return (f"| {label} | " + " | ".join(cells) +
            f" | **{final:.4f}** | {per[len(per) // 2]:.0f}{extra} | {rows[name]['wall']:.0f} | "
            f"{rows[name]['load']} |")

out = [f"Validation loss (nats per byte, the whole validation split) on {nproc} ranks; students "
       f"{student_steps} steps on the first {float(fraction):g} of the training split:\n",
       "| run | " + " | ".join(f"step {s}" for s in evals) +
       " | final | ms/step (median) | wall s | load avg start / end |",
       "|---|" + "---:|" * (len(evals) + 4)]
for n in names:
    out.append(row(n, labels[n]))
out.append(f"\nThe offline teacher: {cache['windows']} windows, {cache_bytes / 2**20:.1f} MiB on "
           f"disk, written in {rows['cache']['wall']:.0f} s (load {rows['cache']['load']}).\n")
if trend.split():
    out.append("Final validation loss by data fraction (cross-entropy only / off-policy):\n")
    out.append("| fraction | cross-entropy only | off-policy distilled | difference |")
    out.append("|---:|---:|---:|---:|")
    def final(name):
        val = {m["step"]: m["val_loss"] for m in metrics(name) if "val_loss" in m}
        return val[max(val)]
    for f, ce, kd in [(fraction, "ce_only", "off_policy")] + [
            (f, f"ce_only_f{f}", f"off_policy_f{f}") for f in trend.split()]:
        a, b = final(ce), final(kd)
        out.append(f"| {float(f):g} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
text = "\n".join(out) + "\n"
open(os.path.join(work, "results.md"), "w").write(text)
print(text)
PY
echo "[experiment] results: $work/results.md"
