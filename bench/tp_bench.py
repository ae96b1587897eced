"""make bench's tensor-parallel rows (docs/tensor-parallel.md#make-bench): fsdpp's layouts side by
side on the same model and global batch, their bytes per rank on dp_shard and tp against the
formulas, their losses against each other and fsdpp-estimate --tp against the peak RSS.
bench/run_bench.py drives it (BENCH_TP_CONFIGS)."""
import os


def parse_tp_configs(text):
    plan = []
    for item in text.replace(";", " ").replace(",", " ").split():
        body, plus, sp = item.partition("+")
        tp, x, dp = body.partition("x")
        if not (tp.isdigit() and dp.isdigit() and x) or (plus and sp != "sp") or int(tp) < 1 or int(dp) < 1:
            raise SystemExit(f"[bench] tp config '{item}': expected TPxDP_SHARD or TPxDP_SHARD+sp, e.g. 2x2+sp")
        if plus and int(tp) == 1:
            raise SystemExit(f"[bench] tp config '{item}': sequence parallelism needs TP > 1")
        plan.append((int(tp), int(dp), bool(plus)))
    return plan


def tp_label(tp, dp, sp):
    if tp == 1:
        return f"FSDP {dp}"
    return f"TP {tp}" + (f" x FSDP {dp}" if dp > 1 else "") + (" + SP" if sp else "")


def tp_local_params(m, tp):
    """Rank 0's parameters under the Llama plan (its share of uneven sizes is the larger)."""
    from llama_torch import ffn_hidden_dim
    C, V, L, H = m["dim"], m["vocab_size"], m["n_layers"], m["n_heads"]
    hd = C // H
    Q, K = H * hd // tp, (m.get("n_kv_heads") or H) * hd // tp
    F = -(-ffn_hidden_dim(C, m.get("ffn_hidden", 0), m.get("multiple_of", 32)) // tp)
    Vr = -(-V // tp)
    block = 2 * C + 2 * Q * C + 2 * K * C + 3 * F * C
    return Vr * C * (1 if m.get("tie_embeddings") else 2) + C + L * block


def tp_theory_bytes(m, tp, sp, B, T):
    """Bytes a rank sends on the tp dim per step (docs/tensor-parallel.md, 'Communication per
    step'): the counters' ring model, all-reduce 2X(N-1)/N, all-gather / reduce-scatter X(N-1)/N,
    with integer division as the counters round."""
    if tp == 1:
        return 0
    N, L, C = tp, m["n_layers"], m["dim"]
    A, M = B * T * C * 4, B * T

    def ar(x):
        return 2 * x * (N - 1) // N

    def ag(x):
        return x * (N - 1) // N
    loss = ar(4 * M) + ar(8 * M)
    if not sp:
        return (4 * L + 2) * ar(A) + loss
    return 2 * (4 * L + 2) * ag(A) + loss + (2 * L + 1) * ar(4 * C)


def run_tp_plan(tp_plan, cfg, a, work, baseline, launch_fsdpp, build, check_env, check_threshold, h):
    """fsdpp's tensor-parallel layouts on the same model and the same global batch (the most
    data-parallel layout's ranks x local_batch), so their losses must agree; FULL_SHARD over
    dp_shard. Per rank and step: the FSDP bytes (dp_shard dim) and the TP bytes (tp dim), each
    against its formula."""
    rows = []
    if not tp_plan:
        return rows
    m, T = cfg["model"], cfg["seq_len"]
    global_batch = cfg["local_batch"] * max(dp for _, dp, _ in tp_plan)
    for tp, dp, sp in tp_plan:
        n = tp * dp
        if global_batch % dp:
            raise SystemExit(f"[bench] {tp_label(tp, dp, sp)}: the global batch {global_batch} does not split over "
                             f"{dp} data-parallel ranks")
        B = global_batch // dp
        tag = f"tp{tp}x{dp}{'sp' if sp else ''}"
        args = ["train", "--dir", work, "--strategy", "full_shard", "--tp", str(tp), "--local-batch", str(B)]
        args += ["--sp"] if sp else []
        timed = [launch_fsdpp(n, args + ["--steps", str(a.steps), "--warmup", str(a.warmup)],
                              os.path.join(work, f"{tag}-{rep}.json")) for rep in range(a.repeats)]
        fs = h.merge(timed)
        chk = None
        if a.memory_check_threshold:
            chk = launch_fsdpp(n, args + ["--steps", "2", "--warmup", "1"], os.path.join(work, f"{tag}-memory.json"),
                               check_env)
        est = h.estimate(build, cfg, "full_shard", n, baseline[n], check_threshold, tp, sp, B)
        local = tp_local_params(m, tp)
        row = {"label": tp_label(tp, dp, sp), "tp": tp, "dp_shard": dp, "sequence_parallel": sp, "world_size": n,
               "local_batch": B, "global_batch": global_batch, "fsdpp": fs, "memory_check": chk, "estimate": est,
               "tp_local_params": local,
               "fsdp_theory_bytes_per_step": 3 * 4 * local * (dp - 1) / dp,
               "tp_theory_bytes_per_step": tp_theory_bytes(m, tp, sp, B, T)}
        row["tokens_per_s"] = global_batch * T / (fs["median_step_ms"] / 1e3)
        row["checked_peak_mb"] = max((chk or fs)["peak_rss_mb"])
        row["estimate_mb"] = est["total_bytes"] / 2**20
        row["estimate_error"] = (row["estimate_mb"] - row["checked_peak_mb"]) / row["checked_peak_mb"]
        rows.append(row)
        h.log(f"{row['label']} ({n} ranks, {B} sequences per dp rank): {fs['median_step_ms']:.0f} ms/step, "
            f"TP bytes {fs['comm_bytes_tp_per_step']:.0f} (theory {row['tp_theory_bytes_per_step']:.0f}), "
            f"FSDP bytes {fs['comm_bytes_per_step']:.0f}, peak RSS {row['checked_peak_mb']:.0f} MiB vs estimate "
            f"{row['estimate_mb']:.0f} MiB, final loss {fs['final_loss']:.6f}")
    ref = rows[0]["fsdpp"]["losses"]
    for r in rows:
        r["max_step_loss_diff"] = max(abs(x - y) for x, y in zip(r["fsdpp"]["losses"], ref))
    return rows


def tp_problems(rows, loss_tolerance, estimate_tolerance):
    problems = []
    for r in rows:
        if r["max_step_loss_diff"] > loss_tolerance:
            problems.append(f"loss: {r['label']}: differs from {rows[0]['label']} by {r['max_step_loss_diff']:.2e} "
                            f"on the same global batch")
        if r["fsdpp"]["comm_bytes_tp_per_step"] != r["tp_theory_bytes_per_step"]:
            problems.append(f"tp comm: {r['label']}: {r['fsdpp']['comm_bytes_tp_per_step']:.0f} bytes per step on the tp "
                            f"dim, the formula says {r['tp_theory_bytes_per_step']:.0f}")
        if abs(r["estimate_error"]) > estimate_tolerance:
            problems.append(f"estimate: {r['label']}: fsdpp-estimate {r['estimate_mb']:.0f} MiB vs measured "
                            f"{r['checked_peak_mb']:.0f} MiB ({100 * r['estimate_error']:+.1f}%)")
    return problems


def tp_report(r, w, mb):
    rows = r.get("tp_configs") or []
    if not rows:
        return
    m = r["config"]["model"]
    w("## Tensor parallelism (fsdpp)\n")
    w(f"fsdpp's layouts side by side on the same model and the same global batch ({rows[0]['global_batch']} x "
      f"{r['config']['seq_len']} tokens per step, split over the data-parallel ranks; every rank of a tp group "
      f"computes its dp rank's part), FULL_SHARD over dp_shard, the Llama plan over tp "
      f"([docs/tensor-parallel.md](../../docs/tensor-parallel.md)). PyTorch's side has no tensor parallelism here. "
      f"Bytes are what one rank sends per step (counters, 10^6 bytes): FSDP's on dp_shard against 3·P_tp·4·(D-1)/D "
      f"(P_tp: the rank's TP slice, unpadded), TP's on tp against the formulas of docs/tensor-parallel.md "
      f"(L = {m['n_layers']}, C = {m['dim']}), which must be equal. Peak RSS: the memory-check run, worst rank.\n")
    w("| layout | ranks | seqs per dp rank | ms/step | tokens/s | tokens/s per rank | FSDP theory | FSDP counted | "
      "TP theory | TP counted | peak RSS MiB | estimate MiB | error | loss (last) | max loss diff |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for x in rows:
        fs = x["fsdpp"]
        w(f"| {x['label']} | {x['world_size']} | {x['local_batch']} | {fs['median_step_ms']:.0f} | "
          f"{x['tokens_per_s']:.0f} | {x['tokens_per_s'] / x['world_size']:.0f} | "
          f"{mb(x['fsdp_theory_bytes_per_step'])} | {mb(fs['comm_bytes_per_step'])} | "
          f"{mb(x['tp_theory_bytes_per_step'])} | {mb(fs['comm_bytes_tp_per_step'])} | {x['checked_peak_mb']:.0f} | "
          f"{x['estimate_mb']:.0f} | **{100 * x['estimate_error']:+.1f}%** | {fs['final_loss']:.6f} | "
          f"{x['max_step_loss_diff']:.1e} |")
    w("")
