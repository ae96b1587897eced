"""fsdpp-ckpt compress: a student from a teacher made here with transformers.

1. Qwen3-MoE teacher (a Hugging Face directory; 4 layers, layer 1 dense, top-4 of 8 experts),
   --keep-layers 0,1,3 --num-experts 3 on calibration text: the router load compress.json reports
   equals the count of transformers' own top-4 choices on the same tokens in the same rows, and
   the experts kept are the 3 most chosen (ties to the lower id); every tensor of the student is
   the teacher's bit for bit (kept experts' slices, the gate's rows of the same experts, layers
   renumbered); top-k became 3; the student loads with load_state_dict on 2 ranks and its logits
   equal transformers' on the student exported with export-hf and on the student built here
   from the teacher by hand (within 1e-5); the teacher's (byte) tokenizer comes with the student
   and with its export, where AutoTokenizer encodes text to its bytes.
2. The same teacher as an fsdpp checkpoint (import-hf), --num-layers 2: layers [0, 3], experts
   untouched, tensors bit for bit.
3. A Llama (layers only): --num-layers 2 keeps layers [0, 2] bit for bit; --num-experts refused.
4. Refusals: layers not increasing or out of range, experts dropped without calibration text.

usage: compress.py FSDPP_RUN FSDPP_CKPT QWEN3_MOE_TOOL
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from hf_check import IDS, IDS_ARG, TOL, compare, sh
import torch
from safetensors.torch import load_file
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

run, ckpt_tool, tool = sys.argv[1:4]
TOKENS, SEQ = 700, 128


def same(what, a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), what


with tempfile.TemporaryDirectory() as tmp:
    p = lambda *n: os.path.join(tmp, *n)
    rng = random.Random(0)
    words = "the king shall come to court and speak of war and peace with his good lords".split()
    text = " ".join(rng.choice(words) for _ in range(400)) + "\n"
    with open(p("cal.txt"), "w") as f:
        f.write(text)

    # 1. Qwen3-MoE from a Hugging Face directory
    torch.manual_seed(0)
    kw = dict(vocab_size=256, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
              num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
              num_experts=8, num_experts_per_tok=4, norm_topk_prob=True, mlp_only_layers=[1],
              router_aux_loss_coef=0.01, initializer_range=0.2)
    cfg = Qwen3MoeConfig(**kw)
    teacher = Qwen3MoeForCausalLM(cfg).eval()
    teacher.save_pretrained(p("hf"))
    out = sh(ckpt_tool, "compress", "--keep-layers", "0,1,3", "--num-experts", "3", "--calibration",
             p("cal.txt"), "--calibration-tokens", str(TOKENS), "--calibration-seq-len", str(SEQ),
             p("hf"), p("st"))
    print(out.strip())
    report = json.load(open(p("st", "compress.json")))
    assert report["kept_layers"] == [0, 1, 3], report
    assert report["calibration"]["tokens"] == TOKENS
    assert report["calibration"]["rows"] == [SEQ] * (TOKENS // SEQ) + [TOKENS % SEQ]
    assert report["num_experts_per_tok"] == {"teacher": 4, "student": 3}

    # The independent count: transformers' router logits on the same bytes, the same rows.
    ids = torch.tensor(list(text.encode())[:TOKENS])
    counts = {l: torch.zeros(8, dtype=torch.long) for l in (0, 2, 3)}
    with torch.no_grad():
        for s in range(0, TOKENS, SEQ):
            o = teacher(ids[s:s + SEQ][None], output_router_logits=True)
            for l, rl in zip((0, 2, 3), o.router_logits):
                top = torch.topk(torch.softmax(rl.float(), dim=-1), 4, dim=-1).indices
                counts[l] += torch.bincount(top.flatten(), minlength=8)
    kept = {}
    assert [e["teacher_layer"] for e in report["experts"]] == [0, 3], report["experts"]
    for e in report["experts"]:
        l = e["teacher_layer"]
        assert e["counts"] == counts[l].tolist(), (l, e["counts"], counts[l].tolist())
        assert sum(e["counts"]) == TOKENS * 4
        order = sorted(range(8), key=lambda x: (-counts[l][x].item(), x))
        assert e["kept"] == sorted(order[:3]), (l, e["kept"], order)
        assert e["dropped"] == sorted(order[3:])
        kept[l] = e["kept"]
        print(f"layer {l}: counts {e['counts']} equal transformers' top-4; kept {e['kept']}")

    # Bit for bit: every student tensor is the teacher's.
    t = {k.removeprefix("model."): v for k, v in load_file(p("hf", "model.safetensors")).items()}
    s = load_file(p("st", "model.safetensors"))
    want = {}
    for j, l in enumerate([0, 1, 3]):
        for k, v in t.items():
            pre = f"layers.{l}."
            if not k.startswith(pre) or ".mlp.experts." in k or ".mlp.gate." in k:
                continue
            want[f"layers.{j}." + k[len(pre):]] = v
        if l in kept:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                want[f"layers.{j}.mlp.experts.{proj}"] = torch.stack(
                    [t[f"layers.{l}.mlp.experts.{e}.{proj}.weight"] for e in kept[l]])
            want[f"layers.{j}.mlp.gate.weight"] = t[f"layers.{l}.mlp.gate.weight"][kept[l]]
    for k in ("embed_tokens.weight", "norm.weight", "lm_head.weight"):
        want[k] = t[k]
    assert sorted(s) == sorted(want), sorted(set(s) ^ set(want))
    for k in want:
        same(k, s[k], want[k])
    print(f"student: {len(s)} tensors, each the teacher's bit for bit")
    info = sh(ckpt_tool, "inspect", p("st"))
    assert "experts: 3 per sparse layer" in info and "top 3" in info and "[0, 2]" in info, info

    # It loads: fsdpp on 2 ranks, transformers on its export, and a student built here.
    sh(run, "--nproc-per-node", "2", "--timeout-s", "120", tool, "ckpt", p("st"), IDS_ARG,
       p("st_fwd.safetensors"))
    got = load_file(p("st_fwd.safetensors"))
    sh(ckpt_tool, "export-hf", p("st"), p("st_hf"))
    scfg = Qwen3MoeConfig(**{**kw, "num_hidden_layers": 3, "num_experts": 3,
                             "num_experts_per_tok": 3, "mlp_only_layers": [1]})
    by_hand = Qwen3MoeForCausalLM(scfg).eval()
    sd = {}
    for k, v in t.items():
        if k.startswith("layers."):
            l = int(k.split(".")[1])
            if l not in (0, 1, 3):
                continue
            rest = k.split(".", 2)[2]
            j = [0, 1, 3].index(l)
            if ".experts." in rest:
                e = int(rest.split(".")[2])
                if e not in kept[l]:
                    continue
                rest = rest.replace(f"experts.{e}.", f"experts.{kept[l].index(e)}.")
            if rest == "mlp.gate.weight":
                v = v[kept[l]]
            sd[f"model.layers.{j}.{rest}"] = v
        else:
            sd[k if k == "lm_head.weight" else "model." + k] = v
    tmp_dir = p("by_hand")
    from safetensors.torch import save_file
    os.makedirs(tmp_dir)
    scfg.save_pretrained(tmp_dir)
    save_file(sd, os.path.join(tmp_dir, "model.safetensors"), metadata={"format": "pt"})
    with torch.no_grad():
        x = torch.tensor(IDS)
        ref = Qwen3MoeForCausalLM.from_pretrained(tmp_dir).eval()(x, labels=x, output_router_logits=True)
        exported = Qwen3MoeForCausalLM.from_pretrained(p("st_hf")).eval()(x).logits
    compare("student in fsdpp (2 ranks) vs built by hand in transformers: logits", got["logits"], ref.logits)
    compare("student: aux_loss", got["aux_loss"], ref.aux_loss)
    compare("student exported vs built by hand: logits", exported, ref.logits)
    # The teacher's tokenizer (bytes: vocabulary 256, no tokenizer files) travels with the student
    # and on into its export, where transformers reads it.
    assert json.load(open(p("st", "fsdpp_tokenizer.json")))["type"] == "byte"
    tok = transformers.AutoTokenizer.from_pretrained(p("st_hf"))
    assert tok("to be, or not")["input_ids"] == list(b"to be, or not"), tok("to be, or not")

    # 2. the teacher as an fsdpp checkpoint, layers evenly
    sh(ckpt_tool, "import-hf", p("hf"), p("ck"))
    out = sh(ckpt_tool, "compress", "--num-layers", "2", p("ck"), p("st2"))
    assert "kept 2 of 4: [0, 3]" in out, out
    t2, s2 = load_file(p("ck", "model.safetensors")), load_file(p("st2", "model.safetensors"))
    for k, v in s2.items():
        src = k
        if k.startswith("layers."):
            j = int(k.split(".")[1])
            src = f"layers.{[0, 3][j]}." + k.split(".", 2)[2]
        same(k, v, t2[src])
    assert len(s2) == 3 + 2 * 12, len(s2)  # embedding, norm, head; 12 per sparse layer
    print(f"--num-layers 2 of an fsdpp checkpoint: layers [0, 3], {len(s2)} tensors bit for bit")

    # 3. a Llama, layers only
    torch.manual_seed(1)
    lcfg = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2)
    LlamaForCausalLM(lcfg).save_pretrained(p("llama_hf"))
    sh(ckpt_tool, "import-hf", p("llama_hf"), p("llama"))
    out = sh(ckpt_tool, "compress", "--num-layers", "2", p("llama"), p("llama_st"))
    assert "llama" in out and "[0, 2]" in out, out
    t3, s3 = load_file(p("llama", "model.safetensors")), load_file(p("llama_st", "model.safetensors"))
    for k, v in s3.items():
        src = k
        if k.startswith("layers."):
            src = f"layers.{[0, 2][int(k.split('.')[1])]}." + k.split(".", 2)[2]
        same(k, v, t3[src])
    assert json.load(open(p("llama_st", "model_config.json")))["n_layers"] == 2
    print(f"Llama --num-layers 2: layers [0, 2], {len(s3)} tensors bit for bit")
    err = sh(ckpt_tool, "compress", "--num-experts", "2", p("llama"), p("x"), ok=False)
    assert "the teacher is a Llama" in err, err

    # 4. refusals, each naming the option
    for args, msg in ((["--keep-layers", "2,1"], "must be increasing"),
                      (["--keep-layers", "0,4"], "the teacher has layers 0..3"),
                      (["--num-layers", "5"], "--num-layers 5"),
                      (["--num-experts", "2"], "give --calibration FILE"),
                      (["--num-experts", "9"], "more than the teacher's 8")):
        err = sh(ckpt_tool, "compress", *args, p("hf"), p("x"), ok=False)
        assert msg in err, (args, err)
        assert not os.path.exists(p("x"))
    print("refusals named")

print("OK")
