#!/usr/bin/python3
"""A PyTorch reference of LLM.int8()'s forward as bitsandbytes' MatMul8bitLt
runs it (Dettmers et al. 2022; bnb's int8_vectorwise_quant with a
threshold, int8_mixed_scaled_mm) and of its backward to the input
(grad_output . CB * SCB / 127), replaying `build/tests/test_int8_outliers
--dump FILE` (format there): the outputs at threshold 6 and above every
activation, and the input gradient, each within 1e-5 relative (Frobenius)
of the C; the outlier columns found are printed."""
import sys
import numpy as np
import torch


def int8_linear(x, CB, SCB, threshold):
    A = x.clone()
    outliers = A.abs() >= threshold
    cols = torch.argwhere(outliers.any(dim=0)).view(-1)
    # row scales over the elements below the threshold; the outlier columns' codes are 0
    row_stats = A.masked_fill(outliers, 0.0).abs().max(dim=1).values
    scale = torch.where(row_stats > 0, 127.0 / row_stats, torch.zeros_like(row_stats))
    CA = torch.round(A.masked_fill(outliers, 0.0) * scale.unsqueeze(1)).to(torch.int32)
    CA[:, cols] = 0
    acc = CA.to(torch.int64) @ CB.to(torch.int64).t()  # exact integer accumulation
    out = acc.to(torch.float32) * row_stats.unsqueeze(1) * SCB.unsqueeze(0) * (1.0 / (127 * 127))
    if cols.numel():
        subB = CB[:, cols].to(torch.float32) * (SCB.unsqueeze(1) / 127.0)  # the weight columns, dequantized
        out = out + A[:, cols] @ subB.t()
    return out, cols


def main(path):
    b = open(path, "rb").read()
    o = 0

    def take(dtype, n):
        nonlocal o
        a = np.frombuffer(b, dtype=dtype, count=n, offset=o)
        o += a.nbytes
        return a

    N, C, R = take(np.int64, 3)
    th, = take(np.float32, 1)
    x = torch.tensor(take(np.float32, N * C).reshape(N, C).copy())
    CB = torch.tensor(take(np.int8, R * C).reshape(R, C).copy())
    SCB = torch.tensor(take(np.float32, R).copy())
    got6, goti, dout, dinp = (torch.tensor(take(np.float32, n).reshape(s).copy())
                              for n, s in ((N * R, (N, R)), (N * R, (N, R)), (N * R, (N, R)), (N * C, (N, C))))
    ok = True
    for name, got, t in (("threshold %g" % th, got6, float(th)), ("above every activation", goti, 1e30)):
        ref, cols = int8_linear(x, CB, SCB, t)
        err = float((got - ref).norm() / ref.norm())
        print(f"forward, {name}: outlier columns {cols.tolist()}, C within {err:.3g} relative of the reference")
        ok = ok and err <= 1e-5
    x.requires_grad_(True)
    W = CB.to(torch.float32) * (SCB.unsqueeze(1) / 127.0)
    ref_g = dout @ W  # bnb: grad_A = grad_output . (CB * SCB / 127)
    err = float((dinp - ref_g).norm() / ref_g.norm())
    print(f"input gradient: C within {err:.3g} relative of grad_output . (CB * SCB / 127)")
    ok = ok and err <= 1e-5
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv[1])
