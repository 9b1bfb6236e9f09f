#!/usr/bin/env bash
# `make bench`: reports plan --cpu's step-time model against measurement
# (bench/plan_time.sh; BENCH_PLAN=0 skips it), a mixture-of-experts step
# against the dense one (bench/moe_step.sh; BENCH_MOE=0 skips it), then builds the sgemm-ceiling
# probe and runs bench/run_bench.py (meshtrain against the PyTorch reference;
# see its docstring for the environment knobs, e.g. BENCH_QUICK=1 for a
# smoke test).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${BENCH_PLAN:-1}" = 0 ] || bash bench/plan_time.sh
[ "${BENCH_MOE:-1}" = 0 ] || bash bench/moe_step.sh  # mixture of experts against the dense model of equal active size
make -s -f Makefile -f bench/bench.mk build/bench/gemm_rate
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "bench: /usr/bin/python3 cannot import torch; install Debian's python3-torch (scripts/setup.sh)" >&2
    exit 2
fi
command -v /usr/bin/time >/dev/null || { echo "bench: /usr/bin/time is missing (Debian package 'time')" >&2; exit 2; }
exec /usr/bin/python3 bench/run_bench.py
