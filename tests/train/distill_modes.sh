#!/usr/bin/env bash
# fsdpp-train's distillation beyond the online teacher (docs/distillation.md): a Qwen3-MoE
# teacher (2 layers, 4 experts) trained here for 6 steps, a student of 1 layer and 2 experts:
#   offline: fsdpp-train teacher-logits on 2 ranks writes the teacher's top 16 (float32, and
#     bf16); a student trained from the float32 cache on 1 rank has the kd_loss, ce_loss, loss
#     and grad norm of the online teacher with top_k 16 (within 1e-5) at every step: the sparse
#     KL equals the online top-k KL, and the cache written on 2 ranks reads on 1 and on 3; the
#     bf16 cache is within 1e-2 of them; the cache refuses another seq_len or text.
#   offpp2: the float32 cache read by a pipelined student (PP 2) equals off32 within 1e-5.
#   on-policy: lmbda 1 (every batch the student's samples) on 1 rank and on 2 ranks: the same
#     losses (the samples depend on the windows only), and generate_ms > 0; seq_kd on 1 rank runs.
#   layers: a student compressed to 1 of the teacher's 2 layers, layer_map [auto] from its
#     compress.json, mse on 1 and 2 ranks: the same layer_loss, 0 at step 1 (its layer 0 is the
#     teacher's) and > 0 after its first update; layer_loss and kd_loss 0 at the start for a
#     student that is the teacher (init_from the teacher itself, [0:0, 1:1]).
# Bad values, a cache of another seq_len or text, windows the cache lacks are refused.
set -euo pipefail
run=$1 train=$2 ckpt=$3 python=$4 src=$5
source "$src/tests/train/distill_lib.sh"
common+=(data.train_fraction=0.25)
go 1 teacher training.per_device_train_batch_size=8 training.max_steps=6
teacher="$dir/teacher/checkpoint-6"
student=(model.n_layers=1 model.num_experts=2 training.max_steps=3 distillation.teacher="$teacher"
         distillation.loss=generalized_jsd distillation.beta=0.3 distillation.temperature=2
         distillation.kd_ratio=0.7)

# The offline teacher, written on 2 ranks in shards of 5 windows.
logits() {  # logits RANKS OUT FLAGS...
  local n=$1 out=$2
  shift 2
  "$run" --nproc-per-node "$n" --timeout-s 120 "$train" teacher-logits "$config" "$dir/$out" \
    "${common[@]}" "${student[@]}" --windows-per-shard 5 "$@" > "$dir/$out.log" 2>&1 \
    || { cat "$dir/$out.log"; exit 1; }
}
logits 2 cache32 --top-k 16 --dtype float32
logits 2 cache16 --top-k 16
grep -q "wrote $dir/cache32: .* windows of 32 tokens, top 16 (float32)" "$dir/cache32.log"
go 1 online "${student[@]}" training.per_device_train_batch_size=8 distillation.top_k=16
go 1 off32 "${student[@]}" training.per_device_train_batch_size=8 distillation.teacher_cache="$dir/cache32"
go 1 off16 "${student[@]}" training.per_device_train_batch_size=8 distillation.teacher_cache="$dir/cache16"
# Read on 3 ranks (24 windows a step as 3 x 8): against its own online run.
go 3 online3 "${student[@]}" training.per_device_train_batch_size=8 distillation.top_k=16
go 3 off3 "${student[@]}" training.per_device_train_batch_size=8 distillation.teacher_cache="$dir/cache32" \
  distillation.teacher=
grep -q "offline teacher $dir/cache32 (top 16 of 256 tokens" "$dir/off3.log"
# A pipelined student reads the cache for the last stage: PP 2 (the Qwen3-MoE's 8 sequences in
# one microbatch, as off32's load-balancing loss takes them) equals off32.
go 2 offpp2 "${student[@]}" training.per_device_train_batch_size=8 distillation.teacher_cache="$dir/cache32" \
  parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_microbatch_size=8 \
  parallelism.pipeline_parallel_schedule=GPipe
grep -q "pipeline parallel: pp 2 x dp_replicate 1 x dp_shard 1 x tp 1 x ep 1; GPipe" "$dir/offpp2.log"
# On-policy: every batch the student's samples; 1 rank x 8 and 2 ranks x 4 windows.
onp=(distillation.lmbda=1 distillation.max_new_tokens=12 distillation.generation_temperature=1.0)
go 1 onp1 "${student[@]}" "${onp[@]}" training.per_device_train_batch_size=8
go 2 onp2 "${student[@]}" "${onp[@]}" training.per_device_train_batch_size=4
go 1 seqkd "${student[@]}" distillation.seq_kd=true distillation.lmbda=0.5 \
  distillation.max_new_tokens=8 training.per_device_train_batch_size=8
# Intermediate layers: a 1-layer student compressed from the teacher, [auto] layer map.
"$ckpt" compress --num-layers 1 "$teacher" "$dir/student1" > "$dir/compress.log" 2>&1 \
  || { cat "$dir/compress.log"; exit 1; }
grep -q "distillation.layer_map: \[0:0\]" "$dir/compress.log"
layers=(model.init_from="$dir/student1" training.max_steps=2 distillation.teacher="$teacher"
        distillation.layer_map=[auto] distillation.layer_loss=mse distillation.layer_loss_weight=0.5)
go 1 layers1 "${layers[@]}" training.per_device_train_batch_size=8
go 2 layers2 "${layers[@]}" training.per_device_train_batch_size=4
go 1 self model.init_from="$teacher" training.max_steps=1 training.per_device_train_batch_size=8 \
  distillation.teacher="$teacher" "distillation.layer_map=[0:0, 1:1]"
"$python" - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
def same(a, b, keys, tol):
    A, B = steps(a), steps(b)
    assert sorted(A) == sorted(B), (a, b, sorted(A), sorted(B))
    worst = 0.0
    for s in A:
        for k in keys:
            diff = abs(A[s][k] - B[s][k])
            worst = max(worst, diff)
            assert diff <= tol, (a, b, s, k, A[s][k], B[s][k])
    return worst
keys = ("loss", "kd_loss", "ce_loss", "grad_norm")
w32 = same("off32", "online", keys, 1e-5)
w3 = same("off3", "online3", keys, 1e-5)
w16 = same("off16", "online", keys, 1e-2)
wpp = same("offpp2", "off32", keys + ("aux_loss",), 1e-5)
off = steps("off3")
assert all(j["teacher_all_gather_bytes"] == 0 for j in off.values()), off  # no teacher ran
print(f"distill_modes: the float32 cache written on 2 ranks, read on 1 and 3, equals the online "
      f"top-16 teacher within {max(w32, w3):.1e} (bf16 cache: {w16:.1e}); read by a pipelined "
      f"student (PP 2): {wpp:.1e}")
w = same("onp1", "onp2", keys, 1e-5)
o1 = steps("onp1")
assert all(j["student_sampled_batches"] == 1 and j["generate_ms"] > 0 for j in o1.values()), o1
print(f"distill_modes: on-policy (lmbda 1) on 1 and 2 ranks within {w:.1e}; kd_loss "
      f"{o1[1]['kd_loss']:.4f}, sampling {o1[1]['generate_ms']:.0f} ms a step")
sk = steps("seqkd")
assert sum(j["student_sampled_batches"] + j["teacher_sampled_batches"] for j in sk.values()) == 3, sk
w = same("layers1", "layers2", keys + ("layer_loss",), 1e-5)
l1 = steps("layers1")
# Compressed to the teacher's layer 0 with every expert kept: at step 1 the student's layer 0 is
# the teacher's (layer_loss 0); its first update moves it away.
assert l1[1]["layer_loss"] < 1e-6 and l1[2]["layer_loss"] > 0, l1
assert steps("self")[1]["layer_loss"] < 1e-6 and steps("self")[1]["kd_loss"] < 1e-6
print(f"distill_modes: layer_map [auto] (mse) on 1 and 2 ranks within {w:.1e}; layer_loss "
      f"{l1[1]['layer_loss']:.4f} -> {l1[2]['layer_loss']:.4f}; 0 for the teacher itself")
PY
bad 1 "distillation.lmbda=1.5: expected a number in [0, 1]" distillation.lmbda=1.5
bad 1 "distillation.max_new_tokens=33: expected 1 .. data.seq_len=32" distillation.lmbda=0.5 \
  distillation.max_new_tokens=33 distillation.teacher="$teacher"
bad 1 "distillation.layer_map holds 'x:1'" "distillation.layer_map=[x:1]"
bad 1 "distillation.teacher_cache without distillation.teacher, with lmbda" \
  distillation.teacher_cache="$dir/cache32" distillation.lmbda=0.5
bad 1 "was written for data.seq_len=32" model.n_layers=1 model.num_experts=2 data.seq_len=16 \
  distillation.teacher_cache="$dir/cache32"
sed 's/e/E/g' "$dir/text.txt" > "$dir/other.txt"
bad 1 "the batch's tokens are not the ones the teacher scored" model.n_layers=1 model.num_experts=2 \
  data.path="$dir/other.txt" distillation.teacher_cache="$dir/cache32"
bad 1 "is not in distillation.teacher_cache" model.n_layers=1 model.num_experts=2 \
  data.train_fraction=0.5 distillation.teacher_cache="$dir/cache32" training.max_steps=2
bad 1 "distillation.layer_map=[auto] takes the layers fsdpp-ckpt compress kept" \
  distillation.teacher="$teacher" "distillation.layer_map=[auto]"
# What a pipelined student does not do: layers of other stages.
bad 2 "distillation.layer_map with parallelism.pipeline_parallel_degree=2: the student's hidden" \
  distillation.teacher="$teacher" "distillation.layer_map=[0:0]" parallelism.pipeline_parallel_degree=2
echo "distill_modes: bad values refused"
