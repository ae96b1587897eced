"""The PyTorch side of `make bench-gpu` (bench/gpu_bench.py drives it; docs/gpus.md).

  python3 bench/gpu_torch_bench.py --dir D --impl fsdp2|eager [--ac] [--float8 off|tensorwise|rowwise]
      --steps 10 --warmup 3 --out F

One process on one GPU. bench/llama_torch.py's Llama from D/init.safetensors (the weights
fsdpp-bench wrote) on D/batches.safetensors, as `fsdpp-bench train --bf16 --fused` trains it:
  fsdp2  every TransformerBlock fully_shard-ed, then the root (world size 1, NCCL), with
         MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): bf16 compute, fp32 master
  eager  the plain module in fp32 under torch.autocast(bfloat16): no FSDP at all
AdamW(fused=True); --ac wraps every block in non-reentrant activation checkpointing. --float8
converts the Linears that torchao's auto filter for the recipe takes (never the LM head, `output`)
to torchao's Float8Linear before AC and fully_shard, as torchtitan's float8 converter does:
tensorwise (with fsdp2: float8 all-gathers, the scales precomputed after each optimizer step, in
the timed step) or rowwise; eager, no torch.compile, as fsdpp's side is. Without torchao it exits
with status 3 (bench/gpu_bench.py reports the row as skipped). Each step
is timed to the device's end (torch.cuda.synchronize); the allocator's peak is reported.
--profile F records the timed steps with torch.profiler (CPU ops, CUDA kernels) into the Chrome
trace F, as `fsdpp-bench train --profile` does (bench/kernel_summary.py compares them).
"""
import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

NO_TORCHAO = 3  # the exit status without torchao: bench/gpu_bench.py's rows say "skipped"


def float8_config(recipe, fsdp2):
    """torchao's Float8LinearConfig for the recipe and its auto filter (the LM head never
    converted), or exit with status NO_TORCHAO when torchao cannot be imported."""
    try:
        from torchao.float8 import Float8LinearConfig
        from torchao.float8.float8_linear_utils import _auto_filter_for_recipe
    except Exception as e:  # ImportError, or a torchao built for another torch failing to load
        print(f"[gpu-torch-bench] skipped: --float8 {recipe}: torchao cannot be imported ({type(e).__name__}: "
              f"{e}); docs/gpus.md#float8 says how to carry its wheel", flush=True)
        sys.exit(NO_TORCHAO)
    config = Float8LinearConfig.from_recipe_name(recipe)
    if recipe == "tensorwise" and fsdp2:
        # FSDP2 all-gathers the converted weights in float8 (torchao's and torchtitan's setting).
        config = dataclasses.replace(config, enable_fsdp_float8_all_gather=True)
    return config, _auto_filter_for_recipe(recipe, filter_fqns=["output"])


def convert_float8(model, recipe, fsdp2):
    """The model's Linears converted in place; returns the config and the converted names."""
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear
    config, module_filter = float8_config(recipe, fsdp2)
    convert_to_float8_training(model, module_filter_fn=module_filter, config=config)
    converted = [n for n, m in model.named_modules() if isinstance(m, Float8Linear)]
    print(f"[gpu-torch-bench] float8 {recipe}: {len(converted)} projections (torchao's auto filter"
          f"{', float8 all-gathers' if config.enable_fsdp_float8_all_gather else ''})", flush=True)
    return config, converted


def _torchao_version():
    import torchao
    return getattr(torchao, "__version__", "unknown")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--impl", choices=["fsdp2", "eager"], required=True)
    ap.add_argument("--ac", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", default="", help="the timed steps' Chrome trace (torch.profiler)")
    ap.add_argument("--float8", choices=["off", "tensorwise", "rowwise"], default="off",
                    help="torchao's float8 training of the Linears its auto filter takes (exit 3 without torchao)")
    a = ap.parse_args()
    if a.float8 != "off":
        float8_config(a.float8, a.impl == "fsdp2")  # without torchao: exit 3 before any work

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
    float8, converted = None, []
    if a.float8 != "off":
        float8, converted = convert_float8(model, a.float8, a.impl == "fsdp2")
    precompute_scales = float8 is not None and float8.enable_fsdp_float8_all_gather
    if precompute_scales:
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp
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
        if precompute_scales:
            precompute_float8_dynamic_scale_for_fsdp(model)  # after each optimizer step, as torchao says
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
        "float8": a.float8, "float8_converted": converted,
        "float8_all_gather": bool(precompute_scales),
        "local_batch": B, "seq_len": T, "warmup": a.warmup, "step_ms": step_ms,
        "median_step_ms": statistics.median(step_ms), "losses": losses, "final_loss": losses[-1],
        "cuda_peak_allocated_mb": torch.cuda.max_memory_allocated() / 2**20,
        "cuda_peak_reserved_mb": torch.cuda.max_memory_reserved() / 2**20,
        "torch": torch.__version__, "device": torch.cuda.get_device_name(device),
        "torchao": _torchao_version() if float8 is not None else None,
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
