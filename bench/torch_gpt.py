"""PyTorch reference for `make bench`: the same GPT-2 as meshtrain (pre-LN
blocks, tanh GELU, learned positions, output head tied to the token
embedding padded to Vp rows), the same initialisation scale, AdamW with
decoupled weight decay on the 2-D weights, gradient clipping at norm 1.
It trains on random tokens and prints one JSON line per step:
{"step": k, "ms": step milliseconds}, then {"peak_rss_kb": ...}.

--dtype bf16 runs the forward under torch.autocast("cpu", dtype=torch.bfloat16):
the linear layers and attention matmuls take bf16 operands (oneDNN), the
parameters, their gradients and AdamW stay fp32 (autocast's master weights),
LayerNorm, softmax and the loss stay fp32 as autocast's CPU op lists say.

The loss is taken over all Vp logit columns (nanoGPT's way with a padded
vocabulary: the padding rows are never targets); slicing the first V
columns would only add a copy to PyTorch's step.

usage: torch_gpt.py --layers L --dim C --heads H --vocab Vp --seq-len T
                    --batch B --steps S [--threads N] [--dtype fp32|bf16]"""
import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attn_proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.fc_proj = nn.Linear(4 * dim, dim)

    def attention(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        # [b, heads, t, head size]
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        probs = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        y = (probs @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.attn_proj(y)

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, vocab, seq_len):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L)
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t))
        mask = self.mask[:t, :t]
        for blk in self.blocks:
            x = blk(x, mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("layers", "dim", "heads", "vocab", "seq-len", "batch", "steps"):
        ap.add_argument("--" + flag, type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.dim % a.heads:
        sys.exit(f"torch_gpt.py: --dim {a.dim} is not a multiple of --heads {a.heads}")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.dim, a.heads, a.vocab, a.seq_len)
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
