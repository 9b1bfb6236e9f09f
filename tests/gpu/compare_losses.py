#!/usr/bin/env python3
"""compare_losses.py REF.jsonl GOT.jsonl NAME TOL: every step's loss and grad_norm (and every
val_loss) of GOT within TOL relative of REF's, the same fields in the same order; prints one line
with the largest relative differences, exit 1 otherwise. Plain Python (the device machine's
python3, the CI's /usr/bin/python3)."""
import json, sys


def vals(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        out += [(k, r[k]) for k in ("loss", "grad_norm", "val_loss") if k in r]
    return out


ref, got, name, tol = vals(sys.argv[1]), vals(sys.argv[2]), sys.argv[3], float(sys.argv[4])
if [k for k, _ in ref] != [k for k, _ in got] or not ref:
    sys.exit(f"FAIL {name}: {len(got)} values logged, expected the {len(ref)} of the reference")
worst = {}
for (k, a), (_, b) in zip(ref, got):
    worst[k] = max(worst.get(k, 0.0), abs(a - b) / abs(a))
steps = sum(k == "loss" for k, _ in ref)
line = f"{name}: {steps} steps, max relative difference " + ", ".join(f"{k} {v:.2g}" for k, v in worst.items())
bad = [k for k, v in worst.items() if not v <= tol]
if bad:
    sys.exit(f"FAIL {line} (bound {tol:g})")
print(f"ok {line} (bound {tol:g})")
