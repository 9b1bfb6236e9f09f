#!/usr/bin/env python3
"""compare_losses.py REF.jsonl GOT.jsonl NAME TOL [FIELDS [WINDOW]]: every step's loss and grad_norm
(and every val_loss; FIELDS, comma-separated, names others; with WINDOW, their means over each
WINDOW consecutive steps, a curve's track) of GOT within TOL relative of REF's, the same fields in the same order; prints one line
with the largest relative differences, exit 1 otherwise. Plain Python (the device machine's
python3, the CI's /usr/bin/python3)."""
import json, sys


FIELDS = sys.argv[5].split(",") if len(sys.argv) > 5 else ("loss", "grad_norm", "val_loss")


def vals(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        out += [(k, r[k]) for k in FIELDS if k in r]
    return out


ref, got, name, tol = vals(sys.argv[1]), vals(sys.argv[2]), sys.argv[3], float(sys.argv[4])
if len(sys.argv) > 6:
    win = int(sys.argv[6])
    def windows(v):
        return [(k, sum(x for kk, x in v[i:i + win] if kk == k) / win) for k in FIELDS
                for i in range(0, len([1 for kk, _ in v if kk == k]) - win + 1, win)
                if not [1 for kk, _ in v if kk != k]]
    if any(kk != FIELDS[0] for kk, _ in ref + got):
        sys.exit("compare_losses.py: WINDOW needs one field")
    ref, got, name = windows(ref), windows(got), f"{name} ({win}-step means)"
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
