#!/usr/bin/python3
"""Compares two safetensors files (or two raw fp32 files) tensor by tensor:
prints the worst max|a-b| / max|b| and exits 1 if it exceeds --tol.
Test-only helper."""
import argparse, json, struct, sys
import numpy as np

def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".safetensors"):
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        out = {}
        for k, v in header.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=np.float32)
        return out
    return {"all": np.frombuffer(data, dtype=np.float32)}

ap = argparse.ArgumentParser()
ap.add_argument("a"); ap.add_argument("b")
ap.add_argument("--tol", type=float, required=True)
args = ap.parse_args()
A, B = load(args.a), load(args.b)
if set(A) != set(B):
    print("tensor names differ:", sorted(set(A) ^ set(B))); sys.exit(1)
worst, wname = 0.0, None
for k in A:
    if A[k].shape != B[k].shape:
        print(f"{k}: shapes differ {A[k].shape} vs {B[k].shape}"); sys.exit(1)
    scale = max(float(np.abs(B[k]).max()), 1e-30)
    r = float(np.abs(A[k].astype(np.float64) - B[k]).max()) / scale
    if r > worst:
        worst, wname = r, k
print(f"worst relative max-abs difference {worst:.3e} ({wname}); tolerance {args.tol:g}")
sys.exit(0 if worst <= args.tol else 1)
