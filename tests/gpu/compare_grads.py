#!/usr/bin/env python3
"""compare_grads.py REF.bin GOT.bin NAME TOL: two --dump-grads files (step 1's gradients of every
trainable tensor, raw float32, in the same order): the same size, and every element's |GOT - REF|
within TOL x max |REF| of the whole dump (the dump has no tensor boundaries). Plain Python."""
import array, sys

ref, got = array.array("f"), array.array("f")
ref.frombytes(open(sys.argv[1], "rb").read())
got.frombytes(open(sys.argv[2], "rb").read())
name, tol = sys.argv[3], float(sys.argv[4])
if len(ref) != len(got) or not ref:
    sys.exit(f"FAIL {name} gradients: {len(got)} values, expected {len(ref)}")
scale = max(abs(x) for x in ref)
worst = max(abs(a - b) for a, b in zip(ref, got)) / scale
line = f"{name}: step-1 gradients, {len(ref)} values, max |diff| / max |ref| {worst:.2g}"
if not worst <= tol:
    sys.exit(f"FAIL {line} (bound {tol:g})")
print(f"ok {line} (bound {tol:g})")
