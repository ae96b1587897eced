"""`make bench-gpu`: fsdpp on a GPU against PyTorch, side by side in one run (docs/gpus.md).

  python3 bench/gpu_bench.py --bin build/bin --out bench/results [--quick] [--default-job DIR]

A Llama of about 1 B parameters (dim 2048, 16 layers, 16 heads, SwiGLU 5632, vocabulary 32000,
sequences of 2048 tokens, 4 per step), bf16 compute with fp32 master weights and reduction,
AdamW (fused on every side), activation checkpointing off and on, each run the same weights
(fsdpp-bench init) and batches:
  fsdpp          fsdpp-bench train on one rank over NCCL (FULL_SHARD at world size 1)
  pytorch-fsdp2  torch.distributed.fsdp.fully_shard at world size 1 (bench/gpu_torch_bench.py)
  pytorch-eager  the plain module under torch.autocast(bfloat16)
Then float8, activation checkpointing off only (--no-fp8 leaves these rows out):
  fsdpp          fsdpp-bench train --fp8 tensorwise, then rowwise (torchao's auto filter)
  pytorch-fsdp2  the same with torchao's float8 (bench/gpu_torch_bench.py --float8 tensorwise|rowwise);
                 without torchao it exits 3 and its row is reported as skipped, not as a failure
A float8 row that fails is reported as failed and the other rows still run; the script then exits 1
after writing the tables. A GPU below compute capability 8.9 (no float8 GEMMs) skips them all.
Reported: step time (median, timed to the device's end), tokens/s, MFU (6N + attention FLOPs per
token, fsdpp/estimate/flops.h, over the bf16 matrix-multiply rate measured here on 8192^3
products), the caching allocator's peak against fsdpp-estimate's (--device cuda), the losses.
--default-job DIR adds the default job's steps/s on the GPU and the CPU (tests/gpu/gpu_tests.sh
default_job's WORK_DIR). Writes OUT/gpu-latest.{json,md}; the bundle's programs must be on PATH
(fsdpp/env.sh) or in --bin.
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NO_TORCHAO = 3  # bench/gpu_torch_bench.py's exit status without torchao: the row is skipped
FP8_RECIPES = ("tensorwise", "rowwise")


def model_config(quick):
    if quick:
        return {"vocab_size": 8192, "dim": 512, "n_layers": 4, "n_heads": 8, "n_kv_heads": 8,
                "multiple_of": 256, "max_seq_len": 512, "seed": 0}, 512, 4
    return {"vocab_size": 32000, "dim": 2048, "n_layers": 16, "n_heads": 16, "n_kv_heads": 16,
            "multiple_of": 256, "max_seq_len": 2048, "seed": 0}, 2048, 4


def ffn_hidden(m):
    sys.path.insert(0, HERE)
    import llama_torch
    return llama_torch.ffn_hidden_dim(m["dim"], m.get("ffn_hidden", 0), m.get("multiple_of", 32))


def flops_per_token(m, seq):
    """6 N (the parameters a token multiplies with: all but the embedding lookup) plus 12 L H D T
    (attention), as fsdpp/estimate/flops.h and torchtitan count."""
    d, L, V, f = m["dim"], m["n_layers"], m["vocab_size"], ffn_hidden(m)
    hd = d // m["n_heads"]
    kv = m["n_kv_heads"] * hd
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * f + 2 * d  # wq wk wv wo, w1 w2 w3, 2 norms
    n = L * per_layer + d + V * d  # final norm, output layer
    return 6.0 * n + 12.0 * L * m["n_heads"] * hd * seq


def run(cmd, log, env=None, timeout=900):
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    if p.returncode != 0:
        sys.stdout.write(open(log).read()[-3000:])
        raise SystemExit(f"[bench-gpu] failed ({p.returncode}): {' '.join(cmd)} (log {log})")
    return time.time() - t0


def run_optional(cmd, log, env=None, timeout=900, torchao=False):
    """A float8 row's run: None when it passed, else ("skipped" or "failed", why); never raises.
    With torchao (bench/gpu_torch_bench.py's rows), exit status 3 means no torchao: skipped."""
    try:
        with open(log, "w") as f:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        rc = p.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        return "failed", f"{type(e).__name__}: {e}"
    if rc == 0:
        return None
    tail = [line.strip() for line in open(log, errors="replace").read().splitlines() if line.strip()]
    if torchao and rc == NO_TORCHAO:
        why = next((line for line in reversed(tail) if "skipped:" in line), "torchao cannot be imported")
        return "skipped", why.split("skipped:", 1)[-1].strip()
    sys.stdout.write("\n".join(tail[-40:]) + "\n")
    print(f"[bench-gpu] float8 row failed ({rc}): {' '.join(cmd)} (log {log})", flush=True)
    return "failed", f"exit {rc}" + (f": {tail[-1][:200]}" if tail else "")


def converted_count(log, j):
    """How many projections a float8 run converted: torchao's from its JSON, fsdpp's from its log
    ("[bench] float8 tensorwise: N projections")."""
    if "float8_converted" in j:
        return len(j["float8_converted"])
    m = re.findall(r"float8 \w+: (\d+) projections", open(log, errors="replace").read())
    return int(m[-1]) if m else None


def matmul_peak(torch):
    n, reps = 8192, 10
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - t0)


def profile(a, prog, d, env, steps):
    """fsdpp, FSDP2 and eager under the profiler, AC off and on; their kernels compared."""
    for ac in (False, True):
        tag = "ac" if ac else "noac"
        traces = []
        for impl in ("fsdpp", "fsdp2", "eager"):
            trace, out = (os.path.join(a.work, f"{impl}-{tag}.{ext}") for ext in ("trace.json", "json"))
            flags = steps + ["--profile", trace, "--out", out] + (["--ac"] if ac else [])
            if impl == "fsdpp":
                cmd = [prog("fsdpp-run"), "--nproc-per-node", "1", prog("fsdpp-bench"), "train", "--dir", d,
                       "--strategy", "full_shard", "--bf16", "--fused"]
            else:
                cmd = [sys.executable, os.path.join(HERE, "gpu_torch_bench.py"), "--dir", d, "--impl", impl]
            run(cmd + flags, os.path.join(a.work, f"{impl}-{tag}.log"), env)
            traces.append(f"{impl}={trace}")
        subprocess.run([sys.executable, os.path.join(HERE, "kernel_summary.py"), "--steps", str(a.steps),
                        "--title", f"GPU time per step by kind of kernel, activation checkpointing {tag}",
                        "--out", os.path.join(a.out, f"gpu-profile-{tag}.md")] + traces, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="", help="fsdpp's programs (default: on PATH)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/fsdpp-gpu-bench")
    ap.add_argument("--quick", action="store_true", help="a small model (a smoke run)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--default-job", default="", help="gpu_tests.sh default_job's work directory")
    ap.add_argument("--no-fp8", action="store_true",
                    help="leave out the float8 rows (fsdpp --fp8, torchao's float8 with FSDP2; AC off)")
    ap.add_argument("--profile", action="store_true",
                    help="instead of the timing table: each run's timed steps under PyTorch's profiler and "
                         "bench/kernel_summary.py's comparison of their kernels (OUT/gpu-profile-{noac,ac}.md)")
    a = ap.parse_args()
    a.quick = a.quick or os.environ.get("BENCH_QUICK") == "1"
    prog = lambda name: os.path.join(a.bin, name) if a.bin else name  # noqa: E731

    import torch
    from safetensors.torch import save_file
    if not torch.cuda.is_available():
        raise SystemExit("[bench-gpu] no CUDA device is visible: the GPU benchmark needs one (docs/gpus.md)")
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    m, seq, batch = model_config(a.quick)
    cfg = {"model": m, "seq_len": seq, "local_batch": batch, "lr": 3e-4, "betas": [0.9, 0.95],
           "eps": 1e-8, "weight_decay": 0.1}
    d = os.path.join(a.work, "model")
    os.makedirs(d, exist_ok=True)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    g = torch.Generator().manual_seed(1234)
    save_file({"tokens": torch.randint(0, m["vocab_size"], (4, batch, seq + 1), generator=g)},
              os.path.join(d, "batches.safetensors"))
    run([prog("fsdpp-bench"), "init", "--dir", d], os.path.join(a.work, "init.log"))
    peak = matmul_peak(torch)
    fpt = flops_per_token(m, seq)
    tokens_per_step = batch * seq
    gpu = torch.cuda.get_device_name(0)
    print(f"[bench-gpu] {gpu}: bf16 matmul {peak / 1e12:.0f} TFLOP/s measured; "
          f"{fpt:.3g} FLOPs/token; {tokens_per_step} tokens/step", flush=True)

    rows = []
    steps = ["--steps", str(a.steps), "--warmup", str(a.warmup)]
    env = dict(os.environ)
    env.pop("FSDPP_DEVICE", None)
    env.pop("FSDPP_BACKEND", None)  # one rank on the GPU: NCCL
    if a.profile:
        return profile(a, prog, d, env, steps)
    for ac in (False, True):
        tag = "ac" if ac else "noac"
        out = os.path.join(a.work, f"fsdpp-{tag}.json")
        run([prog("fsdpp-run"), "--nproc-per-node", "1", prog("fsdpp-bench"), "train", "--dir", d,
             "--strategy", "full_shard", "--bf16", "--fused", "--out", out] + steps + (["--ac"] if ac else []),
            os.path.join(a.work, f"fsdpp-{tag}.log"), env)
        rows.append(("fsdpp", ac, json.load(open(out))))
        for impl in ("fsdp2", "eager"):
            out = os.path.join(a.work, f"{impl}-{tag}.json")
            run([sys.executable, os.path.join(HERE, "gpu_torch_bench.py"), "--dir", d, "--impl", impl,
                 "--out", out] + steps + (["--ac"] if ac else []), os.path.join(a.work, f"{impl}-{tag}.log"))
            rows.append((f"pytorch-{impl}", ac, json.load(open(out))))
        est = subprocess.run(
            [prog("fsdpp-estimate"), "--vocab-size", str(m["vocab_size"]), "--dim", str(m["dim"]),
             "--n-layers", str(m["n_layers"]), "--n-heads", str(m["n_heads"]),
             "--n-kv-heads", str(m["n_kv_heads"]), "--multiple-of", str(m["multiple_of"]),
             "--max-seq-len", str(m["max_seq_len"]), "--batch", str(batch), "--seq-len", str(seq),
             "--param-dtype", "bf16", "--reduce-dtype", "fp32", "--device", "cuda", "--json"] + (["--activation-checkpointing"] if ac else []),
            capture_output=True, text=True, check=True)
        estimate = json.loads(est.stdout)
        for r in rows:
            if r[1] == ac and r[0] == "fsdpp":
                r[2]["estimate"] = estimate

    # float8, AC off only: fsdpp's float8 GEMMs against torchao's with FSDP2, after the rows above.
    fp8_rows, fp8_failed = [], False
    cc = torch.cuda.get_device_capability(0)
    fp8_skip = f"compute capability {cc[0]}.{cc[1]} < 8.9: no float8 GEMMs" if cc < (8, 9) else None
    for recipe in () if a.no_fp8 else FP8_RECIPES:
        for impl in ("fsdpp", "pytorch-fsdp2"):
            tag = f"{'fsdpp' if impl == 'fsdpp' else 'fsdp2'}-fp8-{recipe}"
            out, log = (os.path.join(a.work, f"{tag}.{ext}") for ext in ("json", "log"))
            if impl == "fsdpp":
                cmd = [prog("fsdpp-run"), "--nproc-per-node", "1", prog("fsdpp-bench"), "train", "--dir", d,
                       "--strategy", "full_shard", "--bf16", "--fused", "--fp8", recipe, "--out", out] + steps
                row_env = env
            else:
                cmd = [sys.executable, os.path.join(HERE, "gpu_torch_bench.py"), "--dir", d, "--impl", "fsdp2",
                       "--float8", recipe, "--out", out] + steps
                row_env = None
            status = ("skipped", fp8_skip) if fp8_skip else run_optional(cmd, log, row_env,
                                                                          torchao=impl != "fsdpp")
            if status is None:
                j = json.load(open(out))
                j["float8_converted_count"] = converted_count(log, j)
                fp8_rows.append((impl, recipe, j))
            else:
                fp8_failed |= status[0] == "failed"
                fp8_rows.append((impl, recipe, {status[0]: status[1]}))
                print(f"[bench-gpu] {impl} float8 {recipe}: {status[0]} ({status[1]})", flush=True)

    def summary(impl, ac, j, fp8="off"):
        if "skipped" in j or "failed" in j:
            state = "skipped" if "skipped" in j else "failed"
            return {"impl": impl, "activation_checkpointing": ac, "fp8": fp8, state: j[state]}
        ms = j["median_step_ms"]
        tps = tokens_per_step / (ms / 1000)
        s = {"impl": impl, "activation_checkpointing": ac, "fp8": fp8, "median_step_ms": ms, "tokens_per_s": tps,
             "mfu": fpt * tps / peak, "cuda_peak_allocated_mb": j.get("cuda_peak_allocated_mb"),
             "cuda_peak_reserved_mb": j.get("cuda_peak_reserved_mb"), "losses": j["losses"]}
        if fp8 != "off":
            s["float8_converted"] = j.get("float8_converted_count")
        if "estimate" in j:
            # The estimate's live tensors at the step's peak against the caching allocator's peak of
            # allocated bytes (the runtime, CUDA's context, is neither).
            e = j["estimate"]["estimates"][0]
            s["estimate_mb"] = e["tensors_bytes"] / 2**20
            s["estimate_over_peak"] = s["estimate_mb"] / s["cuda_peak_allocated_mb"]
        return s

    results = [summary(*r) for r in rows]
    for ac in (False, True):
        f = next(r for r in results if r["impl"] == "fsdpp" and r["activation_checkpointing"] == ac)
        t = next(r for r in results if r["impl"] == "pytorch-fsdp2" and r["activation_checkpointing"] == ac)
        e = next(r for r in results if r["impl"] == "pytorch-eager" and r["activation_checkpointing"] == ac)
        f["step_ratio_vs_fsdp2"] = f["median_step_ms"] / t["median_step_ms"]
        for r in (f, t):
            r["max_loss_diff_vs_eager"] = max(abs(x - y) / abs(y) for x, y in zip(r["losses"], e["losses"]))
    # The float8 rows, after the six above: each against its own bf16 row (AC off), fsdpp's against
    # torchao's of the same recipe, the losses against eager bf16's.
    fp8_results = [summary(impl, False, j, recipe) for impl, recipe, j in fp8_rows]
    results += fp8_results
    bf16 = {r["impl"]: r for r in results if not r["activation_checkpointing"] and r["fp8"] == "off"}
    float8 = []
    for recipe in () if a.no_fp8 else FP8_RECIPES:
        f, t = (next(r for r in fp8_results if r["impl"] == impl and r["fp8"] == recipe)
                for impl in ("fsdpp", "pytorch-fsdp2"))
        for r in (f, t):
            if "median_step_ms" in r:
                base = bf16[r["impl"]]
                r["tokens_per_s_vs_bf16"] = r["tokens_per_s"] / base["tokens_per_s"]
                r["max_loss_diff_vs_eager"] = max(abs(x - y) / abs(y)
                                                  for x, y in zip(r["losses"], bf16["pytorch-eager"]["losses"]))
        if "median_step_ms" in f and "median_step_ms" in t:
            f["step_ratio_vs_fsdp2"] = f["median_step_ms"] / t["median_step_ms"]
        float8.append({"recipe": recipe,
                       "fsdpp_vs_bf16": f.get("tokens_per_s_vs_bf16"),
                       "torchao_fsdp2_vs_bf16": t.get("tokens_per_s_vs_bf16"),
                       "fsdpp_step_over_torchao": f.get("step_ratio_vs_fsdp2"),
                       "fsdpp_converted": f.get("float8_converted"), "torchao_converted": t.get("float8_converted"),
                       "fsdpp_state": "ok" if "median_step_ms" in f else ("skipped" if "skipped" in f else "failed"),
                       "torchao_state": "ok" if "median_step_ms" in t else ("skipped" if "skipped" in t else "failed")})
    default_job = None
    if a.default_job and os.path.exists(os.path.join(a.default_job, "steps_per_s.json")):
        default_job = json.load(open(os.path.join(a.default_job, "steps_per_s.json")))
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    load = open("/proc/loadavg").read().split()[:3]
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
              "gpu": gpu, "nvidia_smi": smi, "torch": torch.__version__, "host": platform.node(),
              "cpus": os.cpu_count(), "loadavg_at_end": load, "quick": a.quick, "model": m,
              "seq_len": seq, "local_batch": batch, "flops_per_token": fpt, "bf16_matmul_flops": peak,
              "steps": a.steps, "warmup": a.warmup, "results": results, "float8": float8,
              "default_job": default_job}
    json.dump(report, open(os.path.join(a.out, "gpu-latest.json"), "w"), indent=1)
    lines = [f"# fsdpp on {gpu} ({report['date']})", "",
             f"{'Small smoke model' if a.quick else 'Llama ~1B'}: dim {m['dim']}, {m['n_layers']} layers, "
             f"vocab {m['vocab_size']}, seq {seq}, batch {batch} ({tokens_per_step} tokens/step), bf16 "
             f"compute, fp32 master weights and reduction, fused AdamW; world size 1. "
             f"bf16 matmul measured at {peak / 1e12:.0f} TFLOP/s; {fpt:.3g} FLOPs per token. "
             f"Median of {a.steps} steps after {a.warmup}. torch {torch.__version__}; nvidia-smi: {smi}; "
             f"load average at the end {' '.join(load)} ({os.cpu_count()} CPUs; nothing else of ours ran).", "",
             "| impl | AC | fp8 | step ms | tokens/s | MFU | peak alloc MiB | peak reserved MiB | estimate MiB | est/peak | fsdpp/FSDP2 | loss vs eager |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "median_step_ms" not in r:
            state = "skipped" if "skipped" in r else "failed"
            lines.append("| {} | {} | {} | {}: {} | | | | | | | | |".format(
                r["impl"], "on" if r["activation_checkpointing"] else "off", r["fp8"], state,
                r[state].replace("|", "/")))
            continue
        lines.append("| {} | {} | {} | {:.1f} | {:.0f} | {:.1%} | {:.0f} | {:.0f} | {} | {} | {} | {} |".format(
            r["impl"], "on" if r["activation_checkpointing"] else "off", r["fp8"], r["median_step_ms"], r["tokens_per_s"],
            r["mfu"], r["cuda_peak_allocated_mb"] or 0, r["cuda_peak_reserved_mb"] or 0,
            f"{r['estimate_mb']:.0f}" if "estimate_mb" in r else "",
            f"{r['estimate_over_peak']:.2f}" if "estimate_over_peak" in r else "",
            f"{r['step_ratio_vs_fsdp2']:.3f}" if "step_ratio_vs_fsdp2" in r else "",
            f"{r['max_loss_diff_vs_eager']:.1e}" if "max_loss_diff_vs_eager" in r else ""))
    if float8:
        fmt = lambda v, f: "" if v is None else format(v, f)  # noqa: E731
        lines += ["", "Float8 (AC off; MFU above is against the bf16 rate; each float8 row's loss against eager "
                  "bf16's): tokens/s against the same side's bf16 row, and fsdpp's float8 step against torchao's "
                  "float8 with FSDP2. converted: the projections each side took (torchao's auto filter, never "
                  "the LM head).", "",
                  "| recipe | fsdpp fp8 / fsdpp bf16 | torchao fp8 / FSDP2 bf16 | fsdpp fp8 step / torchao fp8 step | converted (fsdpp, torchao) |",
                  "|---|---|---|---|---|"]
        for x in float8:
            cell = lambda v, state: fmt(v, ".3f") if state == "ok" else state  # noqa: E731
            lines.append("| {} | {} | {} | {} | {}, {} |".format(
                x["recipe"], cell(x["fsdpp_vs_bf16"], x["fsdpp_state"]),
                cell(x["torchao_fsdp2_vs_bf16"], x["torchao_state"]), fmt(x["fsdpp_step_over_torchao"], ".3f"),
                fmt(x["fsdpp_converted"], "d") or "-", fmt(x["torchao_converted"], "d") or "-"))
    if default_job:
        lines += ["", "Default job (configs/default.yaml, one rank) steps/s: " +
                  ", ".join(f"{k} {v:.1f}" for k, v in default_job["steps_per_s"].items())]
    open(os.path.join(a.out, "gpu-latest.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if fp8_failed:
        raise SystemExit("[bench-gpu] a float8 row failed (its row in the tables says why); the other rows ran")


if __name__ == "__main__":
    main()
