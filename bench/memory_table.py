#!/usr/bin/env python3
"""Measured memory and step time of fsdpp's memory/speed options (issue 5's table).

Runs fsdpp-train on one Llama-style model under NO_SHARD, SHARD_GRAD_OP, FULL_SHARD,
FULL_SHARD + activation checkpointing, FULL_SHARD + CPU offload (and bf16, and the disk offload of
the optimizer state) at 1, 2 and 4 ranks, and writes bench/results/memory_table.{json,md,png}:
peak resident memory per rank (VmHWM, max over ranks, from metrics.jsonl) and the median step
time. It then measures prefetch: FULL_SHARD step time with and without forward/backward
prefetch, T_compute (the same step with no communication: N independent 1-rank jobs at once, so
that they share the cores as the N ranks do) and the overlap efficiency
max(T_compute, T_comm) / T_step, with T_comm the standalone time of the same collectives
(`fsdpp-bench collectives`; omitted when the bench tools are not built).

  python3 bench/memory_table.py [--build build] [--steps 8] [--worlds 1,2,4] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from run_bench import OTHER_CPU_LIMIT, other_cpu_probe, other_cpu_share  # noqa: E402

# Parameter-heavy enough (12.7 M parameters: 200 MB of float32 weights, gradients and AdamW
# state) that sharding shows beside the activations of a 4 x 128-token batch.
MODEL = ["model.dim=512", "model.n_layers=4", "model.n_heads=8", "model.n_kv_heads=4",
         "model.max_seq_len=128", "data.seq_len=128", "training.per_device_train_batch_size=4"]
QUICK_MODEL = ["model.dim=64", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=2",
               "model.max_seq_len=64", "data.seq_len=64", "training.per_device_train_batch_size=4"]

CONFIGS = [
    ("NO_SHARD", ["training.fsdp=no_shard"]),
    ("SHARD_GRAD_OP", ["training.fsdp=shard_grad_op"]),
    ("FULL_SHARD", ["training.fsdp=full_shard"]),
    ("FULL_SHARD + checkpointing", ["training.fsdp=full_shard", "training.gradient_checkpointing=true"]),
    ("FULL_SHARD + CPU offload", ["training.fsdp=full_shard", "training.fsdp_config.fsdp_offload_params=true"]),
    ("FULL_SHARD + disk-offloaded optimizer", ["training.fsdp=full_shard"]),  # dir added per run
]
# bf16 halves what is gathered and the activations, but LibTorch's CPU bf16 kernels are several
# times slower than float32 on CPUs without native bf16: off by default here (--bf16).
BF16 = ("FULL_SHARD + bf16", ["training.fsdp=full_shard", "training.bf16=true"])


def run_train(build, nproc, overrides, out_dir, port):
    cmd = [str(build / "bin/fsdpp-run"), "--nproc-per-node", str(nproc), "--master-port", str(port),
           str(build / "bin/fsdpp-train"), str(ROOT / "configs/default.yaml")] + overrides + [
           f"training.output_dir={out_dir}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:])
        raise SystemExit(f"[bench] fsdpp-train failed ({p.returncode}): {' '.join(cmd)}")
    rows = [json.loads(l) for l in (Path(out_dir) / "metrics.jsonl").read_text().splitlines() if l.strip()]
    return rows, time.time() - t0


def summarize(rows, warmup):
    steady = [r for r in rows if r["step"] > warmup] or rows
    return {
        "step_ms": statistics.median(r["step_ms"] for r in steady),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in rows),
        "comm_bytes_per_step": statistics.median(r["comm_bytes"] for r in steady),
        "final_loss": rows[-1]["loss"],
    }


def bench_model(args):
    """The table's model as fsdpp-bench's config.json: the trainer's Llama with its defaults."""
    kv = dict(o.split("=", 1) for o in (QUICK_MODEL if args.quick else MODEL))
    return {"model": {"vocab_size": 256, "dim": int(kv["model.dim"]), "n_layers": int(kv["model.n_layers"]),
                      "n_heads": int(kv["model.n_heads"]), "n_kv_heads": int(kv["model.n_kv_heads"]),
                      "max_seq_len": int(kv["model.max_seq_len"]), "seed": 0},
            "local_batch": int(kv["training.per_device_train_batch_size"]), "seq_len": int(kv["data.seq_len"])}


def standalone_comm(build, args, n, tmp, port):
    """T_comm: the FULL_SHARD step's collectives (every unit's all-gather in forward and in
    backward, its reduce-scatter), the same sizes in the same order, with no compute around
    them: `fsdpp-bench collectives` on n ranks."""
    tool = build / "bin/fsdpp-bench"
    if not tool.exists():
        return {"t_comm_ms": None, "t_comm_note": f"{tool} not built (FSDPP_BUILD_BENCH=OFF)"}
    d = tmp / f"comm{n}"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(bench_model(args)))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([str(tool), "init", "--dir", str(d)], env=env, check=True, stdout=subprocess.DEVNULL)
    out = d / "coll.json"
    p = subprocess.run([str(build / "bin/fsdpp-run"), "--nproc-per-node", str(n), "--master-port", str(port),
                        str(tool), "collectives", "--dir", str(d), "--strategy", "full_shard",
                        "--repeats", str(max(3, args.steps)), "--out", str(out)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:])
        raise SystemExit("[bench] fsdpp-bench collectives failed")
    c = json.loads(out.read_text())
    return {"t_comm_ms": c["t_comm_ms"], "t_copy_ms": c["t_copy_ms"],
            "t_comm_note": "fsdpp-bench collectives: the step's all-gathers and reduce-scatters, standalone"}


def common_overrides(args, steps):
    return (QUICK_MODEL if args.quick else MODEL) + [
        f"training.max_steps={steps}", "training.logging_steps=1", "training.eval_steps=0",
        "training.eval_max_batches=1", "training.sample_tokens=0", "training.save_steps=0",
        "training.warmup_steps=0"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    ap.add_argument("--quick", action="store_true", help="a tiny model, for a smoke test")
    ap.add_argument("--port", type=int, default=29731)
    ap.add_argument("--bf16", action="store_true", help="add a FULL_SHARD + bf16 row")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    worlds = [int(w) for w in args.worlds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = common_overrides(args, args.steps)
    results = {"model": base[:7], "steps": args.steps, "warmup": args.warmup, "rows": [],
               "prefetch": [], "machine": {"cores": os.cpu_count(), "load_before": os.getloadavg()}}
    cpu_before = other_cpu_probe()
    port = args.port
    with tempfile.TemporaryDirectory(prefix="fsdpp-memtable-") as tmp:
        # One token cache for every run, made first: the encoding's own peak is not training's.
        base = base + [f"data.cache_dir={tmp}/cache"]
        port += 1
        run_train(build, 1, base + ["training.max_steps=1"], Path(tmp) / "warm", port)
        for name, extra in CONFIGS + ([BF16] if args.bf16 else []):
            for n in worlds:
                run_dir = Path(tmp) / f"{len(results['rows'])}"
                over = base + extra
                if "disk-offloaded" in name:
                    over = over + [f"training.fsdp_config.fsdp_offload_optimizer_state_dir={run_dir}/optim"]
                port += 1
                rows, wall = run_train(build, n, over, run_dir, port)
                s = summarize(rows, args.warmup)
                s.update({"config": name, "ranks": n, "wall_s": round(wall, 1)})
                results["rows"].append(s)
                print(f"[bench] {name:40s} np{n}: {s['step_ms']:8.1f} ms/step, peak RSS "
                      f"{s['peak_rss_mb']:7.1f} MiB/rank, loss {s['final_loss']:.4f}", flush=True)
        # Prefetch and overlap at N > 1.
        for n in [w for w in worlds if w > 1]:
            entry = {"ranks": n}
            for label, extra in [("no prefetch", ["training.fsdp_config.fsdp_backward_prefetch=NO_PREFETCH",
                                                  "training.fsdp_config.fsdp_forward_prefetch=false"]),
                                 ("prefetch", ["training.fsdp_config.fsdp_backward_prefetch=BACKWARD_PRE",
                                               "training.fsdp_config.fsdp_forward_prefetch=true"])]:
                port += 1
                rows, _ = run_train(build, n, base + ["training.fsdp=full_shard"] + extra,
                                    Path(tmp) / f"pf{n}{label}", port)
                entry[label] = summarize(rows, args.warmup)
            # T_compute: n independent single-rank jobs at once (no communication, the same
            # local batch and the same share of the cores).
            procs = []
            for i in range(n):
                port += 1
                d = Path(tmp) / f"compute{n}_{i}"
                cmd = [str(build / "bin/fsdpp-run"), "--nproc-per-node", "1", "--master-port", str(port),
                       str(build / "bin/fsdpp-train"), str(ROOT / "configs/default.yaml")] + base + [
                       "training.fsdp=no_shard", f"training.output_dir={d}"]
                procs.append((subprocess.Popen(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT), d))
            t_compute = []
            for p, d in procs:
                if p.wait() != 0:
                    raise SystemExit("[bench] a T_compute run failed")
                rows = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines() if l.strip()]
                t_compute.append(summarize(rows, args.warmup)["step_ms"])
            entry["t_compute_ms"] = statistics.median(t_compute)
            port += 1
            entry.update(standalone_comm(build, args, n, Path(tmp), port))
            for label in ("no prefetch", "prefetch"):
                t_step = entry[label]["step_ms"]
                t_comm = entry["t_comm_ms"]
                entry[label]["overlap_efficiency"] = (
                    max(entry["t_compute_ms"], t_comm or 0.0) / t_step if t_step else None)
            results["prefetch"].append(entry)
            print(f"[bench] prefetch np{n}: {entry['no prefetch']['step_ms']:.1f} ms without, "
                  f"{entry['prefetch']['step_ms']:.1f} ms with; T_compute {entry['t_compute_ms']:.1f} ms, "
                  f"T_comm {entry['t_comm_ms'] or float('nan'):.1f} ms",
                  flush=True)
    results["machine"]["load_after"] = os.getloadavg()
    results["machine"]["other_cpu_share"] = other_cpu_share(cpu_before, other_cpu_probe())
    (out / "memory_table.json").write_text(json.dumps(results, indent=2) + "\n")
    write_markdown(results, out / "memory_table.md")
    write_chart(results, out / "memory_table.png")
    print(f"[bench] wrote {out}/memory_table.md, .json, .png")


def write_markdown(r, path):
    worlds = sorted({row["ranks"] for row in r["rows"]})
    lines = ["# Memory and step time per option (measured)", "",
             f"Llama-style model ({', '.join(x.split('=')[0].split('.')[-1] + '=' + x.split('=')[1] for x in r['model'][:6])}), "
             f"byte tokens, AdamW, {r['steps']} steps (median step time over steps > {r['warmup']}); "
             "peak RSS per rank is VmHWM, max over ranks (it includes LibTorch's own ~200-300 MiB). "
             f"Machine: {r['machine']['cores']} cores, load average before {r['machine']['load_before'][0]:.1f}"
             + (f"; other processes used {100 * r['machine']['other_cpu_share']:.0f}% of its CPU time while this ran"
                if r["machine"].get("other_cpu_share") is not None else "") + ". "
             "Regenerate with `make bench-memory`.", ""]
    if (r["machine"].get("other_cpu_share") or 0) > OTHER_CPU_LIMIT:
        lines += ["> **Load caveat:** other processes shared the machine: step times are noisy.", ""]
    lines += [
             "| configuration | " + " | ".join(f"np{n} peak RSS MiB | np{n} ms/step" for n in worlds) + " |",
             "|---|" + "---:|---:|" * len(worlds)]
    names = []
    for row in r["rows"]:
        if row["config"] not in names:
            names.append(row["config"])
    for name in names:
        cells = []
        for n in worlds:
            m = [x for x in r["rows"] if x["config"] == name and x["ranks"] == n]
            cells += [f"{m[0]['peak_rss_mb']:.0f}", f"{m[0]['step_ms']:.0f}"] if m else ["", ""]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if r["prefetch"]:
        lines += ["", "## Prefetch and overlap (FULL_SHARD)", "",
                  "T_compute: the same step with no communication (N independent 1-rank jobs at once). "
                  "T_comm: the step's collectives (each unit's two all-gathers and its reduce-scatter, "
                  "the same sizes in the same order) with no compute, `fsdpp-bench collectives`. "
                  "Overlap efficiency: max(T_compute, T_comm) / T_step (1.0: communication entirely "
                  "hidden and nothing else in the way).", "",
                  "| ranks | no prefetch ms/step | prefetch ms/step | T_compute ms | T_comm ms | overlap eff. (no prefetch) | overlap eff. (prefetch) |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for e in r["prefetch"]:
            tc = e.get("t_comm_ms")
            lines.append(f"| {e['ranks']} | {e['no prefetch']['step_ms']:.0f} | {e['prefetch']['step_ms']:.0f} | "
                         f"{e['t_compute_ms']:.0f} | {'' if tc is None else f'{tc:.0f}'} | "
                         f"{e['no prefetch']['overlap_efficiency']:.2f} | {e['prefetch']['overlap_efficiency']:.2f} |")
    path.write_text("\n".join(lines) + "\n")


def write_chart(r, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[bench] matplotlib missing: no chart", file=sys.stderr)
        return
    worlds = sorted({row["ranks"] for row in r["rows"]})
    names = []
    for row in r["rows"]:
        if row["config"] not in names:
            names.append(row["config"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        xs, mem, ms = [], [], []
        for j, n in enumerate(worlds):
            m = [x for x in r["rows"] if x["config"] == name and x["ranks"] == n]
            if m:
                xs.append(j + i * width)
                mem.append(m[0]["peak_rss_mb"])
                ms.append(m[0]["step_ms"])
        axes[0].bar(xs, mem, width, label=name)
        axes[1].bar(xs, ms, width, label=name)
    for ax, title in zip(axes, ["peak RSS per rank (MiB)", "step time (ms)"]):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(worlds))])
        ax.set_xticklabels([f"{n} rank{'s' if n > 1 else ''}" for n in worlds])
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
