#!/usr/bin/env bash
# GPTQ (quant/gptq.h, `meshtrain quantize --method gptq`):
#  - one layer against tests/gptq_ref.py, a PyTorch float64 re-implementation
#    of the published algorithm on the same Hessian (4 and 8 bits, groups of
#    32..256, act order on and off, symmetric and asymmetric grids): codes
#    equal except at rounding ties (counted; none on this data), scales within
#    1e-6, order and g_idx equal; test_gptq itself checks GPTQ's layer output
#    error below round-to-nearest's on the same grid.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
$BUILD/tests/test_gptq --dump "$W/layer.bin"
$PY tests/gptq_ref.py "$W/layer.bin"
echo OK
