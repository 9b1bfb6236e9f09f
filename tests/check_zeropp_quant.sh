#!/usr/bin/env bash
# ZeRO++'s int8 and int4 block quantizers are bit-exact against a PyTorch
# re-implementation (tests/zeropp_quant_ref.py): tails, exact ties, an
# all-zero block, 1e30 and 1e-30 magnitudes, blocks of 256 and 64.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
$BUILD/tests/test_zeropp_quant --dump $W
$PY tests/zeropp_quant_ref.py $W
