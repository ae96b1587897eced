"""Hugging Face transformers' Qwen3MoeForCausalLM <-> fsdpp's Qwen3Moe.

For two tiny random models made here (GQA, head_dim apart from hidden/heads, a dense layer from
mlp_only_layers or decoder_sparse_step, norm_topk_prob on and off, tied and untied head):
1. save_pretrained (one file, and sharded with an index) -> fsdpp's load_hf_qwen3_moe: logits,
   every sparse layer's router logits, the load-balancing loss and the loss (with
   output_router_logits) equal transformers' within 1e-5, and so does every parameter's
   gradient after the loss's backward (relative to the largest entry of that gradient).
2. fsdpp's save_hf_qwen3_moe -> transformers' from_pretrained: equal logits; the tensors are
   the original ones bit for bit, and load -> save -> load -> save gives the same file.
3. the same model made FSDP units by transformer_layer_policy({"Qwen3MoeDecoderLayer"}) on 2
   ranks and on 1: logits, loss, aux loss and the global gradient norm equal each other and
   transformers' (whose gradient norm comes from its own backward).

usage: qwen3_moe_hf.py FSDPP_RUN TOOL
"""
import filecmp
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a random config needs no network
import torch
from safetensors.torch import load_file
import transformers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

run, tool = sys.argv[1:3]
TOL = 1e-5
IDS = [[3, 17, 42, 0, 9, 55, 23, 8, 31, 60, 12, 5], [7, 7, 1, 44, 2, 90, 13, 61, 29, 4, 38, 50]]
IDS_ARG = ";".join(",".join(map(str, r)) for r in IDS)
worst = {}

CONFIGS = {
    # 3 layers, layer 1 dense by mlp_only_layers; head_dim 16 != 48 / 4; renormalised top-2 of 8.
    "a": dict(vocab_size=96, hidden_size=48, intermediate_size=64, moe_intermediate_size=24,
              num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
              mlp_only_layers=[1], rope_theta=500000.0, rms_norm_eps=1e-5,
              router_aux_loss_coef=0.02, initializer_range=0.1),
    # 4 layers, every other one sparse (decoder_sparse_step 2); one kv head; tied head; top-2 of 4
    # not renormalised.
    "b": dict(vocab_size=96, hidden_size=32, intermediate_size=40, moe_intermediate_size=16,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=8,
              num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=2,
              mlp_only_layers=[], tie_word_embeddings=True, router_aux_loss_coef=0.001,
              initializer_range=0.1),
}


def sh(*cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}")
    return r.stdout


def compare(what, a, b, tol=TOL):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    assert a.shape == b.shape, (what, a.shape, b.shape)
    d = (a - b).abs().max().item()
    worst[what] = d
    print(f"{what}: {tuple(a.shape)}, max |diff| {d:.3g}")
    assert d < tol, f"{what}: max |diff| {d} >= {tol}"


def hf_forward(model):
    ids = torch.tensor(IDS)
    out = model(ids, labels=ids, output_router_logits=True)
    return out


def fsdpp_grads(model, cfg):
    """transformers' gradients under fsdpp's names (experts gate_up_proj split in two)."""
    out = {}
    inter = cfg.moe_intermediate_size
    for n, p in model.named_parameters():
        if p.grad is None:
            continue
        n = n.removeprefix("model.")
        if n.endswith("mlp.experts.gate_up_proj"):
            base = n.removesuffix("gate_up_proj")
            out[base + "gate_proj"] = p.grad[:, :inter]
            out[base + "up_proj"] = p.grad[:, inter:]
        else:
            out[n] = p.grad
    return out


def tensors_of(d):
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    t = {}
    for f in files:
        t.update(load_file(os.path.join(d, f)))
    return t


with tempfile.TemporaryDirectory() as tmp:
    for name, kw in CONFIGS.items():
        torch.manual_seed(0)
        cfg = Qwen3MoeConfig(**kw)
        model = Qwen3MoeForCausalLM(cfg).eval()
        hf = os.path.join(tmp, name)
        model.save_pretrained(hf)
        sharded = os.path.join(tmp, name + "_sharded")
        model.save_pretrained(sharded, max_shard_size="20KB")
        assert os.path.exists(os.path.join(sharded, "model.safetensors.index.json"))
        ref = hf_forward(model)
        ref.loss.backward()
        ref_norm = torch.linalg.vector_norm(
            torch.stack([p.grad.double().norm() for p in model.parameters() if p.grad is not None]))
        n_sparse = sum(1 for i in range(cfg.num_hidden_layers)
                       if i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0)
        assert len(ref.router_logits) == n_sparse, (len(ref.router_logits), n_sparse)

        # 1. transformers -> fsdpp
        for src in (hf, sharded):
            out = os.path.join(tmp, name + "_fwd.safetensors")
            sh(tool, "forward", src, IDS_ARG, out)
            got = load_file(out)
            tag = f"{name}{' sharded files' if src == sharded else ''}"
            compare(f"{tag} logits", got["logits"], ref.logits.detach())
            compare(f"{tag} aux_loss", got["aux_loss"], ref.aux_loss.detach())
            compare(f"{tag} loss", got["loss"], ref.loss.detach())
            for k, rl in enumerate(ref.router_logits):
                compare(f"{tag} router_logits.{k}", got[f"router_logits.{k}"], rl.detach())
            if src == hf:
                grad_gap = 0.0
                for n, g in fsdpp_grads(model, cfg).items():
                    mine = got["grad." + n]
                    assert mine.shape == g.shape, (n, mine.shape, g.shape)
                    grad_gap = max(grad_gap, ((mine - g).abs().max() / g.abs().max().clamp_min(1e-3)).item())
                compare(f"{tag} every parameter's gradient (relative to its largest)", grad_gap, 0.0)

        # 2. fsdpp -> transformers, and load -> save -> load bit for bit
        rt, rt2 = os.path.join(tmp, name + "_rt"), os.path.join(tmp, name + "_rt2")
        sh(tool, "save", hf, rt)
        sh(tool, "save", rt, rt2)
        back = Qwen3MoeForCausalLM.from_pretrained(rt).eval()
        with torch.no_grad():
            compare(f"{name} export logits", back(torch.tensor(IDS)).logits, ref.logits.detach())
        orig, exported = tensors_of(hf), tensors_of(rt)
        if cfg.tie_word_embeddings:
            orig.pop("lm_head.weight", None)
        assert sorted(orig) == sorted(exported), sorted(set(orig) ^ set(exported))
        for k in orig:
            assert torch.equal(orig[k], exported[k]) and orig[k].dtype == exported[k].dtype, k
        assert filecmp.cmp(os.path.join(rt, "model.safetensors"),
                           os.path.join(rt2, "model.safetensors"), shallow=False)
        print(f"{name} export: {len(exported)} tensors bit for bit; save -> load -> save "
              "gives the same file")

        # 3. FSDP on 2 ranks and 1 against transformers
        res = {}
        for n in (1, 2):
            out = os.path.join(tmp, f"{name}_np{n}.safetensors")
            print(sh(run, "--nproc-per-node", str(n), "--timeout-s", "120", tool, "sharded", hf,
                     IDS_ARG, out).strip().splitlines()[-1])
            res[n] = load_file(out)
        for n in (1, 2):
            compare(f"{name} fully_shard np{n} logits", res[n]["logits"], ref.logits.detach())
            compare(f"{name} fully_shard np{n} loss", res[n]["loss"], ref.loss.detach())
            compare(f"{name} fully_shard np{n} aux_loss", res[n]["aux_loss"], ref.aux_loss.detach())
            compare(f"{name} fully_shard np{n} grad norm (relative)",
                    res[n]["grad_norm"] / ref_norm, 1.0)
        compare(f"{name} fully_shard np2 vs np1 logits", res[2]["logits"], res[1]["logits"])

print("worst:", ", ".join(f"{k} {v:.2g}" for k, v in worst.items()))
print("OK")
