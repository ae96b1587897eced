"""Hugging Face transformers <-> fsdpp Llama, both ways, logits within 1e-4.

1. transformers -> fsdpp: tiny random LlamaForCausalLM (GQA, non-default rope_theta and
   rms_norm_eps; once untied, once with tie_word_embeddings) -> save_pretrained (safetensors)
   -> `fsdpp-ckpt import-hf` -> fsdpp's Llama, fully_shard'ed on 2 ranks, loads it with
   load_state_dict -> logits equal transformers' on fixed token ids. Also load_hf_llama straight
   into a plain Llama in one process.
2. fsdpp -> transformers: fsdpp-train trains 3 steps on 2 ranks and saves a SHARDED
   checkpoint-3 -> `fsdpp-ckpt export-hf` -> LlamaForCausalLM.from_pretrained -> logits equal
   fsdpp's of the same checkpoint; importing the export gives back the tensors bit for bit.

usage: hf_roundtrip.py FSDPP_RUN FSDPP_TRAIN FSDPP_CKPT HF_TOOL SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a random config needs no network
import torch
from safetensors.torch import load_file
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

transformers.utils.logging.disable_progress_bar()

run, train, ckpt, tool, src = sys.argv[1:6]
TOL = 1e-4
IDS = [3, 17, 42, 0, 9, 55, 23, 8, 31, 60, 12, 5]
worst = {}


def sh(*cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}")
    return r.stdout


def fsdpp_logits(ckpt_dir, out, nproc=2, ids=IDS):
    sh(run, "--nproc-per-node", str(nproc), "--timeout-s", "120", tool, "logits", ckpt_dir,
       ",".join(map(str, ids)), out)
    return load_file(out)["logits"]


def hf_logits(model, ids=IDS):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def compare(what, a, b):
    assert a.shape == b.shape, (what, a.shape, b.shape)
    d = (a - b).abs().max().item()
    worst[what] = d
    print(f"{what}: logits {tuple(a.shape)}, max |diff| {d:.3g}")
    assert d < TOL, f"{what}: max |diff| {d} >= {TOL}"


with tempfile.TemporaryDirectory() as d:
    # ---- 1. transformers -> fsdpp --------------------------------------------------------
    for tied in (False, True):
        tag = "tied" if tied else "untied"
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=32, rms_norm_eps=1e-6, rope_theta=5000.0,
                          tie_word_embeddings=tied)
        torch.manual_seed(11 + tied)
        hf = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():  # norms away from 1, so that a mapping mistake shows
            for name, p in hf.named_parameters():
                if "norm" in name:
                    p.mul_(torch.rand_like(p) + 0.5)
        hf.save_pretrained(f"{d}/hf-{tag}", safe_serialization=True)
        expect = hf_logits(hf)
        sh(ckpt, "import-hf", f"{d}/hf-{tag}", f"{d}/imported-{tag}")
        compare(f"transformers -> fsdpp ({tag}, 2 ranks, import-hf)", fsdpp_logits(f"{d}/imported-{tag}", f"{d}/l-{tag}.st"), expect)
        sh(tool, "logits-hf", f"{d}/hf-{tag}", ",".join(map(str, IDS)), f"{d}/lh-{tag}.st")
        compare(f"transformers -> fsdpp ({tag}, load_hf_llama)", load_file(f"{d}/lh-{tag}.st")["logits"], expect)

    # ---- 2. fsdpp -> transformers --------------------------------------------------------
    out = f"{d}/train"
    sh(run, "--nproc-per-node", "2", "--timeout-s", "120", train, f"{src}/configs/default.yaml",
       f"data.path={src}/docs", "data.seq_len=16", f"data.cache_dir={d}/cache",
       "model.dim=32", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
       "model.max_seq_len=32", "model.norm_eps=1e-6", "model.rope_theta=5000",
       "training.max_steps=3", "training.save_steps=3", "training.learning_rate=0.01",
       "training.logging_steps=1", "training.sample_tokens=0",
       "training.per_device_train_batch_size=2", f"training.output_dir={out}")
    ck = f"{out}/checkpoint-3"
    sh(ckpt, "export-hf", ck, f"{d}/exported")
    # The weights, and the byte tokenizer as transformers and fsdpp read it (train.hf_tokenizer).
    assert sorted(os.listdir(f"{d}/exported")) == [
        "config.json", "fsdpp_tokenizer.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json"], os.listdir(f"{d}/exported")
    back = LlamaForCausalLM.from_pretrained(f"{d}/exported").eval()
    assert back.config.num_key_value_heads == 2 and abs(back.config.rms_norm_eps - 1e-6) < 1e-12
    ids = [b % 256 for b in b"To be, or not"]
    compare("fsdpp -> transformers (trained SHARDED checkpoint, export-hf)",
            hf_logits(back, ids), fsdpp_logits(ck, f"{d}/l-train.st", ids=ids))
    # ... and back again: the same tensors as the checkpoint, bit for bit.
    sh(ckpt, "import-hf", f"{d}/exported", f"{d}/reimported")
    sh(ckpt, "consolidate", ck, f"{d}/consolidated.safetensors")
    a, b = load_file(f"{d}/reimported/model.safetensors"), load_file(f"{d}/consolidated.safetensors")
    assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
    bad = [k for k in a if not torch.equal(a[k], b[k])]
    assert not bad, f"differ after export-hf + import-hf: {bad}"
    print(f"export-hf then import-hf: {len(a)} tensors equal the checkpoint's bit for bit")

print(f"hf round trip ok; worst max |diff| {max(worst.values()):.3g} (tolerance {TOL})")
