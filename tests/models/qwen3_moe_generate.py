"""fsdpp-generate on a Qwen3-MoE against transformers' own generate().

A Qwen3MoeForCausalLM made here with transformers (bytes as the vocabulary: 256 ids, so
fsdpp-generate takes the byte tokenizer), saved with save_pretrained. Greedy continuations of a
prompt, byte for byte, from:
  - transformers' generate() (do_sample=False, with its KV cache): the reference;
  - fsdpp-generate on the Hugging Face directory itself, on 1 rank;
  - fsdpp-generate on `fsdpp-ckpt import-hf` of it (an fsdpp checkpoint), on 1 and on 2 ranks
    (the model sharded: FULL_SHARD, one unit per decoder layer);
  - fsdpp-generate on `fsdpp-ckpt export-hf` of that checkpoint.
Before fsdpp-generate read Qwen3-MoE, each of these was refused with a message about a Llama
config ("config field 'intermediate_size'..." / model_config.json's format).

usage: qwen3_moe_generate.py FSDPP_RUN FSDPP_CKPT FSDPP_GENERATE
"""
import os
import subprocess
import sys
import tempfile

from hf_check import sh
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

run, ckpt_tool, generate = sys.argv[1:4]
PROMPT = "Q: why?"
N = 24


def fsdpp_generate(path, ranks=1):
    cmd = [generate, path, "--prompt", PROMPT, "--max-new-tokens", str(N), "--temperature", "0",
           "--raw"]
    if ranks > 1:
        cmd = [run, "--nproc-per-node", str(ranks), "--no-prefix", "--timeout-s", "120"] + cmd
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n"
                 f"{r.stdout.decode(errors='replace')}{r.stderr.decode(errors='replace')}")
    return r.stdout.rstrip(b"\n")


with tempfile.TemporaryDirectory() as tmp:
    p = lambda *n: os.path.join(tmp, *n)
    torch.manual_seed(0)
    # 3 layers, layer 1 dense; head_dim 16 != 48 / 4; renormalised top-2 of 8 experts.
    cfg = Qwen3MoeConfig(vocab_size=256, hidden_size=48, intermediate_size=64,
                         moe_intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
                         norm_topk_prob=True, mlp_only_layers=[1], rope_theta=500000.0,
                         rms_norm_eps=1e-5, initializer_range=0.3, max_position_embeddings=64)
    model = Qwen3MoeForCausalLM(cfg).eval()
    model.save_pretrained(p("hf"))
    ids = torch.tensor([list(PROMPT.encode())])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=N, do_sample=False, pad_token_id=0,
                             eos_token_id=None)
    want = bytes(out[0].tolist())
    assert len(want) == len(PROMPT) + N, want
    print(f"transformers: {want!r}")

    sh(ckpt_tool, "import-hf", p("hf"), p("ck"))
    sh(ckpt_tool, "export-hf", p("ck"), p("exported"))
    cases = [("the Hugging Face directory", p("hf"), 1),
             ("its fsdpp checkpoint (import-hf), 1 rank", p("ck"), 1),
             ("its fsdpp checkpoint, 2 ranks", p("ck"), 2),
             ("export-hf of the checkpoint", p("exported"), 1)]
    for what, path, ranks in cases:
        got = fsdpp_generate(path, ranks)
        assert got == want, f"{what}: fsdpp-generate {got!r} != transformers {want!r}"
        print(f"fsdpp-generate on {what}: the same {len(got)} bytes")
