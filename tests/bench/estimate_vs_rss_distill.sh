#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS for knowledge distillation: a teacher (configs/qwen3-moe-small.yaml,
# 8 experts, trained 2 steps here) and a student of the same config with 4 experts, distilled on
# 1 rank and FSDP 2; fsdpp-estimate reads the student's config with its distillation: section (the
# teacher's shape from its checkpoint's model_config.json) and must be within 15% of the worst
# rank's peak RSS (metrics.jsonl's peak_rss_mb). The runtime term is fsdpp-bench baseline's.
set -euo pipefail
run=$1 train=$2 bench=$3 estimate=$4 python=$5 src=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/docs/moe.md" "$dir/text.txt"  # any fixed text: the loss does not matter here
common=(data.path="$dir/text.txt" data.seq_len=128 data.val_fraction=0.05 data.cache_dir="$dir/cache"
        training.per_device_train_batch_size=8 training.logging_steps=1 training.eval_steps=0
        training.sample_tokens=0 training.warmup_steps=0 training.malloc_mmap_threshold=65536)
config="$src/configs/qwen3-moe-small.yaml"
"$run" --nproc-per-node 1 --timeout-s 120 "$train" "$config" "${common[@]}" training.max_steps=2 \
  training.save_steps=2 training.output_dir="$dir/teacher" > "$dir/teacher.log" 2>&1 || { cat "$dir/teacher.log"; exit 1; }
student=("${common[@]}" model.num_experts=4 training.max_steps=2 training.save_strategy=no
         distillation.teacher="$dir/teacher/checkpoint-2")
status=0
for n in 1 2; do
  "$run" --nproc-per-node $n --timeout-s 120 "$bench" baseline --out "$dir/baseline-$n.json" >/dev/null
  "$run" --nproc-per-node $n --timeout-s 120 "$train" "$config" "${student[@]}" training.output_dir="$dir/d$n" \
    > "$dir/d$n.log" 2>&1 || { cat "$dir/d$n.log"; exit 1; }
  base=$("$python" -c "import json,sys; print(max(json.load(open(sys.argv[1]))['peak_rss_mb']))" "$dir/baseline-$n.json")
  "$estimate" --json "$config" "${student[@]}" --world-size $n --runtime-baseline-mb "$base" > "$dir/est-$n.json"
  "$python" - "$dir/d$n/metrics.jsonl" "$dir/est-$n.json" "d$n" <<'PY' || status=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meas = max(r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r)
e = json.load(open(sys.argv[2]))["estimates"][0]
assert e["teacher_bytes"] > 0, e  # the config's distillation: section reached the estimate
est = e["total_bytes"] / 2**20
err = (est - meas) / meas
print(f"{sys.argv[3]}: measured peak RSS {meas:.0f} MiB, estimate {est:.0f} MiB ({100 * err:+.1f}%; teacher "
      f"{e['teacher_bytes'] / 2**20:.1f}, activations {e['activations_bytes'] / 2**20:.1f}, runtime "
      f"{e['runtime_bytes'] / 2**20:.1f}; peak at {e['peak_at']})")
sys.exit(0 if abs(err) < 0.15 else 1)
PY
done
exit $status
