"""ZeRO++'s block quantizers re-implemented with PyTorch for the tests
(parallel/zeropp_quant.h): scale = absmax / qmax per block, codes =
round-half-even(x / scale), 0 for an all-zero block; int4 codes as
two's-complement nibbles, element 2i low. Reads the cases that
test_zeropp_quant --dump DIR wrote and compares codes, scales and
dequantized values byte for byte."""
import sys
import numpy as np
import torch

def quantize(x, block, bits):
    qmax = 127.0 if bits == 8 else 7.0
    n = x.numel()
    nb = (n + block - 1) // block
    pad = torch.zeros(nb * block, dtype=torch.float32)
    pad[:n] = x
    blocks = pad.view(nb, block)
    scale = blocks.abs().amax(dim=1) / torch.tensor(qmax, dtype=torch.float32)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(blocks / safe[:, None])
    q = torch.where(scale[:, None] > 0, q, torch.zeros_like(q)).clamp(-qmax, qmax).to(torch.int32).view(-1)[:n]
    if bits == 8:
        codes = q.to(torch.int8).view(torch.uint8)
    else:
        nib = (q & 0xF).to(torch.uint8)
        if n % 2:
            nib = torch.cat([nib, torch.zeros(1, dtype=torch.uint8)])
        codes = nib[0::2] | (nib[1::2] << 4)
    deq = (q.to(torch.float32).view(-1) * torch.repeat_interleave(scale, block)[:n])
    return codes, scale, deq

def main(d):
    bad = 0
    for line in open(f"{d}/cases.txt"):
        name, n, block, bits = line.split()
        n, block, bits = int(n), int(block), int(bits)
        x = torch.from_numpy(np.fromfile(f"{d}/{name}.x", dtype=np.float32))
        codes, scale, deq = quantize(x, block, bits)
        got = {k: np.fromfile(f"{d}/{name}.{k}", dtype=np.uint8) for k in "qsy"}
        want = {"q": codes.numpy().tobytes(), "s": scale.numpy().tobytes(), "y": deq.numpy().tobytes()}
        diffs = [k for k in "qsy" if got[k].tobytes() != want[k]]
        print(("FAIL " if diffs else "ok   ") + f"{name}: n={n} block={block} int{bits}: codes, scales, values "
              + ("differ in " + ",".join(diffs) if diffs else "identical"))
        bad += bool(diffs)
    sys.exit(1 if bad else 0)

main(sys.argv[1])
