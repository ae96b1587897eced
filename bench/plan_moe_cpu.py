#!/usr/bin/env python3
"""fsdpp-plan's MoE step time against Qwen3-MoE steps measured here (docs/planner.md#moe-steps-measured-here).

fsdpp runs a sparse layer's experts one after another, and fsdpp-plan times them as those kernels
(src/estimate/expert_kernels.cpp): per expert a handful of small GEMMs and copies, each paying at
least the cluster's op overhead. This runs fsdpp-train on this machine (CPU, Gloo) for Qwen3-MoE
layouts whose time is mostly the experts (the small model of configs/qwen3-moe-small.yaml with 8
and 64 experts, on 1 and 2 ranks, with and without expert parallelism, and once with glibc's own
mmap threshold, training.malloc_mmap_threshold=0), takes the median step after the warm-up (the
fastest of --runs runs, as bench/plan_calibration.py does), and sets it beside fsdpp-plan
--cluster cpu for the same layout, and beside the same prediction with the experts at the dense
matmuls' rate (what the planner did before). Nothing is fitted. Writes
bench/results/plan_moe_cpu.{md,json}.

  python3 bench/plan_moe_cpu.py --build build [--steps 12] [--runs 3]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

LAYOUTS = [  # name, ranks, overrides, expert parallelism
    ("8 experts, FSDP 1", 1, [], 1),
    ("64 experts, FSDP 1", 1, ["model.num_experts=64"], 1),
    ("64 experts, FSDP 2", 2, ["model.num_experts=64"], 1),
    ("64 experts, FSDP 2, EP 2", 2, ["model.num_experts=64", "parallelism.expert_parallel_degree=2"], 2),
    ("64 experts, FSDP 1, glibc's threshold", 1, ["model.num_experts=64", "training.malloc_mmap_threshold=0"], 1),
]
GLOBAL_BATCH = 8
CONFIG = "configs/qwen3-moe-small.yaml"
RATE = 47.5e9  # the cpu preset's fitted rate per core (src/estimate/cluster.cpp)


def measure(build, src, name, ranks, overrides, steps, workdir):
    out = os.path.join(workdir, name.replace(" ", "_").replace(",", ""))
    args = [f"{build}/bin/fsdpp-run", "--nproc-per-node", str(ranks), "--timeout-s", "300",
            f"{build}/bin/fsdpp-train", f"{src}/{CONFIG}", f"data.path={src}/docs",
            f"data.cache_dir={workdir}/cache", f"training.output_dir={out}", f"training.max_steps={steps}",
            "training.logging_steps=1", "training.eval_steps=0", "training.sample_tokens=0",
            "training.save_strategy=no", "training.overwrite_output_dir=true", "training.report_to=none",
            f"training.per_device_train_batch_size={GLOBAL_BATCH // ranks}", "training.seed=1"] + overrides
    load = os.getloadavg()[0]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: fsdpp-train failed:\n{r.stderr[-3000:]}")
    ms = [json.loads(l)["step_ms"] for l in open(f"{out}/metrics.jsonl") if '"step_ms"' in l][2:]
    return statistics.median(ms) / 1000, load


def predict(build, src, ranks, overrides, ep, workdir):
    out = os.path.join(workdir, "plan.json")
    args = [f"{build}/bin/fsdpp-plan", f"{src}/{CONFIG}", *[o for o in overrides if o.startswith("model.")],
            "--cluster", "cpu", "--world-size", str(ranks), "--global-batch", str(GLOBAL_BATCH), "--json", out,
            "--strategy", "full_shard", "--tp", "1", "--pp", "1", "--checkpointing", "off"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fsdpp-plan failed: {r.stderr}")
    rows = [row for row in json.load(open(out))["fitting"] if row["ep"] == ep]
    if not rows:
        sys.exit(f"fsdpp-plan has no layout with EP {ep}")
    return rows[0]


def dense_rate(row, ranks, moe):
    """The same prediction with the experts' FLOPs at the dense rate (the planner before)."""
    d, i, k, layers = moe
    tokens = GLOBAL_BATCH // ranks * 128
    crowding = max(1.0, ranks / 2)
    return row["step_s"] - row["experts_s"] + 18.0 * d * i * k * layers * tokens / RATE * crowding


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--reuse", help="take the measured steps from this earlier plan_moe_cpu.json")
    args = ap.parse_args()
    earlier = {r["layout"]: r["runs"] for r in json.load(open(args.reuse))["rows"]} if args.reuse else {}
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    moe = (128, 128, 2, 4)  # dim, expert width, top-k, sparse layers of configs/qwen3-moe-small.yaml
    runs = {name: earlier[name] for name, *_ in LAYOUTS if name in earlier}
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(args.runs):
            for name, ranks, overrides, ep in LAYOUTS:
                if name in earlier:
                    continue
                step, load = measure(args.build, src, name, ranks, overrides, args.steps, workdir)
                runs.setdefault(name, []).append({"step_s": step, "load_avg_1min": load})
                print(f"round {round_ + 1}: {name:26s} {step:7.3f} s (load {load:.1f})", flush=True)
        fastest = {name: min(r["step_s"] for r in runs[name]) for name in runs}
        rows = []
        for name, ranks, overrides, ep in LAYOUTS:
            p = predict(args.build, src, ranks, overrides, ep, workdir)
            dense = dense_rate(p, ranks, moe)
            rows.append({"layout": name, "ranks": ranks, "runs": runs[name], "measured_s": fastest[name],
                         "predicted_s": p["step_s"], "experts_s": p["experts_s"], "expert_ops": p["expert_ops"],
                         "dense_rate_s": dense, "ratio": p["step_s"] / fastest[name],
                         "dense_ratio": dense / fastest[name]})
            print(f"{name:26s} measured {fastest[name]:7.3f} s  predicted {p['step_s']:7.3f} s "
                  f"({rows[-1]['ratio']:.2f})  experts at the dense rate {dense:7.3f} s ({rows[-1]['dense_ratio']:.2f})",
                  flush=True)
    os.makedirs(f"{src}/bench/results", exist_ok=True)
    json.dump({"rows": rows}, open(f"{src}/bench/results/plan_moe_cpu.json", "w"),
              indent=1)
    with open(f"{src}/bench/results/plan_moe_cpu.md", "w") as f:
        f.write("| layout | ranks | runs (s) | fastest (s) | predicted (s) | of it experts (s) | predicted / fastest "
                "| experts at the dense rate (s) | that / fastest |\n|---|---:|---|---:|---:|---:|---:|---:|---:|\n")
        for r in rows:
            each = " / ".join(f"{x['step_s']:.3f}" for x in r["runs"])
            f.write(f"| {r['layout']} | {r['ranks']} | {each} | "
                    f"{r['measured_s']:.3f} | {r['predicted_s']:.3f} | {r['experts_s']:.3f} | {r['ratio']:.2f} | "
                    f"{r['dense_rate_s']:.3f} | {r['dense_ratio']:.2f} |\n")


if __name__ == "__main__":
    main()
