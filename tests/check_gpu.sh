#!/usr/bin/env bash
# The CUDA build and, where a GPU exists, the device run: `make gpu` (nvcc, sm_90 + PTX, every
# warning an error) must succeed wherever /usr/local/cuda has nvcc; then tests/gpu/run.sh runs
# the kernel tests, memcheck and racecheck on the GPU -- or, with no GPU here, exits 77 and the
# suite counts this test as skipped (the compile above still had to pass).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
if [ -x "${NVCC:-/usr/local/cuda/bin/nvcc}" ]; then
    make -s gpu > "$W/build.log" 2>&1 || { tail -n 30 "$W/build.log"; echo "FAIL: make gpu"; exit 1; }
    echo "make gpu: built $(ls build-gpu/tests | tr '\n' ' ')without warnings"
fi
OUT=$W/report bash tests/gpu/run.sh
