#!/usr/bin/python3
"""Independent numpy (float64) references for the lean optimizers.

Reads the file written by `build/tests/test_lean_optim --dump FILE`:
  three times (beta1 = 0; beta1 = 0.9; beta1 = 0 with the relative step and
  d = 1.5): an Adafactor run over a hand-made unit
    int64 n_tensors, numel, steps; per tensor int64 offset, rows, cols, ndim, decay
    float64 beta1, decay_rate, eps1, clip_threshold, weight_decay, scale_parameter, eps2
    float32 p0[numel]; per step float64 lr, grad_scale + float32 grad[numel]
    float32 p_final[numel] (the C result)
  float32 signed map[256], unsigned map[256] (mt_q8_decode of every code)
and checks the C results (to 1e-6 of the parameters' scale) against whole-tensor formulas written from the
papers (Shazeer & Stern 2018, Algorithm 4 with update clipping; Dettmers et
al. 2022 dynamic tree quantization). Exits 1 on a mismatch."""
import sys
import numpy as np


class Reader:
    def __init__(self, path):
        self.b = open(path, "rb").read()
        self.o = 0

    def take(self, dtype, n):
        a = np.frombuffer(self.b, dtype=dtype, count=n, offset=self.o)
        self.o += a.nbytes
        return a


def adafactor_reference(rd):
    nt, numel, steps = rd.take(np.int64, 3)
    tensors = [rd.take(np.int64, 5) for _ in range(nt)]
    beta1, decay_rate, eps1, d, wd, scale_parameter, eps2 = rd.take(np.float64, 7)
    p = rd.take(np.float32, numel).astype(np.float64)
    p0 = p.copy()
    state = {}
    for t in range(1, steps + 1):
        lr, gs = rd.take(np.float64, 2)
        grad = rd.take(np.float32, numel).astype(np.float64)
        beta2t = 1.0 - t ** decay_rate
        for i, (off, rows, cols, ndim, decay) in enumerate(tensors):
            n = rows * cols
            G = (grad[off:off + n] * gs).reshape(rows, cols)
            G2 = G * G + eps1
            if ndim == 2 and rows >= 2 and cols >= 2:
                R, C = state.get((i, "r"), np.zeros(rows)), state.get((i, "c"), np.zeros(cols))
                R = beta2t * R + (1 - beta2t) * G2.mean(axis=1)
                C = beta2t * C + (1 - beta2t) * G2.mean(axis=0)
                state[(i, "r")], state[(i, "c")] = R, C
                V = np.outer(R, C) / R.mean()
            else:
                V = beta2t * state.get((i, "v"), np.zeros((rows, cols))) + (1 - beta2t) * G2
                state[(i, "v")] = V
            U = G / np.sqrt(V)
            rms = np.sqrt(np.mean(U * U))
            U = U / max(1.0, rms / d)
            if beta1 > 0:
                M = beta1 * state.get((i, "m"), np.zeros((rows, cols))) + (1 - beta1) * U
                state[(i, "m")] = M
                U = M
            W = p[off:off + n].reshape(rows, cols)
            # relative step: alpha_t = max(eps2, RMS(X_{t-1})) rho_t (Algorithm 4)
            alpha = lr * max(eps2, np.sqrt(np.mean(W * W))) if scale_parameter else lr
            if decay:
                W = W * (1 - alpha * wd)
            p[off:off + n] = (W - alpha * U).ravel()
    got = rd.take(np.float32, numel).astype(np.float64)
    # C keeps the parameters in fp32 (a rounding of ~6e-8 relative each
    # step); the reference in float64
    err = np.max(np.abs(got - p)) / np.max(np.abs(p))
    err_disp = np.max(np.abs(got - p)) / np.max(np.abs(p - p0))
    print(f"adafactor beta1={beta1:.1f}{' relative step d=%g' % d if scale_parameter else ''}: {steps} steps, max |C - numpy| = {err:.3g} of max |p|, "
          f"{err_disp:.3g} of the largest displacement")
    return err <= 1e-6 and err_disp <= 1e-5


def code_map(signed):
    """Dynamic tree map written from the paper's description: sign bit (signed
    map only), then z zero bits giving the decade 10^-z, an indicator bit, and
    the remaining bits a linear fraction between 0.1 and 1 of that decade."""
    bits = 7 if signed else 8
    vals = np.zeros(256)
    for code in range(256):
        mag = code & 0x7F if signed else code
        if mag == 0:
            continue
        h = mag.bit_length() - 1           # the indicator bit's position
        z = bits - 1 - h                   # leading zero bits
        k = mag - (1 << h)                 # fraction bits
        v = 10.0 ** -z * (0.1 + 0.9 * (k + 1) / (1 << h))
        vals[code] = -v if signed and code & 0x80 else v
    return vals


def main():
    rd = Reader(sys.argv[1])
    ok = all([adafactor_reference(rd) for _ in range(3)])
    for signed in (1, 0):
        got = rd.take(np.float32, 256).astype(np.float64)
        want = code_map(signed)
        err = np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30))
        levels = np.unique(want)
        print(f"q8 map signed={signed}: {len(levels)} distinct values, smallest nonzero "
              f"{np.min(np.abs(want[want != 0])):.0e}, max rel diff C vs numpy {err:.2g}")
        ok = ok and err <= 1e-7 and (len(levels) == 255 if signed else len(levels) == 256)
    if rd.o != len(rd.b):
        print(f"trailing bytes: read {rd.o} of {len(rd.b)}")
        ok = False
    print("lean_optim_ref:", "ok" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
