#!/usr/bin/env bash
# fsdpp-train's distillation: section (docs/distillation.md#distilling-with-fsdpp-train): a
# Qwen3-MoE teacher (2 layers, 4 experts) trained here for 8 steps, then a smaller Qwen3-MoE
# student (1 layer, 2 experts) distilled from it:
#   d1: 1 rank; d2: FULL_SHARD on 2 ranks; ep2: expert parallelism over 2 ranks; tpmoe: tensor
#   parallelism 2 (the vocab-parallel KD loss). Every step's
#   loss, kd_loss, ce_loss and grad norm equal d1's within 1e-5; the teacher all-gathers and never
#   reduce-scatters (teacher_reduce_scatter_bytes 0 in every line of metrics.jsonl); r1: d2's
#   checkpoint-2 resumed on 1 rank continues with d1's steps 3 and 4.
#   same: the student starts from the teacher's own checkpoint (model.init_from, a Qwen3-MoE):
#   step 1's kd_loss is 0 (within 1e-6) in float32 and small but not 0 with a bfloat16 teacher.
#   kd0: kd_ratio 0 gives the losses of the run without distillation.
#   hf: a Llama teacher from a Hugging Face directory (fsdpp-ckpt export-hf).
#   tp2, tp2k: a Llama student with tensor parallelism 2 (the vocab-parallel KD loss, without and
#   with top_k) equal to one process (tp1, tp1k) within 1e-5 per step; pp2, pp2k, pp2fsdp2,
#   pp2tp2k: the same student pipelined (PP 2 alone, x FSDP 2, x TP 2) likewise; onpp2, seqkdpp2:
#   on-policy (lmbda 0.5, and with seq_kd) pipelined, the samples drawn through the stages, equal
#   one process (onp1, seqkd1) with 3 accumulation batches the pipeline cuts across.
# The teacher is in no checkpoint of the student and in no optimizer (kd0's checkpoint holds the
# same files as plain's). Bad values are [config] errors naming the key.
set -euo pipefail
run=$1 train=$2 ckpt=$3 python=$4 src=$5
source "$src/tests/train/distill_lib.sh"
go 1 teacher training.per_device_train_batch_size=8 training.max_steps=8
teacher="$dir/teacher/checkpoint-8"
student=(model.n_layers=1 model.num_experts=2 training.max_steps=4 distillation.teacher="$teacher"
         distillation.loss=generalized_jsd distillation.beta=0.3 distillation.temperature=2
         distillation.kd_ratio=0.7)
go 1 d1 "${student[@]}" training.per_device_train_batch_size=8
# The Hydra group's override next to the section's own keys.
go 2 d2 "${student[@]}" distillation.training.per_device_train_batch_size=4 training.save_steps=2
# A distillation run resumed (on 1 rank from the 2-rank checkpoint): the teacher comes back from
# its directory, the student from the checkpoint.
cp -r "$dir/d2" "$dir/r1"
rm -rf "$dir/r1/checkpoint-4"
go 1 r1 "${student[@]}" training.per_device_train_batch_size=8 \
  training.resume_from_checkpoint="$dir/r1/checkpoint-2"
go 2 ep2 "${student[@]}" training.per_device_train_batch_size=4 parallelism.expert_parallel_degree=2
# The Qwen3-MoE student with tensor parallelism 2 (vocab-parallel KD loss): d1's steps.
go 2 tpmoe "${student[@]}" training.per_device_train_batch_size=8 parallelism.tensor_parallel_degree=2
grep -q "distillation: teacher Qwen3-MoE hidden 64 x 2 layers" "$dir/d2.log"
grep -qa "train/kd_loss" "$dir"/d1/runs/events.out.tfevents.*  # TensorBoard has them too
grep -qa "train/ce_loss" "$dir"/d1/runs/events.out.tfevents.*
same=(model.init_from="$teacher" training.max_steps=1 training.per_device_train_batch_size=8
      distillation.teacher="$teacher" distillation.kd_ratio=1)
go 1 same "${same[@]}"
go 2 same_bf16 "${same[@]}" distillation.teacher_dtype=bfloat16
go 1 kd0 model.n_layers=1 training.max_steps=2 training.per_device_train_batch_size=8 \
  distillation.teacher="$teacher" distillation.kd_ratio=0
go 1 plain model.n_layers=1 training.max_steps=2 training.per_device_train_batch_size=8
# A Llama teacher from a Hugging Face directory.
go 1 llama model.architecture=llama training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[TransformerBlock] \
  training.per_device_train_batch_size=8 training.max_steps=2
"$ckpt" export-hf "$dir/llama/checkpoint-2" "$dir/llama_hf" > "$dir/export.log" 2>&1 || { cat "$dir/export.log"; exit 1; }
go 2 hf model.n_layers=1 training.max_steps=2 training.per_device_train_batch_size=4 \
  distillation.teacher="$dir/llama_hf"
grep -q "distillation: teacher Llama dim 64 x 2 layers" "$dir/hf.log"
# A tensor-parallel Llama student (vocab-parallel KD loss on each rank's 128 of the 256 columns):
# tp2 on 2 ranks equals tp1 on one, with the whole vocabulary's top 20 (tp2k: each rank's top 20
# gathered) and without.
tpstudent=(model.architecture=llama training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[TransformerBlock]
           model.n_layers=1 training.max_steps=3 training.per_device_train_batch_size=8
           distillation.teacher="$teacher" distillation.loss=generalized_jsd distillation.beta=0.3
           distillation.temperature=2 distillation.kd_ratio=0.7)
go 1 tp1 "${tpstudent[@]}"
go 2 tp2 "${tpstudent[@]}" parallelism.tensor_parallel_degree=2
go 1 tp1k "${tpstudent[@]}" distillation.top_k=20
go 2 tp2k "${tpstudent[@]}" distillation.top_k=20 parallelism.tensor_parallel_degree=2
grep -q "tensor parallel: " "$dir/tp2.log"
# The same student pipelined (the teacher's logits computed before the pipeline, each microbatch's
# rows of them in the last stage's objective): PP 2 in 4 microbatches (with and without top_k),
# PP 2 x FSDP 2, and PP 2 x TP 2 (the vocab-parallel objective in the last stage) equal tp1/tp1k.
pp2=(parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_microbatch_size=2)
go 2 pp2 "${tpstudent[@]}" "${pp2[@]}"
go 2 pp2k "${tpstudent[@]}" "${pp2[@]}" distillation.top_k=20
go 4 pp2fsdp2 "${tpstudent[@]}" "${pp2[@]}" training.per_device_train_batch_size=4
go 4 pp2tp2k "${tpstudent[@]}" "${pp2[@]}" distillation.top_k=20 parallelism.tensor_parallel_degree=2
grep -q "pipeline parallel: pp 2 x dp_replicate 1 x dp_shard 1 x tp 2" "$dir/pp2tp2k.log"
# On-policy under the pipeline: each of the 3 accumulation batches of 2 windows is the
# data, or the student's samples (drawn through both stages), or the teacher's (seq_kd); the
# pipeline's 2 microbatches of 3 rows cut accumulation batch 1 in two. PP 2 equals one process.
onp=(training.per_device_train_batch_size=2 training.gradient_accumulation_steps=3
     distillation.lmbda=0.5 distillation.max_new_tokens=12 distillation.generation_temperature=1.0)
go 1 onp1 "${tpstudent[@]}" "${onp[@]}"
pp3=(parallelism.pipeline_parallel_degree=2 parallelism.pipeline_parallel_microbatch_size=3)
go 2 onpp2 "${tpstudent[@]}" "${onp[@]}" "${pp3[@]}"
go 1 seqkd1 "${tpstudent[@]}" "${onp[@]}" distillation.seq_kd=true
go 2 seqkdpp2 "${tpstudent[@]}" "${onp[@]}" "${pp3[@]}" distillation.seq_kd=true
# configs/distill-moe.yaml (the guide's training: section) as docs/distillation.md runs it: a
# student compressed from the teacher (half its experts), with the torchrun spelling of the flag.
"$ckpt" compress --num-experts 2 --calibration "$dir/text.txt" "$teacher" "$dir/student" \
  > "$dir/compress.log" 2>&1 || { cat "$dir/compress.log"; exit 1; }
"$run" --nproc_per_node=2 --timeout-s 120 "$train" "$src/configs/distill-moe.yaml" \
  data.path="$dir/text.txt" data.cache_dir="$dir/cache" data.seq_len=32 \
  model.init_from="$dir/student" distillation.teacher="$teacher" training.max_steps=2 \
  training.logging_steps=1 training.sample_tokens=0 training.output_dir="$dir/example" \
  > "$dir/example.log" 2>&1 || { cat "$dir/example.log"; exit 1; }
grep -q "activation checkpointing (full): 2 of 2 blocks" "$dir/example.log"
grep -q "(bfloat16, FULL_SHARD, frozen); loss forward_kl, temperature 2, kd_ratio 0.5" "$dir/example.log"
test -f "$dir/example/checkpoint-2/model.safetensors"  # FULL_STATE_DICT
"$python" - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
def steps(name):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{name}/metrics.jsonl")) if "loss" in j}
one = steps("d1")
assert sorted(one) == [1, 2, 3, 4], sorted(one)
worst = 0.0
for name in ("d2", "ep2", "r1", "tpmoe"):
    got = steps(name)
    assert sorted(got) == [1, 2, 3, 4], (name, sorted(got))
    for s, j in got.items():
        for k in ("loss", "kd_loss", "ce_loss", "grad_norm"):
            diff = abs(j[k] - one[s][k])
            worst = max(worst, diff)
            assert diff < 1e-5, (name, s, k, j[k], one[s][k])
        assert j["teacher_reduce_scatter_bytes"] == 0, (name, s, j)
        assert j["teacher_all_gather_bytes"] > 0 or (name, s) in (("r1", 3), ("r1", 4)), (name, s, j)
for s, j in one.items():
    # The mix, as torchtune's recipe writes it, plus the student's load-balancing loss.
    mix = 0.3 * j["ce_loss"] + 0.7 * j["kd_loss"] + 0.001 * j["aux_loss"]
    assert abs(j["loss"] - mix) < 1e-5, (s, j["loss"], mix)
    assert j["teacher_all_gather_bytes"] == 0 and j["teacher_reduce_scatter_bytes"] == 0, j
print(f"distill: FSDP 2, EP 2, TP 2 and a 1-rank resume of FSDP 2's checkpoint-2 x 4 steps equal one process, worst difference {worst:.2e}; "
      f"kd_loss {one[1]['kd_loss']:.4f} -> {one[4]['kd_loss']:.4f}, ce_loss "
      f"{one[1]['ce_loss']:.4f} -> {one[4]['ce_loss']:.4f}; teacher all-gathers "
      f"{steps('d2')[1]['teacher_all_gather_bytes']} bytes a step per rank on 2 ranks, reduce-scatters 0")
kd = steps("same")[1]["kd_loss"]
kd_bf16 = steps("same_bf16")[1]["kd_loss"]
assert kd < 1e-6, kd
assert 1e-7 < kd_bf16 < 1e-2, kd_bf16
print(f"distill: the teacher's own weights as the student: kd_loss {kd:.2e} (float32 teacher), "
      f"{kd_bf16:.2e} (bfloat16 teacher)")
kd0, plain = steps("kd0"), steps("plain")
for s in (1, 2):
    for k in ("loss", "grad_norm"):
        assert abs(kd0[s][k] - plain[s][k]) < 1e-6, (s, k, kd0[s][k], plain[s][k])
    assert abs(kd0[s]["ce_loss"] + 0.001 * kd0[s]["aux_loss"] - plain[s]["loss"]) < 1e-6, s
worst, each = 0.0, {}
keys = ("loss", "kd_loss", "ce_loss", "grad_norm")
sampled = ("student_sampled_batches", "teacher_sampled_batches")
for one_name, name, tol, more in (
        ("tp1", "tp2", 1e-5, ()), ("tp1k", "tp2k", 1e-5, ()), ("tp1", "pp2", 1e-5, ()),
        ("tp1k", "pp2k", 1e-5, ()), ("tp1", "pp2fsdp2", 1e-5, ()), ("tp1k", "pp2tp2k", 1e-5, ()),
        ("onp1", "onpp2", 1e-6, sampled), ("seqkd1", "seqkdpp2", 1e-6, sampled)):
    one, got = steps(one_name), steps(name)
    assert sorted(got) == sorted(one) == [1, 2, 3], (name, sorted(got))
    for s in one:
        for k in keys + more:
            diff = abs(got[s][k] - one[s][k])
            worst = max(worst, diff)
            each[name] = max(each.get(name, 0.0), diff)
            assert diff < tol, (name, s, k, got[s][k], one[s][k])
assert abs(steps("tp1k")[1]["kd_loss"] - steps("tp1")[1]["kd_loss"]) > 1e-6  # top_k mattered
# The on-policy runs' 9 accumulation batches: some the student's, the others the data's (onp1) or the
# teacher's (seqkd1).
for name, teacher_samples in (("onp1", False), ("seqkd1", True)):
    student, teacher = (sum(j[k] for j in steps(name).values()) for k in sampled)
    assert 0 < student < 9 and teacher == (9 - student if teacher_samples else 0), (name, student, teacher)
print(f"distill: a tensor-parallel and a pipelined Llama student (TP 2, PP 2, PP 2 x FSDP 2, PP 2 x "
      f"TP 2; with and without top_k 20; PP 2 on-policy, lmbda 0.5 with and without seq_kd) equal "
      f"one process over 3 steps, worst difference {worst:.2e} ("
      + ", ".join(f"{n} {v:.1e}" for n, v in each.items()) + ")")
hf = steps("hf")
assert hf[1]["kd_loss"] > 0 and hf[2]["teacher_reduce_scatter_bytes"] == 0, hf
# No teacher tensor in the student's checkpoint, and the same files as without distillation.
names = sorted(os.listdir(f"{d}/kd0/checkpoint-2"))
assert names == sorted(os.listdir(f"{d}/plain/checkpoint-2")), names
print(f"distill: kd_ratio 0 equals no distillation; a Llama teacher from a Hugging Face "
      f"directory: kd_loss {hf[1]['kd_loss']:.4f}")
ex = steps("example")
assert sorted(ex) == [1, 2] and all(j["teacher_reduce_scatter_bytes"] == 0 for j in ex.values()), ex
assert all(0 < j["kd_loss"] < 10 for j in ex.values()), ex
print(f"distill: configs/distill-moe.yaml on a compressed student: kd_loss {ex[1]['kd_loss']:.2e}, "
      f"ce_loss {ex[1]['ce_loss']:.4f} at step 1")
PY
bad 1 "distillation.kd_ratio=1.5: expected a number in [0, 1]" distillation.kd_ratio=1.5
bad 1 "distillation.loss" distillation.loss=kl
bad 1 "distillation.teacher_dtype" distillation.teacher_dtype=fp16
bad 1 "distillation.beta=2: expected a number in [0, 1]" distillation.beta=2
bad 1 "distillation.temperature=0: expected a finite number > 0" distillation.temperature=0
bad 1 "distillation.teacher='$dir/none' is not a directory" distillation.teacher="$dir/none"
bad 1 "has a vocabulary of 256 tokens and the student 300" model.vocab_size=300 \
  distillation.teacher="$teacher"
bad 1 "distillation.top_k=999 is larger than the vocabulary (256 tokens)" distillation.top_k=999 \
  distillation.teacher="$teacher"
echo "distill: bad values refused"
