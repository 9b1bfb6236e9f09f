#!/usr/bin/env bash
# The GPU tests: builds them with `make cuda` (nvcc from /usr/local/cuda)
# and runs each. Without nvcc, or without a CUDA device, it prints one line
# saying so and exits 77 (skipped: never counted as passed).
set -uo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$NVCC" ]; then
    echo "SKIP: no CUDA compiler at $NVCC (the GPU tests need CUDA; the CPU build does not)"
    exit 77
fi
make -s cuda >/tmp/mt-cuda-build.$$ 2>&1 || { cat /tmp/mt-cuda-build.$$; rm -f /tmp/mt-cuda-build.$$; echo "FAIL: make cuda"; exit 1; }
rm -f /tmp/mt-cuda-build.$$
rc=0
for t in build-cuda/tests/gpu/*; do
    [ -x "$t" ] || continue
    echo "== $(basename "$t")"
    LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} "$t"
    r=$?
    if [ $r -eq 77 ]; then rc=77; elif [ $r -ne 0 ]; then rc=1; break; fi
done
exit $rc
