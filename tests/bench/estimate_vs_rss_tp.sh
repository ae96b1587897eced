#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS under tensor parallelism: fsdpp-train runs the model
# of estimate_vs_rss.sh with TP 2 (2 ranks), TP 2 x FSDP 2 and TP 2 x FSDP 2 with sequence
# parallelism (4 ranks); fsdpp-estimate reads the same config and overrides (its parallelism:
# section passes through train::configured_estimate) and must be within 15% of the worst rank's
# peak RSS (metrics.jsonl's peak_rss_mb, a max over the ranks). The runtime term is fsdpp-bench
# baseline's, as make bench measures it.
set -euo pipefail
run=$1 train=$2 bench=$3 estimate=$4 python=$5 src=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/docs/estimate.md" "$dir/text.txt"  # any fixed text: the loss does not matter here
# 3.1 M parameters (the model of estimate_vs_rss.sh), 8 x 128 tokens per data-parallel rank; a
# fixed mmap threshold, so that RSS follows the live tensors.
common=(data.path="$dir/text.txt" data.seq_len=128 data.val_fraction=0.05 data.cache_dir="$dir/cache"
        model.dim=256 model.n_layers=4 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=128
        training.per_device_train_batch_size=8 training.max_steps=3 training.logging_steps=1
        training.eval_steps=0 training.save_strategy=no training.sample_tokens=0 training.warmup_steps=0
        training.malloc_mmap_threshold=65536)
for n in 2 4; do
  "$run" --nproc-per-node $n --timeout-s 120 "$bench" baseline --out "$dir/baseline-$n.json" >/dev/null
done
status=0
for c in 2:tp2:false 4:tp2x2:false 4:tp2x2sp:true; do
  IFS=: read -r n name sp <<<"$c"
  keys=("${common[@]}" parallelism.tensor_parallel_degree=2 parallelism.enable_sequence_parallel=$sp)
  "$run" --nproc-per-node "$n" --timeout-s 120 "$train" "$src/configs/default.yaml" "${keys[@]}" \
    training.output_dir="$dir/$name" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; exit 1; }
  base=$("$python" -c "import json,sys; print(max(json.load(open(sys.argv[1]))['peak_rss_mb']))" "$dir/baseline-$n.json")
  "$estimate" --json "$src/configs/default.yaml" "${keys[@]}" --world-size "$n" --runtime-baseline-mb "$base" \
    > "$dir/est-$name.json"
  "$python" - "$dir/$name/metrics.jsonl" "$dir/est-$name.json" "$name" <<'PY' || status=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meas = max(r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r)
e = json.load(open(sys.argv[2]))["estimates"][0]
assert e["tensor_parallel"] == 2, e  # the config's parallelism: section reached the estimate
est = e["total_bytes"] / 2**20
err = (est - meas) / meas
terms = ", ".join(f"{k[:-6]} {e[k] / 2**20:.1f}" for k in
                  ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "unsharded_bytes",
                   "activations_bytes", "allocator_bytes", "runtime_bytes"))
print(f"{sys.argv[3]} (sp {e['sequence_parallel']}): measured peak RSS {meas:.0f} MiB, estimate {est:.0f} MiB "
      f"({100 * err:+.1f}%; {terms}; peak at {e['peak_at']})")
sys.exit(0 if abs(err) < 0.15 else 1)
PY
done
exit $status
