"""How fast fsdpp reads data files on one core: MB/s of text out of JSON Lines (plain, .gz, .zst),
Parquet, a save_to_disk directory and chat messages, beside Python's own readers on the same files.

usage: data_read.py [--bin build/bin] [--out bench/results] [--mb 100] [--repeats 3]

The corpus is English text (Debian's fortunes, else fsdpp's docs) cut into documents of 0.5 to 4
KB, written by json/gzip/zstandard/pyarrow/datasets as a user would write it. Each reader runs
pinned to one core (taskset -c 0) and reads every example to the end (`fsdpp-data records
--examples --count`: decoded, converted to records, validated as UTF-8, made into examples, not
printed). Seconds are the CPU seconds of the read that the reader reports (start-up left out; CPU
time because the machine is shared), the best of --repeats runs. Text MB/s = the examples' text
bytes / seconds; file MB/s = the file's bytes / seconds. Not a timed test: it writes
bench/results/data-read.{md,json}.
"""
import argparse
import glob
import gzip
import json
import os
import random
import re
import subprocess
import sys
import tempfile

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


def read_seconds(cmd, repeats):
    """The least CPU seconds of `repeats` runs' reading, as the command reports it on stderr ("...
    0.712 s of CPU"): start-up (fsdpp-data loads LibTorch, Python imports) is left out, and CPU
    time, unlike wall time, does not count the waits for a core on a machine shared with other jobs."""
    best = None
    for _ in range(repeats):
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        m = re.search(r"([0-9.]+) s of CPU", r.stderr)
        if r.returncode != 0 or not m:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
        best = float(m.group(1)) if best is None else min(best, float(m.group(1)))
    return best


def python_reference(kind, path):
    """Python's own reader of the same file, to the same point (every text in hand)."""
    if kind == "jsonl":
        body = ("for line in open(sys.argv[1], encoding='utf-8'):\n"
                "    n += len(json.loads(line)['text'])")
    else:
        body = ("f = pq.ParquetFile(sys.argv[1])\nfor i in range(f.num_row_groups):\n"
                "    n += sum(len(t) for t in f.read_row_group(i, columns=['text']).column('text').to_pylist())")
    code = ("import json, sys, time\nimport pyarrow.parquet as pq\nn = 0\nt0 = time.process_time()\n" + body +
            "\nprint(f'{time.process_time() - t0:.3f} s of CPU', file=sys.stderr)")
    return [sys.executable, "-c", code, path]


def write_formats(d, docs):
    """Every format of the benchmark for `docs` in directory d: [(name, path, python reference)]."""
    os.makedirs(d)
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
    Dataset(table).save_to_disk(saved, num_shards=min(2, len(docs)))
    chat = os.path.join(d, "chat.jsonl")
    with open(chat, "w", encoding="utf-8") as f:
        for i in range(0, max(1, len(docs) - 1), 2):
            f.write(json.dumps({"messages": [{"role": "user", "content": docs[i]},
                                             {"role": "assistant", "content": docs[min(i + 1, len(docs) - 1)]}]},
                               ensure_ascii=False) + "\n")
    return [("JSON Lines", jsonl, "jsonl"), ("JSON Lines .gz", jsonl + ".gz", None),
            ("JSON Lines .zst", jsonl + ".zst", None), ("Parquet (snappy)", parquet, "parquet"),
            ("save_to_disk (Arrow, 2 shards)", saved, None), ("messages, JSON Lines", chat, None)]


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--mb", type=float, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    fsdpp_data = os.path.abspath(os.path.join(args.bin, "fsdpp-data"))
    docs = documents(int(args.mb * 1e6))
    text_bytes = sum(len(d.encode()) for d in docs)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name, path, ref in write_formats(os.path.join(d, "full"), docs):
            read_s = read_seconds(["taskset", "-c", "0", fsdpp_data, "records", path, "--examples", "--count"],
                                  args.repeats)
            size = size_of(path)
            row = {"format": name, "file_mb": size / 1e6, "text_mb": text_bytes / 1e6, "cpu_seconds": read_s,
                   "text_mb_s": text_bytes / 1e6 / read_s, "file_mb_s": size / 1e6 / read_s}
            if ref:
                py_s = read_seconds(["taskset", "-c", "0", *python_reference(ref, path)], args.repeats)
                row["python_text_mb_s"] = text_bytes / 1e6 / py_s
            rows.append(row)
            print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    with open(os.path.join(args.out, "data-read.json"), "w") as f:
        json.dump({"cpu": cpu, "documents": len(docs), "text_mb": text_bytes / 1e6, "rows": rows}, f, indent=1)
    lines = ["# Reading data files, one core\n",
             f"`python bench/data_read.py --mb {args.mb:g}`: {len(docs)} documents of English text "
             f"(0.5-4 KB each), {text_bytes / 1e6:.0f} MB, on {cpu}, pinned to one core (`taskset -c 0`). "
             f"Throughput = text bytes / CPU seconds of the read as the reader reports it (start-up, where "
             f"fsdpp-data loads LibTorch, left out), best of {args.repeats}: CPU time, not wall time, "
             f"because the machine is shared with other jobs. "
             f"fsdpp: `fsdpp-data records PATH --examples --count` (records decoded, validated as UTF-8, "
             f"made into examples, not printed). Python, for scale: `json.loads` per line, or pyarrow's "
             f"Parquet reader by row group and `to_pylist()` of the text column, to the same point.\n",
             "| format | file MB | fsdpp text MB/s | fsdpp file MB/s | Python text MB/s |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        py = f"{r['python_text_mb_s']:.0f}" if "python_text_mb_s" in r else ""
        lines.append(f"| {r['format']} | {r['file_mb']:.0f} | {r['text_mb_s']:.0f} | {r['file_mb_s']:.0f} | {py} |")
    lines.append("\nTokenizing runs at 5 to 20 MB/s of text per core: reading is not the bottleneck.")
    with open(os.path.join(args.out, "data-read.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
