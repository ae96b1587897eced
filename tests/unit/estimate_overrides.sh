#!/usr/bin/env bash
# fsdpp-estimate reads its run through the config engine (docs/estimate.md#flags-and-config-keys):
#  (a) a flag and the key=value override it is an alias of give byte-identical output;
#  (b) a bad value through either spelling is the engine's error, naming the key, the same text;
#  (c) an override fsdpp-train accepts changes the estimate as its flag does: the output differs
#      from the config's own, in the direction the feature goes (checked in the JSON), and keys
#      without a flag (training.bf16, fsdp_forward_prefetch) reach the estimate too.
set -euo pipefail
est=$1
src=$2
py=${3:-python3}
cd "$src"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# same NAME CONFIG "FLAGS" "OVERRIDES" [EXTRA...]: the flags' output equals the overrides', and
# differs from the config's own (same extra arguments, neither flags nor overrides).
same() {
  local name=$1 config=$2 flags=$3 keys=$4
  shift 4
  # shellcheck disable=SC2086
  "$est" "$config" $flags "$@" > "$work/$name.flag" || fail "$name: flags failed"
  # shellcheck disable=SC2086
  "$est" "$config" $keys "$@" > "$work/$name.key" || fail "$name: overrides failed"
  "$est" "$config" "$@" > "$work/$name.base" || fail "$name: the config alone failed"
  cmp -s "$work/$name.flag" "$work/$name.key" ||
    { diff "$work/$name.flag" "$work/$name.key"; fail "$name: '$flags' and '$keys' differ"; }
  ! cmp -s "$work/$name.flag" "$work/$name.base" || fail "$name: '$flags' changed nothing"
  echo "same: $name: $flags == $keys"
}

same shape configs/default.yaml "--dim 256 --n-layers 6 --n-heads 8 --n-kv-heads 2" \
  "model.dim=256 model.n_layers=6 model.n_heads=8 model.n_kv_heads=2" -n 1,2
same batch_ckpt configs/default.yaml "-b 4 -t 64 --activation-checkpointing" \
  "training.per_device_train_batch_size=4 data.seq_len=64 training.gradient_checkpointing=true" -n 2 --json
same strategy configs/default.yaml "-s shard_grad_op --cpu-offload --backward-prefetch-post" \
  "training.fsdp=shard_grad_op training.fsdp_config.fsdp_offload_params=true training.fsdp_config.fsdp_backward_prefetch=BACKWARD_POST" -n 2
same hybrid configs/default.yaml "-s hybrid --shard-group-size 2" \
  "training.fsdp=hybrid_shard training.fsdp_config.fsdp_hybrid_shard_group_size=2" -n 8
same tp configs/default.yaml "--tp 2 --sequence-parallel" \
  "parallelism.tensor_parallel_degree=2 parallelism.enable_sequence_parallel=true" -n 4 --json
same pp configs/default.yaml "--pp 2 --schedule ZBH1 --layers-per-stage 3" \
  "parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_schedule=ZBH1 parallelism.pipeline_parallel_layers_per_stage=3" -n 2
same ep configs/qwen3-moe-small.yaml "--ep 2 --num-experts 4 --top-k 1" \
  "parallelism.expert_parallel_degree=2 model.num_experts=4 model.num_experts_per_tok=1" -n 2
same whole configs/default.yaml "--build-whole --mmap-threshold 65536" \
  "model.deferred_init=off training.malloc_mmap_threshold=65536" -n 2
same teacher configs/qwen3-moe-small.yaml "--teacher-config configs/qwen3-moe-small.yaml --teacher-dtype bfloat16" \
  "distillation.teacher=configs/qwen3-moe-small.yaml distillation.teacher_dtype=bfloat16" -n 1

# (c) the direction of each feature, from the JSON above.
"$py" - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def first(name, kind):
    return json.load(open(f"{w}/{name}.{kind}"))["estimates"][0]
b, c = first("batch_ckpt", "base"), first("batch_ckpt", "key")
# 4 x 64 tokens with checkpointing against 8 x 128 without: far fewer activations.
assert c["activations_bytes"] < b["activations_bytes"] / 4, (c["activations_bytes"], b["activations_bytes"])
b, t = first("tp", "base"), first("tp", "key")
assert t["tensor_parallel"] == 2 and t["sequence_parallel"] and b["tensor_parallel"] == 1
# the heads, the FFN and the logits split over the tp group, the norms and residuals over the sequence
assert t["activations_bytes"] < b["activations_bytes"] * 0.8, (t["activations_bytes"], b["activations_bytes"])
print("directions: checkpointing", b["activations_bytes"], "->", c["activations_bytes"],
      "; tp 2 + sp activations", b["activations_bytes"], "->", t["activations_bytes"])
PY
grep -q "pipeline 2, 8 microbatches of 1, ZBH1" "$work/pp.key" || { cat "$work/pp.key"; fail "pp: no ZBH1 table"; }
grep -q "expert parallel 2" "$work/ep.key" || fail "ep: no expert parallelism"
grep -q "SHARD_GRAD_OP.*CPU offload.*(post)" "$work/strategy.key" || { cat "$work/strategy.key"; fail "strategy"; }
grep -q "note: distillation teacher: Qwen3-MoE .* in bf16" "$work/teacher.key" || { cat "$work/teacher.key"; fail "teacher"; }

# Keys that have no flag reach the estimate: bf16 compute with fp32 reduction, one unit prefetched.
out=$("$est" configs/default.yaml training.bf16=true training.fsdp_config.fsdp_forward_prefetch=true -n 2)
grep -q "params bf16, reduce fp32, prefetch forward 1 / backward 1" <<<"$out" || { echo "$out"; fail "bf16/forward_prefetch"; }

# (b) bad values: the engine's error, naming the key, identical through the flag and the key.
bad() {
  local flag=$1 key=$2 want=$3 rc
  set +e
  "$est" configs/default.yaml $flag > /dev/null 2> "$work/bad.flag"; rc=$?
  set -e
  [ $rc = 2 ] || fail "'$flag' exited $rc, expected 2 (a ConfigError)"
  set +e
  "$est" configs/default.yaml "$key" > /dev/null 2> "$work/bad.key"; rc=$?
  set -e
  [ $rc = 2 ] || fail "'$key' exited $rc, expected 2"
  grep -qF -- "$want" "$work/bad.flag" || { cat "$work/bad.flag"; fail "'$flag': no '$want'"; }
  cmp -s "$work/bad.flag" "$work/bad.key" || { cat "$work/bad.flag" "$work/bad.key"; fail "'$flag' and '$key' differ"; }
  echo "error: $flag: $(cat "$work/bad.flag")"
}
bad "--dim abc" "model.dim=abc" "[config] model.dim='abc' (override 'model.dim=abc'): expected an integer"
bad "-s zero4" "training.fsdp=zero4" "[config] training.fsdp='zero4' (override 'training.fsdp=zero4'): expected one of full_shard"
bad "--tp 0" "parallelism.tensor_parallel_degree=0" "[config] parallelism.tensor_parallel_degree=0: expected >= 1"
bad "--teacher-dtype bf16" "distillation.teacher_dtype=bf16" "[config] distillation.teacher_dtype='bf16'"
bad "--mmap-threshold 99999999999" "training.malloc_mmap_threshold=99999999999" \
  "[config] training.malloc_mmap_threshold=99999999999: expected bytes in [0, 33554432]"
bad "-t 4096" "data.seq_len=4096" "[config] data.seq_len=4096 is longer than model.max_seq_len=128"
# Without a config the same engine reads the flags (over fsdpp-estimate's defaults).
set +e
"$est" --dim 64 --n-heads 4 --tp 3 > /dev/null 2> "$work/bad.noconfig"; rc=$?
set -e
[ $rc = 2 ] && grep -qF "[config] model.n_heads=4, model.n_kv_heads=0 with parallelism.tensor_parallel_degree=3" \
  "$work/bad.noconfig" || { cat "$work/bad.noconfig"; fail "--tp 3 without a config"; }
echo ok
