#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS for Qwen3-MoE: fsdpp-train runs configs/qwen3-moe-small.yaml
# (1.84 M parameters, 8 experts top-2 in each of 4 sparse layers) on 1 rank, FSDP 2, EP 2 (2 ranks)
# and EP 2 x FSDP 2 (4 ranks); fsdpp-estimate reads the same config and overrides (its model: and
# parallelism.expert_parallel_degree pass through train::configured_estimate) and must be within
# 10% of the worst rank's peak RSS (metrics.jsonl's peak_rss_mb, a max over the ranks). The runtime
# term is fsdpp-bench baseline's, as make bench measures it.
set -euo pipefail
run=$1 train=$2 bench=$3 estimate=$4 python=$5 src=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/docs/estimate.md" "$dir/text.txt"  # any fixed text: the loss does not matter here
# 8 x 128 tokens per rank; a fixed mmap threshold, so that RSS follows the live tensors.
common=(data.path="$dir/text.txt" data.seq_len=128 data.val_fraction=0.05 data.cache_dir="$dir/cache"
        training.per_device_train_batch_size=8 training.max_steps=3 training.logging_steps=1
        training.eval_steps=0 training.save_strategy=no training.sample_tokens=0 training.warmup_steps=0
        training.malloc_mmap_threshold=65536)
for n in 1 2 4; do
  "$run" --nproc-per-node $n --timeout-s 120 "$bench" baseline --out "$dir/baseline-$n.json" >/dev/null
done
status=0
for c in 1:one:1 2:fsdp2:1 2:ep2:2 4:ep2x2:2; do
  IFS=: read -r n name ep <<<"$c"
  keys=("${common[@]}" parallelism.expert_parallel_degree=$ep)
  "$run" --nproc-per-node "$n" --timeout-s 120 "$train" "$src/configs/qwen3-moe-small.yaml" "${keys[@]}" \
    training.output_dir="$dir/$name" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; exit 1; }
  # The trainer's own memory check ran on the same estimate (it no longer skips qwen3_moe).
  grep -q "memory check: skipped" "$dir/$name.log" && { echo "$name: the trainer skipped its memory check"; exit 1; }
  base=$("$python" -c "import json,sys; print(max(json.load(open(sys.argv[1]))['peak_rss_mb']))" "$dir/baseline-$n.json")
  "$estimate" --json "$src/configs/qwen3-moe-small.yaml" "${keys[@]}" --world-size "$n" --runtime-baseline-mb "$base" \
    > "$dir/est-$name.json"
  "$python" - "$dir/$name/metrics.jsonl" "$dir/est-$name.json" "$name" "$ep" <<'PY' || status=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meas = max(r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r)
j = json.load(open(sys.argv[2]))
e = j["estimates"][0]
assert e["expert_parallel"] == int(sys.argv[4]), e  # the config's parallelism: section reached the estimate
assert j["num_active_params"] < j["num_params"], j  # top-2 of 8 experts: fewer active than total
est = e["total_bytes"] / 2**20
err = (est - meas) / meas
terms = ", ".join(f"{k[:-6]} {e[k] / 2**20:.1f}" for k in
                  ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "unsharded_bytes",
                   "activations_bytes", "allocator_bytes", "runtime_bytes"))
print(f"{sys.argv[3]} (ep {e['expert_parallel']}, experts over {e['expert_shard_world']}): measured peak RSS "
      f"{meas:.0f} MiB, estimate {est:.0f} MiB ({100 * err:+.1f}%; {terms}; peak at {e['peak_at']})")
sys.exit(0 if abs(err) < 0.10 else 1)
PY
done
exit $status
