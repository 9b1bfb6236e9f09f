#!/usr/bin/python3
"""torch.optim.Adagrad (PyTorch 1.13, single-tensor path) replaying the run
`build/tests/test_adagrad --dump FILE` wrote (format in tests/test_adagrad.c):
one parameter per tensor of the unit, weight decay on the tensors meshtrain
decays, the C run's lr each step, each gradient multiplied by the clipping
coefficient in float32 first (as meshtrain's update does). The final
parameters and sums must agree with the C run to 1e-6 relative (the largest
difference and the count of bitwise-unequal elements are printed)."""
import sys
import numpy as np
import torch


def main(path):
    b = open(path, "rb").read()
    o = 0

    def take(dtype, n):
        nonlocal o
        a = np.frombuffer(b, dtype=dtype, count=n, offset=o)
        o += a.nbytes
        return a

    nt, numel, steps = take(np.int64, 3)
    tensors = [take(np.int64, 3) for _ in range(nt)]
    lr_decay, acc0, eps, wd = take(np.float64, 4)
    p0 = take(np.float32, numel)
    params = [torch.tensor(p0[off:off + n].copy()) for off, n, _ in tensors]
    for q in params:
        q.requires_grad_(True)
    groups = [{"params": [q], "weight_decay": float(wd) if decay else 0.0} for q, (_, _, decay) in zip(params, tensors)]
    opt = torch.optim.Adagrad(groups, lr=1e-2, lr_decay=float(lr_decay), eps=float(eps),
                              initial_accumulator_value=float(acc0), foreach=False)
    for _ in range(steps):
        lr, scale = take(np.float64, 2)
        g = torch.tensor(take(np.float32, numel).copy()) * torch.tensor(np.float32(scale))
        for q, (off, n, _) in zip(params, tensors):
            q.grad = g[off:off + n].clone()
        for grp in opt.param_groups:
            grp["lr"] = float(lr)
        opt.step()
    got_p, got_s = take(np.float32, numel), take(np.float32, numel)
    ref_p = torch.cat([q.detach() for q in params]).numpy()
    ref_s = torch.cat([opt.state[q]["sum"] for q in params]).numpy()
    ok = True
    for name, got, ref in (("parameters", got_p, ref_p), ("sum", got_s, ref_s)):
        err = float(np.max(np.abs(got.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1e-30)))
        neq = int(np.sum(got.view(np.uint32) != ref.view(np.uint32)))
        print(f"adagrad {steps} steps vs torch.optim.Adagrad: {name} max relative difference {err:.3g}, "
              f"{neq} of {numel} elements not bitwise equal")
        ok = ok and err <= 1e-6
    disp = float(np.max(np.abs(ref_p - p0)))
    print(f"largest displacement over the run {disp:.3g}")
    ok = ok and disp > 1e-3  # the run moved the parameters
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv[1])
