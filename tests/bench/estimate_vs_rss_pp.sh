#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS under pipeline parallelism: fsdpp-train runs the model
# of estimate_vs_rss.sh (3.1 M parameters, 4 blocks: 6 units with the embedding and the head) cut
# into 2 stages, 8 sequences of 128 tokens per data-parallel rank in 4 microbatches (2 steps: the
# second is the steady state), with GPipe,
# 1F1B, ZBH1 and Interleaved1F1B (4 stages) on 2 ranks and 1F1B x FSDP 2 on 4; fsdpp-estimate
# reads the same config and overrides (parallelism.pipeline_parallel_*) and must be within 10% of
# the worst rank's peak RSS (metrics.jsonl's peak_rss_mb, a max over the ranks); GPipe, which
# holds every microbatch, must come out above 1F1B in both. The runtime term is fsdpp-bench
# baseline's, as make bench measures it.
set -euo pipefail
run=$1 train=$2 bench=$3 estimate=$4 python=$5 src=$6
# The cases, ranks:schedule (two CTests split them to stay short).
cases=${7:-"2:GPipe 2:1F1B 2:ZBH1 2:Interleaved1F1B 4:1F1B"}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$src/docs/estimate.md" "$dir/text.txt"  # any fixed text: the loss does not matter here
common=(data.path="$dir/text.txt" data.seq_len=128 data.val_fraction=0.05 data.cache_dir="$dir/cache"
        model.dim=256 model.n_layers=4 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=128
        training.per_device_train_batch_size=8 training.max_steps=2 training.logging_steps=1
        training.eval_steps=0 training.save_strategy=no training.sample_tokens=0 training.warmup_steps=0
        training.malloc_mmap_threshold=65536 parallelism.pipeline_parallel_degree=2
        parallelism.pipeline_parallel_microbatch_size=2)
status=0
for c in $cases; do
  IFS=: read -r n schedule <<<"$c"
  [ -f "$dir/baseline-$n.json" ] ||
    "$run" --nproc-per-node $n --timeout-s 120 "$bench" baseline --out "$dir/baseline-$n.json" >/dev/null
  name=$schedule-$n
  keys=("${common[@]}" parallelism.pipeline_parallel_schedule=$schedule)
  "$run" --nproc-per-node "$n" --timeout-s 120 "$train" "$src/configs/default.yaml" "${keys[@]}" \
    training.output_dir="$dir/$name" > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; exit 1; }
  grep -q "memory check: skipped" "$dir/$name.log" && { echo "$name: the trainer skipped its memory check"; exit 1; }
  base=$("$python" -c "import json,sys; print(max(json.load(open(sys.argv[1]))['peak_rss_mb']))" "$dir/baseline-$n.json")
  "$estimate" --json "$src/configs/default.yaml" "${keys[@]}" --world-size "$n" --runtime-baseline-mb "$base" \
    > "$dir/est-$name.json"
  "$python" - "$dir/$name/metrics.jsonl" "$dir/est-$name.json" "$name" "$dir/measured.txt" <<'PY' || status=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meas = max(r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r)
e = json.load(open(sys.argv[2]))["estimates"][0]
assert e["pipeline_parallel"] == 2, e  # the config's parallelism: section reached the estimate
est = e["total_bytes"] / 2**20
err = (est - meas) / meas
stages = "; ".join(f"stage {s['stage']} (rank {s['rank']}) in flight {s['in_flight']}, W {s['held_weight_grads']}"
                   for s in e["stages"])
print(f"{sys.argv[3]}: measured peak RSS {meas:.0f} MiB, estimate {est:.0f} MiB ({100 * err:+.1f}%; "
      f"activations {e['activations_bytes'] / 2**20:.1f}, runtime {e['runtime_bytes'] / 2**20:.1f}; peak at "
      f"{e['peak_at']}; {stages})")
open(sys.argv[4], "a").write(f"{sys.argv[3]} {meas} {est}\n")
sys.exit(0 if abs(err) < 0.10 else 1)
PY
done
"$python" - "$dir/measured.txt" <<'PY' || status=1
import sys
got = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(sys.argv[1])}
if "GPipe-2" not in got or "1F1B-2" not in got:
    sys.exit(0)
g, f = got["GPipe-2"], got["1F1B-2"]
print(f"GPipe over 1F1B: measured {g[0] - f[0]:+.1f} MiB, estimated {g[1] - f[1]:+.1f} MiB")
sys.exit(0 if g[0] > f[0] and g[1] > f[1] else 1)
PY
exit $status
