#!/usr/bin/env bash
# training.async_save on 2 ranks against synchronous saves of the same run:
#   - the same losses bit for bit (the background writer does not disturb training) and the
#     same checkpoint tensors and trainer_state.json;
#   - save_total_limit=2 leaves the two newest checkpoints and no temporary directories;
#   - a run resumed from an asynchronous checkpoint continues bit for bit;
#   - a write that fails on rank 1 (FSDPP_FAULT_SAVE_FAIL=1) surfaces as an error on the next
#     save, naming the checkpoint, and the job fails;
#   - how long training is held by a save, sync vs async, with slow storage emulated by
#     FSDPP_FAULT_SAVE_DELAY_MS=400 (every checkpoint file starts 400 ms late) and without:
#     printed, and the first async save must hold it for less than the emulated delay (later
#     ones may wait for the previous save when the writes take longer than save_steps steps).
# TRAIN_FAULTS is fsdpp-train-faults (tests/support/): fsdpp-train that carries out
# FSDPP_FAULT_SAVE_DELAY_MS and FSDPP_FAULT_SAVE_FAIL; the runs that set them start it.
set -euo pipefail
run=$1 train=$2 ckpt=$3 python=$4 src=$5 train_faults=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(data.path="$src/docs" data.seq_len=32 data.val_fraction=0.1 data.cache_dir="$dir/cache"
        model.dim=128 model.n_layers=2 model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32
        training.logging_steps=1 training.eval_steps=0 training.save_steps=4
        training.save_total_limit=2 training.sample_tokens=0 training.learning_rate=0.003
        training.lr_scheduler_type=constant training.per_device_train_batch_size=4 training.seed=5)
job=("$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${common[@]}")
faulty_job=("$run" --nproc-per-node 2 --timeout-s 120 "$train_faults" "$src/configs/default.yaml" "${common[@]}")
for mode in sync async; do
  async=false; [ "$mode" = async ] && async=true
  FSDPP_FAULT_SAVE_DELAY_MS=400 "${faulty_job[@]}" training.max_steps=12 training.async_save=$async \
    training.output_dir="$dir/$mode" > "$dir/$mode.log"
  "${job[@]}" training.max_steps=12 training.async_save=$async training.output_dir="$dir/$mode-fast" \
    > "$dir/$mode-fast.log"
done
# Resume from the asynchronous checkpoint-8 (checkpoint-12 removed) to 12.
mkdir "$dir/resumed"
cp -r "$dir/async/checkpoint-8" "$dir/async/config.yaml" "$dir/async/metrics.jsonl" "$dir/resumed/"
"${job[@]}" training.max_steps=12 training.async_save=true training.output_dir="$dir/resumed" \
  training.resume_from_checkpoint=latest > "$dir/resumed.log"
grep -q "resumed from $dir/resumed/checkpoint-8" "$dir/resumed.log"
# A failed background write: rank 1's files of checkpoint-4 cannot be written.
if FSDPP_FAULT_SAVE_FAIL=1 "${faulty_job[@]}" training.max_steps=12 training.async_save=true \
    training.output_dir="$dir/failing" > "$dir/failing.log" 2>&1; then
  echo "a job whose checkpoint write failed succeeded"; exit 1
fi
grep -q "asynchronous save of '$dir/failing/checkpoint-4' failed: .*FSDPP_FAULT_SAVE_FAIL" "$dir/failing.log" \
  || { echo "the failed write was not reported as expected:"; tail -20 "$dir/failing.log"; exit 1; }
echo "failed write reported: $(grep -m1 -o "asynchronous save of .*" "$dir/failing.log" | cut -c1-160)"
[ ! -e "$dir/failing/checkpoint-4" ]
for s in 8 12; do "$ckpt" inspect "$dir/async/checkpoint-$s" > /dev/null; done

"$python" - "$dir" <<'PY'
import json, os, re, sys
import torch
from safetensors.torch import load_file
d = sys.argv[1]
def losses(run):
    return {j["step"]: j["loss"] for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
s, a, r = losses("sync"), losses("async"), losses("resumed")
assert sorted(s) == sorted(a) == sorted(r) == list(range(1, 13)), (sorted(s), sorted(a), sorted(r))
assert s == a, "async saves changed the losses"
assert r == a, "the run resumed from an asynchronous checkpoint differs"
print("losses: sync == async == resumed-from-async, steps 1..12, bit for bit")
for run in ("sync", "async", "sync-fast", "async-fast"):
    names = sorted(n for n in os.listdir(f"{d}/{run}") if n.startswith("checkpoint"))
    assert names == ["checkpoint-12", "checkpoint-8"], (run, names)
n = 0
for step in (8, 12):
    ds, da = f"{d}/sync/checkpoint-{step}", f"{d}/async/checkpoint-{step}"
    files = sorted(os.listdir(ds))
    assert files == sorted(os.listdir(da)), (files, os.listdir(da))
    for f in files:
        if f.endswith(".safetensors"):
            x, y = load_file(f"{ds}/{f}"), load_file(f"{da}/{f}")
            assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), f
            n += len(x)
        elif f == "trainer_state.json":  # but for the digest of metrics.jsonl, whose lines hold timings
            x, y = json.load(open(f"{ds}/{f}")), json.load(open(f"{da}/{f}"))
            x.pop("metrics_xxh3"), y.pop("metrics_xxh3")
            assert x == y, f"{f} differs"
        else:
            assert open(f"{ds}/{f}").read() == open(f"{da}/{f}").read(), f"{f} differs"
print(f"checkpoints 8 and 12: {n} tensors, index.json, trainer_state.json identical sync vs async")

def blocked(log):  # ms training was held by each save, from the trainer's log lines
    return [float(x) for x in re.findall(r"checkpoint-\d+ \((?:a?sync)\): training blocked ([\d.]+) ms", open(log).read())]
def step_ms(run):
    return {j["step"]: j["step_ms"] for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
def interval(run, k):  # wall time from step k-1's log line to step k's: includes a save at k-1
    e = {j["step"]: j["elapsed_s"] for j in map(json.loads, open(f"{d}/{run}/metrics.jsonl"))}
    return 1000 * (e[k] - e[k - 1])
print("time training is held by a save (2 ranks, Llama dim 128 x 2 layers, SHARDED, AdamW):")
for tag, suffix, note in (("emulated slow storage (+400 ms per file)", "", ""), ("local disk", "-fast", "")):
    bs, ba = blocked(f"{d}/sync{suffix}.log"), blocked(f"{d}/async{suffix}.log")
    assert len(bs) == 3 and len(ba) == 3, (bs, ba)
    around_s = [interval(f"sync{suffix}", k) for k in (5, 9)]
    around_a = [interval(f"async{suffix}", k) for k in (5, 9)]
    plain = sorted(interval(f"sync{suffix}", k) for k in (2, 3, 4, 6, 7, 8))[3]
    print(f"  {tag}: sync blocks {sum(bs)/3:.1f} ms per save, async {sum(ba)/3:.1f} ms; "
          f"step interval after a save: sync {sum(around_s)/2:.1f} ms, async {sum(around_a)/2:.1f} ms "
          f"(a step without a save: {plain:.1f} ms)")
    if suffix == "":  # the first save has no earlier one to wait for
        assert bs[0] >= 400, bs
        assert ba[0] < 400, f"async held training {ba[0]} ms, as long as the write itself"
PY
