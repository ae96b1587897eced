"""Records users bring, tokenized with their model's tokenizer.json and trained on, against
transformers computing the same documents another way.

1. A Qwen2-style byte-level BPE tokenizer (tests/parity/tokenizer_factory.py) with Qwen3's
   training chat template ({% generation %} around the assistant turns, as TRL ships it).
2. `fsdpp-data prepare` of three datasets, and each document's ids and loss mask equal to what
   TRL's SFTTrainer tokenizes with transformers' AutoTokenizer:
     text (JSON Lines)                   tok(text) + EOS, every token counts;
     prompt/completion (Parquet)         tok(prompt + completion) + EOS; the first
                                         len(tok(prompt)) tokens carry no loss;
     chat messages (JSON Lines .zst)     apply_chat_template(return_assistant_tokens_mask=True):
                                         its input_ids, and its assistant_masks as the loss mask.
3. fsdpp-train on 2 ranks from each file (and a save_to_disk directory, a mixture) prepares the
   same documents into its cache: the log's document, token and loss-token counts equal the ones
   computed here, and training from the prepared directory gives the same loss at every step,
   bit for bit, as training from the file. Packed bfd rows with document masking give one
   document a row's first loss over the same documents; without the mask they do not.
4. Refusals: a prepared directory with other loss options, a tokenizer other than the one it was
   prepared with, sentencepiece training on records.

usage: records.py FSDPP_RUN FSDPP_TRAIN FSDPP_DATA SOURCE_DIR
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
run, train, data_tool, src = sys.argv[1:5]
sys.path.insert(0, os.path.join(src, "tests", "parity"))
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import zstandard  # noqa: E402
import tokenizer_factory as tf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

WORDS = ("the model reads a file of records and learns what the assistant says; numbers 12 345 "
         "and accents café naïve, code x = f(y) + 1, emoji 🙂 and CJK 日本語 too").split()


def sh(*cmd, ok=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
    if ok and r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{out}")
    return r.returncode, out


def words(r, lo, hi):
    return " ".join(r.choice(WORDS) for _ in range(r.randint(lo, hi)))


def make_data(d):
    r = random.Random(11)
    texts = [{"text": words(r, 5, 60), "id": i} for i in range(60)]
    pcs = [{"prompt": "Q: " + words(r, 3, 20) + "\nA:", "completion": " " + words(r, 2, 25)} for _ in range(60)]
    chats = []
    for i in range(60):
        m = [{"role": "system", "content": words(r, 3, 10)}] if i % 3 == 0 else []
        for _ in range(r.randint(1, 3)):
            m += [{"role": "user", "content": words(r, 2, 15)},
                  {"role": "assistant", "content": words(r, 2, 20)}]
        chats.append({"messages": m})
    with open(f"{d}/text.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in texts)
    pq.write_table(pa.Table.from_pylist(pcs), f"{d}/pc.parquet", row_group_size=16)
    raw = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in chats).encode()
    with open(f"{d}/chat.jsonl.zst", "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(raw))
    return texts, pcs, chats


def expected(tok, texts, pcs, chats):
    """The documents TRL's SFTTrainer makes: (ids, mask) per record."""
    eos = tok.eos_token_id
    out = {"text": [], "pc": [], "pc_all": [], "chat": []}
    for t in texts:
        ids = tok(t["text"]).input_ids
        ids = ids if ids and ids[-1] == eos else ids + [eos]
        out["text"].append((ids, [1] * len(ids)))
    for p in pcs:
        prompt = tok(p["prompt"]).input_ids
        ids = tok(p["prompt"] + p["completion"]).input_ids + [eos]
        out["pc"].append((ids, [0] * len(prompt) + [1] * (len(ids) - len(prompt))))
        out["pc_all"].append((ids, [1] * len(ids)))
    for c in chats:
        enc = tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        out["chat"].append((list(enc["input_ids"]), list(enc["assistant_masks"])))
    return out


def prepared(d, name, data_path, tok_dir, *extra):
    out = f"{d}/prep-{name}"
    _, log = sh(data_tool, "prepare", data_path, "--tokenizer", tok_dir, "--out", out, *extra)
    _, docs = sh(data_tool, "documents", out)
    rows = (json.loads(line) for line in docs.splitlines() if line.startswith("{"))
    return out, [(j["ids"], j["mask"]) for j in rows], log


def compare(name, got, want):
    if len(got) != len(want):
        sys.exit(f"{name}: {len(got)} documents, transformers {len(want)}")
    for i, ((gi, gm), (wi, wm)) in enumerate(zip(got, want)):
        if gi != wi:
            at = next((k for k, (a, b) in enumerate(zip(gi, wi)) if a != b), min(len(gi), len(wi)))
            sys.exit(f"{name}: document {i}: ids differ at {at}: fsdpp {gi[at:at + 8]} transformers "
                     f"{wi[at:at + 8]} (lengths {len(gi)}, {len(wi)})")
        if gm != wm:
            at = next(k for k, (a, b) in enumerate(zip(gm, wm)) if a != b)
            sys.exit(f"{name}: document {i}: loss mask differs at token {at}: fsdpp {gm[at:at + 12]} "
                     f"transformers {wm[at:at + 12]}")
    print(f"  {name}: {len(got)} documents, {sum(len(g[0]) for g in got)} tokens, "
          f"{sum(sum(g[1]) for g in got)} counted by the loss: ids and masks == transformers'")


def job(d, name, data_path, tok_dir, *extra, ok=True):
    out = f"{d}/run-{name}"
    rc, log = sh(run, "--nproc-per-node", "2", "--timeout-s", "180", train,
                 os.path.join(src, "configs/default.yaml"), f"data.path={data_path}",
                 f"data.tokenizer={tok_dir}", "data.seq_len=64", "data.val_fraction=0.1",
                 "model.dim=32", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
                 "model.max_seq_len=128", "training.eval_steps=0", "training.sample_tokens=0",
                 "training.per_device_train_batch_size=2", "training.max_steps=4",
                 "training.save_steps=0", "training.logging_steps=1", f"data.cache_dir={d}/cache",
                 f"training.output_dir={out}", *extra, ok=ok)
    return rc, log, out


def losses(out):
    with open(f"{out}/metrics.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def data_line(log):
    m = re.search(r"\((\d+) records, (\d+) documents, (\d+) tokens, (\d+) counted by the loss", log)
    if not m:
        sys.exit(f"no data line in the log:\n{log}")
    return tuple(int(x) for x in m.groups())


def first_loss(d, name, data_path, tok_dir, *extra):
    """The first step's loss on one rank with every training row in that one step."""
    def one_rank(tag, batch):
        _, log = sh(run, "--nproc-per-node", "1", "--timeout-s", "180", train,
                    os.path.join(src, "configs/default.yaml"), f"data.path={data_path}",
                    f"data.tokenizer={tok_dir}", "data.seq_len=64", "data.val_fraction=0",
                    "model.dim=32", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
                    "model.max_seq_len=128", "training.eval_steps=0", "training.sample_tokens=0",
                    f"training.per_device_train_batch_size={batch}", "training.max_steps=1",
                    "training.save_steps=0", "training.logging_steps=1", f"data.cache_dir={d}/cache",
                    f"training.output_dir={d}/run-{name}-{tag}", *extra)
        return log
    m = re.search(r"train \d+ documents in (\d+) rows of 64 \(([^)]*)\)", one_rank("rows", 1))
    if not m:
        sys.exit(f"{name}: no row count in the log")
    rows = int(m.group(1))
    one_rank("all", rows)
    return rows, m.group(2), losses(f"{d}/run-{name}-all")[0][1]


def check_masking(d, data_path, tok_dir):
    """Packed rows with document masking (bfd packing's default, TRL's padding_free) compute each
    document as alone: over every document in one step, the first loss equals one document a row's
    (the global token mean over the same tokens at the same initial weights); without the mask
    the documents of a row attend to each other and the loss differs."""
    rows1, how1, alone = first_loss(d, "doc-a-row", data_path, tok_dir)
    rows2, how2, masked = first_loss(d, "bfd-masked", data_path, tok_dir, "data.packing=true")
    rows3, how3, crossed = first_loss(d, "bfd-crossed", data_path, tok_dir, "data.packing=true",
                                      "data.padding_free=false")
    if "each document attended to alone" not in how2 or "attends to the earlier" not in how3:
        sys.exit(f"the data lines do not say how the packed documents attend: {how2!r}, {how3!r}")
    if not rows2 < rows1 or abs(masked - alone) > 1e-6 * abs(alone):
        sys.exit(f"document masking: packed ({rows2} rows) first loss {masked!r}, one document a row "
                 f"({rows1} rows) {alone!r}; expected equal within 1e-6 relative")
    # A small model at its first step: attending across documents moves the loss little, but far
    # more than the masked rows' rounding does.
    if abs(crossed - alone) < 20 * max(abs(masked - alone), 1e-7 * abs(alone)):
        sys.exit(f"packed without the mask gave {crossed!r}, with it {masked!r}, alone {alone!r}: the "
                 f"mask changed nothing beyond rounding")
    print(f"  document masking: {rows1} rows of one document and {rows2} packed bfd rows give the "
          f"first loss {alone:.6f} and {masked:.6f} (difference {abs(masked - alone):.1e}); packed "
          f"without the mask {crossed:.6f}")


def check_trains(d, name, data_path, tok_dir, want, *extra):
    _, log, out = job(d, name, data_path, tok_dir, *extra)
    records, docs, tokens, counted = data_line(log)
    w = (len(want), sum(len(i) for i, _ in want), sum(sum(m) for _, m in want))
    if (docs, tokens, counted) != w:
        sys.exit(f"{name}: fsdpp-train's data line says {docs} documents, {tokens} tokens, {counted} "
                 f"counted; transformers' documents give {w}\n{log}")
    ls = losses(out)
    if len(ls) != 4 or not all(l == l and 0 < l < 50 for _, l in ls):
        sys.exit(f"{name}: losses {ls}")
    print(f"  fsdpp-train {name}: the data line's {docs} documents, {tokens} tokens, {counted} counted "
          f"== transformers'; losses {[round(l, 4) for _, l in ls]}")
    return ls


with tempfile.TemporaryDirectory() as d:
    train_text = [words(random.Random(k), 50, 400) for k in range(200)]
    tok_dir, _ = tf.make_qwen2(d, train_text)
    cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8"))
    cfg["chat_template"] = open(os.path.join(src, "tests/data/chat_templates/qwen3_training.jinja"),
                                encoding="utf-8").read()
    json.dump(cfg, open(cfg_path, "w", encoding="utf-8"), ensure_ascii=False)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    texts, pcs, chats = make_data(d)
    want = expected(tok, texts, pcs, chats)

    print("fsdpp-data prepare == transformers (TRL's SFT tokenization):")
    prep = {}
    prep["text"], got, _ = prepared(d, "text", f"{d}/text.jsonl", tok_dir)
    compare("text (JSON Lines)", got, want["text"])
    prep["pc"], got, _ = prepared(d, "pc", f"{d}/pc.parquet", tok_dir)
    compare("prompt/completion (Parquet), completion_only_loss", got, want["pc"])
    _, got, _ = prepared(d, "pc_all", f"{d}/pc.parquet", tok_dir, "--completion-only-loss", "false")
    compare("prompt/completion, completion_only_loss=false", got, want["pc_all"])
    prep["chat"], got, log = prepared(d, "chat", f"{d}/chat.jsonl.zst", tok_dir, "--assistant-only-loss")
    compare("chat messages (JSON Lines, zstd), assistant_only_loss", got, want["chat"])
    print("  " + log.strip().splitlines()[-1])

    print("fsdpp-train on 2 ranks:")
    a = check_trains(d, "chat", f"{d}/chat.jsonl.zst", tok_dir, want["chat"], "data.assistant_only_loss=true")
    b = check_trains(d, "chat-prepared", prep["chat"], tok_dir, want["chat"], "data.assistant_only_loss=true")
    if a != b:
        sys.exit(f"training from the prepared directory gave other losses: {a} vs {b}")
    print("  the prepared directory trains to the same losses as the file, bit for bit")
    check_trains(d, "pc-packed", f"{d}/pc.parquet", tok_dir, want["pc"], "data.packing=true")
    check_masking(d, f"{d}/pc.parquet", tok_dir)
    # save_to_disk's directory, with another text field.
    import datasets
    datasets.Dataset.from_list([{"body": t["text"]} for t in texts]).save_to_disk(f"{d}/saved")
    check_trains(d, "saved", f"{d}/saved", tok_dir, want["text"], "data.dataset_text_field=body")

    # Exact resume: 12 steps straight (packed rows of prompt/completion, about 9 steps an epoch:
    # the second epoch's order comes from training.seed), against 6 steps then a resume to 12.
    steady = ["training.lr_scheduler_type=constant", "training.warmup_steps=0", "training.save_steps=6",
              "data.packing=true", "training.seed=5"]
    _, _, straight = job(d, "straight", f"{d}/pc.parquet", tok_dir, *steady, "training.max_steps=12")
    _, _, halves = job(d, "halves", f"{d}/pc.parquet", tok_dir, *steady, "training.max_steps=6")
    job(d, "halves", f"{d}/pc.parquet", tok_dir, *steady, "training.max_steps=12",
        "training.resume_from_checkpoint=latest")
    a, b = losses(straight), losses(halves)
    if [x for x in a if x[0] > 6] != [x for x in b if x[0] > 6]:
        sys.exit(f"the resumed run's losses differ from the uninterrupted run's:\n{a}\n{b}")
    print(f"  resumed at step 6 of 12 (into the second epoch): steps 7-12's losses == the "
          f"uninterrupted run's, bit for bit")

    print("refusals:")
    rc, log, _ = job(d, "bad-mask", prep["chat"], tok_dir, "data.assistant_only_loss=false", ok=False)
    assert rc != 0 and "its loss masks are fixed when it is prepared" in log, (rc, log)
    print("  " + next(line for line in log.splitlines() if "loss masks are fixed" in line).strip()[:160])
    rc, log, _ = job(d, "bad-tok", prep["text"], "byte", ok=False)
    assert rc != 0 and "was prepared with tokenizer" in log, (rc, log)
    print("  " + next(line for line in log.splitlines() if "was prepared with tokenizer" in line).strip()[:160])
    rc, log, _ = job(d, "spm", f"{d}/text.jsonl", "sentencepiece", ok=False)
    assert rc != 0 and "holds records" in log, (rc, log)
    print("  " + next(line for line in log.splitlines() if "holds records" in line).strip()[:160])
print("records: OK")
