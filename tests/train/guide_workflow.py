"""The distillation guide's workflow on the formats users bring, end to end.

A Qwen3-MoE made here by transformers (random weights; 4 layers, 8 experts; 64 embedding rows
more than its tokenizer has tokens, as published models round their vocabulary up) with a
byte-level BPE tokenizer in Qwen2's configuration (tests/parity/tokenizer_factory.py) and Qwen3's
training chat template, saved as a Hugging Face directory; a chat dataset as JSON Lines. Then, as
the guide runs it:
  1. fsdpp-ckpt import-hf: the checkpoint keeps tokenizer.json and tokenizer_config.json;
  2. fine-tune from the Hugging Face directory (model.init_from: its tokenizer.json is the run's)
     on the chat with assistant_only_loss, 2 ranks;
  3. fsdpp-ckpt compress the fine-tuned model: 2 of 4 layers, 4 of 8 experts by their router load
     on calibration text tokenized with its tokenizer;
  4. distill the compressed student from the fine-tuned teacher on the chat, 2 ranks;
  5. fsdpp-ckpt export-hf the student: its tokenizer files are the model's own;
  6. transformers loads the export (AutoTokenizer, AutoModelForCausalLM) and its greedy generate()
     of a chat prompt gives the ids fsdpp-generate gives on the export and on the checkpoint,
     ending at EOS where it does and never drawing the rows past the tokenizer.
And the newcomer's traps: data.tokenizer=byte beside model.init_from of that directory is refused
(the model's vocabulary is not bytes), as is naming another tokenizer.

usage: guide_workflow.py FSDPP_RUN FSDPP_TRAIN FSDPP_CKPT FSDPP_GENERATE SOURCE_DIR
"""
import filecmp
import json
import os
import random
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
run, train, ckpt, generate, src = sys.argv[1:6]
sys.path.insert(0, os.path.join(src, "tests", "parity"))
import torch  # noqa: E402
import tokenizer_factory as tf  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: E402

transformers.utils.logging.disable_progress_bar()
WORDS = ("what is the answer to this question about experts routers layers and tokens please "
         "explain it simply the model learns from data 1 2 3 42 yes no maybe").split()


def sh(*cmd, ok=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    if ok and r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{out}")
    return r.returncode, out, r.stdout.decode(errors="replace")


def words(r, lo, hi):
    return " ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi)))


def fsdpp_train(d, name, *extra, ok=True):
    out = f"{d}/{name}"
    rc, log, _ = sh(run, "--nproc-per-node", "2", "--timeout-s", "240", train,
                    os.path.join(src, "configs/default.yaml"), f"data.path={d}/chat.jsonl",
                    "data.assistant_only_loss=true", "data.seq_len=96", "data.val_fraction=0.1",
                    "training.eval_steps=0", "training.sample_tokens=0",
                    "training.per_device_train_batch_size=2", "training.max_steps=4",
                    "training.save_steps=0", "training.learning_rate=1e-3",
                    "training.fsdp_config.fsdp_transformer_layer_cls_to_wrap=[Qwen3MoeDecoderLayer]",
                    f"data.cache_dir={d}/cache", f"training.output_dir={out}", *extra, ok=ok)
    return rc, log, f"{out}/checkpoint-4"


with tempfile.TemporaryDirectory() as d:
    r = random.Random(3)
    tok_dir, _ = tf.make_qwen2(d, [words(random.Random(k), 50, 300) for k in range(150)])
    cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
    tcfg = json.load(open(cfg_path, encoding="utf-8"))
    tcfg["chat_template"] = open(os.path.join(src, "tests/data/chat_templates/qwen3_training.jinja"),
                                 encoding="utf-8").read()
    tcfg["eos_token"] = "<|im_end|>"  # Qwen3's instruct models end a turn with it
    json.dump(tcfg, open(cfg_path, "w", encoding="utf-8"), ensure_ascii=False)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    n_tok = len(tok)
    vocab = (n_tok + 63) // 64 * 64 + 64

    torch.manual_seed(0)
    hf = f"{d}/teacher-hf"
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
        max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
        initializer_range=0.3,  # peaked logits: greedy choices far from ties
        eos_token_id=tok.eos_token_id, bos_token_id=None, pad_token_id=tok.pad_token_id))
    model.save_pretrained(hf)
    tok.save_pretrained(hf)
    print(f"teacher: transformers' Qwen3-MoE, {vocab} embedding rows, tokenizer of {n_tok} tokens "
          f"(Qwen2's configuration, Qwen3's training chat template)")

    with open(f"{d}/chat.jsonl", "w", encoding="utf-8") as f:
        for i in range(120):
            m = [{"role": "system", "content": words(r, 3, 8)}] if i % 4 == 0 else []
            for _ in range(r.randint(1, 2)):
                m += [{"role": "user", "content": words(r, 3, 12)},
                      {"role": "assistant", "content": words(r, 3, 16)}]
            f.write(json.dumps({"messages": m}) + "\n")
    with open(f"{d}/calibration.txt", "w", encoding="utf-8") as f:
        f.write("\n".join(words(r, 20, 60) for _ in range(40)))

    # 1. import-hf keeps the tokenizer files.
    sh(ckpt, "import-hf", hf, f"{d}/teacher-ckpt")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert os.path.exists(f"{d}/teacher-ckpt/{name}"), os.listdir(f"{d}/teacher-ckpt")
    assert json.load(open(f"{d}/teacher-ckpt/tokenizer.json")) == json.load(open(f"{hf}/tokenizer.json"))
    print("1. import-hf: the checkpoint holds the model's tokenizer.json and tokenizer_config.json")

    # The traps: bytes for a model without its tokenizer, another tokenizer beside one that has it.
    notok = f"{d}/hf-without-tokenizer"
    os.makedirs(notok)
    for name in os.listdir(hf):
        if not name.startswith(("tokenizer", "special_tokens", "chat_template")):
            os.symlink(f"{hf}/{name}", f"{notok}/{name}")
    rc, log, _ = fsdpp_train(d, "trap-byte", f"model.init_from={notok}", "data.tokenizer=byte", ok=False)
    assert rc != 0 and "cannot stand in" in log, (rc, log)
    gpt2_dir, _ = tf.make_gpt2(d, [words(random.Random(k), 50, 300) for k in range(50)])
    rc, log, _ = fsdpp_train(d, "trap-other", f"model.init_from={hf}", f"data.tokenizer={gpt2_dir}", ok=False)
    assert rc != 0 and "is not the tokenizer" in log, (rc, log)
    print("   refused: data.tokenizer=byte for a model whose vocabulary is not bytes; another "
          "tokenizer.json beside the model's own")

    # 2. Fine-tune from the Hugging Face directory on the chat.
    _, log, ft = fsdpp_train(d, "finetune", f"model.init_from={hf}")
    assert "from model.init_from" in log and "counted by the loss" in log, log
    assert "tokenizer tokenizer.json" in log or "tokenizer.json" in log, log
    print("2. fine-tuned on the chat (assistant_only_loss): " +
          next(line for line in log.splitlines() if "counted by the loss" in line).split("] ", 1)[-1][:150])

    # 3. compress.
    sh(ckpt, "compress", "--num-layers", "2", "--num-experts", "4", "--calibration",
       f"{d}/calibration.txt", "--calibration-seq-len", "64", ft, f"{d}/student")
    assert json.load(open(f"{d}/student/tokenizer.json")) == json.load(open(f"{hf}/tokenizer.json"))
    print("3. compressed: 2 of 4 layers, 4 of 8 experts; the student keeps the tokenizer")

    # 4. distill the student from the fine-tuned teacher.
    _, log, student = fsdpp_train(d, "distill", f"model.init_from={d}/student",
                                  f"distillation.teacher={ft}", "distillation.kd_ratio=0.5")
    print("4. distilled from the fine-tuned teacher on the chat")

    # 5. export-hf.
    sh(ckpt, "export-hf", student, f"{d}/export")
    assert json.load(open(f"{d}/export/tokenizer.json")) == json.load(open(f"{hf}/tokenizer.json"))
    print("5. export-hf: the export's tokenizer.json is the model's own")

    # 6. transformers' greedy generate() == fsdpp-generate.
    etok = AutoTokenizer.from_pretrained(f"{d}/export")
    emodel = AutoModelForCausalLM.from_pretrained(f"{d}/export").eval()
    prompt = etok.apply_chat_template([{"role": "user", "content": "what is the answer please"}],
                                      tokenize=False, add_generation_prompt=True)
    ids = etok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = emodel.generate(ids, max_new_tokens=24, do_sample=False, eos_token_id=etok.eos_token_id,
                              pad_token_id=etok.pad_token_id,
                              suppress_tokens=list(range(n_tok, vocab)))[0].tolist()
    for where in (f"{d}/export", student):
        _, _, out = sh(generate, where, "--prompt", prompt, "--max-new-tokens", "24", "--temperature",
                       "0", "--ids")
        got = [int(x) for x in out.split()]
        if got != ref:
            sys.exit(f"fsdpp-generate on {where}: {got}\ntransformers: {ref}")
    assert max(ref) < n_tok
    print(f"6. transformers' greedy generate() == fsdpp-generate on the export and the checkpoint: "
          f"{len(ref) - ids.shape[1]} tokens{' ending at EOS' if ref[-1] == etok.eos_token_id else ''}: "
          f"{etok.decode(ref[ids.shape[1]:])!r}")
print("guide_workflow: OK")
