#!/usr/bin/env bash
# fsdpp-estimate against measured peak RSS: the same model trained by fsdpp-bench at 1 and 2 ranks
# under several strategies; every estimate must be within 15% of the worst rank's peak RSS.
# The runtime term is measured here as fsdpp-estimate's docs say to (fsdpp-bench baseline).
set -euo pipefail
run=$1 bench=$2 estimate=$3 python=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# 3.4 M parameters; 8 x 128 tokens per rank, so activations and model state are ~ half the peak.
cat > "$dir/config.json" <<'JSON'
{"model": {"vocab_size": 256, "dim": 256, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 0,
           "multiple_of": 32, "max_seq_len": 128, "tie_embeddings": false, "seed": 0},
 "local_batch": 8, "seq_len": 128, "lr": 1e-3, "weight_decay": 0.1}
JSON
"$bench" init --dir "$dir" >/dev/null
for n in 1 2; do
  "$run" --nproc-per-node $n --timeout-s 120 "$bench" baseline --out "$dir/baseline-$n.json" >/dev/null
done
status=0
# As make bench checks it (a fixed mmap threshold: RSS follows the live tensors), and once with
# glibc's default malloc (its heap keeps more; the estimate models part of it).
for c in 65536/full_shard:1 65536/full_shard:2 65536/shard_grad_op:2 65536/no_shard:2 0/full_shard:2; do
  threshold=${c%/*} c=${c#*/}
  s=${c%:*} n=${c#*:}
  if [ "$threshold" = 0 ]; then unset MALLOC_MMAP_THRESHOLD_; else export MALLOC_MMAP_THRESHOLD_=$threshold; fi
  "$run" --nproc-per-node "$n" --timeout-s 120 "$bench" train --dir "$dir" --strategy "$s" --steps 2 \
    --warmup 1 --out "$dir/train-$s-$n.json" >/dev/null
  unset MALLOC_MMAP_THRESHOLD_
  base=$("$python" -c "import json,sys; print(max(json.load(open(sys.argv[1]))['peak_rss_mb']))" "$dir/baseline-$n.json")
  "$estimate" --json --vocab-size 256 --dim 256 --n-layers 4 --n-heads 4 --n-kv-heads 2 --max-seq-len 128 --batch 8 \
    --seq-len 128 --strategy "$s" --world-size "$n" --runtime-baseline-mb "$base" --mmap-threshold "$threshold" \
    --build-whole > "$dir/est-$s-$n.json"  # fsdpp-bench builds the model whole, then shards it
  echo -n "MALLOC_MMAP_THRESHOLD_=${threshold/#0/unset}: "
  "$python" - "$dir/train-$s-$n.json" "$dir/est-$s-$n.json" "$s" "$n" <<'PY' || status=1
import json, sys
meas = max(json.load(open(sys.argv[1]))["peak_rss_mb"])
e = json.load(open(sys.argv[2]))["estimates"][0]
est = e["total_bytes"] / 2**20
err = (est - meas) / meas
terms = ", ".join(f"{k[:-6]} {e[k] / 2**20:.0f}" for k in
                  ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "unsharded_bytes",
                   "activations_bytes", "allocator_bytes", "runtime_bytes"))
print(f"{sys.argv[3]} x{sys.argv[4]}: measured peak RSS {meas:.0f} MiB, estimate {est:.0f} MiB "
      f"({100 * err:+.1f}%; {terms}; peak at {e['peak_at']})")
sys.exit(0 if abs(err) < 0.15 else 1)
PY
done
exit $status
