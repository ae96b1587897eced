"""The PyTorch side of `make bench`: FSDP2 (torch.distributed.fsdp.fully_shard) on Gloo, CPU.

  python -m torch.distributed.run --standalone --nproc-per-node N bench/torch_bench.py \
      --dir D --strategy full_shard --steps 5 --warmup 2 --out result.json

Trains bench/llama_torch.py's Llama from D/init.safetensors (the weights fsdpp wrote) on the
batches of D/batches.safetensors, exactly as fsdpp-bench train does: each TransformerBlock a
unit, then the root; AdamW; per step forward, backward, optimizer step and zero_grad timed, then
the global loss all-reduced outside the timed region. Rank 0 writes the result JSON.

Communication is counted two ways: the collectives FSDP issues (torch.distributed's functions
wrapped, bytes sent per rank as the algorithm moves them: ring all-gather (N-1)/N of the output;
Gloo's reduce_scatter_tensor, which c10d implements as an all-reduce of the whole input,
2(N-1)/N of the input; ring all-reduce 2(N-1)/N), and the bytes this process actually wrote to
its sockets (/proc/self/io wchar), which fsdpp-bench reads the same way.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def io_wchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


class CommCounter:
    """Wraps torch.distributed's collectives that FSDP2 calls (looked up at call time)."""

    def __init__(self, dist):
        self.bytes = {}
        self.calls = {}
        self.enabled = False
        for name, model in (("all_gather_into_tensor", self._ag), ("reduce_scatter_tensor", self._rs),
                            ("all_reduce", self._ar)):
            self._wrap(dist, name, model)

    @staticmethod
    def _nbytes(t):
        return t.numel() * t.element_size()

    def _ag(self, args, kw, n):
        out = kw.get("output_tensor", args[0] if args else None)
        return self._nbytes(out) * (n - 1) / n

    def _rs(self, args, kw, n):
        inp = kw.get("input", args[1] if len(args) > 1 else None)
        return 2 * self._nbytes(inp) * (n - 1) / n

    def _ar(self, args, kw, n):
        t = kw.get("tensor", args[0] if args else None)
        return 2 * self._nbytes(t) * (n - 1) / n

    def _wrap(self, dist, name, model):
        original = getattr(dist, name)
        counter = self

        def wrapped(*args, **kw):
            if counter.enabled:
                group = kw.get("group")
                n = dist.get_world_size(group) if group is not None else dist.get_world_size()
                key = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
                       "all_reduce": "all_reduce"}[name]
                counter.bytes[key] = counter.bytes.get(key, 0) + (model(args, kw, n) if n > 1 else 0)
                counter.calls[key] = counter.calls.get(key, 0) + 1
            return original(*args, **kw)

        setattr(dist, name, wrapped)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--strategy", default="full_shard")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--forward-prefetch", type=int, default=0,
                    help="blocks whose all-gather each block issues before its own forward "
                         "(set_modules_to_forward_prefetch), as fsdpp's forward_prefetch")
    ap.add_argument("--keep-ends", action="store_true",
                    help="the root and the last block keep their parameters from forward to backward "
                         "(reshard_after_forward=False on them: torchtitan's layout, FSDP2's default for the root)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import llama_torch

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    counter = CommCounter(dist)
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    B, T = cfg["local_batch"], cfg["seq_len"]
    tokens = load_file(os.path.join(a.dir, "batches.safetensors"))["tokens"]
    baseline_rss = status_mb("VmHWM")

    model = llama_torch.Llama(cfg["model"])
    llama_torch.load_weights(model, os.path.join(a.dir, "init.safetensors"))
    num_params = sum(p.numel() for p in model.parameters())
    if a.strategy == "no_shard":
        # Replicate over the "replicate" dim, shard over a dim of one rank: plain data
        # parallelism, gradients all-reduced.
        mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    reshard = a.strategy == "full_shard"
    last = len(model.layers) - 1
    for i, layer in enumerate(model.layers):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard and not (a.keep_ends and i == last))
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard and not a.keep_ends)
    if a.forward_prefetch > 0:
        layers, k = list(model.layers), a.forward_prefetch
        model.set_modules_to_forward_prefetch(layers[:k])
        for i, layer in enumerate(layers):
            layer.set_modules_to_forward_prefetch(layers[i + 1:i + 1 + k])
    betas = cfg.get("betas", [0.9, 0.95])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.get("lr", 1e-3), betas=tuple(betas),
                            eps=cfg.get("eps", 1e-8), weight_decay=cfg.get("weight_decay", 0.1))

    step_ms, fwd, bwd, optm, losses, wire = [], [], [], [], [], []
    n_batches = tokens.size(0)
    for step in range(a.warmup + a.steps):
        rows = tokens[step % n_batches, rank * B:(rank + 1) * B]
        x, y = rows[:, :T].contiguous(), rows[:, 1:].contiguous()
        counter.enabled = step >= a.warmup
        w0 = io_wchar()
        t0 = time.perf_counter()
        logits, loss = model(x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t3 = time.perf_counter()
        w1 = io_wchar()
        counter.enabled = False
        global_loss = loss.detach().to(torch.float64).reshape(1)
        dist.all_reduce(global_loss)
        losses.append(global_loss.item() / world)
        if step >= a.warmup:
            step_ms.append((t3 - t0) * 1e3)
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            optm.append((t3 - t2) * 1e3)
            wire.append(w1 - w0)
        del logits, loss

    def gather(v):
        t = torch.tensor([float(v)], dtype=torch.float64)
        out = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(out, t)
        return [o.item() for o in out]

    peak = gather(status_mb("VmHWM"))
    base = gather(baseline_rss)
    per_rank_step = gather(statistics.median(step_ms))
    if rank == 0:
        per = max(1, a.steps)
        result = {
            "impl": "pytorch", "strategy": a.strategy, "world_size": world, "num_params": num_params,
            "local_batch": B, "seq_len": T, "warmup": a.warmup,
            "step_ms": step_ms, "median_step_ms": statistics.median(step_ms),
            "median_step_ms_per_rank": per_rank_step,
            "phase_ms": {"forward": statistics.median(fwd), "backward": statistics.median(bwd),
                         "optimizer": statistics.median(optm)},
            "losses": losses, "final_loss": losses[-1],
            "peak_rss_mb": peak, "baseline_rss_mb": base,
            "comm_per_step": {k: {"bytes": counter.bytes[k] / per, "calls": counter.calls[k] / per}
                              for k in counter.bytes},
            "comm_bytes_per_step": sum(counter.bytes.values()) / per,
            "wire_bytes_per_step": statistics.median(wire),
            "threads": torch.get_num_threads(), "torch": torch.__version__,
        }
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    # PyTorch's Gloo can still abort in its teardown at interpreter exit ("terminate called
    # without an active exception", seen once in CI on 2 cores; pytorch/pytorch#190489):
    # everything is written and every rank is past the barrier, so skip the destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
