#!/usr/bin/env bash
# Adafactor (beta1 0; beta1 0.9; beta1 0 with the relative step, d 1.5 and a
# zero-initialised bias under the eps2 floor; 10 steps on a unit with
# odd-shaped matrices, a vector and a [1, n] matrix) and the 8-bit code maps
# against the independent numpy reference tests/lean_optim_ref.py (float64, whole-tensor formulas):
# parameters agree to 1e-6 of their magnitude (1e-5 of their
# displacement over the 10 steps), the maps to 1e-7.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
$BUILD/tests/test_lean_optim --dump "$W/run.bin"
$PY tests/lean_optim_ref.py "$W/run.bin"
