#!/usr/bin/env python3
"""A model larger than one rank's memory limit, trained and reloaded (issue 27, docs/fully-shard.md
"Models larger than one device").

fsdpp-train on a 1.57 B-parameter Llama (6.3 GB in fp32) over 4 ranks of FULL_SHARD, AdamW with its
state offloaded to memory-mapped files (fsdp_offload_optimizer_state_dir), every rank under a hard
data limit (RLIMIT_DATA, set by prlimit for each rank: malloc's memory, private writable mappings)
smaller than the model in fp32:

  1. model.deferred_init=off under the limit: every rank builds the whole model first; the
     allocation fails (the memory check skipped, to show the real failure), and with the check on
     the trainer refuses before it allocates, naming the whole model's build;
  2. model.deferred_init=exact under the limit: trains --steps steps, saves a SHARDED checkpoint;
  3. fsdpp-ckpt export-hf of it (one process, outside the limit: an offline conversion);
  4. model.init_from=<that Hugging Face directory> under the same limit: trains --steps steps;
  5. fsdpp-estimate for the same config, deferred and --build-whole.

Writes bench/results/big_model.{json,md}: per rank the peak RSS (VmHWM, from metrics.jsonl) of
each run against the estimate and against what building the whole model needs, the losses, the
times, and what else the machine was running.

  python3 bench/big_model.py [--build build] [--steps 2] [--limit-gib 4.75] [--quick]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from run_bench import other_cpu_probe, other_cpu_share  # noqa: E402

# 34 blocks of dim 2048 (16 heads of 128, 4 kv heads, SwiGLU 5632) and a vocabulary of 8192:
# 1.57 B parameters, 6.3 GB in fp32.
MODEL = ["model.dim=2048", "model.n_layers=34", "model.n_heads=16", "model.n_kv_heads=4",
         "model.ffn_hidden=5632", "model.vocab_size=8192", "model.max_seq_len=16", "data.seq_len=16",
         "training.per_device_train_batch_size=1"]
QUICK_MODEL = ["model.dim=256", "model.n_layers=8", "model.n_heads=4", "model.n_kv_heads=2",
               "model.ffn_hidden=704", "model.vocab_size=2048", "model.max_seq_len=64", "data.seq_len=64",
               "training.per_device_train_batch_size=1"]
RANKS = 4


def machine_state():
    """What else the machine is doing: memory, load, the largest other processes."""
    mem = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        if k in ("MemTotal", "MemAvailable", "Cached", "Dirty"):
            mem[k] = int(v.split()[0]) * 1024
    ps = subprocess.run(["ps", "-eo", "rss=,comm=", "--sort=-rss"], stdout=subprocess.PIPE, text=True).stdout
    top = [l.split(None, 1) for l in ps.splitlines()[:8]]
    return {"mem": mem, "load": os.getloadavg(),
            "top_rss": [{"rss_mb": int(r) / 1024, "comm": c.strip()} for r, c in top if r.isdigit()]}


def train(build, overrides, out_dir, port, limit_bytes, log):
    """fsdpp-train on RANKS ranks, each under RLIMIT_DATA = limit_bytes; returns (rc, metrics, s)."""
    cmd = [str(build / "bin/fsdpp-run"), "--nproc-per-node", str(RANKS), "--master-port", str(port),
           "--timeout-s", "1800", "prlimit", f"--data={limit_bytes}",
           str(build / "bin/fsdpp-train"), str(ROOT / "configs/default.yaml")] + overrides + [
           f"training.output_dir={out_dir}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.time()
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    metrics = Path(out_dir) / "metrics.jsonl"
    rows = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()] if metrics.exists() else []
    return rc, rows, time.time() - t0


def last_error(log):
    lines = [l for l in Path(log).read_text().splitlines() if "[train]" in l or "Error" in l or "error" in l]
    return lines[-1][:600] if lines else Path(log).read_text()[-600:]


def estimate(build, overrides, extra):
    cmd = [str(build / "bin/fsdpp-estimate"), str(ROOT / "configs/default.yaml")] + overrides + [
        "--world-size", str(RANKS), "--json"] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return json.loads(p.stdout)["estimates"][0]


def summary(rows):
    if not rows:
        return None
    return {"steps": len(rows), "losses": [r["loss"] for r in rows],
            "step_ms": [r["step_ms"] for r in rows],
            "peak_rss_mb_per_rank": rows[-1].get("peak_rss_mb_per_rank"),
            "peak_rss_mb": rows[-1]["peak_rss_mb"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--limit-gib", type=float, default=4.75, help="RLIMIT_DATA of each rank")
    ap.add_argument("--out", default=str(ROOT / "bench/results"))
    ap.add_argument("--work", default=None, help="scratch directory on a disk (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="a small model and limit, to check the harness")
    ap.add_argument("--port", type=int, default=29861)
    args = ap.parse_args()
    build = Path(args.build).resolve()
    model = QUICK_MODEL if args.quick else MODEL
    limit_gib = 0.9 if args.quick and args.limit_gib == 4.75 else args.limit_gib
    limit = int(limit_gib * (1 << 30))
    work = Path(args.work or tempfile.mkdtemp(prefix="fsdpp-big-model-", dir=str(ROOT / "build")))
    work.mkdir(parents=True, exist_ok=True)
    common = model + [
        f"training.max_steps={args.steps}", "training.logging_steps=1", "training.eval_steps=0",
        "training.sample_tokens=0", "training.warmup_steps=0", "training.fsdp=full_shard",
        f"data.cache_dir={work}/cache",
        # Large blocks from mmap, returned when freed: RLIMIT_DATA counts the heap's address
        # space, which glibc's dynamic threshold would keep growing (docs/fully-shard.md#memory).
        "training.malloc_mmap_threshold=1048576",
        f"training.fsdp_config.fsdp_offload_optimizer_state_dir={work}/optim"]
    res = {"model": model, "ranks": RANKS, "limit_bytes": limit, "steps": args.steps, "quick": args.quick,
           "machine_before": machine_state(), "runs": {}}
    cpu_before = other_cpu_probe()
    port = args.port

    def run(name, overrides, expect_ok):
        nonlocal port
        port += 1
        out = work / name
        shutil.rmtree(out, ignore_errors=True)
        log = work / f"{name}.log"
        print(f"[bench] {name} ...", flush=True)
        rc, rows, secs = train(build, common + overrides, out, port, limit, log)
        r = {"rc": rc, "seconds": secs, "log": str(log), "summary": summary(rows),
             "machine_after": machine_state()}
        if rc != 0:
            r["error"] = last_error(log)
        res["runs"][name] = r
        print(f"[bench] {name}: exit {rc} in {secs:.0f} s" + (f": {r['error']}" if rc else ""), flush=True)
        if expect_ok and rc != 0:
            raise SystemExit(f"[bench] {name} failed; see {log}")
        return r

    run("whole_unchecked", ["model.deferred_init=off", "training.skip_memory_check=true", "training.max_steps=1",
                            "training.save_strategy=no"], False)
    run("whole_checked", ["model.deferred_init=off", "training.skip_memory_check=false", "training.max_steps=1",
                          "training.save_strategy=no"], False)
    run("deferred_exact", ["model.deferred_init=exact", "training.save_strategy=steps",
                           f"training.save_steps={args.steps}", "training.save_only_model=true"], True)
    ckpt = work / "deferred_exact" / f"checkpoint-{args.steps}"
    hf = work / "hf"
    shutil.rmtree(hf, ignore_errors=True)
    t0 = time.time()
    subprocess.run([str(build / "bin/fsdpp-ckpt"), "export-hf", str(ckpt), str(hf)], check=True,
                   stdout=subprocess.DEVNULL)
    res["export_seconds"] = time.time() - t0
    shutil.rmtree(work / "deferred_exact" / f"checkpoint-{args.steps}", ignore_errors=True)
    run("init_from_hf", [f"model.init_from={hf}", "training.save_strategy=no"], True)
    res["estimate_deferred"] = estimate(build, model, ["--optimizer-state-on-disk"])
    res["estimate_whole"] = estimate(build, model, ["--optimizer-state-on-disk", "--build-whole"])
    res["num_params"] = json.loads(subprocess.run(
        [str(build / "bin/fsdpp-estimate"), str(ROOT / "configs/default.yaml")] + model + ["--json"],
        stdout=subprocess.PIPE, text=True, check=True).stdout)["num_params"]
    res["other_cpu_share"] = other_cpu_share(cpu_before, other_cpu_probe())
    res["machine_after"] = machine_state()
    shutil.rmtree(hf, ignore_errors=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "big_model_quick" if args.quick else "big_model"
    (out / f"{name}.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / f"{name}.md").write_text(report(res))
    print((out / f"{name}.md").read_text())
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


def report(r):
    gib = 1 << 30
    m = r["machine_before"]
    lines = []
    w = lines.append
    w(f"# A model larger than one rank's memory ({time.strftime('%Y-%m-%d %H:%M')})\n")
    if r["quick"]:
        w("> **Quick run**: a small model and limit, for checking the harness, not for quoting.\n")
    w(f"Llama, {r['num_params'] / 1e9:.2f} B parameters ({4 * r['num_params'] / 1e9:.2f} GB in fp32): "
      f"`{' '.join(r['model'])}`; {r['ranks']} ranks of FULL_SHARD on the CPU (Gloo), AdamW with its state "
      f"in memory-mapped files, {r['steps']} steps. Every rank under RLIMIT_DATA = "
      f"{r['limit_bytes'] / gib:.2f} GiB (`prlimit --data`).\n")
    ed, ew = r["estimate_deferred"], r["estimate_whole"]
    w("| run | exit | peak RSS per rank (MiB) | losses | s |")
    w("|---|---|---|---|---|")
    for name, run in r["runs"].items():
        s = run["summary"]
        peaks = ", ".join(f"{p:.0f}" for p in (s or {}).get("peak_rss_mb_per_rank") or []) or "-"
        losses = ", ".join(f"{x:.4f}" for x in (s or {}).get("losses", [])) or "-"
        w(f"| {name} | {run['rc']} | {peaks} | {losses} | {run['seconds']:.0f} |")
    w("")
    for name, run in r["runs"].items():
        if run.get("error"):
            w(f"- {name}: `{run['error']}`")
    w("")
    w(f"fsdpp-estimate for the same config at N={r['ranks']} (`--optimizer-state-on-disk`: one parameter's AdamW "
      f"state mapped in at a time): deferred {ed['total_bytes'] / gib:.2f} GiB (peak at {ed['peak_at']}), "
      f"built whole (`--build-whole`) {ew['total_bytes'] / gib:.2f} GiB (peak at {ew['peak_at']}). The Hugging Face "
      f"export between the runs is one offline process (`fsdpp-ckpt export-hf`, {r['export_seconds']:.0f} s) outside "
      f"the limit.\n")
    w(f"Machine: {m['mem']['MemTotal'] / gib:.1f} GiB, {m['mem']['MemAvailable'] / gib:.1f} GiB available before, load "
      f"{m['load'][0]:.1f}; other processes used {100 * (r['other_cpu_share'] or 0):.0f}% of the CPUs during the "
      f"runs; largest processes before: " + ", ".join(f"{p['comm']} {p['rss_mb']:.0f} MiB" for p in m["top_rss"][:5]) + ".\n")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
