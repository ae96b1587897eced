"""Where a step's GPU time goes, from Chrome traces of PyTorch's profiler (Kineto), side by side.

  python3 bench/kernel_summary.py --steps N --out F.md NAME=TRACE.json [NAME=TRACE.json ...]

The traces are `fsdpp-bench train --profile` and `bench/gpu_torch_bench.py --profile` runs of the
same model and steps (bench/gpu_bench.py --profile makes them). For each: the kernels' (and
device copies' and memsets') time per step by kind, the device's busy time (the union of their
intervals) against the span from the first to the last, and the kernels whose time differs most
between the first trace and each other one. Writes F.md and F.json.
"""
import argparse
import collections
import json
import re

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# The kind of a kernel, by the first pattern its name matches (ATen's and cuBLAS's names).
KINDS = [
    ("nccl", r"nccl"),
    ("attention", r"flash|fmha|attention|efficient_attention"),
    ("matmul", r"gemm|nvjet|xmma|cutlass|cublas|sm90_|sm100_|ampere_|Kernel2"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("norm", r"rms_?norm|layer_?norm|norm"),
    ("softmax / loss", r"softmax|nll|cross_entropy|logsumexp"),
    ("copy / cast", r"copy|cast|memcpy|Memcpy|CatArray|cat_|index|gather|scatter"),
    ("fill / memset", r"fill|memset|Memset|zero"),
    ("reduction", r"reduce|Reduce|sum"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|silu|mul|add"),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name):
            return kind
    return "other"


def short(name, n=90):
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= n else name[: n - 3] + "..."


def summarize(path, steps):
    events = json.load(open(path))["traceEvents"]
    gpu = [e for e in events if e.get("cat") in GPU_CATS and "dur" in e]
    if not gpu:
        raise SystemExit(f"[kernel-summary] {path}: no GPU events (was it a GPU run with CUDA activity?)")
    by_kind, by_name = collections.Counter(), collections.Counter()
    calls = collections.Counter()
    for e in gpu:
        by_kind[kind_of(e["name"])] += e["dur"]
        by_name[e["name"]] += e["dur"]
        calls[kind_of(e["name"])] += 1
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in gpu)
    busy, end = 0.0, None
    start = spans[0][0]
    for s, t in spans:  # the union of the intervals (streams overlap)
        if end is None or s > end:
            busy += t - s
            end = t
        elif t > end:
            busy += t - end
            end = t
    per_step = lambda us: us / 1000.0 / steps  # noqa: E731  (microseconds -> ms per step)
    return {"span_ms": per_step(end - start), "busy_ms": per_step(busy),
            "kernel_ms": per_step(sum(by_kind.values())),
            "kinds": {k: per_step(v) for k, v in by_kind.items()},
            "calls": {k: v / steps for k, v in calls.items()},
            "names": {k: per_step(v) for k, v in by_name.items()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True, help="steps each trace holds")
    ap.add_argument("--out", required=True, help="F.md (and F.json beside it)")
    ap.add_argument("--title", default="GPU time per step by kind of kernel")
    ap.add_argument("traces", nargs="+", help="NAME=TRACE.json")
    a = ap.parse_args()
    runs = dict(t.split("=", 1) for t in a.traces)
    s = {name: summarize(path, a.steps) for name, path in runs.items()}
    names = list(s)
    kinds = sorted({k for r in s.values() for k in r["kinds"]}, key=lambda k: -s[names[0]]["kinds"].get(k, 0))
    lines = [f"# {a.title}", "", f"ms per step (mean of {a.steps} profiled steps; kernels on any stream).", "",
             "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    row = lambda label, f: lines.append(f"| {label} | " + " | ".join(f(s[n]) for n in names) + " |")  # noqa: E731
    row("span (first kernel to last)", lambda r: f"{r['span_ms']:.1f}")
    row("device busy (union)", lambda r: f"{r['busy_ms']:.1f}")
    row("idle inside the span", lambda r: f"{r['span_ms'] - r['busy_ms']:.1f}")
    row("sum of kernel times", lambda r: f"{r['kernel_ms']:.1f}")
    for k in kinds:
        row(k, lambda r, k=k: f"{r['kinds'].get(k, 0):.2f} ({r['calls'].get(k, 0):.0f})")
    base = s[names[0]]
    for other in names[1:]:
        o = s[other]
        diff = {n: base["names"].get(n, 0) - o["names"].get(n, 0) for n in set(base["names"]) | set(o["names"])}
        top = sorted(diff, key=lambda n: -abs(diff[n]))[:20]
        lines += ["", f"## The kernels whose time differs most: {names[0]} - {other} (ms per step)", "",
                  f"| kernel | kind | {names[0]} | {other} | difference |", "|---|---|---|---|---|"]
        for n in top:
            lines.append(f"| `{short(n)}` | {kind_of(n)} | {base['names'].get(n, 0):.2f} | "
                         f"{o['names'].get(n, 0):.2f} | {diff[n]:+.2f} |")
    out = a.out[:-3] if a.out.endswith(".md") else a.out
    open(out + ".md", "w").write("\n".join(lines) + "\n")
    json.dump({n: {k: v for k, v in r.items() if k != "names"} | {"top_names": dict(
        sorted(r["names"].items(), key=lambda kv: -kv[1])[:60])} for n, r in s.items()},
              open(out + ".json", "w"), indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
