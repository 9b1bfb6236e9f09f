"""PyTorch reference for `make bench`'s Llama rows: the same model as
meshtrain's llama family (RMSNorm, half-split rotary embeddings, grouped-
query attention with the kv heads repeated as transformers' repeat_kv does,
SwiGLU MLP, untied head over the Vp padded vocabulary rows), N(0, 0.02)
matrices, AdamW with decoupled weight decay on the 2-D weights, gradient
clipping at norm 1. It trains on random tokens and prints one JSON line per
step: {"step": k, "ms": step milliseconds}, then {"peak_rss_kb": ...}.
--dtype bf16 runs the forward under torch.autocast("cpu", dtype=torch.bfloat16)
as bench/torch_gpt.py does.

usage: torch_llama.py --layers L --dim C --heads H --kv-heads KV --ffn F
                      --vocab Vp --seq-len T --batch B --steps S [--threads N] [--dtype fp32|bf16]"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rms_norm(x, w, eps=1e-5):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv_heads, dim // heads
        self.in_norm = nn.Parameter(torch.ones(dim))
        self.q = nn.Linear(dim, heads * self.hd, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, dim, bias=False)
        self.post_norm = nn.Parameter(torch.ones(dim))
        self.gate = nn.Linear(dim, ffn, bias=False)
        self.up = nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def attention(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        probs = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        return self.o((probs @ v).transpose(1, 2).reshape(b, t, -1))

    def forward(self, x, cos, sin, mask):
        x = x + self.attention(rms_norm(x, self.in_norm), cos, sin, mask)
        h = rms_norm(x, self.post_norm)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers, dim, heads, kv_heads, ffn, vocab, seq_len, theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(dim))
        self.head = nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.arange(seq_len).float()[:, None] * inv[None, :]
        emb = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin, mask = self.cos[:t], self.sin[:t], self.mask[:t, :t]
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        logits = self.head(rms_norm(x, self.norm))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("layers", "dim", "heads", "kv-heads", "ffn", "vocab", "seq-len", "batch", "steps"):
        ap.add_argument("--" + flag, type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Llama(a.layers, a.dim, a.heads, a.kv_heads, a.ffn, a.vocab, a.seq_len)
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(a.seed)
    for step in range(a.steps):
        data = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=gen)
        tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        print(json.dumps({"step": step + 1, "loss": round(loss.item(), 6), "ms": round(ms, 3)}), flush=True)
    print(json.dumps({"peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), flush=True)


if __name__ == "__main__":
    main()
