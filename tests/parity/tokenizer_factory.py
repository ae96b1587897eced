"""Tokenizers in the published configurations of GPT-2, Llama 3, Qwen2 and Llama 2 (SentencePiece),
trained here offline, and deterministic mixed text to run them on: what tests/parity/
tokenizers_parity.py compares fsdpp with and bench/tokenizer_bench.py times.

The configurations are copied from the tokenizer.json / tokenizer_config.json files of gpt2,
Meta-Llama-3-8B / 3.1, Qwen2.5 and Llama-2 as the Hub serves them; only the vocabulary and the
merges are ours (a few thousand tokens, trained on Debian's fortunes and generated text), and
tokenizer_class is PreTrainedTokenizerFast (transformers' per-model classes rebuild the pipeline
from the vocabulary instead of reading tokenizer.json). Where a tokenizer has an added token the
published file does not, its comment says so: it exercises one of the matching rules.

  texts = Texts(source_dir)
  make_all(work_dir, texts) -> [(name, directory, added_token_texts)]
  corpus(seed, added_token_texts, megabytes, texts) -> [str]  (records)
"""
import glob
import json
import os
import random

from tokenizers import Tokenizer, models, pre_tokenizers, trainers, Regex

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
               r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
M = "\u2581"  # ▁


class FactoryError(RuntimeError):
    pass


def fail(msg):
    raise FactoryError(msg)


# ---- text -----------------------------------------------------------------------------------

def fortunes():
    files = [f for f in sorted(glob.glob("/usr/share/games/fortunes/*"))
             if os.path.isfile(f) and not f.endswith((".dat", ".u8"))]
    if not files:
        fail("no fortunes under /usr/share/games/fortunes: run scripts/setup.sh (Debian's fortunes)")
    text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in files)
    return [p.strip("\n") for p in text.split("\n%\n") if p.strip()]


def source_files(src):
    out = []
    for pattern in ("src/**/*.cpp", "src/**/*.h", "tests/**/*.py", "scripts/*.sh", "CMakeLists.txt"):
        for f in sorted(glob.glob(os.path.join(src, pattern), recursive=True)):
            out.append(open(f, encoding="utf-8", errors="replace").read())
    if not out:
        fail(f"no source files under {src}")
    return out


class Texts:
    """What the generated text is made from: fortunes, this repository's sources, their words."""

    def __init__(self, source_dir):
        self.prose = fortunes()
        self.code = source_files(source_dir)
        self.words = sorted({w for p in self.prose[:4000] for w in p.split() if w.isalpha()})


CONTRACTIONS = ["'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'rE", "'ve", "'VE", "'Ve", "'m", "'M",
                "'ll", "'LL", "'Ll", "'lL", "'d", "'D", "\u2019s", "'\u017f"]  # ſ: (?i) folds it to s
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", " \n", "\n\n", " \t ", "\u00a0", "\u202f", "\u3000",
          "\u2009", "\u0085", "\u2028", "\u2029", "\x0b", "\x0c", "\u1680", "\u205f"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\ufeff", "\u2060", "\u180e", "\u00ad"]
EMOJI = ["\U0001F469\u200d\U0001F4BB", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
         "\U0001F44D\U0001F3FD", "\U0001F44B\U0001F3FF", "\U0001F3F3\ufe0f\u200d\U0001F308",
         "\U0001F1EB\U0001F1F7", "\U0001F9D1\U0001F3FB\u200d\U0001F91D\u200d\U0001F9D1\U0001F3FE",
         "\u2764\ufe0f", "\U0001F600", "\U0001F525", "#\ufe0f\u20e3", "\U0001FAE0", "\u263a"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "a\u0301\u0302\u0303", "o\u0323\u0302", "\u1ec7",
             "Vi\u1ec7t Nam", "\u0915\u094d\u0937", "\u0627\u064e\u0644\u0652", "\u05e9\u05c1\u05b8",
             "\u0041\u030a", "\u212b", "\u1e0b\u0323", "q\u0307\u0323", "\u0301", "\u0308\u0308"]
OTHER_SCRIPTS = ["\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
                 "\u039f\u03b4\u03c5\u03c3\u03c3\u03b5\u03cd\u03c2", "\u0130stanbul \u0131\u015f\u0131k",
                 "Stra\u00dfe", "\ufb01sh \ufb02ow", "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48",
                 "\u216b \u2162", "x\u00b2 + y\u00b3", "\u00bd \u00be", "\u0663\u0664\u0665",
                 "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u0967\u0968\u0969", "\u00c5ngstr\u00f6m",
                 "K\u212a", "\u2126", "caf\u00e9", "cafe\u0301", "\u01c4\u01c5\u01c6", "\u1e9e\u00df"]
CJK_PUNCT = "\uff0c\u3002\u3001\uff01\uff1f\u300c\u300d\uff1a"


def cjk(r, n):
    out = []
    for _ in range(n):
        k = r.random()
        if k < 0.6:
            out.append(chr(r.randint(0x4E00, 0x62FF)))
        elif k < 0.75:
            out.append(chr(r.randint(0x3041, 0x3093)))
        elif k < 0.85:
            out.append(chr(r.randint(0x30A1, 0x30F6)))
        else:
            out.append(r.choice(CJK_PUNCT))
    return "".join(out)


def korean(r, n):
    out = []
    for _ in range(n):
        if r.random() < 0.12:
            out.append(" ")
        elif r.random() < 0.1:  # decomposed: L V (T) jamo, which NFC composes
            out.append(chr(0x1100 + r.randint(0, 18)) + chr(0x1161 + r.randint(0, 20)) +
                       (chr(0x11A8 + r.randint(0, 26)) if r.random() < 0.5 else ""))
        else:
            out.append(chr(r.randint(0xAC00, 0xD7A3)))
    return "".join(out)


def number(r):
    k = r.random()
    if k < 0.5:
        return str(r.randint(0, 10 ** r.randint(1, 12)))
    if k < 0.7:
        return f"{r.random() * 10 ** r.randint(0, 8):.{r.randint(1, 6)}f}"
    if k < 0.8:
        return f"{r.randint(1, 999)},{r.randint(0, 999):03d},{r.randint(0, 999):03d}"
    if k < 0.97:
        return "".join(r.choice("0123456789") for _ in range(r.randint(13, 60)))
    return "".join(r.choice("0123456789") for _ in range(r.randint(100, 3000)))  # a long piece


def sentence(r, t):
    words = [r.choice(t.words) for _ in range(r.randint(3, 15))]
    for i in range(len(words)):
        x = r.random()
        if x < 0.08:
            words[i] += r.choice(CONTRACTIONS)
        elif x < 0.12:
            words[i] = words[i].upper()
        elif x < 0.15:
            words[i] = words[i].capitalize() + r.choice(CONTRACTIONS)
    return " ".join(words) + r.choice([".", "!", "?", ",", ";", ":", "...", " --", ""])


def segment(r, t, specials):
    k = r.random()
    if k < 0.28:
        return r.choice(t.prose)
    if k < 0.40:
        c = r.choice(t.code)
        start = r.randint(0, max(0, len(c) - 2000))
        return c[start:start + r.randint(50, 2000)]
    if k < 0.48:
        return sentence(r, t)
    if k < 0.53:
        return "".join(r.choice(SPACES) for _ in range(r.randint(1, 40)))
    if k < 0.57:
        return " ".join(number(r) for _ in range(r.randint(1, 6)))
    if k < 0.62:
        return cjk(r, r.randint(1, 80))
    if k < 0.66:
        return korean(r, r.randint(1, 60))
    if k < 0.70:
        return "".join(r.choice(EMOJI) + r.choice(["", " ", "", "x"]) for _ in range(r.randint(1, 8)))
    if k < 0.74:
        return " ".join(r.choice(COMBINING) for _ in range(r.randint(1, 6)))
    if k < 0.77:
        return r.choice(t.words) + r.choice(ZERO_WIDTH) + r.choice(t.words + [""])
    if k < 0.80:
        return " ".join(r.choice(OTHER_SCRIPTS) for _ in range(r.randint(1, 4)))
    if k < 0.84:
        return sentence(r, t).replace("\n", "\r\n") + "\r\n" + sentence(r, t) + "\r" + sentence(r, t)
    if k < 0.86:
        return "".join(chr(r.choice([1, 2, 7, 8, 0x1b, 0x1f, 0x7f, 0x9f])) for _ in range(r.randint(1, 4)))
    if k < 0.88:
        return r.choice(["", " ", "  "]) + "x" * r.randint(200, 1500)  # a long word
    if k < 0.90:
        return " " * r.randint(50, 600) + r.choice(["", "a", "\n"])
    if specials:  # an added or special token, glued to text or spaced, or a broken one
        t = r.choice(specials)
        return r.choice(["", " ", "  ", "\n", "x"]) + (t if r.random() < 0.9 else t[:-1]) + r.choice(["", " ", "\n", "y", "  "])
    return sentence(r, t)


def document(r, t, specials, size):
    parts, n = [], 0
    while n < size:
        s = segment(r, t, specials)
        parts.append(s)
        parts.append(r.choice(["", " ", "\n", "\n\n", " ", "\r\n", "\t"]))
        n += len(s) + 1
    return "".join(parts).replace("\x00", "")


def corpus(seed, specials, megabytes, texts):
    """Records of mixed text, about `megabytes` MB of UTF-8, the same for the same arguments."""
    r = random.Random(seed)
    docs, total = [], 0
    while total < megabytes * 1e6:
        d = document(r, texts, specials, int(r.expovariate(1 / 2500)) + 1)
        if r.random() < 0.01:
            d = ""
        docs.append(d)
        total += len(d.encode())
    return docs


# ---- tokenizers in the published configurations ---------------------------------------------

def bpe_model(vocab, merges, **extra):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
         "vocab": vocab, "merges": merges}
    m.update(extra)
    return m


def added(i, content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False):
    return {"id": i, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def train_bpe(train_text, pre_tokenizer, vocab_size, normalizer=None):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_text, trainer=trainer)
    j = json.loads(tok.to_str())
    return j["model"]["vocab"], j["model"]["merges"]


def write(dirname, tokenizer_json, config):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json, f, ensure_ascii=False)
    with open(os.path.join(dirname, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return dirname


def make_gpt2(work, train_text):
    vocab, merges = train_bpe(train_text, pre_tokenizers.ByteLevel(add_prefix_space=False), 3000)
    n = len(vocab)
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [added(n, "<|endoftext|>", normalized=True),
                          # Not GPT-2's: one of each matching rule, on a published pipeline.
                          added(n + 1, "<mask>", special=False, lstrip=True),
                          added(n + 2, "<|fim|>", special=False, rstrip=True),
                          added(n + 3, "dog", special=False, single_word=True)],
         "normalizer": None, "pre_tokenizer": BYTE_LEVEL,
         "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
         "model": bpe_model(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="")}
    config = {"model_max_length": 1024, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}
    return write(os.path.join(work, "gpt2"), j, config), ["<|endoftext|>", "<mask>", "<|fim|>", "dog"]


LLAMA3_SPECIAL = (["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
                  + [f"<|reserved_special_token_{i}|>" for i in range(3, 248)])


def make_llama3(work, train_text):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    vocab, merges = train_bpe(train_text, pre, 3500)
    n = len(vocab)
    bos = n
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [added(n + i, t) for i, t in enumerate(LLAMA3_SPECIAL)],
         "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
             {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
         "post_processor": {"type": "Sequence", "processors": [
             {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
             {"type": "TemplateProcessing",
              "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}}],
              "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                       {"Sequence": {"id": "B", "type_id": 1}}],
              "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                       "tokens": ["<|begin_of_text|>"]}}}]},
         "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
         "model": bpe_model(vocab, merges, ignore_merges=True)}
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": True,
              "model_input_names": ["input_ids", "attention_mask"],
              "model_max_length": 1000000000000000019884624838656, "tokenizer_class": "PreTrainedTokenizerFast"}
    return write(os.path.join(work, "llama3"), j, config), LLAMA3_SPECIAL[:12]


QWEN_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
              ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
              ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
              ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
              ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False), ("</tool_call>", False),
              ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False),
              ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False)]


def make_qwen2(work, train_text):
    from tokenizers import normalizers
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    vocab, merges = train_bpe(train_text, pre, 3000, normalizer=normalizers.NFC())
    n = len(vocab)
    tokens = [added(n + i, t, special=s) for i, (t, s) in enumerate(QWEN_ADDED)]
    # Not Qwen's: an added token matched after normalization, written decomposed (NFC: "café").
    tokens.append(added(n + len(QWEN_ADDED), "cafe\u0301", special=False, normalized=True))
    no_regex = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
         "normalizer": {"type": "NFC"},
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
             no_regex]},
         "post_processor": no_regex, "decoder": no_regex,
         "model": bpe_model(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="")}
    config = {"add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False,
              "eos_token": "<|endoftext|>", "errors": "replace", "model_max_length": 32768,
              "pad_token": "<|endoftext|>", "split_special_tokens": False, "unk_token": None,
              "tokenizer_class": "PreTrainedTokenizerFast",
              "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"}
    return write(os.path.join(work, "qwen2"), j, config), [t for t, _ in QWEN_ADDED] + ["cafe\u0301", "caf\u00e9"]


def make_spm(work, train_text):
    import sentencepiece as spm
    import transformers
    transformers.utils.logging.set_verbosity_error()
    model_dir = os.path.join(work, "spm_model")
    os.makedirs(model_dir, exist_ok=True)
    lines = [line for t in train_text for line in t.split("\n") if line.strip()]
    # Llama 2's trainer settings (its tokenizer.model's TrainerSpec), with a smaller vocabulary
    # and character coverage (the generated CJK has thousands of rare characters: byte fallback).
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=os.path.join(model_dir, "tokenizer"), model_type="bpe",
        vocab_size=3000, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        character_coverage=0.995, max_sentence_length=16384, num_threads=2, minloglevel=2,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    os.remove(os.path.join(model_dir, "tokenizer.vocab"))
    out = os.path.join(work, "spm")
    transformers.LlamaTokenizer.from_pretrained(model_dir).save_pretrained(out)
    j = json.load(open(os.path.join(out, "tokenizer.json"), encoding="utf-8"))
    if j["pre_tokenizer"] != {"type": "Metaspace", "replacement": M, "prepend_scheme": "first", "split": False}:
        fail(f"transformers converted tokenizer.model to another pre_tokenizer: {j['pre_tokenizer']}")
    if not j["model"]["byte_fallback"] or not j["model"]["fuse_unk"]:
        fail(f"transformers converted without byte_fallback/fuse_unk: {j['model']['byte_fallback']}")
    config = json.load(open(os.path.join(out, "tokenizer_config.json"), encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # read tokenizer.json as it is
    write(out, j, config)
    # Llama 2's published layout of the same model.
    legacy = json.loads(json.dumps(j))
    legacy["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": M}, {"type": "Replace", "pattern": {"String": " "}, "content": M}]}
    legacy["pre_tokenizer"] = None
    legacy["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    legacy["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": M}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    legacy["model"]["unk_token"] = "<unk>"
    legacy_config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                     "unk_token": "<unk>", "pad_token": None, "clean_up_tokenization_spaces": False,
                     "legacy": True, "model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast"}
    specials = ["<s>", "</s>", "<unk>"]
    return out, write(os.path.join(work, "spm_legacy"), legacy, legacy_config), specials




def training_text(texts):
    r = random.Random(7)
    return texts.prose[:] + [document(r, texts, [], 2000) for _ in range(300)]


def make_all(work, texts):
    """The five tokenizers, each a directory (tokenizer.json + tokenizer_config.json)."""
    train = training_text(texts)
    made = []
    d, s = make_gpt2(work, train)
    made.append(("gpt2", d, s))
    d, s = make_llama3(work, train)
    made.append(("llama3", d, s))
    d, s = make_qwen2(work, train)
    made.append(("qwen2", d, s))
    spm_dir, legacy_dir, s = make_spm(work, train)
    made += [("spm", spm_dir, s), ("spm_legacy", legacy_dir, s)]
    return made


# ---- the other supported components, on small tokenizers --------------------------------------

def make_components(work, texts):
    """Tokenizers in no model's configuration that use the supported components the published
    ones do not: ByteLevel with add_prefix_space and RobertaProcessing; NFKD/StripAccents/
    Lowercase/Strip, Split with each behavior (and invert), Digits, continuing_subword_prefix and
    end_of_word_suffix with BPEDecoder, BertProcessing; NFKC and a regex Replace, Metaspace
    (always, split) with its decoder, added tokens normalized (matched after Lowercase),
    single_word, lstrip and rstrip."""
    from tokenizers import AddedToken, decoders, normalizers, processors
    train = training_text(texts)[:3000]
    made = []

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(train, trainers.BpeTrainer(vocab_size=1500, show_progress=False,
                                                       special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.add_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    made.append(("roberta_like", tok, ["<s>", "</s>", "<mask>", "<pad>"]))

    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                           normalizers.Strip()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), "removed"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split("-", "merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[.,;:!?]"), "merged_with_next"),
        pre_tokenizers.Split(Regex(r"\p{P}"), "contiguous"),
        pre_tokenizers.Split(Regex(r"[^\p{L}\p{N}\p{P}]+"), "isolated", invert=True)])
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    tok.train_from_iterator(train, trainers.BpeTrainer(vocab_size=1500, show_progress=False,
                                                       special_tokens=["[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                                       continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    made.append(("bert_like", tok, ["[CLS]", "[SEP]", "[MASK]", "[UNK]"]))

    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\d"), "7"),
                                           normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(prepend_scheme="always", split=True)
    tok.train_from_iterator(train, trainers.BpeTrainer(vocab_size=1500, show_progress=False,
                                                       special_tokens=["<unk>", "<s>", "</s>"]))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    tok.add_tokens([AddedToken("Hello World", normalized=True, single_word=True),
                    AddedToken("[MASK]", lstrip=True, rstrip=True, normalized=False, special=True),
                    AddedToken("dog", normalized=True, single_word=True)])
    made.append(("metaspace_like", tok, ["Hello World", "hello world", "[MASK]", "<s>", "dog", "DOG"]))

    out = []
    for name, tok, specials in made:
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        out.append((name, d, specials))
    return out
