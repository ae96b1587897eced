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
. "$src/tests/bench/estimate_rss_lib.sh"
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
  train_and_estimate "$schedule-$n" "$n" "$src/configs/default.yaml" "${common[@]}" \
    parallelism.pipeline_parallel_schedule=$schedule
  check_estimate "$schedule-$n" 0.10 --expect pipeline_parallel=2 --record "$dir/measured.txt" || status=1
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
