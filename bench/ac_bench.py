"""Activation checkpointing's memory and time, side by side: none, full and selective (the
projections' products kept, fsdp/kept_linear.h) on one model and batch (docs/fully-shard.md#selective-checkpointing).

  python bench/ac_bench.py --build-dir build [--out bench/results/ac-modes.md] [--repeats 3]

One rank (fsdpp-run --nproc-per-node 1, FULL_SHARD), the headline model of bench/run_bench.py
(11.2 M parameters) at a longer sequence, so that activations dominate: fsdpp-bench train with
--count-alloc reports the peak of live tensor bytes (parameters, gradients, AdamW state and what
forward keeps for backward) and the median step. The three modes alternate, `--repeats` times;
the table gives the median over repeats of each, and the losses of the three (which must be equal:
checkpointing changes no result).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_bench import HEADLINE, make_batches, param_count  # noqa: E402

MODES = {"none": [], "full": ["--ac"], "selective": ["--ac", "--ac-selective"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--out", default="")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    bin_dir = os.path.join(a.build_dir, "bin")
    cfg = json.loads(json.dumps(HEADLINE))
    cfg["seq_len"] = a.seq_len
    cfg["local_batch"] = a.batch
    cfg["model"]["max_seq_len"] = a.seq_len
    work = tempfile.mkdtemp(prefix="fsdpp-ac-bench-")
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(cfg, f)
    subprocess.run([os.path.join(bin_dir, "fsdpp-bench"), "init", "--dir", work], check=True,
                   stdout=subprocess.DEVNULL)
    make_batches(work, cfg, 1, a.warmup + a.steps)
    results = {m: [] for m in MODES}
    for r in range(a.repeats):
        for mode, flags in MODES.items():
            out = os.path.join(work, f"{mode}-{r}.json")
            subprocess.run([os.path.join(bin_dir, "fsdpp-run"), "--nproc-per-node", "1",
                            os.path.join(bin_dir, "fsdpp-bench"), "train", "--dir", work,
                            "--strategy", "full_shard", "--count-alloc", "--steps", str(a.steps),
                            "--warmup", str(a.warmup), "--out", out] + flags,
                           check=True, stdout=subprocess.DEVNULL)
            results[mode].append(json.load(open(out)))
    losses = {m: results[m][0]["losses"] for m in MODES}
    same = all(losses[m] == losses["none"] for m in MODES)
    rows = []
    for mode in MODES:
        step = statistics.median(j["median_step_ms"] for j in results[mode])
        peak = statistics.median(j["peak_tensor_mb"][0] for j in results[mode])
        rows.append((mode, peak, step))
    base_peak, base_step = rows[0][1], rows[0][2]
    lines = [
        f"Activation checkpointing on {platform.node()} ({os.cpu_count()} cores), 1 rank, "
        f"the {param_count(cfg['model']) / 1e6:.1f} M-parameter Llama of bench/run_bench.py, "
        f"{a.batch} x {a.seq_len} tokens, float32; median of {a.repeats} alternated runs of "
        f"{a.steps} timed steps (`python bench/ac_bench.py`). Losses of the three equal: {same}.",
        "",
        "| mode | peak live tensors (MiB) | vs none | step (ms) | vs none |",
        "|---|---|---|---|---|",
    ]
    for mode, peak, step in rows:
        lines.append(f"| {mode} | {peak:.1f} | {peak / base_peak:.2f} | {step:.0f} | {step / base_step:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    if not same:
        print("the modes' losses differ:", losses, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
