#!/usr/bin/env python3
"""GPT-2 124M training speed in plain PyTorch, the reference meshtrain's CUDA path is compared
with (issue 28, point 5): bf16 autocast, scaled_dot_product_attention, fused AdamW, T = 1024;
tokens/s and MFU (model FLOPs / 989e12, H100 dense bf16) for eager and torch.compile.

    python3 tests/gpu/torch_bench.py                 # on the GPU (tests/gpu/run.sh runs it)
    /usr/bin/python3 tests/gpu/torch_bench.py --tiny # smoke test on the CPU (PyTorch 1.13: eager,
                                                     # manual attention, no torch.compile)
Prints one line per mode and a JSON summary line. The batch halves on out-of-memory."""
import argparse, json, math, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
HAS_COMPILE = hasattr(torch, "compile")
PEAK = 989e12


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if HAS_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch < 2.0: the same causal attention by hand
            s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, L, H):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        self.head.weight = self.wte.weight  # tied
        for m in self.modules():  # GPT-2's initialisation
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))


def flops_per_token(model, cfg):
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    return 6 * n + 12 * cfg["L"] * cfg["C"] * cfg["T"]  # matmuls fwd+bwd, plus attention's QK^T and PV


def run(mode, cfg, B, steps, warmup, dev):
    torch.manual_seed(0)
    model = GPT(cfg["V"], cfg["T"], cfg["C"], cfg["L"], cfg["H"]).to(dev)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=(dev == "cuda"))
    except TypeError:  # PyTorch without fused AdamW
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    step_model = torch.compile(model) if mode == "compile" else model
    idx = torch.randint(0, cfg["V"], (B, cfg["T"]), device=dev)
    tgt = torch.randint(0, cfg["V"], (B, cfg["T"]), device=dev)
    amp = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if dev == "cuda" else None

    def step():
        opt.zero_grad(set_to_none=True)
        if amp:
            with amp:
                loss = step_model(idx, tgt)
        else:
            loss = step_model(idx, tgt)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    if dev == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tps = B * cfg["T"] * steps / dt
    return {"mode": mode, "batch": B, "T": cfg["T"], "tokens_per_s": round(tps, 1),
            "mfu": round(flops_per_token(model, cfg) * tps / PEAK, 4), "step_ms": round(1000 * dt / steps, 2),
            "loss": round(float(loss), 4)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true", help="a tiny model on the CPU (smoke test)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() and not a.tiny else "cpu"
    if a.tiny:
        cfg, B, steps, warmup = dict(V=256, T=64, C=64, L=2, H=4), 2, 3, 1
    else:
        cfg, B, steps, warmup = dict(V=50304, T=1024, C=768, L=12, H=12), a.batch, a.steps, a.warmup
        if dev == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True  # what the speed comparison uses (bf16 autocast anyway)
    modes = ["eager"] + (["compile"] if HAS_COMPILE and dev == "cuda" else [])
    results = []
    for mode in modes:
        b = B
        while b >= 1:
            try:
                r = run(mode, cfg, b, steps, warmup, dev)
                break
            except torch.cuda.OutOfMemoryError if hasattr(torch.cuda, "OutOfMemoryError") else RuntimeError:
                torch.cuda.empty_cache()
                b //= 2
        else:
            print(f"{mode}: out of memory at batch 1", file=sys.stderr)
            return 1
        results.append(r)
        print(f"{mode:8s} batch {r['batch']:3d}: {r['tokens_per_s']:.0f} tokens/s, MFU {100 * r['mfu']:.1f}% "
              f"(of 989 TFLOP/s), {r['step_ms']} ms/step, loss {r['loss']}")
    if not HAS_COMPILE or dev != "cuda":
        print("compile: not run (" + ("no torch.compile in this PyTorch" if not HAS_COMPILE else "CPU smoke test") + ")")
    print(json.dumps({"device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu",
                      "torch": torch.__version__, "sdpa": HAS_SDPA, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
