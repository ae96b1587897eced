#!/usr/bin/env python3
"""fsdpp-plan's step time against steps measured here (docs/planner.md#measured-here).

Runs fsdpp-train on this machine (CPU, Gloo) for every layout the planner can describe with up to
8 ranks of a small Llama (FULL_SHARD on 1, 2, 4, 8 ranks, SHARD_GRAD_OP and NO_SHARD on 2 and 4,
checkpointing, TP 2, PP 2), takes the median step time of the steps after the warm-up, and asks
fsdpp-plan --cluster cpu for the same layout. The cpu preset's compute rate comes from the FSDP 1
row and its Gloo bandwidth from the DDP rows (src/estimate/step_time.cpp); every other row is a
check. Writes bench/results/plan_calibration.{md,json}, with the load average at each run. The
same layout's median step varies by up to 30% from run to run even on a quiet machine (a VM on
a shared host), so every layout is measured --runs times, in rounds (each round runs every
layout once), and the fastest run is the one compared: the step without interference.

  python3 bench/plan_calibration.py --build build [--steps 16] [--runs 3]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

LAYOUTS = [  # name, ranks, fsdpp-train overrides, fsdpp-plan filters
    ("FSDP 1", 1, ["training.fsdp=full_shard"], ["--strategy", "full_shard", "--tp", "1", "--pp", "1"]),
    ("FSDP 2", 2, ["training.fsdp=full_shard"], ["--strategy", "full_shard", "--tp", "1", "--pp", "1"]),
    ("FSDP 4", 4, ["training.fsdp=full_shard"], ["--strategy", "full_shard", "--tp", "1", "--pp", "1"]),
    ("FSDP 8", 8, ["training.fsdp=full_shard"], ["--strategy", "full_shard", "--tp", "1", "--pp", "1"]),
    ("ZeRO-2 2", 2, ["training.fsdp=shard_grad_op"], ["--strategy", "shard_grad_op", "--tp", "1", "--pp", "1"]),
    ("DDP 2", 2, ["training.fsdp=no_shard"], ["--strategy", "no_shard", "--tp", "1", "--pp", "1"]),
    ("DDP 4", 4, ["training.fsdp=no_shard"], ["--strategy", "no_shard", "--tp", "1", "--pp", "1"]),
    ("FSDP 2 + ckpt", 2, ["training.fsdp=full_shard", "training.gradient_checkpointing=true"],
     ["--strategy", "full_shard", "--tp", "1", "--pp", "1", "--checkpointing", "on"]),
    ("FSDP 2 x TP 2", 4, ["training.fsdp=full_shard", "parallelism.tensor_parallel_degree=2"],
     ["--strategy", "full_shard", "--tp", "2", "--pp", "1"]),
    ("PP 2 x FSDP 1", 2, ["training.fsdp=full_shard", "parallelism.pipeline_parallel_degree=2",
                          "parallelism.pipeline_parallel_schedule=1F1B",
                          "parallelism.pipeline_parallel_microbatch_size=1"],
     ["--strategy", "full_shard", "--tp", "1", "--pp", "2"]),
]
GLOBAL_BATCH = 8
MODEL = ["model.dim=256", "model.n_layers=4", "model.n_heads=8", "model.n_kv_heads=4", "model.max_seq_len=128",
         "data.seq_len=128"]


def measure(build, src, name, ranks, overrides, steps, workdir):
    out = os.path.join(workdir, name.replace(" ", "_").replace("+", ""))
    args = [f"{build}/bin/fsdpp-run", "--nproc-per-node", str(ranks), "--timeout-s", "300",
            f"{build}/bin/fsdpp-train", f"{src}/configs/default.yaml", f"data.path={src}/docs",
            f"data.cache_dir={workdir}/cache", f"training.output_dir={out}", f"training.max_steps={steps}",
            "training.logging_steps=1", "training.eval_steps=0", "training.sample_tokens=0", "training.save_strategy=no",
            "training.overwrite_output_dir=true",
            f"training.per_device_train_batch_size={GLOBAL_BATCH // dp_of(ranks, overrides)}",
            "training.seed=1"] + MODEL + overrides
    load = os.getloadavg()[0]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: fsdpp-train failed:\n{r.stderr[-3000:]}")
    ms = [json.loads(l)["step_ms"] for l in open(f"{out}/metrics.jsonl")][2:]  # after the warm-up
    return statistics.median(ms) / 1000, load


def dp_of(ranks, overrides):
    tp = pp = 1
    for o in overrides:
        if o.startswith("parallelism.tensor_parallel_degree="): tp = int(o.split("=")[1])
        if o.startswith("parallelism.pipeline_parallel_degree="): pp = int(o.split("=")[1])
    return ranks // (tp * pp)


def predict(build, src, ranks, overrides, filters, workdir):
    out = os.path.join(workdir, "plan.json")
    args = [f"{build}/bin/fsdpp-plan", f"{src}/configs/default.yaml", *MODEL, *overrides, "--cluster", "cpu",
            "--world-size", str(ranks), "--global-batch", str(GLOBAL_BATCH), "--json", out, *filters]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fsdpp-plan failed: {r.stderr}")
    plan = json.load(open(out))
    fitting = plan.get("fitting", [])
    if not fitting:
        sys.exit(f"fsdpp-plan found no fitting layout for {filters}: {plan.get('rejected')}")
    return fitting[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3, help="runs of each layout; the fastest is compared")
    ap.add_argument("--reuse", help="take the measured steps from this earlier plan_calibration.json")
    args = ap.parse_args()
    earlier = {r["layout"]: r for r in json.load(open(args.reuse))} if args.reuse else {}
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = {name: earlier[name]["runs"] for name, *_ in LAYOUTS if name in earlier}
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(args.runs):
            for name, ranks, overrides, filters in LAYOUTS:
                if name in earlier:
                    continue
                step, load = measure(args.build, src, name, ranks, overrides, args.steps, workdir)
                runs.setdefault(name, []).append({"step_s": step, "load_avg_1min": load})
                print(f"round {round_ + 1}: {name:16s} {step:7.3f} s (load {load:.1f})", flush=True)
        rows = []
        for name, ranks, overrides, filters in LAYOUTS:
            p = predict(args.build, src, ranks, overrides, filters, workdir)
            fastest = min(runs[name], key=lambda r: r["step_s"])
            measured = fastest["step_s"]
            rows.append({"layout": name, "ranks": ranks, "measured_s": measured, "runs": runs[name],
                         "predicted_s": p["step_s"], "ratio": p["step_s"] / measured, "compute_s": p["compute_s"],
                         "fsdp_comm_s": p["fsdp_comm_s"], "tp_comm_s": p["tp_comm_s"],
                         "pp_bubble_s": p["pp_bubble_s"], "load_avg_1min": fastest["load_avg_1min"]})
            print(f"{name:16s} measured {measured:7.3f} s  predicted {p['step_s']:7.3f} s  "
                  f"ratio {rows[-1]['ratio']:5.2f}", flush=True)
    os.makedirs(f"{src}/bench/results", exist_ok=True)
    json.dump(rows, open(f"{src}/bench/results/plan_calibration.json", "w"), indent=1)
    with open(f"{src}/bench/results/plan_calibration.md", "w") as f:
        f.write("| layout | ranks | runs (s) | fastest (s) | predicted (s) | predicted / fastest |\n")
        f.write("|---|---:|---|---:|---:|---:|\n")
        for r in rows:
            each = " / ".join(f"{x['step_s']:.3f}" for x in r["runs"])
            f.write(f"| {r['layout']} | {r['ranks']} | {each} | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | "
                    f"{r['ratio']:.2f} |\n")
    within = sum(abs(r["ratio"] - 1) <= 0.2 for r in rows)
    print(f"{within} of {len(rows)} layouts within +-20% of the measured step")


if __name__ == "__main__":
    main()
