"""The tokenizer travels through `fsdpp-ckpt export-hf`: transformers' AutoTokenizer on the
exported directory encodes text to the ids fsdpp trained on, and AutoTokenizer +
AutoModelForCausalLM + greedy generate() give the ids `fsdpp-generate --temperature 0 --ids`
gives (and its text, where no control piece such as <unk> is among them).

1. byte tokenizer: ids == the UTF-8 bytes for ASCII and non-ASCII text (and control bytes),
   decode round-trips, greedy text equal to fsdpp-generate's.
2. SentencePiece (data.tokenizer=sentencepiece, vocabulary 300, trained on a text with
   non-ASCII characters, digits, tabs, runs of spaces): the HF ids of the whole training text
   equal the token file fsdpp-train wrote (its last tokens: the cache is a header then uint16
   ids), decode round-trips, greedy text equal to fsdpp-generate's.
3. fsdpp-generate works on the exported directory (fsdpp's own tokenizer files are there), and
   `import-hf` of the export keeps them: its checkpoint generates the same text.

usage: hf_tokenizer.py FSDPP_RUN FSDPP_TRAIN FSDPP_CKPT FSDPP_GENERATE SOURCE_DIR
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

transformers.utils.logging.disable_progress_bar()
run, train, ckpt, generate, src = sys.argv[1:6]
N = 20


def sh(*cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout.decode(errors='replace')}"
                 f"{r.stderr.decode(errors='replace')}")
    return r.stdout


def job(d, name, data, steps, *extra):
    out = os.path.join(d, name)
    sh(run, "--nproc-per-node", "2", "--timeout-s", "120", train,
       os.path.join(src, "configs/default.yaml"), f"data.path={data}", "data.seq_len=32",
       "data.val_fraction=0.1", "model.dim=32", "model.n_layers=2", "model.n_heads=4",
       "model.n_kv_heads=2", "model.max_seq_len=64", "training.eval_steps=0",
       "training.sample_tokens=0", "training.per_device_train_batch_size=4",
       f"data.cache_dir={d}/cache-{name}", f"training.max_steps={steps}",
       f"training.output_dir={out}", *extra)
    return out, os.path.join(out, f"checkpoint-{steps}")


def check_generate(ck, hf, prompt):
    def ids_of(path):
        out = sh(generate, path, "--prompt", prompt, "--max-new-tokens", str(N), "--temperature", "0",
                 "--ids")
        return [int(x) for x in out.split()]
    fsdpp_ids = ids_of(ck)
    assert ids_of(hf) == fsdpp_ids, "fsdpp-generate on the export differs"
    fsdpp_text = sh(generate, ck, "--prompt", prompt, "--max-new-tokens", str(N), "--temperature",
                    "0", "--raw")[:-1]
    tok = AutoTokenizer.from_pretrained(hf)
    model = AutoModelForCausalLM.from_pretrained(hf).eval()
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=N, do_sample=False, pad_token_id=0)
    # The ids, greedy: transformers stops at EOS as fsdpp-generate does.
    assert ref[0].tolist() == fsdpp_ids, (ref[0].tolist(), fsdpp_ids)
    hf_text = tok.decode(ref[0], skip_special_tokens=True)
    # The text where no control piece was generated (SentencePiece decodes <unk> as " \u2047 ",
    # transformers' skip_special_tokens drops it; fsdpp-generate's text ends before an EOS).
    if not set(fsdpp_ids[ids.shape[1]:]) & set(tok.all_special_ids):
        assert hf_text == fsdpp_text.decode("utf-8", "replace"), (hf_text, fsdpp_text)
    print(f"  greedy {N} tokens: transformers (AutoTokenizer + generate) == fsdpp-generate, ids "
          f"{'and text' if hf_text == fsdpp_text.decode('utf-8', 'replace') else '(a control piece among them)'}: "
          f"{hf_text!r}")
    return tok, ref[0].tolist(), fsdpp_text


SAMPLES = ["Hello, world!\n", "  two  spaces\tand a tab 12345\n", "héllo wörld — ünïcode ✓ 日本語 🙂\n",
           "ctrl \x01\x7f end"]

with tempfile.TemporaryDirectory() as d:
    # 1. bytes
    _, ck = job(d, "byte", f"{src}/configs", 2)
    hf = os.path.join(d, "hf-byte")
    sh(ckpt, "export-hf", ck, hf)
    for f in ("tokenizer.json", "tokenizer_config.json", "fsdpp_tokenizer.json", "config.json"):
        assert os.path.exists(os.path.join(hf, f)), f"export-hf wrote no {f}: {os.listdir(hf)}"
    print("byte tokenizer:")
    tok, ids, raw = check_generate(ck, hf, "Q: ")
    assert bytes(ids) == raw, (ids, raw)  # id == byte, generated ones too
    for s in SAMPLES:
        got = tok(s).input_ids
        assert got == list(s.encode()), (s, got)
        assert tok.decode(got) == s, (s, tok.decode(got))
    print(f"  ids == UTF-8 bytes and decode round-trips for {len(SAMPLES)} texts (ASCII, non-ASCII, "
          "control bytes)")

    # 2. SentencePiece, on a text with what SentencePiece treats specially
    text_path = os.path.join(d, "corpus.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        for p in sorted(glob.glob(f"{src}/docs/*.md"))[:6]:
            f.write(open(p, encoding="utf-8").read())
        f.write("".join(SAMPLES[:3]) * 20)
    out, ck = job(d, "spm", text_path, 2, "data.tokenizer=sentencepiece",
                  "data.tokenizer_vocab_size=300")
    hf = os.path.join(d, "hf-spm")
    sh(ckpt, "export-hf", ck, hf)
    for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "fsdpp_tokenizer.json"):
        assert os.path.exists(os.path.join(hf, f)), f"export-hf wrote no {f}: {os.listdir(hf)}"
    print("SentencePiece tokenizer (300 pieces):")
    tok, ids, raw = check_generate(ck, hf, "The ")
    # The control pieces are transformers' special tokens, named in tokenizer_config.json.
    assert (tok.unk_token, tok.bos_token, tok.eos_token) == ("<unk>", "<s>", "</s>"), tok
    assert tok.convert_tokens_to_ids(["<unk>", "<s>", "</s>"]) == [0, 1, 2]
    assert tok.decode([5, 2, 1, 6], skip_special_tokens=True) == tok.decode([5, 6])
    text = open(text_path, encoding="utf-8").read()
    # fsdpp-train encodes a text file as text: a "<s>" written in it (docs/chat-templates.md has
    # some) is three pieces, not the control piece, as SentencePiece itself encodes it; transformers
    # matches special tokens in text unless told not to.
    hf_ids = tok(text, split_special_tokens=True).input_ids
    caches = glob.glob(os.path.join(d, "cache-spm", "*.tokens"))
    assert len(caches) == 1, caches
    cached = np.fromfile(caches[0], dtype=np.uint8)
    fsdpp_ids = cached[len(cached) - 2 * len(hf_ids):].view(np.uint16).tolist()
    if fsdpp_ids != hf_ids:
        at = next(i for i, (a, b) in enumerate(zip(fsdpp_ids, hf_ids)) if a != b)
        sys.exit(f"ids differ at token {at}: fsdpp {fsdpp_ids[at:at + 8]} HF {hf_ids[at:at + 8]} "
                 f"({tok.convert_ids_to_tokens(hf_ids[at:at + 8])})")
    # Characters SentencePiece left out of the 300 pieces (here the tab) are <unk> on both sides
    # and decode as SentencePiece's " ⁇ "; text without them round-trips.
    assert tok.decode(tok("a\tb").input_ids) == "a \u2047 b", tok.decode(tok("a\tb").input_ids)
    assert tok.decode(hf_ids) == text.replace("\t", " \u2047 ")
    for s in SAMPLES[:3]:
        assert tok.decode(tok(s).input_ids) == s.replace("\t", " \u2047 "), s
    print(f"  the {len(hf_ids)} ids of the whole training text ({len(text)} characters) == fsdpp's "
          "token file; decode round-trips (unknown characters: SentencePiece's \u2047)")

    # 3. import-hf keeps fsdpp's tokenizer files: the imported checkpoint generates the same text.
    imported = os.path.join(d, "imported-spm")
    sh(ckpt, "import-hf", hf, imported)
    assert open(os.path.join(imported, "tokenizer.model"), "rb").read() == \
        open(os.path.join(ck, "tokenizer.model"), "rb").read()
    again = sh(generate, imported, "--prompt", "The ", "--max-new-tokens", str(N), "--temperature",
               "0", "--raw")[:-1]
    assert again == raw, (again, raw)
    print("  import-hf of the export keeps the tokenizer: fsdpp-generate gives the same text")
print("hf_tokenizer: OK")
