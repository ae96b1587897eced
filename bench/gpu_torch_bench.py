"""The PyTorch side of `make bench-gpu` (bench/gpu_bench.py drives it; docs/gpus.md).

  python3 bench/gpu_torch_bench.py --dir D --impl fsdp2|eager [--ac] --steps 10 --warmup 3 --out F

One process on one GPU. bench/llama_torch.py's Llama from D/init.safetensors (the weights
fsdpp-bench wrote) on D/batches.safetensors, as `fsdpp-bench train --bf16 --fused` trains it:
  fsdp2  every TransformerBlock fully_shard-ed, then the root (world size 1, NCCL), with
         MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): bf16 compute, fp32 master
  eager  the plain module in fp32 under torch.autocast(bfloat16): no FSDP at all
AdamW(fused=True); --ac wraps every block in non-reentrant activation checkpointing. Each step
is timed to the device's end (torch.cuda.synchronize); the allocator's peak is reported.
--profile F records the timed steps with torch.profiler (CPU ops, CUDA kernels) into the Chrome
trace F, as `fsdpp-bench train --profile` does (bench/kernel_summary.py compares them).
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--impl", choices=["fsdp2", "eager"], required=True)
    ap.add_argument("--ac", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", default="", help="the timed steps' Chrome trace (torch.profiler)")
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import llama_torch

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    B, T = cfg["local_batch"], cfg["seq_len"]
    tokens = load_file(os.path.join(a.dir, "batches.safetensors"))["tokens"]
    model = llama_torch.Llama(cfg["model"])
    llama_torch.load_weights(model, os.path.join(a.dir, "init.safetensors"))
    num_params = sum(p.numel() for p in model.parameters())
    model.to(device)
    if a.ac:
        for i, layer in enumerate(model.layers):
            model.layers[i] = checkpoint_wrapper(layer)
    autocast = a.impl == "eager"
    if a.impl == "fsdp2":
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 1000))
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
        mesh = init_device_mesh("cuda", (1,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    betas = cfg.get("betas", [0.9, 0.95])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.get("lr", 1e-3), betas=tuple(betas),
                            eps=cfg.get("eps", 1e-8), weight_decay=cfg.get("weight_decay", 0.1),
                            fused=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step_ms, losses = [], []
    n_batches = tokens.size(0)
    profiler = None
    if a.profile:
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        profiler = torch.profiler.profile(activities=acts)
    for step in range(a.warmup + a.steps):
        if profiler and step == a.warmup:
            profiler.start()
        rows = tokens[step % n_batches, :B]
        x, y = rows[:, :T].contiguous().to(device), rows[:, 1:].contiguous().to(device)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        losses.append(loss.item())
        if step >= a.warmup:
            step_ms.append((t1 - t0) * 1e3)
        del logits, loss
    if profiler:
        profiler.stop()
        profiler.export_chrome_trace(a.profile)
    result = {
        "impl": f"pytorch-{a.impl}", "activation_checkpointing": a.ac, "num_params": num_params,
        "local_batch": B, "seq_len": T, "warmup": a.warmup, "step_ms": step_ms,
        "median_step_ms": statistics.median(step_ms), "losses": losses, "final_loss": losses[-1],
        "cuda_peak_allocated_mb": torch.cuda.max_memory_allocated() / 2**20,
        "cuda_peak_reserved_mb": torch.cuda.max_memory_reserved() / 2**20,
        "torch": torch.__version__, "device": torch.cuda.get_device_name(device),
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
