"""Tokenizer throughput on one core: fsdpp (fsdpp-tokenize, its encode time without process
start-up and I/O) against Hugging Face's tokenizers in Python, single-thread encode() per record
and encode_batch() with one thread, on the same text. Writes bench/results/tokenizer.md.

Tokenizers: tests/parity/tokenizer_factory.py's Llama 3 (byte-level BPE: Split regex +
ByteLevel) and converted SentencePiece (Metaspace, byte fallback) configurations, trained on
this machine. Texts: the parity test's mixed text (10 MB, seed 1000) and English prose alone
(Debian's fortunes, about 2.6 MB). Every process is pinned to one core (the same one), each
measurement is the best of REPEATS runs, and the load average of the machine is recorded before
and after (other jobs share it: the numbers are as good as that).

usage: python bench/tokenizer_bench.py BUILD_DIR [OUT.md]       (make configure; build fsdpp-tokenize)
"""
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

CORE = 0
os.sched_setaffinity(0, {CORE})  # before tokenizers starts its thread pool
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "true"  # one thread anyway: encode_batch's own path

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "parity"))
import tokenizer_factory as factory  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
out_md = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "bench", "results", "tokenizer.md")
tool = os.path.join(build, "bin", "fsdpp-tokenize")
REPEATS = 3


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def best(f):
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def fsdpp_seconds(directory, stdin):
    """fsdpp-tokenize's own encode time (--time), best of REPEATS, pinned to CORE."""
    times = []
    for _ in range(REPEATS):
        r = subprocess.run(["taskset", "-c", str(CORE), tool, directory, "--null", "--time"], input=stdin,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
        m = re.search(r"in ([0-9.]+) s", r.stderr.decode())
        times.append(float(m.group(1)))
    return min(times)


def main():
    if not os.path.exists(tool):
        sys.exit(f"{tool} is missing: cmake --build {build} --target fsdpp-tokenize")
    texts = factory.Texts(ROOT)
    load_before = loadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fsdpp_tok_bench_") as work:
        made = {name: (d, s) for name, d, s in factory.make_all(work, texts)}
        for kind, name in (("byte-level BPE (Llama 3)", "llama3"), ("SentencePiece BPE (converted)", "spm")):
            directory, specials = made[name]
            tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
            for text_name, docs in (("mixed (parity corpus)", factory.corpus(1000, specials, 10, texts)),
                                    ("English prose (fortunes)", texts.prose)):
                docs = [d for d in docs if d]
                stdin = "\0".join(docs).encode()
                mb = len(stdin) / 1e6
                # The same ids, or the comparison means nothing.
                ref = [e.ids for e in tok.encode_batch(docs[:200], add_special_tokens=False)]
                got = subprocess.run([tool, directory, "--null"], input="\0".join(docs[:200]).encode(),
                                     stdout=subprocess.PIPE, check=True).stdout.decode().split("\n")[:-1]
                if [list(map(int, g.split())) for g in got] != ref:
                    sys.exit(f"{name}: fsdpp's ids differ from tokenizers' (run the parity test)")
                t_loop = best(lambda: [tok.encode(d, add_special_tokens=False) for d in docs])
                t_batch = best(lambda: tok.encode_batch(docs, add_special_tokens=False))
                t_fsdpp = fsdpp_seconds(directory, stdin)
                rows.append((kind, text_name, mb, mb / t_loop, mb / t_batch, mb / t_fsdpp))
                print(f"{kind:32s} {text_name:26s} {mb:5.1f} MB  tokenizers encode {mb / t_loop:6.2f} MB/s  "
                      f"encode_batch {mb / t_batch:6.2f} MB/s  fsdpp {mb / t_fsdpp:6.2f} MB/s", flush=True)
    load_after = loadavg()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    lines = [
        "# Tokenizer throughput, one core",
        "",
        f"`python bench/tokenizer_bench.py build` on {datetime.date.today().isoformat()}: MB of UTF-8 text "
        "per second, every process pinned to the same core (`taskset -c 0`, `RAYON_NUM_THREADS=1`), best "
        f"of {REPEATS} runs. fsdpp: `fsdpp-tokenize DIR --null --time` (its encode calls, without process "
        "start-up, reading stdin or printing ids). tokenizers "
        f"{tokenizers.__version__} in Python: `encode(text)` per record, and `encode_batch(records)` with "
        "one thread (both build Encoding objects with offsets, which fsdpp does not). The ids are the "
        "same (tests/parity/tokenizers_parity.py; the benchmark re-checks its first 200 records).",
        "",
        "| tokenizer | text | MB | tokenizers encode | tokenizers encode_batch (1 thread) | fsdpp | fsdpp / tokenizers' best |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind, text_name, mb, loop, batch, fsdpp in rows:
        lines.append(f"| {kind} | {text_name} | {mb:.1f} | {loop:.2f} | {batch:.2f} | {fsdpp:.2f} | "
                     f"{fsdpp / max(loop, batch):.1f}x |")
    lines += [
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores, shared: load average {load_before} before the runs and "
        f"{load_after} after (1, 5 and 15 minutes; other sessions were building on it). Under load every "
        "number is lower, fsdpp's and tokenizers' alike; the ratio is what carries over.",
        "",
        "Texts: the parity test's mixed text (prose, code, whitespace runs, numbers, CJK, Korean, emoji, "
        "combining marks, added tokens; `tokenizer_factory.corpus(1000, ...)`) and Debian's fortunes. "
        "Tokenizers: `tokenizer_factory.make_llama3` (Llama 3's regex and ByteLevel, 3500 tokens + 256 "
        "special) and `make_spm` (a SentencePiece BPE of 3000 pieces converted by transformers: "
        "Metaspace, byte fallback).",
        "",
    ]
    os.makedirs(os.path.dirname(out_md), exist_ok=True)
    with open(out_md, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {out_md}")


main()
