"""A GPT-2 forward pass in PyTorch (float64) over the tensors of a GGUF
file (tests/check_gguf.sh): the logits at every position of the ids in
IDS, written as float32 [n, V] to OUT. With --gelu-f16 the GELU is ggml's
CPU one (ggml-cpu/vec.h, GGML_GELU_FP16): the tanh GELU of the input rounded
to f16, rounded to f16 (inputs beyond +-10: 0 and x), to show that this
table is the whole difference between llama.cpp's and meshtrain's logits.

  gguf_gpt2_ref.py MODEL.gguf IDS OUT --heads H [--gelu-f16]
"""
import math
import sys

import numpy as np
import torch

sys.path.insert(0, "tests")
from gguf_check import gguf_tensors  # noqa: E402


def main():
    path, ids_path, out = sys.argv[1:4]
    f16_gelu = "--gelu-f16" in sys.argv[4:]
    raw = gguf_tensors(path)
    t = {}
    for name, (ty, ne, data) in raw.items():
        assert ty == 0, f"{name}: not f32"
        t[name] = torch.from_numpy(np.frombuffer(data, dtype=np.float32).reshape(tuple(reversed(ne))).astype(np.float64))
    L = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("blk."))
    C = t["token_embd.weight"].shape[1]
    H = int(sys.argv[sys.argv.index("--heads") + 1])  # GGUF's gpt2.attention.head_count; given by the test

    def gelu(x):
        if not f16_gelu:
            return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        xr = x.float().half().double()
        g = (0.5 * xr * (1 + torch.tanh(math.sqrt(2 / math.pi) * (xr + 0.044715 * xr**3)))).float().half().double()
        return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, g))

    def ln(x, w, b):
        m = x.mean(-1, keepdim=True)
        v = ((x - m) ** 2).mean(-1, keepdim=True)
        return (x - m) / torch.sqrt(v + 1e-5) * w + b

    ids = torch.tensor([int(i) for i in open(ids_path).read().split()])
    T = len(ids)
    x = t["token_embd.weight"][ids] + t["position_embd.weight"][:T]
    hd = C // H
    mask = torch.triu(torch.full((T, T), float("-inf"), dtype=torch.float64), 1)
    for l in range(L):
        p = f"blk.{l}."
        h = ln(x, t[p + "attn_norm.weight"], t[p + "attn_norm.bias"])
        qkv = h @ t[p + "attn_qkv.weight"].T + t[p + "attn_qkv.bias"]
        q, k, v = (z.reshape(T, H, hd).transpose(0, 1) for z in qkv.split(C, -1))
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, -1) @ v
        x = x + a.transpose(0, 1).reshape(T, C) @ t[p + "attn_output.weight"].T + t[p + "attn_output.bias"]
        h = ln(x, t[p + "ffn_norm.weight"], t[p + "ffn_norm.bias"])
        h = gelu(h @ t[p + "ffn_up.weight"].T + t[p + "ffn_up.bias"])
        x = x + h @ t[p + "ffn_down.weight"].T + t[p + "ffn_down.bias"]
    x = ln(x, t["output_norm.weight"], t["output_norm.bias"])
    (x @ t["token_embd.weight"].T).float().numpy().tofile(out)


main()
