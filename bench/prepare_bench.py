"""How fast fsdpp prepares records, and whether training on them is as fast as on a text file.

usage: prepare_bench.py [--bin build/bin] [--out bench/results] [--mb 20] [--steps 30] [--repeats 2]
                        [--note 'what else was running']

1. Prepare: `fsdpp-data prepare` of chat messages (JSON Lines, --mb MB) with a byte-level BPE
   tokenizer in Llama 3's configuration (tests/parity/tokenizer_factory.py, trained here) and Llama
   3.1's chat template, on 1
   thread and on every core: wall seconds of the whole command (reading, rendering the chat
   template, tokenizing, writing the shards), MB/s of the file and tokens/s. Best of --repeats.
2. Training speed: the default model (configs/default.yaml, byte tokenizer, 2 ranks, seq_len 128)
   for --steps steps on the same text as a plain .txt file (today's token windows) and as JSON
   Lines prepared by fsdpp-data (rows of packed documents), the runs alternated; the median
   step_ms of metrics.jsonl after the first 5 steps. Not a timed test: it writes
   bench/results/prepare.{md,json}.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "parity"))
import tokenizer_factory as tf  # noqa: E402


def sh(*cmd):
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout.decode()}{r.stderr.decode()}")
    return time.perf_counter() - t, r.stderr.decode(errors="replace")


def paragraphs():
    texts = tf.Texts(SRC) if hasattr(tf, "Texts") else None
    prose = texts.prose if texts else tf.fortunes()
    return [p for p in prose if p.strip()]


def write_chat(path, mb, prose):
    r = random.Random(1)
    size = 0
    with open(path, "w", encoding="utf-8") as f:
        while size < mb * 1e6:
            m = []
            for _ in range(r.randint(1, 3)):
                m += [{"role": "user", "content": r.choice(prose)[:400]},
                      {"role": "assistant", "content": " ".join(r.choice(prose) for _ in range(2))[:1500]}]
            line = json.dumps({"messages": m}, ensure_ascii=False) + "\n"
            f.write(line)
            size += len(line.encode())


def train_speed(binary, data, out, steps, extra):
    sh(os.path.join(binary, "fsdpp-run"), "--nproc-per-node", "2", os.path.join(binary, "fsdpp-train"),
       os.path.join(SRC, "configs/default.yaml"), f"data.path={data}", f"training.max_steps={steps}",
       "training.eval_steps=0", "training.save_steps=0", "training.sample_tokens=0",
       "training.logging_steps=1", f"training.output_dir={out}", "training.overwrite_output_dir=true",
       "data.val_fraction=0", *extra)
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
    return statistics.median(r["step_ms"] for r in rows if "step_ms" in r and r["step"] > 5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(SRC, "build", "bin"))
    ap.add_argument("--out", default=os.path.join(SRC, "bench", "results"))
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--note", default="", help="what else was running, for the results")
    a = ap.parse_args()
    cores = os.cpu_count()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        prose = paragraphs()
        tok_dir, _ = tf.make_llama3(d, prose[:3000])
        # Llama 3.1's chat template (the assistant turns found by their prefixes: it has no
        # {% generation %} blocks).
        cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
        cfg = json.load(open(cfg_path, encoding="utf-8"))
        cfg["chat_template"] = open(os.path.join(SRC, "tests/data/chat_templates/llama3_1.jinja"),
                                    encoding="utf-8").read()
        json.dump(cfg, open(cfg_path, "w", encoding="utf-8"), ensure_ascii=False)
        chat = os.path.join(d, "chat.jsonl")
        write_chat(chat, a.mb, prose)
        size = os.path.getsize(chat)
        prep = {}
        for threads in (1, cores):
            best = None
            for k in range(a.repeats):
                out = os.path.join(d, f"prep-{threads}-{k}")
                secs, log = sh(os.path.join(a.bin, "fsdpp-data"), "prepare", chat, "--tokenizer", tok_dir,
                               "--out", out, "--threads", str(threads), "--assistant-only-loss")
                best = secs if best is None else min(best, secs)
            m = json.load(open(os.path.join(out, "prepared.json")))
            prep[threads] = {"seconds": best, "file_mb_s": size / 1e6 / best,
                             "tokens_per_s": m["tokens"] / best, "tokens": m["tokens"],
                             "documents": m["documents"], "loss_tokens": m["loss_tokens"]}
            print(f"prepare on {threads} thread(s): {best:.1f} s, {size / 1e6 / best:.2f} MB/s, "
                  f"{m['tokens'] / best:,.0f} tokens/s", flush=True)

        # The same text as a .txt corpus and as JSON Lines records (byte tokenizer for both).
        text = os.path.join(d, "text.txt")
        records = os.path.join(d, "text.jsonl")
        docs = [p for p in prose][:4000]
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(docs))
        with open(records, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": p}, ensure_ascii=False) + "\n" for p in docs)
        prepared = os.path.join(d, "text-prepared")
        sh(os.path.join(a.bin, "fsdpp-data"), "prepare", records, "--tokenizer", "byte", "--out", prepared)
        speeds = {"text file": [], "prepared JSON Lines, packed": []}
        for _ in range(a.repeats):
            speeds["text file"].append(train_speed(a.bin, text, os.path.join(d, "run-text"), a.steps, []))
            speeds["prepared JSON Lines, packed"].append(
                train_speed(a.bin, prepared, os.path.join(d, "run-records"), a.steps, ["data.packing=true"]))
        print({k: [round(x, 1) for x in v] for k, v in speeds.items()}, flush=True)
    load_after = os.getloadavg()
    result = {"date": time.strftime("%Y-%m-%d"), "cores": cores, "file_mb": size / 1e6, "prepare": prep,
              "step_ms": {k: min(v) for k, v in speeds.items()}, "step_ms_runs": speeds,
              "load_before": load_before, "load_after": load_after}
    os.makedirs(a.out, exist_ok=True)
    json.dump(result, open(os.path.join(a.out, "prepare.json"), "w"), indent=1)
    t, r = result["step_ms"]["text file"], result["step_ms"]["prepared JSON Lines, packed"]
    lines = [
        "# Preparing records, and training on them",
        "",
        f"`python bench/prepare_bench.py` on {result['date']}, {cores} cores. Chat messages as JSON Lines "
        f"({size / 1e6:.1f} MB), `fsdpp-data prepare --assistant-only-loss` with a byte-level BPE tokenizer "
        "in Llama 3's configuration and Llama 3.1's chat template (wall seconds of the whole command: reading, "
        "rendering, tokenizing, writing; best of the runs):",
        "",
        "| threads | seconds | file MB/s | tokens/s | documents | tokens | counted by the loss |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for threads, p in prep.items():
        lines.append(f"| {threads} | {p['seconds']:.1f} | {p['file_mb_s']:.2f} | {p['tokens_per_s']:,.0f} | "
                     f"{p['documents']} | {p['tokens']} | {p['loss_tokens']} |")
    lines += [
        "",
        f"Training the default model (configs/default.yaml: byte tokenizer, 2 ranks, seq_len 128) for "
        f"{a.steps} steps on the same text as a `.txt` file and as prepared JSON Lines (packed rows), "
        "alternated; the median step of each run after step 5, the best run:",
        "",
        "| data | step ms | runs |",
        "|---|---:|---|",
        f"| text file | {t:.1f} | {', '.join(f'{x:.1f}' for x in speeds['text file'])} |",
        f"| prepared JSON Lines, packed | {r:.1f} | "
        f"{', '.join(f'{x:.1f}' for x in speeds['prepared JSON Lines, packed'])} |",
        "",
        f"Records / text: {r / t:.2f}x the step time. Load average before {load_before[0]:.2f} "
        f"{load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} "
        f"{load_after[2]:.2f} (1, 5, 15 minutes). {a.note}".rstrip(),
    ]
    open(os.path.join(a.out, "prepare.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
