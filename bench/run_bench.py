"""`make bench`: fsdpp against PyTorch's own FSDP2, side by side (docs/benchmarks.md).

  python bench/run_bench.py --build-dir build            # the headline model (>= 10M parameters)
  BENCH_QUICK=1 python bench/run_bench.py ...             # a tiny model, for a smoke test

Knobs (flag or environment variable): --steps/BENCH_STEPS timed steps per run,
--warmup/BENCH_WARMUP untimed steps before them, --repeats/BENCH_REPEATS runs of each side per
configuration (alternated fsdpp, pytorch, fsdpp, pytorch, ...), --configs/BENCH_CONFIGS which
strategies at which world sizes ("full_shard:1,2,4 shard_grad_op:2 no_shard:2"),
--tp-configs/BENCH_TP_CONFIGS fsdpp's tensor-parallel layouts side by side, TPxDP_SHARD[+sp]
("1x4 2x1 2x2 2x2+sp": FSDP 4, TP 2, TP 2 x FSDP 2, the same with sequence parallelism; "" for
none), --out-dir (bench/results), --quick/BENCH_QUICK.

Writes <out-dir>/<timestamp>.json, .md and .png, and copies them to latest.*.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tp_bench import parse_tp_configs, run_tp_plan, tp_problems, tp_report  # noqa: E402
import trace_overlap  # noqa: E402
ROOT = os.path.dirname(HERE)

# The headline model: 11.2 M parameters (byte vocabulary, GQA 6 query / 2 kv heads, SwiGLU 1024).
HEADLINE = {
    "model": {"vocab_size": 256, "dim": 384, "n_layers": 7, "n_heads": 6, "n_kv_heads": 2,
              "ffn_hidden": 0, "multiple_of": 32, "max_seq_len": 128, "tie_embeddings": False,
              "seed": 0},
    "local_batch": 4, "seq_len": 128,
}
QUICK = {
    "model": {"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
              "ffn_hidden": 0, "multiple_of": 32, "max_seq_len": 32, "tie_embeddings": True,
              "seed": 0},
    "local_batch": 2, "seq_len": 32,
}
OPTIM = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
# On one rank every strategy is the same computation: FULL_SHARD alone runs there.
DEFAULT_CONFIGS = "full_shard:1,2,4 shard_grad_op:2 no_shard:2"
# fsdpp alone (PyTorch's side has no tensor parallelism here): tp x dp_shard, FULL_SHARD over dp_shard.
DEFAULT_TP_CONFIGS = "1x4 2x1 2x2 2x2+sp"
LOSS_TOLERANCE = 1e-4   # |fsdpp - pytorch| of the loss after the last step
ESTIMATE_TOLERANCE = 0.15


OTHER_CPU_LIMIT = 0.10   # above this share of the CPUs used by other processes, the report warns


def other_cpu_probe():
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its waited-for
    descendants, wall time) now, for other_cpu_share()."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    hz = os.sysconf("SC_CLK_TCK")
    me = os.times()
    ours = me.user + me.system + me.children_user + me.children_system
    return ((user + nice + system + irq + softirq + steal) / hz, ours, time.time())


def other_cpu_share(before, after):
    """Share of the machine's CPU time that processes outside this benchmark used between two
    probes: what the load average cannot tell apart from the benchmark's own ranks."""
    busy = after[0] - before[0]
    ours = after[1] - before[1]
    wall = after[2] - before[2]
    if wall <= 0:
        return None
    return max(0.0, (busy - ours) / (wall * os.cpu_count()))


def env_default(name, default):
    return os.environ.get(name, default)


def log(msg):
    print(f"[bench] {msg}", flush=True)


def parse_configs(text):
    plan = []
    for item in text.replace(";", " ").split():
        strategy, _, sizes = item.partition(":")
        if strategy not in ("full_shard", "shard_grad_op", "no_shard") or not sizes:
            raise SystemExit(f"[bench] config '{item}': expected STRATEGY:N[,N...] with STRATEGY one of "
                             "full_shard, shard_grad_op, no_shard")
        plan += [(strategy, int(n)) for n in sizes.split(",") if n]
    return plan


def run(cmd, env=None, timeout=900, attempts=1):
    """Runs cmd; a failed attempt is reported and retried up to `attempts` times in all."""
    for attempt in range(1, attempts + 1):
        t0 = time.time()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
        if p.returncode == 0:
            return p.stdout, time.time() - t0
        sys.stderr.write(p.stdout[-4000:])
        log(f"command failed ({p.returncode}, attempt {attempt} of {attempts}): {' '.join(cmd)}")
    raise SystemExit(f"[bench] giving up on: {' '.join(cmd)}")


def corpus_bytes():
    """Real text makes the loss fall; any will do, and none is required."""
    for path in (os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"),
                 "/work/shared/data/tinyshakespeare.txt"):
        if os.path.isfile(path):
            return open(path, "rb").read(), os.path.normpath(path)
    fortunes = "/usr/share/games/fortunes"
    if os.path.isdir(fortunes):
        data = b""
        for name in sorted(os.listdir(fortunes)):
            p = os.path.join(fortunes, name)
            if os.path.isfile(p) and not os.path.islink(p) and not name.endswith((".dat", ".u8")):
                data += open(p, "rb").read()
        if data:
            return data, fortunes
    return None, "random tokens"


def make_batches(work, cfg, max_world, n_batches):
    import torch
    from safetensors.torch import save_file
    B, T, V = cfg["local_batch"], cfg["seq_len"], cfg["model"]["vocab_size"]
    g = torch.Generator().manual_seed(1234)
    text, source = corpus_bytes()
    rows = n_batches * max_world * B
    if text is not None and len(text) > T + 2:
        data = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(torch.int64) % V
        starts = torch.randint(0, data.numel() - T - 1, (rows,), generator=g)
        tokens = torch.stack([data[s:s + T + 1] for s in starts.tolist()])
    else:
        tokens = torch.randint(0, V, (rows, T + 1), generator=g)
    tokens = tokens.view(n_batches, max_world * B, T + 1).contiguous()
    save_file({"tokens": tokens}, os.path.join(work, "batches.safetensors"))
    return source


def param_count(m):
    from llama_torch import ffn_hidden_dim
    C, V, L = m["dim"], m["vocab_size"], m["n_layers"]
    kv = (m.get("n_kv_heads") or m["n_heads"]) * (C // m["n_heads"])
    F = ffn_hidden_dim(C, m.get("ffn_hidden", 0), m.get("multiple_of", 32))
    block = 2 * C * C + 2 * C * kv + 3 * C * F + 2 * C
    return V * C * (1 if m.get("tie_embeddings") else 2) + C + L * block


def edge_count(m):
    """Parameters of the root unit (embeddings, final norm, head) and of the last block: what
    --keep-ends keeps gathered from forward to backward."""
    C, V, L = m["dim"], m["vocab_size"], m["n_layers"]
    root = V * C * (1 if m.get("tie_embeddings") else 2) + C
    return root + (param_count(m) - root) // L


def theory_bytes(strategy, n, param_bytes, kept_bytes=0):
    """Bytes each rank sends per step with ring collectives (ZeRO paper, section 7); units kept
    gathered from forward to backward (kept_bytes) skip FULL_SHARD's backward all-gather."""
    if n == 1:
        return 0.0
    f = (n - 1) / n
    if strategy == "full_shard":
        return (3 * param_bytes - kept_bytes) * f
    return {"shard_grad_op": 2, "no_shard": 2}[strategy] * param_bytes * f


def median(v):
    return statistics.median(v) if v else float("nan")


def merge(runs):
    """One result from the repeats of one side: every timed step, the worst peak per rank."""
    out = dict(runs[0])
    out["step_ms"] = [t for r in runs for t in r["step_ms"]]
    out["median_step_ms"] = median(out["step_ms"])
    out["peak_rss_mb"] = [max(r["peak_rss_mb"][i] for r in runs) for i in range(len(runs[0]["peak_rss_mb"]))]
    out["baseline_rss_mb"] = [max(r["baseline_rss_mb"][i] for r in runs)
                              for i in range(len(runs[0]["baseline_rss_mb"]))]
    for k in ("forward", "backward", "optimizer"):
        out["phase_ms"][k] = median([r["phase_ms"][k] for r in runs])
    out["wire_bytes_per_step"] = median([r.get("wire_bytes_per_step", float("nan")) for r in runs])
    out["final_losses"] = [r["final_loss"] for r in runs]
    return out


def estimate(build, cfg, strategy, n, baseline_mb, mmap_threshold, tp=1, sp=False, batch=None):
    m = cfg["model"]
    cmd = [os.path.join(build, "bin", "fsdpp-estimate"), "--json",
           "--vocab-size", str(m["vocab_size"]), "--dim", str(m["dim"]), "--n-layers", str(m["n_layers"]),
           "--n-heads", str(m["n_heads"]), "--n-kv-heads", str(m.get("n_kv_heads", 0)),
           "--ffn-hidden", str(m.get("ffn_hidden", 0)), "--multiple-of", str(m.get("multiple_of", 32)),
           "--max-seq-len", str(m["max_seq_len"]),
           "--batch", str(batch or cfg["local_batch"]), "--seq-len", str(cfg["seq_len"]), "--tp", str(tp),
           "--strategy", strategy, "--world-size", str(n), "--runtime-baseline-mb", f"{baseline_mb:.1f}",
           "--build-whole",  # fsdpp-bench builds the model whole, then shards it
           "--mmap-threshold", str(mmap_threshold)]
    if m.get("tie_embeddings"):
        cmd.append("--tie-embeddings")
    if sp:
        cmd.append("--sequence-parallel")
    out, _ = run(cmd)
    return json.loads(out)["estimates"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--steps", type=int, default=int(env_default("BENCH_STEPS", "3")))
    ap.add_argument("--warmup", type=int, default=int(env_default("BENCH_WARMUP", "1")))
    ap.add_argument("--repeats", type=int, default=int(env_default("BENCH_REPEATS", "2")))
    ap.add_argument("--configs", default=env_default("BENCH_CONFIGS", DEFAULT_CONFIGS),
                    help="strategy:world,sizes ... (default %(default)s)")
    ap.add_argument("--tp-configs", default=env_default("BENCH_TP_CONFIGS", DEFAULT_TP_CONFIGS),
                    help="fsdpp's tensor-parallel layouts, TPxDP_SHARD[+sp] ... (default %(default)s; '' for none)")
    ap.add_argument("--quick", action="store_true", default=env_default("BENCH_QUICK", "0") not in ("", "0"))
    ap.add_argument("--mmap-threshold", type=int, default=int(env_default("BENCH_MALLOC_MMAP_THRESHOLD", "0") or 0),
                    help="MALLOC_MMAP_THRESHOLD_ for both sides' timed runs; 0: glibc's default malloc")
    ap.add_argument("--memory-check-threshold", type=int,
                    default=int(env_default("BENCH_MEMORY_CHECK_THRESHOLD", "65536") or 0),
                    help="one more fsdpp run per configuration with this MALLOC_MMAP_THRESHOLD_, where RSS "
                         "follows the live tensors, to check fsdpp-estimate against (0: check the timed runs)")
    ap.add_argument("--forward-prefetch", type=int, default=int(env_default("BENCH_FORWARD_PREFETCH", "1")),
                    help="units whose all-gather each unit issues before its own forward, both sides "
                         "(fsdpp's forward_prefetch, FSDP2's set_modules_to_forward_prefetch)")
    ap.add_argument("--keep-ends", type=int, default=int(env_default("BENCH_KEEP_ENDS", "1")),
                    help="1: the root and the last block keep their parameters from forward to backward, "
                         "both sides (fsdpp's set_reshard_after_forward, FSDP2's reshard_after_forward=False "
                         "on them: torchtitan's layout); 0: every unit reshards")
    ap.add_argument("--reduce-bucket-size", type=int,
                    default=int(env_default("BENCH_REDUCE_BUCKET_SIZE", "1000000")),
                    help="fsdpp's reduce_bucket_size: gradient elements per reduce-scatter bucket, issued "
                         "as soon as computed (0: one reduce-scatter per unit, as FSDP2)")
    ap.add_argument("--trace-prefetch", default=env_default("BENCH_TRACE_PREFETCH", "0,1,2"),
                    help="forward prefetch depths of the traced fsdpp runs, one per depth and multi-rank "
                         "configuration, whose traces give the exposed communication ('' for none)")
    ap.add_argument("--note", default=env_default("BENCH_NOTE", ""),
                    help="a line for the report (e.g. what else ran on the machine)")
    ap.add_argument("--render", metavar="JSON",
                    help="only rewrite the Markdown report and chart of an earlier run from its JSON "
                         "(after a change to the report's layout); nothing is run")
    a = ap.parse_args()
    if a.render:
        return render(a.render)

    sys.path.insert(0, HERE)
    build = os.path.abspath(a.build_dir)
    bench_bin = os.path.join(build, "bin", "fsdpp-bench")
    run_bin = os.path.join(build, "bin", "fsdpp-run")
    for b in (bench_bin, run_bin, os.path.join(build, "bin", "fsdpp-estimate")):
        if not os.path.exists(b):
            raise SystemExit(f"[bench] {b} is missing: build the targets fsdpp-bench fsdpp-run fsdpp-estimate")
    plan = parse_configs(a.configs) if a.configs.strip() else []
    tp_plan = parse_tp_configs(a.tp_configs)
    world_sizes = sorted({n for _, n in plan} | {tp * dp for tp, dp, _ in tp_plan})
    cfg = dict(QUICK if a.quick else HEADLINE)
    cfg.update(OPTIM)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    # glibc's malloc with a fixed mmap threshold, for both sides: every tensor of 64 KiB or more
    # gets its own mapping and is returned when freed, so peak RSS measures what the programs
    # hold rather than what glibc's heap happened to keep (docs/benchmarks.md).
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if a.mmap_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = str(a.mmap_threshold)
    check_env = dict(env)
    check_threshold = a.memory_check_threshold or a.mmap_threshold
    if a.memory_check_threshold:
        check_env["MALLOC_MMAP_THRESHOLD_"] = str(a.memory_check_threshold)
    python = sys.executable
    started = datetime.datetime.now()
    load_before = os.getloadavg()
    cpu_before = other_cpu_probe()

    work = tempfile.mkdtemp(prefix="fsdpp-bench-")
    try:
        with open(os.path.join(work, "config.json"), "w") as f:
            json.dump(cfg, f)
        run([bench_bin, "init", "--dir", work], env=env)
        source = make_batches(work, cfg, max(world_sizes), a.warmup + a.steps)
        n_params = param_count(cfg["model"])
        log(f"model: {n_params / 1e6:.2f} M parameters, {cfg['local_batch']} x {cfg['seq_len']} tokens "
            f"per rank, data: {source}; {a.warmup} warm-up + {a.steps} timed steps, {a.repeats} repeats")

        def launch_fsdpp(n, args, out, run_env=None):
            run([run_bin, "--nproc-per-node", str(n), "--timeout-s", "600", bench_bin] + args + ["--out", out],
                env=run_env or env)
            return json.load(open(out))

        def launch_torch(n, args, out):
            # Gloo's teardown in PyTorch now and then aborts a rank after the work is done: retry.
            run([python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
                 os.path.join(HERE, "torch_bench.py")] + args + ["--out", out], env=env, attempts=2)
            return json.load(open(out))

        trace_depths = [int(d) for d in a.trace_prefetch.split(",") if d.strip()]
        keep_ends = ["--keep-ends"] if a.keep_ends else []
        fsdpp_layout = keep_ends + ["--reduce-bucket-size", str(a.reduce_bucket_size)]

        def launch_traced(n, strategy, depth):
            # The timed steps traced (FSDPP_PROFILE_STEPS; a step runs from one root forward to
            # the next, so one more step ends the last traced one), at a given forward prefetch.
            tdir = os.path.join(work, f"trace-{strategy}-{n}-{depth}")
            run_env = dict(env, FSDPP_PROFILE_STEPS=f"{a.warmup + 1}-{a.warmup + a.steps}", FSDPP_TRACE_DIR=tdir)
            r = launch_fsdpp(n, ["train", "--dir", work, "--strategy", strategy, "--steps", str(a.steps + 1),
                                 "--warmup", str(a.warmup), "--forward-prefetch", str(depth)] + fsdpp_layout,
                             os.path.join(work, f"traced-{strategy}-{n}-{depth}.json"), run_env)
            s = trace_overlap.summarize(trace_overlap.read(tdir))
            s.update(forward_prefetch=depth, peak_rss_mb=max(r["peak_rss_mb"]))
            return s

        # The runtime's own memory, per world size (fsdpp-estimate's runtime term).
        baseline = {}
        for n in world_sizes:
            r = launch_fsdpp(n, ["baseline"], os.path.join(work, f"baseline-{n}.json"))
            baseline[n] = max(r["peak_rss_mb"])
        log("runtime baseline (peak RSS of a bare LibTorch + Gloo training process): " +
            ", ".join(f"{n} ranks {baseline[n]:.0f} MiB" for n in world_sizes))

        # Compute alone: every rank trains its own unsharded copy, no communication, the same
        # number of processes sharing the cores as in the sharded run; run after each pair of the
        # first configuration at that world size, so that it sees the same load.
        compute = {n: [] for n in world_sizes}

        def launch_compute(n, rep):
            r = launch_fsdpp(n, ["train", "--dir", work, "--no-fsdp", "--steps", str(a.steps),
                                 "--warmup", str(a.warmup)], os.path.join(work, f"compute-{n}-{rep}.json"))
            compute[n].append(r)

        configs = []
        for strategy, n in plan:
            runs = {"fsdpp": [], "pytorch": []}
            common = ["--dir", work, "--strategy", strategy, "--steps", str(a.steps), "--warmup", str(a.warmup),
                      "--forward-prefetch", str(a.forward_prefetch)]
            for rep in range(a.repeats):
                # Alternate (fsdpp, pytorch, fsdpp, pytorch, ...), so that a noisy minute hits both.
                for side in ("fsdpp", "pytorch"):
                    out = os.path.join(work, f"{side}-{strategy}-{n}-{rep}.json")
                    if side == "fsdpp":
                        runs[side].append(launch_fsdpp(n, ["train"] + common + fsdpp_layout, out))
                    else:
                        runs[side].append(launch_torch(n, common + keep_ends, out))
                if len(compute[n]) < a.repeats:
                    launch_compute(n, rep)
            fs, pt = merge(runs["fsdpp"]), merge(runs["pytorch"])
            coll = None
            if n > 1:
                coll = launch_fsdpp(n, ["collectives", "--dir", work, "--strategy", strategy,
                                        "--repeats", str(max(2, a.steps))] + keep_ends,
                                    os.path.join(work, f"coll-{strategy}-{n}.json"))
            est = estimate(build, cfg, strategy, n, baseline[n], a.mmap_threshold)
            memory_check = None
            if a.memory_check_threshold:
                memory_check = launch_fsdpp(n, ["train"] + common[:-6] + ["--steps", "2", "--warmup", "1"] +
                                            fsdpp_layout,
                                            os.path.join(work, f"memory-{strategy}-{n}.json"), check_env)
            check_est = estimate(build, cfg, strategy, n, baseline[n], check_threshold)
            traced = []
            for depth in (trace_depths if n > 1 else []):
                traced.append(launch_traced(n, strategy, depth))
            c = {"strategy": strategy, "world_size": n, "keep_ends": bool(a.keep_ends), "fsdpp": fs, "pytorch": pt,
                 "compute": merge(compute[n]), "collectives": coll, "estimate": est,
                 "memory_check": memory_check, "memory_check_estimate": check_est, "traced": traced}
            derive(c, cfg, n_params, os.cpu_count() or 1)
            configs.append(c)
            log(f"{strategy} x{n}: fsdpp {fs['median_step_ms']:.0f} ms, pytorch {pt['median_step_ms']:.0f} ms "
                f"(ratio {c['ratio']:.2f}); peak RSS {max(fs['peak_rss_mb']):.0f} vs {max(pt['peak_rss_mb']):.0f} MiB; "
                f"final loss {fs['final_loss']:.6f} vs {pt['final_loss']:.6f}")

        scaling(configs, cfg)
        tp_rows = run_tp_plan(tp_plan, cfg, a, work, baseline, launch_fsdpp, build, check_env, check_threshold,
                              sys.modules[__name__])
        finished = datetime.datetime.now()
        result = {
            "started": started.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "load_before": load_before,
                        "load_after": os.getloadavg(), "platform": platform.platform(),
                        "other_cpu_share": other_cpu_share(cpu_before, other_cpu_probe())},
            "quick": a.quick, "note": a.note, "config": cfg, "num_params": n_params, "data": source,
            "steps": a.steps, "warmup": a.warmup, "repeats": a.repeats, "forward_prefetch": a.forward_prefetch,
            "keep_ends": bool(a.keep_ends), "reduce_bucket_size": a.reduce_bucket_size,
            "environment": {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": env.get("MALLOC_MMAP_THRESHOLD_", ""),
                            "memory_check_MALLOC_MMAP_THRESHOLD_": check_env.get("MALLOC_MMAP_THRESHOLD_", "")},
            "runtime_baseline_mb": baseline, "configs": configs, "tp_configs": tp_rows,
        }
        problems = check(result)
        result["problems"] = problems
        os.makedirs(a.out_dir, exist_ok=True)
        stamp = started.strftime("%Y%m%d-%H%M%S") + ("-quick" if a.quick else "")
        base = os.path.join(a.out_dir, stamp)
        with open(base + ".json", "w") as f:
            json.dump(result, f, indent=1)
        chart(result, base + ".png")
        with open(base + ".md", "w") as f:
            f.write(report(result, os.path.basename(base) + ".png"))
        if not a.quick:
            for ext in ("json", "png"):
                shutil.copyfile(f"{base}.{ext}", os.path.join(a.out_dir, f"latest.{ext}"))
            with open(os.path.join(a.out_dir, "latest.md"), "w") as f:
                f.write(report(result, "latest.png"))
        log(f"wrote {base}.md / .json / .png" + ("" if a.quick else " and latest.*"))
        for p in problems:
            log("PROBLEM: " + p)
        return 1 if any(p.startswith(("loss", "tp comm")) for p in problems) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def render(path):
    with open(path) as f:
        result = json.load(f)
    for c in result["configs"]:
        derive(c, result["config"], result["num_params"], result["machine"]["cpus"])
    scaling(result["configs"], result["config"])
    base = os.path.splitext(path)[0]
    chart(result, base + ".png")
    with open(base + ".md", "w") as f:
        f.write(report(result, os.path.basename(base) + ".png"))
    log(f"rewrote {base}.md and .png from {path}")
    return 0


def derive(c, cfg, n_params, cpus):
    fs, pt, n = c["fsdpp"], c["pytorch"], c["world_size"]
    tokens = cfg["local_batch"] * cfg["seq_len"] * n
    c["ratio"] = fs["median_step_ms"] / pt["median_step_ms"]
    c["fsdpp_tokens_per_s"] = tokens / (fs["median_step_ms"] / 1e3)
    c["pytorch_tokens_per_s"] = tokens / (pt["median_step_ms"] / 1e3)
    c["loss_diff"] = abs(fs["final_loss"] - pt["final_loss"])
    c["max_step_loss_diff"] = max(abs(a - b) for a, b in zip(fs["losses"], pt["losses"]))
    c["theory_bytes_per_step"] = theory_bytes(c["strategy"], n, 4 * n_params,
                                              4 * edge_count(cfg["model"]) if c.get("keep_ends") else 0)
    t_step = fs["median_step_ms"]
    t_compute = c["compute"]["median_step_ms"]
    coll = c["collectives"]
    t_comm = coll["t_comm_ms"] if coll else 0.0
    t_copy = coll["t_copy_ms"] if coll else 0.0
    c["profile_ms"] = {"step": t_step, "compute": t_compute, "communication": t_comm, "copies": t_copy,
                       "waiting_other": t_step - t_compute - t_comm - t_copy}
    c["overlap_efficiency"] = max(t_compute, t_comm) / t_step if t_step > 0 else float("nan")
    # At one rank T_compute is plain LibTorch (the same model and AdamW, no fully_shard): what
    # fsdpp's step costs over it is FSDP's own overhead, with nothing to communicate.
    if n == 1:
        c["plain_libtorch_ratio"] = t_step / t_compute if t_compute > 0 else float("nan")
    # The best ratio this fsdpp could reach on this machine: its step with every collective and
    # copy hidden, i.e. the compute alone with the optimizer stepping only the local shard.
    floor = t_compute - c["compute"]["phase_ms"]["optimizer"] + fs["phase_ms"]["optimizer"]
    c["floor_ms"] = floor
    c["floor_ratio"] = floor / pt["median_step_ms"]
    # With every core computing, the collectives' own CPU time (Gloo's socket copies and sums,
    # t_comm_cpu_ms) and the copies cannot hide behind compute: they add to each rank's work,
    # stretched by ranks/cores when the ranks share cores (as T_compute already is).
    if coll and coll.get("t_comm_cpu_ms") is not None:
        share = max(1.0, n / cpus)  # the cores of the machine the run was on
        cpu_floor = floor + share * (coll["t_comm_cpu_ms"] + t_copy)
        c["cpu_floor_ms"] = cpu_floor
        c["cpu_floor_ratio"] = cpu_floor / pt["median_step_ms"]
    # In-step communication time is not timed inside fsdpp: take what is not compute and not the
    # copies. Collective efficiency = busbw in the step / standalone busbw at the same sizes.
    in_step = t_step - t_compute - t_copy
    if coll and t_comm > 0 and in_step > 0:
        c["collective_efficiency"] = t_comm / in_step
        c["busbw_standalone_gbps"] = coll["comm_bytes_per_step"] / (t_comm / 1e3) / 1e9
        c["busbw_in_step_gbps"] = fs["comm_bytes_per_step"] / (in_step / 1e3) / 1e9
    else:
        c["collective_efficiency"] = None
    est = c["estimate"]["total_bytes"] / 2**20
    meas = max(fs["peak_rss_mb"])
    c["estimate_mb"] = est
    c["estimate_error_timed_runs"] = (est - meas) / meas
    # The checked pair: the memory-check run (fixed mmap threshold) and its estimate.
    chk = c["memory_check"] or fs
    c["checked_peak_mb"] = max(chk["peak_rss_mb"])
    c["checked_estimate_mb"] = c["memory_check_estimate"]["total_bytes"] / 2**20
    c["estimate_error"] = (c["checked_estimate_mb"] - c["checked_peak_mb"]) / c["checked_peak_mb"]


def scaling(configs, cfg):
    one = {c["strategy"]: c for c in configs if c["world_size"] == 1}
    ref = one.get("full_shard")
    for c in configs:
        if ref:
            per_rank = c["fsdpp_tokens_per_s"] / c["world_size"]
            c["weak_scaling_efficiency"] = per_rank / ref["fsdpp_tokens_per_s"]
            c["pytorch_weak_scaling_efficiency"] = (c["pytorch_tokens_per_s"] / c["world_size"]) / ref["pytorch_tokens_per_s"]


def check(result):
    problems = tp_problems(result.get("tp_configs") or [], LOSS_TOLERANCE, ESTIMATE_TOLERANCE)
    for c in result["configs"]:
        name = f"{c['strategy']} x{c['world_size']}"
        if c["loss_diff"] > LOSS_TOLERANCE:
            problems.append(f"loss: {name}: fsdpp {c['fsdpp']['final_loss']:.6f} vs pytorch "
                            f"{c['pytorch']['final_loss']:.6f} differ by {c['loss_diff']:.2e} > {LOSS_TOLERANCE}")
        if abs(c["estimate_error"]) > ESTIMATE_TOLERANCE:
            problems.append(f"estimate: {name}: fsdpp-estimate {c['checked_estimate_mb']:.0f} MiB vs measured "
                            f"{c['checked_peak_mb']:.0f} MiB ({100 * c['estimate_error']:+.1f}%)")
    return problems


def mb(x):
    return f"{x / 1e6:.1f}"


def report(r, png):
    m = r["config"]["model"]
    L = []
    w = L.append
    title = "fsdpp vs PyTorch FSDP2 (fully_shard), Gloo on CPU"
    w(f"# {title}\n")
    w(f"Run {r['started']} to {r['finished']} on `{r['machine']['host']}` ({r['machine']['cpus']} CPUs, "
      f"load average {r['machine']['load_before'][0]:.1f} before, {r['machine']['load_after'][0]:.1f} after). "
      f"`make bench` re-runs it; [docs/benchmarks.md](../../docs/benchmarks.md) explains every column.\n")
    other = r["machine"].get("other_cpu_share")
    if other is not None:
        w(f"CPU time used by other processes while this ran: {100 * other:.0f}% of the machine's "
          f"(/proc/stat's busy time less the benchmark's own processes).\n")
    if (other is not None and other > OTHER_CPU_LIMIT) or (
            other is None and (r["machine"]["load_before"][0] > 1.5 or r["machine"]["load_after"][0] > 1.5)):
        w(f"> **Load caveat:** the machine was shared while this ran (load average "
          f"{r['machine']['load_before'][0]:.1f} / {r['machine']['load_after'][0]:.1f} on {r['machine']['cpus']} CPUs). "
          f"Step times are noisy; ratios from alternated runs are "
          f"less so. Re-run `make bench` on a quiet machine for numbers to quote.\n")
    if r.get("note"):
        w(f"Note: {r['note']}.\n")
    if r["quick"]:
        w("> **Quick run** (BENCH_QUICK): a tiny model, for checking the harness, not for quoting.\n")
    w(f"Model: Llama-style, {r['num_params'] / 1e6:.2f} M parameters (dim {m['dim']}, {m['n_layers']} layers, "
      f"{m['n_heads']} heads / {m.get('n_kv_heads') or m['n_heads']} kv heads, vocab {m['vocab_size']}, "
      f"{'tied' if m.get('tie_embeddings') else 'untied'} head), fp32, AdamW; "
      f"{r['config']['local_batch']} x {r['config']['seq_len']} tokens per rank per step (fixed local batch); "
      f"units: each TransformerBlock, then the root" +
      (" (the root and the last block keep their parameters from forward to backward on both sides: "
       "fsdpp's set_reshard_after_forward, FSDP2's reshard_after_forward=False, torchtitan's layout)"
       if r.get("keep_ends") else "") +
      (f"; fsdpp reduces gradients in buckets of {r['reduce_bucket_size'] / 1e6:g} M elements as they are "
       f"computed (reduce_bucket_size; FSDP2 has no such option and reduces each unit at once)"
       if r.get("reduce_bucket_size") else "") +
      f". Same initial weights (fsdpp wrote them to safetensors, "
      f"PyTorch loaded them) and the same batches ({r['data']}). One intra-op thread per rank. "
      f"{r['warmup']} warm-up + {r['steps']} timed steps per run, {r['repeats']} runs of each side alternated; "
      f"medians over all timed steps. Forward prefetch {r.get('forward_prefetch', 0)} on both sides (each unit "
      f"issues the all-gather of the next {r.get('forward_prefetch', 0)} before its own forward: fsdpp's "
      f"forward_prefetch, FSDP2's set_modules_to_forward_prefetch). Both sides ran with OMP_NUM_THREADS=1"
      + (f" and MALLOC_MMAP_THRESHOLD_={r['environment']['MALLOC_MMAP_THRESHOLD_']} (tensors of that size or more "
         f"get their own mapping, returned when freed: RSS follows what the programs hold)"
         if r["environment"]["MALLOC_MMAP_THRESHOLD_"] else " and glibc's default malloc") + ".\n")
    w(f"![chart]({png})\n")

    w("## Speed\n")
    w("| strategy | ranks | fsdpp ms/step | PyTorch ms/step | fsdpp / PyTorch | fsdpp tokens/s | PyTorch tokens/s | target (<= 0.8) |")
    w("|---|---:|---:|---:|---:|---:|---:|---|")
    for c in r["configs"]:
        target = "—" if c["world_size"] == 1 else ("met" if c["ratio"] <= 0.8 else f"gap: {c['ratio'] - 0.8:+.2f}")
        w(f"| {c['strategy']} | {c['world_size']} | {c['fsdpp']['median_step_ms']:.0f} | "
          f"{c['pytorch']['median_step_ms']:.0f} | **{c['ratio']:.2f}** | {c['fsdpp_tokens_per_s']:.0f} | "
          f"{c['pytorch_tokens_per_s']:.0f} | {target} |")
    w("")
    ones = [c for c in r["configs"] if c["world_size"] == 1 and "plain_libtorch_ratio" in c]
    if ones:
        w("## One rank: fsdpp against plain LibTorch\n")
        w("The same model, batches and AdamW in one process without `fully_shard` (`fsdpp-bench train "
          "--no-fsdp`, alternated with the fsdpp runs): what FSDP itself costs where it has nothing to "
          "communicate. Target: at most 1.03.\n")
        w("| strategy | fsdpp ms/step | plain LibTorch ms/step | fsdpp / plain | forward fsdpp / plain | "
          "backward fsdpp / plain | optimizer fsdpp / plain | target (<= 1.03) |")
        w("|---|---:|---:|---:|---:|---:|---:|---|")
        for c in ones:
            f, p = c["fsdpp"]["phase_ms"], c["compute"]["phase_ms"]
            target = "met" if c["plain_libtorch_ratio"] <= 1.03 else f"gap: {c['plain_libtorch_ratio'] - 1.03:+.3f}"
            w(f"| {c['strategy']} | {c['fsdpp']['median_step_ms']:.0f} | {c['compute']['median_step_ms']:.0f} | "
              f"**{c['plain_libtorch_ratio']:.3f}** | {f['forward']:.0f} / {p['forward']:.0f} | "
              f"{f['backward']:.0f} / {p['backward']:.0f} | {f['optimizer']:.0f} / {p['optimizer']:.0f} | {target} |")
        w("")
    w("## Memory (peak RSS per rank, MiB)\n")
    chk_env = r["environment"].get("memory_check_MALLOC_MMAP_THRESHOLD_", "")
    w("Peak resident set (VmHWM) of each rank in the timed runs, worst rank shown; 'model' is the peak minus "
      "the process's own RSS just before the model was built (interpreter, libraries, Gloo). fsdpp-estimate "
      "([docs/estimate.md](../../docs/estimate.md)) for the same configuration: beside the timed runs (with "
      "glibc's default malloc its heap fragmentation is a lower bound, so the estimate reads low), and the "
      "checked pair" + (f": one more fsdpp run with MALLOC_MMAP_THRESHOLD_={chk_env}, where RSS follows the "
                         "live tensors, and the estimate for it" if chk_env else "") +
      ", which must agree within 15%.\n")
    w("| strategy | ranks | fsdpp peak | PyTorch peak | fsdpp model | PyTorch model | fsdpp <= PyTorch | estimate (error) | checked: fsdpp peak | estimate | error |")
    w("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for c in r["configs"]:
        fp, pp = max(c["fsdpp"]["peak_rss_mb"]), max(c["pytorch"]["peak_rss_mb"])
        fm = max(p - b for p, b in zip(c["fsdpp"]["peak_rss_mb"], c["fsdpp"]["baseline_rss_mb"]))
        pm = max(p - b for p, b in zip(c["pytorch"]["peak_rss_mb"], c["pytorch"]["baseline_rss_mb"]))
        ok = "yes" if fp <= pp else f"no: +{fp - pp:.0f}"
        w(f"| {c['strategy']} | {c['world_size']} | {fp:.0f} | {pp:.0f} | {fm:.0f} | {pm:.0f} | {ok} | "
          f"{c['estimate_mb']:.0f} ({100 * c['estimate_error_timed_runs']:+.1f}%) | {c['checked_peak_mb']:.0f} | "
          f"{c['checked_estimate_mb']:.0f} | **{100 * c['estimate_error']:+.1f}%** |")
    w("")
    w("## Loss after the last step\n")
    w(f"Global mean training loss; the two must agree within {LOSS_TOLERANCE:g} (the bench fails otherwise).\n")
    w("| strategy | ranks | fsdpp | PyTorch | abs diff (last step) | max abs diff (any step) |")
    w("|---|---:|---:|---:|---:|---:|")
    for c in r["configs"]:
        w(f"| {c['strategy']} | {c['world_size']} | {c['fsdpp']['final_loss']:.6f} | {c['pytorch']['final_loss']:.6f} | "
          f"{c['loss_diff']:.1e} | {c['max_step_loss_diff']:.1e} |")
    w("")
    w("## Communication per step per rank (MB, 10^6 bytes)\n")
    w("Theory: ring collectives over the fp32 parameter bytes S, FULL_SHARD 3·S·(N-1)/N" +
      (" less the backward all-gather of the units kept gathered (the root and the last block, S_kept·(N-1)/N)"
       if r.get("keep_ends") else "") +
      ", SHARD_GRAD_OP and NO_SHARD 2·S·(N-1)/N. fsdpp counted: its process group's counters (bytes sent as the algorithm moves "
      "them; shards padded to a multiple of N rows). PyTorch issued: the collectives FSDP2 called "
      "(torch.distributed wrapped), at the same algorithm model, Gloo's reduce_scatter_tensor being an "
      "all-reduce of the whole input in c10d. Wire: bytes each process wrote to its sockets during the step "
      "(/proc/self/io), measured the same way on both sides.\n")
    w("| strategy | ranks | theory | fsdpp counted | fsdpp wire | PyTorch issued | PyTorch wire |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for c in r["configs"]:
        w(f"| {c['strategy']} | {c['world_size']} | {mb(c['theory_bytes_per_step'])} | "
          f"{mb(c['fsdpp']['comm_bytes_per_step'])} | {mb(c['fsdpp'].get('wire_bytes_per_step', 0))} | "
          f"{mb(c['pytorch']['comm_bytes_per_step'])} | {mb(c['pytorch'].get('wire_bytes_per_step', 0))} |")
    w("")
    w("## Scaling and overlap (fsdpp)\n")
    w("Weak scaling: tokens/s per rank at N over tokens/s at 1 rank (FULL_SHARD), local batch fixed "
      "(on a machine with fewer cores than ranks this is bounded by cores/ranks). T_compute: the same step "
      "with no sharding and no communication, the same number of processes running at once. T_comm: the "
      "step's collectives, same sizes and order, run standalone. Overlap efficiency = max(T_compute, T_comm) "
      "/ T_step. Collective efficiency = busbw inside the step / standalone busbw, where the time inside the "
      "step is T_step - T_compute - T_copies (fsdpp has no timers inside its FSDP core; this is measured "
      "from outside: a value above 1 means part of the communication was hidden behind compute).\n")
    w("| strategy | ranks | weak scaling fsdpp | weak scaling PyTorch | T_step | T_compute | T_comm | overlap eff. | busbw standalone GB/s | busbw in step GB/s (apparent) | collective eff. (apparent) |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in r["configs"]:
        p = c["profile_ms"]
        ce = c.get("collective_efficiency")
        w(f"| {c['strategy']} | {c['world_size']} | {c.get('weak_scaling_efficiency', float('nan')):.2f} | "
          f"{c.get('pytorch_weak_scaling_efficiency', float('nan')):.2f} | {p['step']:.0f} | {p['compute']:.0f} | "
          f"{p['communication']:.0f} | {c['overlap_efficiency']:.2f} | "
          f"{c.get('busbw_standalone_gbps', float('nan')):.2f} | {c.get('busbw_in_step_gbps', float('nan')):.2f} | "
          f"{'n/a' if ce is None else f'{ce:.2f}'} |")
    w("")
    traced = [(c, t) for c in r["configs"] for t in c.get("traced") or []]
    if traced:
        w("## Overlap read from the traces (fsdpp)\n")
        w("One more fsdpp run per forward prefetch depth with its timed steps traced (FSDPP_PROFILE_STEPS, "
          "[observability.md](../../docs/observability.md#timeline-traces)); medians over every rank and traced "
          "step. Collectives ran: the time the process groups' comm tracks were busy. Exposed: the time the "
          "main thread blocked in Work::wait, the communication the step did not hide. Hidden = 1 - exposed / "
          "ran; not waiting = 1 - exposed / step. Peak RSS: the run's worst rank, the memory cost of "
          "gathering further ahead. Longest waits: mean per step over ranks and steps, by phase and unit.\n")
        w("| strategy | ranks | forward prefetch | step ms (trace) | collectives ran | exposed | hidden | not waiting | peak RSS MiB | longest waits (ms per step) |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for c, t in traced:
            top = "; ".join(f"{k} {v:.1f}" for k, v in t["top_exposed"])
            w(f"| {c['strategy']} | {c['world_size']} | {t['forward_prefetch']} | {t['step_ms']:.0f} | "
              f"{t['comm_ms']:.0f} | {t['exposed_ms']:.1f} | {t['hidden']:.2f} | {t['not_waiting']:.2f} | "
              f"{t['peak_rss_mb']:.0f} | {top} |")
        w("")
    gaps = [c for c in r["configs"] if c["world_size"] > 1 and c["ratio"] > 0.8]
    mem_gaps = [c for c in r["configs"] if max(c["fsdpp"]["peak_rss_mb"]) > max(c["pytorch"]["peak_rss_mb"])]
    w("## Where fsdpp's time goes\n")
    if gaps or mem_gaps:
        w("Configurations short of the target (step time above 0.8x PyTorch's, or more memory): the step split "
          "into compute (T_compute), communication (standalone T_comm), copies (gather copy-out, reduce-scatter "
          "copy-in and the gradient division, timed standalone with the same tensor ops) and the rest (waiting, "
          "hooks, allocation; negative when communication overlaps compute). Forward / backward / optimizer are "
          "the phases as timed inside the step.\n")
    else:
        w("Every configuration meets the target; the split is shown for reference.\n")
    w("Floor: fsdpp's step with every collective and copy hidden (T_compute, its optimizer on the local shard "
      "only), over PyTorch's step. CPU floor: the floor plus what cannot hide when every core computes, the "
      "collectives' own CPU time (comm CPU: every thread of the process inside the standalone collectives, "
      "socket copies and sums) and the copies, times ranks/cores when ranks share cores.\n")
    w("| strategy | ranks | T_step | compute | communication | comm CPU | copies | waiting / other | forward | backward | optimizer | PyTorch fwd / bwd / opt | floor ratio | CPU floor ratio |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for c in (gaps or r["configs"]):
        p, ph, pph = c["profile_ms"], c["fsdpp"]["phase_ms"], c["pytorch"]["phase_ms"]
        floor, cpu_floor = c.get("floor_ratio"), c.get("cpu_floor_ratio")
        comm_cpu = (c.get("collectives") or {}).get("t_comm_cpu_ms")
        w(f"| {c['strategy']} | {c['world_size']} | {p['step']:.0f} | {p['compute']:.0f} | {p['communication']:.0f} | "
          f"{'' if comm_cpu is None else f'{comm_cpu:.0f}'} | "
          f"{p['copies']:.0f} | {p['waiting_other']:.0f} | {ph['forward']:.0f} | {ph['backward']:.0f} | "
          f"{ph['optimizer']:.0f} | {pph['forward']:.0f} / {pph['backward']:.0f} / {pph['optimizer']:.0f} | "
          f"{'' if floor is None else f'{floor:.2f}'} | {'' if cpu_floor is None else f'{cpu_floor:.2f}'} |")
    w("")
    tp_report(r, w, mb)
    if r["problems"]:
        w("## Problems found by this run\n")
        for p in r["problems"]:
            w(f"- {p}")
        w("")
    w(f"Raw numbers: the JSON beside this file. Runtime baseline (fsdpp-bench baseline, peak RSS of a bare "
      f"LibTorch + Gloo process that trained a tiny model): " +
      ", ".join(f"{n} ranks {v:.0f} MiB" for n, v in r["runtime_baseline_mb"].items()) + ".\n")
    return "\n".join(L)


def chart(r, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cs = r["configs"]
    labels = [f"{c['strategy'].replace('_', ' ')}\nx{c['world_size']}" for c in cs]
    x = range(len(cs))
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.8))
    wd = 0.38
    ax[0].bar([i - wd / 2 for i in x], [c["fsdpp"]["median_step_ms"] for c in cs], wd, label="fsdpp")
    ax[0].bar([i + wd / 2 for i in x], [c["pytorch"]["median_step_ms"] for c in cs], wd, label="PyTorch FSDP2")
    for i, c in enumerate(cs):
        ax[0].annotate(f"{c['ratio']:.2f}x", (i, max(c["fsdpp"]["median_step_ms"], c["pytorch"]["median_step_ms"])),
                       ha="center", va="bottom", fontsize=8)
    ax[0].set_title("median step time (ms), ratio fsdpp/PyTorch")
    ax[1].bar([i - wd / 2 for i in x], [max(c["fsdpp"]["peak_rss_mb"]) for c in cs], wd, label="fsdpp")
    ax[1].bar([i + wd / 2 for i in x], [max(c["pytorch"]["peak_rss_mb"]) for c in cs], wd, label="PyTorch FSDP2")
    ax[1].plot(list(x), [c["estimate_mb"] for c in cs], "k_", markersize=18, mew=2, label="fsdpp-estimate")
    ax[1].plot(list(x), [c["checked_peak_mb"] for c in cs], "r.", markersize=10,
               label="fsdpp, fixed mmap threshold")
    ax[1].set_title("peak RSS per rank (MiB)")
    parts = ["compute", "communication", "copies", "waiting_other"]
    bottom = [0.0] * len(cs)
    for part in parts:
        vals = [max(0.0, c["profile_ms"][part]) for c in cs]
        ax[2].bar(list(x), vals, 0.6, bottom=bottom, label=part.replace("_", " / "))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax[2].plot(list(x), [c["profile_ms"]["step"] for c in cs], "k_", markersize=18, mew=2, label="T_step")
    ax[2].set_title("fsdpp step profile (ms)")
    for a_ in ax:
        a_.set_xticks(list(x))
        a_.set_xticklabels(labels, fontsize=8)
        a_.legend(fontsize=7)
    load = r["machine"]["load_before"][0]
    fig.suptitle(f"fsdpp vs PyTorch FSDP2, Llama {r['num_params'] / 1e6:.1f}M, Gloo/CPU, {r['started']}"
                 f" (load {load:.1f} on {r['machine']['cpus']} CPUs)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
