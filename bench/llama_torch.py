"""The Llama-style decoder of src/models/llama.cpp, op for op, in PyTorch.

Same parameter names (tok_embeddings.weight, layers.0.attention.wq.weight, ...), the same
RMSNorm (normalised in at least float32), the same rotary embedding (interleaved pairs
(x[2i], x[2i+1]) of each head, angles computed in float64 and stored as float32), the same
grouped-query attention (kv head j serves query heads j*n_rep .. (j+1)*n_rep-1, causal SDPA),
SwiGLU and loss (mean cross entropy in float32, ignore_index -100). Weights are not drawn here:
they are loaded from the safetensors file fsdpp wrote, so both sides start equal.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def ffn_hidden_dim(dim, ffn_hidden=0, multiple_of=32):
    if ffn_hidden > 0:
        return ffn_hidden
    hidden = 2 * (4 * dim) // 3
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def compute_dtype(x):
    return torch.promote_types(x.dtype, torch.float32)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        if x.is_cuda and self.weight.dtype == x.dtype:  # the fused kernel, as fsdpp's RMSNorm
            return torch.rms_norm(x, [x.size(-1)], self.weight, self.eps)
        xc = x.to(compute_dtype(x))
        normed = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def apply_rope(x, cos, sin):
    # x: (B,T,H,D); cos, sin: (max_seq_len, D/2)
    T, half = x.size(1), x.size(3) // 2
    xc = x.to(compute_dtype(x)).unflatten(-1, (half, 2))  # (B,T,H,D/2,2)
    x0, x1 = xc.select(-1, 0), xc.select(-1, 1)
    c = cos.narrow(0, 0, T).view(1, T, 1, half).to(xc.dtype)
    s = sin.narrow(0, 0, T).view(1, T, 1, half).to(xc.dtype)
    if x.is_cuda:  # one complex multiply, as fsdpp's on a GPU (src/models/decoder_parts.h)
        out = torch.view_as_real(torch.view_as_complex(xc.contiguous()) * torch.complex(c, s)).flatten(-2)
    else:
        out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).flatten(-2)
    return out.to(x.dtype)


def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    B, T, Hkv, D = x.shape
    return x.unsqueeze(3).expand(B, T, Hkv, n_rep, D).reshape(B, T, Hkv * n_rep, D)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dim, self.n_heads = cfg["dim"], cfg["n_heads"]
        self.n_kv_heads = cfg.get("n_kv_heads", 0) or self.n_heads
        self.head_dim = dim // self.n_heads
        self.wq = nn.Linear(dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, dim, bias=False)
        i = torch.arange(0, self.head_dim, 2, dtype=torch.float64)
        inv_freq = torch.pow(float(cfg.get("rope_theta", 10000.0)), -i / float(self.head_dim))
        t = torch.arange(cfg["max_seq_len"], dtype=torch.float64)
        angles = torch.outer(t, inv_freq)
        self.register_buffer("rope_cos", angles.cos().to(torch.float32), persistent=False)
        self.register_buffer("rope_sin", angles.sin().to(torch.float32), persistent=False)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)
        q = apply_rope(q, self.rope_cos, self.rope_sin)
        k = apply_rope(k, self.rope_cos, self.rope_sin)
        k = repeat_kv(k, self.n_heads // self.n_kv_heads)
        v = repeat_kv(v, self.n_heads // self.n_kv_heads)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        eps = cfg.get("norm_eps", 1e-5)
        self.attention_norm = RMSNorm(cfg["dim"], eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg["dim"], eps)
        self.feed_forward = FeedForward(
            cfg["dim"], ffn_hidden_dim(cfg["dim"], cfg.get("ffn_hidden", 0), cfg.get("multiple_of", 32)))

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg["n_layers"]))
        self.norm = RMSNorm(cfg["dim"], cfg.get("norm_eps", 1e-5))
        self.output = None
        if not cfg.get("tie_embeddings", False):
            self.output = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)

    def forward(self, tokens, targets):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        logits = self.output(h) if self.output is not None else F.linear(h, self.tok_embeddings.weight)
        flat = logits.reshape(-1, logits.size(-1))
        flat = flat.to(compute_dtype(flat))
        loss = F.cross_entropy(flat, targets.reshape(-1), ignore_index=-100)
        return logits, loss


def load_weights(model, path):
    from safetensors.torch import load_file
    missing, unexpected = model.load_state_dict(load_file(path), strict=True)
    assert not missing and not unexpected, (missing, unexpected)
