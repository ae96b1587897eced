"""fsdpp-ckpt import-hf / export-hf / inspect on a Qwen3MoeForCausalLM made here with transformers.

1. import-hf of the save_pretrained directory, and of the same model saved in shards with
   model.safetensors.index.json: the same tensors bit for bit; inspect names the architecture.
2. The imported checkpoint, loaded by load_state_dict into a Qwen3Moe sharded on 2 ranks
   (qwen3_moe_tool ckpt): logits, load-balancing loss and loss equal transformers' within 1e-5.
3. export-hf: the tensors are the published per-expert ones, bit for bit, and from_pretrained
   gives the same logits; import-hf of the export gives the first checkpoint's file byte for byte.
4. export-hf --max-shard-size 20KB: numbered shards with an index that from_pretrained loads
   (same logits), and import-hf reads back byte for byte.

usage: qwen3_moe_ckpt_tool.py FSDPP_RUN FSDPP_CKPT TOOL
"""
import filecmp
import json
import os
import re
import subprocess
import sys
import tempfile

from hf_check import IDS, IDS_ARG, TOL, compare, sh, tensors_of
import torch
from safetensors.torch import load_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

run, ckpt_tool, tool = sys.argv[1:4]


def same_tensors(what, a, b):
    assert sorted(a) == sorted(b), (what, sorted(set(a) ^ set(b)))
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), (what, k)
    print(f"{what}: {len(a)} tensors bit for bit")


with tempfile.TemporaryDirectory() as tmp:
    p = lambda *n: os.path.join(tmp, *n)
    torch.manual_seed(0)
    # 3 layers, layer 1 dense; head_dim 16 != 48 / 4; renormalised top-2 of 8 experts.
    cfg = Qwen3MoeConfig(vocab_size=96, hidden_size=48, intermediate_size=64,
                         moe_intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2,
                         norm_topk_prob=True, mlp_only_layers=[1], rope_theta=500000.0,
                         rms_norm_eps=1e-5, router_aux_loss_coef=0.02, initializer_range=0.1)
    model = Qwen3MoeForCausalLM(cfg).eval()
    model.save_pretrained(p("hf"))
    model.save_pretrained(p("hf_sharded"), max_shard_size="20KB")
    assert os.path.exists(p("hf_sharded", "model.safetensors.index.json"))
    with torch.no_grad():
        ids = torch.tensor(IDS)
        ref = model(ids, labels=ids, output_router_logits=True)

    # 1. import, from one file and from indexed shards
    print(sh(ckpt_tool, "import-hf", p("hf"), p("ck")).strip())
    sh(ckpt_tool, "import-hf", p("hf_sharded"), p("ck_sharded"))
    same_tensors("import of one file vs of shards", load_file(p("ck", "model.safetensors")),
                 load_file(p("ck_sharded", "model.safetensors")))
    mc = json.load(open(p("ck", "model_config.json")))
    assert mc["model_type"] == "qwen3_moe" and mc["num_experts"] == 8, mc
    info = sh(ckpt_tool, "inspect", p("ck"))
    for want in ("model: qwen3_moe", "experts: 8 per sparse layer", "top 2 renormalised",
                 "2 sparse layer(s) [0, 2], dense MLPs of 64", "checksums: "):
        assert want in info, (want, info)
    print("\n".join(l for l in info.splitlines() if "model:" in l or "experts:" in l or "active" in l))
    elements = int(re.search(r"parameter tensors, (\d+) elements", info).group(1))
    total, active = map(int, re.search(r"(\d+) parameters, (\d+) active per token", info).groups())
    # Active: all but the experts outside the top-k of the two sparse layers.
    assert total == elements and active == elements - 2 * (8 - 2) * 3 * 24 * 48, (total, active)

    # 2. the imported checkpoint in fsdpp on 2 ranks against transformers
    out = p("ck_fwd.safetensors")
    sh(run, "--nproc-per-node", "2", "--timeout-s", "120", tool, "ckpt", p("ck"), IDS_ARG, out)
    got = load_file(out)
    compare("imported checkpoint on 2 ranks: logits", got["logits"], ref.logits)
    compare("imported checkpoint on 2 ranks: aux_loss", got["aux_loss"], ref.aux_loss)
    compare("imported checkpoint on 2 ranks: loss", got["loss"], ref.loss)

    # 3. export, then import again
    print(sh(ckpt_tool, "export-hf", p("ck"), p("ex")).strip())
    same_tensors("export vs save_pretrained", tensors_of(p("ex")), tensors_of(p("hf")))
    assert any(k.endswith("mlp.experts.7.down_proj.weight") for k in tensors_of(p("ex")))
    with torch.no_grad():
        back = Qwen3MoeForCausalLM.from_pretrained(p("ex")).eval()
        compare("export in transformers: logits", back(ids).logits, ref.logits)
    sh(ckpt_tool, "import-hf", p("ex"), p("ck2"))
    assert filecmp.cmp(p("ck", "model.safetensors"), p("ck2", "model.safetensors"), shallow=False)
    print("import-hf of the export: model.safetensors byte for byte")

    # 4. export in shards of at most 20 KB
    print(sh(ckpt_tool, "export-hf", "--max-shard-size", "20KB", p("ck"), p("exs")).strip())
    index = json.load(open(p("exs", "model.safetensors.index.json")))
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and "model.safetensors" not in os.listdir(p("exs")), files
    for f in files:
        assert os.path.getsize(p("exs", f)) < 20000 + 4096 or len(load_file(p("exs", f))) == 1, f
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size()
                                                  for t in tensors_of(p("exs")).values())
    same_tensors("sharded export vs save_pretrained", tensors_of(p("exs")), tensors_of(p("hf")))
    with torch.no_grad():
        back = Qwen3MoeForCausalLM.from_pretrained(p("exs")).eval()
        compare(f"sharded export ({len(files)} files) in transformers: logits", back(ids).logits,
                ref.logits)
    sh(ckpt_tool, "import-hf", p("exs"), p("ck3"))
    assert filecmp.cmp(p("ck", "model.safetensors"), p("ck3", "model.safetensors"), shallow=False)
    print("import-hf of the sharded export: model.safetensors byte for byte")

print("OK")
