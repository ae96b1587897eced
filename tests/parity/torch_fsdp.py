"""PyTorch's own FSDP (fully_shard, FSDP2) on the model of tests/support/test_models.h.

  python torch_fsdp.py prepare DIR   writes DIR/init.pt (initial weights) and DIR/batches.pt
  python torch_fsdp.py train DIR     (under fsdpp-run) trains with fully_shard on Gloo, writes
                                     DIR/torch_losses.json
  python torch_fsdp.py compare DIR   compares DIR/torch_losses.json with DIR/fsdpp_losses.json
"""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH, STEPS, LR, WD = 29, 16, 2, 2, 7, 12, 8, 1e-2, 0.1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 3 * DIM + 1)
        self.fc2 = nn.Linear(3 * DIM + 1, DIM)

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(self.ln1(x)).view(B, T, 3, HEADS, C // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        h = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        h = self.emb(tokens)
        for b in self.blocks:
            h = b(h)
        return self.lm_head(self.norm(h))


def prepare(d):
    torch.manual_seed(1234)
    model = TinyTransformer()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, os.path.join(d, "init.pt"))
    g = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, VOCAB, (STEPS, BATCH, SEQ + 1), generator=g)
    torch.save({"tokens": tokens}, os.path.join(d, "batches.pt"))


def train(d):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = TinyTransformer()
    model.load_state_dict(torch.load(os.path.join(d, "init.pt")))
    mesh = init_device_mesh("cpu", (world,))
    for b in model.blocks:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    tokens = torch.load(os.path.join(d, "batches.pt"))["tokens"]
    local = BATCH // world
    losses = []
    for step in range(STEPS):
        t = tokens[step, rank * local:(rank + 1) * local]
        logits = model(t[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), t[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        losses.append(global_loss.item() / world)
    if rank == 0:
        with open(os.path.join(d, "torch_losses.json"), "w") as f:
            json.dump(losses, f)
    dist.barrier()  # nobody tears Gloo down while a peer still talks to it
    dist.destroy_process_group()
    # PyTorch's Gloo can still abort in its teardown at interpreter exit ("terminate called
    # without an active exception", seen once in CI on 2 cores; pytorch/pytorch#190489):
    # everything is written and every rank is past the barrier, so skip the destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def compare(d):
    theirs = json.load(open(os.path.join(d, "torch_losses.json")))
    ours = json.load(open(os.path.join(d, "fsdpp_losses.json")))
    assert len(theirs) == len(ours) == STEPS, (len(theirs), len(ours))
    worst = 0.0
    for step, (a, b) in enumerate(zip(theirs, ours)):
        print(f"step {step}: torch {a:.8f}  fsdpp {b:.8f}  diff {abs(a - b):.2e}")
        worst = max(worst, abs(a - b))
    print(f"max |diff| = {worst:.2e}")
    if worst > 1e-5:
        sys.exit(f"losses differ by {worst:.2e} > 1e-5")
    if not ours[-1] < ours[0]:
        sys.exit("the loss did not fall")


if __name__ == "__main__":
    {"prepare": prepare, "train": train, "compare": compare}[sys.argv[1]](sys.argv[2])
