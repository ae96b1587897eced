"""fsdpp-generate against transformers, and the final save it reads.

1. fsdpp-train (2 ranks, byte tokenizer, save_steps 0) ends with checkpoint-<last step>: the
   final model is always saved, with its tokenizer (fsdpp_tokenizer.json) inside.
2. fsdpp-generate greedy on 1 rank == on 2 ranks (the model sharded) == transformers' greedy
   generate() of the same checkpoint exported with `fsdpp-ckpt export-hf`, byte for byte; and
   fsdpp-generate reads the exported directory to the same text.
3. Prompts from stdin (one per line), --stop, and seeded top-k / top-p sampling that repeats.
4. Fine-tuning (model.init_from) from the checkpoint and from its Hugging Face export: the new run's
   first loss continues from the source's validation loss, not from a fresh model's, though the
   YAML asks for another width (the source's shape wins); a source whose tensors do not fit its
   config is refused naming the tensor and both shapes.

usage: generate.py FSDPP_RUN FSDPP_TRAIN FSDPP_CKPT FSDPP_GENERATE SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import transformers
from transformers import LlamaForCausalLM

transformers.utils.logging.disable_progress_bar()
run, train, ckpt, generate, src = sys.argv[1:6]
PROMPT = "Q: "
N = 25  # prompt + N stays within max_seq_len=32: both sides see the whole context


def metrics(out):
    return [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]


def sh(*cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout.decode(errors='replace')}"
                 f"{r.stderr.decode(errors='replace')}")
    return r.stdout


with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "run")
    job = [train, os.path.join(src, "configs/default.yaml"), f"data.path={src}/configs",
           "data.seq_len=32", "data.val_fraction=0.1", "model.dim=32", "model.n_layers=2",
           "model.n_heads=4", "model.n_kv_heads=2", "model.max_seq_len=32", "training.eval_steps=0",
           "training.sample_tokens=0", "training.per_device_train_batch_size=4",
           f"data.cache_dir={d}/cache"]
    sh(run, "--nproc-per-node", "2", "--timeout-s", "120", *job, "training.max_steps=60",
       "training.logging_steps=30", f"training.output_dir={out}")
    ck = os.path.join(out, "checkpoint-60")
    assert os.path.isdir(ck), f"no final checkpoint: {os.listdir(out)}"
    assert json.load(open(os.path.join(ck, "fsdpp_tokenizer.json"))) == {"type": "byte"}
    print("final save: checkpoint-60 with its tokenizer")

    greedy = ["--prompt", PROMPT, "--max-new-tokens", str(N), "--temperature", "0", "--raw"]

    def check_greedy(ck, hf):
        one = sh(generate, ck, *greedy)
        two = sh(run, "--nproc-per-node", "2", "--no-prefix", generate, ck, *greedy)
        assert one == two, (one, two)
        text = one[:-1]  # the trailing newline
        assert text.startswith(PROMPT.encode()) and len(text) > len(PROMPT), text
        sh(ckpt, "export-hf", ck, hf)
        model = LlamaForCausalLM.from_pretrained(hf).eval()
        with torch.no_grad():
            ref = model.generate(torch.tensor([list(PROMPT.encode())]), max_new_tokens=N,
                                 do_sample=False, pad_token_id=0)
        ref_bytes = bytes(ref[0].tolist())
        assert ref_bytes == text, f"fsdpp {text!r} != transformers {ref_bytes!r}"
        assert sh(generate, hf, *greedy) == one
        print(f"greedy, {N} tokens of {os.path.basename(ck)}: fsdpp (1 and 2 ranks) == "
              f"transformers == fsdpp on the export: {text!r}")
        return one, text

    # A model after one step: its greedy bytes vary (a trained one's may settle on spaces), so
    # equal text means equal argmaxes over many different logits.
    fresh = os.path.join(d, "fresh")
    sh(run, "--nproc-per-node", "2", *job, "training.max_steps=1", f"training.output_dir={fresh}")
    _, varied = check_greedy(os.path.join(fresh, "checkpoint-1"), os.path.join(d, "hf-fresh"))
    assert len(set(varied[len(PROMPT):])) >= 5, varied
    hf = os.path.join(d, "hf")
    one, text = check_greedy(ck, hf)

    lines = sh(generate, ck, "--max-new-tokens", "8", "--temperature", "0", "--raw",
               stdin=b"Q: \nA: \n").split(b"\n")
    assert lines[0].startswith(b"Q: ") and lines[1].startswith(b"A: ") and lines[2] == b"", lines
    assert lines[0] == sh(generate, ck, "--prompt", "Q: ", "--max-new-tokens", "8", "--temperature",
                          "0", "--raw")[:-1]
    stop_at = text[len(PROMPT) + 5:len(PROMPT) + 7].decode("latin-1")
    if stop_at and "\x00" not in stop_at:
        cut = sh(generate, ck, *greedy, "--stop", stop_at)[:-1]
        assert cut == text[:text.index(stop_at.encode("latin-1"), len(PROMPT))], (cut, stop_at)
    sampled = ["--prompt", PROMPT, "--max-new-tokens", "20", "--temperature", "0.9", "--top-k", "20",
               "--top-p", "0.8", "--seed", "7", "--raw"]
    a, b = sh(generate, ck, *sampled), sh(generate, ck, *sampled)
    c = sh(run, "--nproc-per-node", "2", "--no-prefix", generate, ck, *sampled)
    assert a == b == c, (a, b, c)
    print("stdin prompts, --stop, and seeded top-k/top-p sampling (1 and 2 ranks) as expected")

    # 4. fine-tuning
    src_val = metrics(out)[-1]["val_loss"]
    fresh_loss = metrics(fresh)[0]["loss"]
    for name, source in (("checkpoint", ck), ("export", hf)):
        o = os.path.join(d, f"ft-{name}")
        log = sh(run, "--nproc-per-node", "2", *job, "model.dim=64", "training.max_steps=1",
                 f"model.init_from={source}", f"training.output_dir={o}").decode()
        assert "model.dim: 64 in the config, 32 in" in log, log
        first = metrics(o)[0]["loss"]
        print(f"fine-tune from the {name}: step-1 loss {first:.4f}; the source's validation loss "
              f"{src_val:.4f}; a fresh model's step-1 loss {fresh_loss:.4f}")
        assert abs(first - src_val) < 0.3 and first < fresh_loss - 1, (first, src_val, fresh_loss)
    bad = os.path.join(d, "hf-bad")
    subprocess.run(["cp", "-r", hf, bad], check=True)
    c = json.load(open(os.path.join(bad, "config.json")))
    c["intermediate_size"] *= 2
    json.dump(c, open(os.path.join(bad, "config.json"), "w"))
    r = subprocess.run([*job, "training.max_steps=1", f"model.init_from={bad}",
                        f"training.output_dir={d}/ft-bad"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode != 0 and "'model.layers.0.mlp.gate_proj.weight' has shape [96, 32] but the " \
        "config gives [192, 32]" in r.stdout, r.stdout
    print("a source whose tensors do not fit its config: refused, naming the tensor and both shapes")
