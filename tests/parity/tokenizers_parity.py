"""fsdpp's tokenizer.json reader gives Hugging Face's `tokenizers` ids, exactly.

Tokenizers are made here, offline, with the library's own trainers, then given the published
configurations (tokenizer_factory.py: copied from the tokenizer.json files of gpt2,
Meta-Llama-3-8B / 3.1, Qwen2.5 and Llama-2 as the Hub serves them; only the vocabulary and
merges are ours):

  gpt2         ByteLevel pre-tokenizer with GPT-2's regex, ByteLevel decoder, <|endoftext|>
  llama3       Sequence[Split(Llama 3's regex, Isolated), ByteLevel(use_regex=false)],
               ignore_merges, 256 special tokens, TemplateProcessing with <|begin_of_text|>
  qwen2        NFC, Sequence[Split(Qwen2's regex), ByteLevel], its <|endoftext|>/<|im_start|>/
               <|im_end|> and Qwen2.5's other added tokens (special and not), plus one added
               token with "normalized": true written decomposed (matched after NFC)
  spm          a SentencePiece BPE (byte_fallback, Llama 2's trainer settings) trained by the
               sentencepiece package and converted by transformers from its tokenizer.model
               (LlamaTokenizer: Metaspace prepend_scheme "first", byte fallback, fuse_unk)
  spm_legacy   the same model in Llama 2's published layout: Prepend("▁") + Replace(" ", "▁")
               normalizers, no pre-tokenizer, "<s> $A" template, unk_token <unk>

and, on COMPONENTS_MB (0.5) MB each, three small tokenizers in no model's configuration that use
the supported components the five do not (tokenizer_factory.make_components): ByteLevel with
add_prefix_space and RobertaProcessing; NFKD/StripAccents/Lowercase/Strip, Split with every
behavior and invert, Digits, continuing_subword_prefix / end_of_word_suffix with BPEDecoder,
BertProcessing; NFKC, a regex Replace, Metaspace (always, split), normalized / single_word /
lstrip / rstrip added tokens.

Training text: Debian's fortunes (installed by scripts/setup.sh) and text generated here. Then
`MB` (default 10) MB of mixed text per tokenizer, generated deterministically: English prose,
source code (this repository's), runs of spaces/tabs/newlines, digits and long numbers,
contractions in any case, CJK, Korean (also as decomposed jamo), emoji with ZWJ sequences and
skin tones, combining marks, NBSP and other spaces, zero-width characters, Windows line endings,
lone CR, control characters, and the tokenizer's added and special tokens inside text. Records
are NUL-separated; fsdpp-tokenize --null encodes each.

Checked: the ids of every record (encode, add_special_tokens=False) equal tokenizers'; their
decode (skip_special_tokens=False) on the first DECODE_MB (3) MB of records equals tokenizers';
on the first SUBSET_MB (1) MB also encode with add_special_tokens=True and the decode of those
ids with skip_special_tokens=True (the post-processor only puts ids around a text: the whole
corpus would add the reference's time, not cases). spm_legacy, spm's model in another layout,
gets 3 MB.
fsdpp-tokenize --info against transformers' AutoTokenizer: len(tokenizer) and the BOS/EOS/PAD/UNK
ids; encode with special tokens against transformers on the first records (its
tokenizer_config.json rules). fsdpp-tokenize's line mode (\\r\\n, lone \\r), --whole, and its
refusal of invalid UTF-8. On a mismatch: the record, both id lists around the first difference.

usage: tokenizers_parity.py FSDPP_TOKENIZE SOURCE_DIR [MB]
"""
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
from tokenizers import Tokenizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_factory as factory  # noqa: E402

fsdpp_tokenize, src = sys.argv[1], sys.argv[2]
MB = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
SUBSET_MB = min(MB, 1.0)
DECODE_MB = min(MB, 3.0)
COMPONENTS_MB = min(MB, 0.5)
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


# ---- the comparison -------------------------------------------------------------------------

def run(args, stdin, check=True):
    r = subprocess.run([fsdpp_tokenize] + args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        fail(f"fsdpp-tokenize {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r


def parse_ids(out):
    lines = out.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [list(map(int, line.split())) for line in lines]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def report(name, what, docs, ref, got, tok):
    for k, (r, g) in enumerate(zip(ref, got)):
        if r != g:
            i = first_difference(r, g)
            lo = max(0, i - 8)
            fail(f"{name} {what}: record {k} differs at id {i}\n"
                 f"text ({len(docs[k])} chars): {docs[k][:3000]!r}\n"
                 f"tokenizers [{lo}:]: {r[lo:lo + 24]} {[tok.id_to_token(x) for x in r[lo:lo + 24]]}\n"
                 f"fsdpp      [{lo}:]: {g[lo:lo + 24]} {[tok.id_to_token(x) for x in g[lo:lo + 24]]}")
    if len(ref) != len(got):
        fail(f"{name} {what}: {len(ref)} records from tokenizers, {len(got)} from fsdpp-tokenize")


def check(name, directory, specials, seed, texts, megabytes=None, with_transformers=True):
    from transformers import AutoTokenizer
    tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    docs = factory.corpus(seed, specials, megabytes or MB, texts)
    if len(docs) > 1 and docs[-1] == "":
        docs[-1] = "x"  # a trailing NUL would end the last record instead of starting an empty one
    stdin = "\0".join(docs).encode()
    # The first SUBSET_MB MB: encode with special tokens and decode skipping them (the post-
    # processor only puts ids around the text, so the whole corpus adds little there and the
    # reference's time doubles).
    subset, n = 0, 0
    while subset < len(docs) and n < SUBSET_MB * 1e6:
        n += len(docs[subset].encode()) + 1
        subset += 1
    timings = {}

    t = time.time()
    ref = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
    timings["tokenizers encode_batch"] = time.time() - t
    t = time.time()
    got = parse_ids(run([directory, "--null"], stdin).stdout)
    timings["fsdpp-tokenize"] = time.time() - t
    report(name, "encode(add_special_tokens=False)", docs, ref, got, tok)
    plain = ref
    ref = [e.ids for e in tok.encode_batch(docs[:subset], add_special_tokens=True)]
    got = parse_ids(run([directory, "--null", "--add-special-tokens"], "\0".join(docs[:subset]).encode() + b"\0").stdout)
    report(name, "encode(add_special_tokens=True)", docs, ref, got, tok)
    with_special = ref

    # Decode: the first DECODE_MB MB (the decoders see every kind of token there; the whole
    # corpus would add the reference's time, not cases).
    decoded, n = 0, 0
    while decoded < len(docs) and n < DECODE_MB * 1e6:
        n += len(docs[decoded].encode()) + 1
        decoded += 1
    for skip, ids in ((False, plain[:decoded]), (True, with_special)):
        t = time.time()
        ref = tok.decode_batch(ids, skip_special_tokens=skip)
        timings.setdefault("tokenizers decode_batch", time.time() - t)
        lines = "\n".join(" ".join(map(str, x)) for x in ids).encode() + b"\n"
        t = time.time()
        out = run([directory, "--decode", "--null"] + (["--skip-special-tokens"] if skip else []), lines).stdout
        timings.setdefault("fsdpp-tokenize --decode", time.time() - t)
        got = out.decode("utf-8").split("\0")[:-1]
        for k, (r, g) in enumerate(zip(ref, got)):
            if r != g:
                i = first_difference(r, g)
                fail(f"{name} decode(skip_special_tokens={skip}): record {k} differs at char {i}\n"
                     f"ids: {ids[k][:200]}\ntokenizers: {r[max(0, i - 40):i + 40]!r}\n"
                     f"fsdpp     : {g[max(0, i - 40):i + 40]!r}")
        if len(ref) != len(got):
            fail(f"{name} decode(skip_special_tokens={skip}): {len(ref)} texts from tokenizers, {len(got)} from fsdpp")

    # What transformers makes of the directory: len(tokenizer), the special ids, and its
    # encode with special tokens (tokenizer_config.json's rules) on the first records.
    if not with_transformers:  # no tokenizer_config.json: nothing of transformers' to compare
        log(f"ok   {name}: {len(stdin) / 1e6:.1f} MB in {len(docs)} records, {sum(map(len, plain))} ids and "
            f"the decoded text equal tokenizers'")
        return tok
    hf = AutoTokenizer.from_pretrained(directory)
    info = json.loads(run([directory, "--info"], b"").stdout)
    want = {"vocab_size": len(hf), "bos": hf.bos_token_id, "eos": hf.eos_token_id, "pad": hf.pad_token_id,
            "unk": hf.unk_token_id}
    have = {k: info[k] for k in want}
    if have != want:
        fail(f"{name}: fsdpp-tokenize --info says {have}; transformers says {want}")
    sample = docs[:300]
    ref = [hf(d)["input_ids"] for d in sample]
    got = parse_ids(run([directory, "--null", "--add-special-tokens"], "\0".join(sample).encode() + b"\0").stdout)
    report(name, "transformers encode (add_special_tokens=True)", sample, ref, got, tok)
    log(f"ok   {name}: {len(stdin) / 1e6:.1f} MB in {len(docs)} records, {sum(map(len, plain))} ids equal "
        f"tokenizers'; their decode on the first {decoded} records; with special tokens and skipping "
        f"them in decode on the first {subset} records; "
        f"--info {want} as transformers'; " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    return tok


def check_cli(directory, tok):
    # Lines: "\n" and "\r\n" end a line, a lone "\r" is text, no line after a final "\n".
    text = "a b\r\nc\rd\n\n  e\n"
    got = parse_ids(run([directory], text.encode()).stdout)
    ref = [tok.encode(t, add_special_tokens=False).ids for t in ["a b", "c\rd", "", "  e"]]
    if got != ref:
        fail(f"line mode on {text!r}: {got}; expected {ref}")
    got = parse_ids(run([directory, "--whole"], text.encode()).stdout)
    if got != [tok.encode(text, add_special_tokens=False).ids]:
        fail(f"--whole on {text!r}: {got}")
    r = run([directory], b"ok\nbad \xc3\x28 text\n", check=False)
    err = r.stderr.decode(errors="replace")
    if r.returncode == 0 or "not UTF-8 at byte offset 7" not in err:
        fail(f"invalid UTF-8 was not refused with its offset: exit {r.returncode}, {err!r}")
    log("ok   fsdpp-tokenize: line mode (\\r\\n ends a line, lone \\r is text), --whole, invalid UTF-8 refused at its offset")


def main():
    texts = factory.Texts(src)
    with tempfile.TemporaryDirectory(prefix="fsdpp_tok_parity_") as work:
        try:
            made = factory.make_all(work, texts)
        except factory.FactoryError as e:
            fail(str(e))
        log("trained: " + ", ".join(n for n, _, _ in made))
        toks = {}
        for seed, (name, directory, specials) in enumerate(made):
            # spm_legacy is spm's model in another layout: less text.
            toks[name] = check(name, directory, specials, 1000 + seed, texts,
                               megabytes=min(MB, 3.0) if name == "spm_legacy" else None)
        check_cli(made[2][1], toks["qwen2"])
        # The components no published configuration above uses, on less text.
        for seed, (name, directory, specials) in enumerate(factory.make_components(work, texts)):
            check(name, directory, specials, 2000 + seed, texts, megabytes=COMPONENTS_MB, with_transformers=False)
    log("PASS")


main()
