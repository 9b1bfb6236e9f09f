"""bitsandbytes' reference (PyTorch, CPU) weight quantizers re-implemented
for the tests of quant/nf4.h and quant/int8.h, following bnb's default
backend step by step in fp32:
  quantize_4bit(nf4, blocksize=64): per block of 64 over the flattened
    weight, absmax; full blocks scale by x * (1 / max(absmax, 1e-38)),
    the short tail by x / max(absmax, 1e-38) and keeps that clamped
    absmax; torch.bucketize against the fp32 midpoints of the 16 NF4
    values (a tie goes to the lower code); two codes a byte, first high.
  compress_statistics=True: absmax - mean, quantize_blockwise with the
    signed dynamic map (create_dynamic_map) in blocks of 256, same rules.
    The one deliberate difference: the mean is a sequential float64 sum
    divided by the count, rounded to fp32 (what the C side does), where
    bnb calls torch's fp32 .mean(); we print how often the two agree.
  dequantize_4bit: code[q] * absmax in fp32, absmax = dyn[acode] *
    nested_absmax + offset.
  int8_vectorwise_quant (threshold 0): SCB = row absmax, q = round(x *
    (127 / SCB)) (PyTorch's 127 / t is reciprocal(t) * 127); zeros stay 0
    and |q| <= 127 where bnb's would be NaN / inf casts. Dequantized as
    int8_vectorwise_dequant: q * SCB * 7.874015718698502e-3.
Reads what test_quant_nf4 --dump DIR wrote and compares byte for byte."""
import sys
import numpy as np
import torch

NF4 = torch.tensor([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=torch.float32)


def dynamic_map():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    for exponent i, the means of adjacent points of an fp32 linspace from
    0.1 to 1 with 2^i + 1 points, scaled by +-10^(i-6); then 0 and 1."""
    vals = []
    for i in range(7):
        pts = torch.linspace(0.1, 1, 2 ** i + 1, dtype=torch.float32)
        mid = (pts[:-1] + pts[1:]) / 2.0
        vals += ((10 ** (i - 6)) * mid).tolist() + (-(10 ** (i - 6)) * mid).tolist()
    vals += [0, 1.0]
    assert len(vals) == 256
    return torch.tensor(sorted(vals), dtype=torch.float32)


DYN = dynamic_map()


def quantize_blockwise(x, code, block):
    n = x.numel()
    full = n - n % block
    head = x[:full].view(-1, block)
    absmax = head.abs().amax(dim=1) if full else torch.zeros(0, dtype=torch.float32)
    scaled = (head * (1.0 / absmax.clamp(min=1e-38)).view(-1, 1)).clamp(-1, 1).view(-1)
    if n > full:
        tail_max = x[full:].abs().max().clamp(min=1e-38)
        absmax = torch.cat([absmax, tail_max.view(1)])
        scaled = torch.cat([scaled, (x[full:] / tail_max).clamp(-1, 1)])
    mids = (code[:-1] + code[1:]) / 2
    return torch.bucketize(scaled, mids, out_int32=True).to(torch.uint8), absmax


def dequantize_blockwise(codes, absmax, code, block):
    n = codes.numel()
    return code[codes.long()] * absmax.repeat_interleave(block)[:n]


def quantize_nf4(x):
    codes, absmax = quantize_blockwise(x, NF4, 64)
    if codes.numel() % 2:
        codes = torch.cat([codes, torch.zeros(1, dtype=torch.uint8)])
    return (codes[0::2] << 4) | codes[1::2], absmax


def double_quant(absmax):
    total = 0.0
    for v in absmax.tolist():  # sequential float64 sum, as the C side
        total += v
    offset = torch.tensor(total / absmax.numel(), dtype=torch.float32)
    acode, nested = quantize_blockwise(absmax - offset, DYN, 256)
    return acode, nested, offset


def dequantize_nf4(packed, absmax, n):
    codes = torch.stack([packed >> 4, packed & 0xF], dim=1).view(-1)[:n]
    return NF4[codes.long()] * absmax.repeat_interleave(64)[:n]


def quantize_int8(w):
    scb = w.abs().amax(dim=1)
    q = torch.round(w * (127.0 / scb).view(-1, 1)).clamp(-127, 127)
    q = torch.where(w == 0, torch.zeros_like(q), q)
    return q.to(torch.int8), scb


def dequantize_int8(q, scb):
    return q * scb.view(-1, 1) * 7.874015718698502e-3


def raw(t):
    return t.contiguous().numpy().tobytes()


def bf16(t):
    return raw(t.to(torch.bfloat16).view(torch.int16))


def main(d):
    bad = 0
    got_nf4 = np.fromfile(f"{d}/maps.nf4", dtype=np.uint8).tobytes()
    got_dyn = np.fromfile(f"{d}/maps.dynamic", dtype=np.uint8).tobytes()
    for label, got, want in (("nf4 code", got_nf4, raw(NF4)), ("dynamic map", got_dyn, raw(DYN))):
        same = got == want
        print(("ok   " if same else "FAIL ") + f"{label}: C table and the Python formula's " + ("identical" if same else "differ"))
        bad += not same
    mean_agree = cases = 0
    for line in open(f"{d}/cases.txt"):
        name, rows, cols = line.split()
        rows, cols = int(rows), int(cols)
        n = rows * cols
        x = torch.from_numpy(np.fromfile(f"{d}/{name}.x", dtype=np.float32))
        packed, absmax = quantize_nf4(x)
        y = dequantize_nf4(packed, absmax, n)
        acode, nested, offset = double_quant(absmax)
        absmax_dq = dequantize_blockwise(acode, nested, DYN, 256) + offset
        yd = dequantize_nf4(packed, absmax_dq, n)
        q8, scb = quantize_int8(x.view(rows, cols))
        y8 = dequantize_int8(q8, scb)
        want = {
            "packed": raw(packed), "absmax": raw(absmax), "y": raw(y), "yb": bf16(y),
            "dq_acode": raw(acode), "dq_nabsmax": raw(nested), "dq_offset": raw(offset.view(1)),
            "dq_y": raw(yd), "dq_yb": bf16(yd),
            "i8_q": raw(q8), "i8_scb": raw(scb), "i8_y": raw(y8), "i8_yb": bf16(y8),
        }
        diffs = [k for k, v in want.items() if np.fromfile(f"{d}/{name}.{k}", dtype=np.uint8).tobytes() != v]
        cases += 1
        mean_agree += bool(absmax.mean() == offset)
        print(("FAIL " if diffs else "ok   ") + f"{name} [{rows}, {cols}]: {absmax.numel()} blocks, "
              f"{nested.numel()} nested: nf4 codes/absmax/values, double quant, int8 "
              + ("differ in " + ",".join(diffs) if diffs else "identical"))
        bad += bool(diffs)
    print(f"offset: torch's fp32 absmax.mean() equals the float64-sum mean in {mean_agree} of {cases} cases")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1])
