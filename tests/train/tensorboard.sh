#!/usr/bin/env bash
# fsdpp-train's TensorBoard event files (training.report_to, docs/observability.md), read back
# with the tensorboard package's own reader (EventAccumulator, which TensorBoard's server used
# before its Rust data server, and the same purge rules), 2 ranks:
#   A: fp16 (loss_scale, skipped_steps), default report_to, logging_dir under output_dir: every
#      scalar of every metrics.jsonl line is in the event file at its step with the float32 of
#      the JSON value, no other scalar is, and the effective config is there as text.
#   B: no_shard (comm_bytes_inter), logging_dir set, rank 0 SIGKILLed at step 6
#      (FSDPP_FAULT_KILL): its file reads steps 1..5 exactly as metrics.jsonl has them; a copy cut
#      in the middle of its last record reads up to the record before. B is then resumed from
#      checkpoint-3 to step 10: the directory's two files read as the final metrics.jsonl (the
#      resumed run's session start drops the first file's steps 4 and 5).
#   C: report_to=none writes no event file; report_to=wandb is refused before training.
# TRAIN_FAULTS is fsdpp-train-faults (tests/support/), the fsdpp-train that carries out
# FSDPP_FAULT_KILL.
set -euo pipefail
run=$1 train=$2 python=$3 src=$4 train_faults=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
small=(data.path="$src/configs" data.seq_len=32 data.val_fraction=0.1 model.dim=32 model.n_layers=2
       model.n_heads=4 model.n_kv_heads=2 model.max_seq_len=32 training.logging_steps=1
       training.sample_tokens=0 training.per_device_train_batch_size=2 data.cache_dir="$dir/cache")
np2=("$run" --nproc-per-node 2 --timeout-s 120 "$train" "$src/configs/default.yaml" "${small[@]}")

"${np2[@]}" training.fp16=true training.max_steps=6 training.logging_steps=2 training.eval_steps=3 \
  training.output_dir="$dir/A" > "$dir/A.log" 2>&1 || { cat "$dir/A.log"; exit 1; }
grep -q "\[train\] TensorBoard: $dir/A/runs/events.out.tfevents." "$dir/A.log" ||
  { echo "FAIL: no TensorBoard line naming the file"; cat "$dir/A.log"; exit 1; }

b_args=(training.fsdp=no_shard training.max_steps=10 training.eval_steps=3
        training.save_steps=3 training.report_to=tensorboard training.logging_dir="$dir/tb-B"
        training.output_dir="$dir/B")
b=("${np2[@]}" "${b_args[@]}")
if FSDPP_FAULT_KILL=0:6 "$run" --nproc-per-node 2 --timeout-s 120 "$train_faults" \
     "$src/configs/default.yaml" "${small[@]}" "${b_args[@]}" > "$dir/B1.log" 2>&1; then
  echo "FAIL: the run with rank 0 killed at step 6 succeeded"; cat "$dir/B1.log"; exit 1
fi
mkdir "$dir/B-killed"
cp "$dir/B/metrics.jsonl" "$dir/B-killed/"
cp -r "$dir/tb-B" "$dir/B-killed/tb"
"${b[@]}" training.resume_from_checkpoint=latest > "$dir/B2.log" 2>&1 || { cat "$dir/B2.log"; exit 1; }

"${np2[@]}" training.max_steps=1 training.report_to=none training.output_dir="$dir/C" > "$dir/C.log" 2>&1 ||
  { cat "$dir/C.log"; exit 1; }
[ ! -e "$dir/C/runs" ] || { echo "FAIL: report_to=none wrote $dir/C/runs"; exit 1; }
if "$train" "$src/configs/default.yaml" "${small[@]}" training.report_to=wandb \
     training.output_dir="$dir/D" > "$dir/D.log" 2>&1; then
  echo "FAIL: report_to=wandb was accepted"; exit 1
fi
grep -q "\[config\] training.report_to has 'wandb': fsdpp reports to tensorboard only" "$dir/D.log" ||
  { echo "FAIL: report_to=wandb"; cat "$dir/D.log"; exit 1; }

"$python" - "$dir" <<'PY'
import glob, json, math, os, struct, sys
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import SCALARS, TENSORS, EventAccumulator

d = sys.argv[1]
HF_TAGS = {"loss": "train/loss", "val_loss": "eval/loss", "lr": "train/learning_rate"}

def f32(x):
    # JSON has no inf or nan: metrics.jsonl writes null (an fp16 step's grad_norm when the loss
    # scaler skips it), and the event file the non-finite float itself.
    return None if x is None else struct.unpack("<f", struct.pack("<f", float(x)))[0]

def same(got, want):
    return got == want or (want is None and got is not None and not math.isfinite(got))

def expected_scalars(metrics):
    want = {}
    for line in open(metrics):
        j = json.loads(line)
        for k, v in j.items():
            if isinstance(v, list):  # a figure per rank: one tag per rank
                for r, x in enumerate(v):
                    want.setdefault(f"train/{k}/rank_{r}", {})[j["step"]] = f32(x)
            elif k != "step" and not isinstance(v, str):
                want.setdefault(HF_TAGS.get(k, "train/" + k), {})[j["step"]] = f32(v)
    return want

def check(logdir, metrics, steps):
    ea = EventAccumulator(logdir, size_guidance={SCALARS: 0, TENSORS: 0})
    ea.Reload()
    want = expected_scalars(metrics)
    assert sorted(want["train/loss"]) == steps, (metrics, sorted(want["train/loss"]))
    got_tags = sorted(ea.Tags()["scalars"])
    assert got_tags == sorted(want), (logdir, got_tags, sorted(want))
    n = 0
    for tag, by_step in want.items():
        events = ea.Scalars(tag)
        got = {e.step: e.value for e in events}
        assert len(got) == len(events), (tag, [e.step for e in events])  # no step twice
        bad = {s: (got.get(s), v) for s, v in by_step.items() if not same(got.get(s), v)}
        assert not bad and sorted(got) == sorted(by_step), (logdir, tag, bad, sorted(got))
        n += len(events)
    return ea, n, got_tags

def config_texts(ea):
    assert ea.SummaryMetadata("config").plugin_data.plugin_name == "text"
    return [t.tensor_proto.string_val[0].decode() for t in ea.Tensors("config")]

# A: the whole run, fp16.
files = glob.glob(f"{d}/A/runs/events.out.tfevents.*")
assert len(files) == 1, files
ea, n, tags = check(f"{d}/A/runs", f"{d}/A/metrics.jsonl", [1, 2, 3, 4, 6])
for t in ("train/loss", "eval/loss", "train/learning_rate", "train/grad_norm", "train/tokens_per_s",
          "train/step_ms", "train/peak_rss_mb", "train/comm_bytes", "train/comm_bytes_intra",
          "train/comm_bytes_inter", "train/loss_scale", "train/skipped_steps"):
    assert t in tags, (t, tags)
assert [e.step for e in ea.Scalars("eval/loss")] == [3, 6], ea.Scalars("eval/loss")
config = open(f"{d}/A/config.yaml").read()
assert config_texts(ea) == ["```yaml\n" + config + "```"], config_texts(ea)
assert "fp16: true" in config
print(f"A: {n} scalars under {len(tags)} tags equal metrics.jsonl's (float32); config text "
      f"({len(config)} bytes) as text-plugin data")

# B, killed at step 6: the file a SIGKILL left reads steps 1..5.
ea, n, tags = check(f"{d}/B-killed/tb", f"{d}/B-killed/metrics.jsonl", [1, 2, 3, 4, 5])
assert max(e.value for e in ea.Scalars("train/comm_bytes_inter")) > 0
print(f"B killed at step 6: {n} scalars of steps 1..5 read back")
# ... and a copy cut inside its last record reads up to the record before.
[killed] = glob.glob(f"{d}/B-killed/tb/events.out.tfevents.*")
data = open(killed, "rb").read()
os.makedirs(f"{d}/torn")
with open(f"{d}/torn/events.out.tfevents.0.torn", "wb") as f:
    f.write(data[:-7])
whole = [e.step for e in event_file_loader.EventFileLoader(killed).Load()]
torn = [e.step for e in event_file_loader.EventFileLoader(f"{d}/torn/events.out.tfevents.0.torn").Load()]
assert torn == whole[:-1] and whole[-1] == 5 and torn[-1] == 4, (whole, torn)
print(f"B torn copy: {len(torn)} of {len(whole)} records read, the last one whole at step {torn[-1]}")

# B resumed from checkpoint-3: two files that read as the final metrics.jsonl.
files = sorted(glob.glob(f"{d}/tb-B/events.out.tfevents.*"))
assert len(files) == 2, files
ea, n, tags = check(f"{d}/tb-B", f"{d}/B/metrics.jsonl", list(range(1, 11)))
texts = config_texts(ea)
assert [t.step for t in ea.Tensors("config")] == [0, 3], ea.Tensors("config")
assert texts[1] == "```yaml\n" + open(f"{d}/B/config.yaml").read() + "```", texts[1]
assert "resume_from_checkpoint: latest" in texts[1] and "resume_from_checkpoint: latest" not in texts[0]
print(f"B resumed: {n} scalars of steps 1..10 from {len(files)} files equal the final metrics.jsonl")
PY
echo "train.tensorboard: OK"
