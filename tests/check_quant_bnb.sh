#!/usr/bin/env bash
# NF4 (plain and double quant) and int8 weight quantizers are bit-exact
# against a PyTorch re-implementation of bitsandbytes' reference quantizer
# (tests/quant_ref.py): codes, absmax, nested absmax, offset, the code
# tables, fp32 and bf16 dequantization; shapes 64x64, 3x100 (tail block),
# 1x7, 5x13 (odd count), 256x300 (1200 blocks: a nested tail), an all-zero
# block and row, an all-zero tail, ties, 1e30, 1e-30 and subnormal weights.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
$BUILD/tests/test_quant_nf4 --dump $W
$PY tests/quant_ref.py $W
