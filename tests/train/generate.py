"""fsdpp-generate against transformers, and the final save it reads.

1. fsdpp-train (2 ranks, byte tokenizer, save_steps 0) ends with checkpoint-<last step>: the
   final model is always saved, with its tokenizer (fsdpp_tokenizer.json) inside.
2. fsdpp-generate greedy on 1 rank == on 2 ranks (the model sharded) == transformers' greedy
   generate() of the same checkpoint exported with `fsdpp-ckpt export-hf`, byte for byte; and
   fsdpp-generate reads the exported directory to the same text.
3. Prompts from stdin (one per line), --stop, and seeded top-k / top-p sampling that repeats.

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


def sh(*cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout.decode(errors='replace')}"
                 f"{r.stderr.decode(errors='replace')}")
    return r.stdout


with tempfile.TemporaryDirectory() as d:
    out = os.path.join(d, "run")
    sh(run, "--nproc-per-node", "2", "--timeout-s", "120", train, os.path.join(src, "configs/default.yaml"),
       f"data.path={src}/configs", "data.seq_len=32", "data.val_fraction=0.1", "model.dim=32",
       "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2", "model.max_seq_len=32",
       "training.max_steps=60", "training.logging_steps=30", "training.eval_steps=0",
       "training.sample_tokens=0", "training.per_device_train_batch_size=4",
       f"data.cache_dir={d}/cache", f"training.output_dir={out}")
    ck = os.path.join(out, "checkpoint-60")
    assert os.path.isdir(ck), f"no final checkpoint: {os.listdir(out)}"
    assert json.load(open(os.path.join(ck, "fsdpp_tokenizer.json"))) == {"type": "byte"}
    print("final save: checkpoint-60 with its tokenizer")

    greedy = ["--prompt", PROMPT, "--max-new-tokens", str(N), "--temperature", "0", "--raw"]
    one = sh(generate, ck, *greedy)
    two = sh(run, "--nproc-per-node", "2", "--no-prefix", generate, ck, *greedy)
    assert one == two, (one, two)
    text = one[:-1]  # the trailing newline
    assert text.startswith(PROMPT.encode()) and len(text) > len(PROMPT), text

    hf = os.path.join(d, "hf")
    sh(ckpt, "export-hf", ck, hf)
    model = LlamaForCausalLM.from_pretrained(hf).eval()
    ids = torch.tensor([list(PROMPT.encode())])
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=N, do_sample=False, pad_token_id=0)
    ref_bytes = bytes(ref[0].tolist())
    assert ref_bytes == text, f"fsdpp {text!r} != transformers {ref_bytes!r}"
    from_hf = sh(generate, hf, *greedy)
    assert from_hf == one, (from_hf, one)
    print(f"greedy, {N} tokens: fsdpp (1 and 2 ranks) == transformers == fsdpp on the export: {text!r}")

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
