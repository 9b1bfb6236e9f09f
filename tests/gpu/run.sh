#!/usr/bin/env bash
# The device run (docs/usage.md, "GPU kernels"): on a machine with an NVIDIA GPU,
#  1. probe: nvidia-smi, the test binary's libraries (ldd), compute-sanitizer;
#  2. every CUDA kernel against its CPU reference (test_kernels), and 10 training steps of a
#     1-layer GPT-2 and Llama composed of the kernels against the CPU ops (test_step);
#  3. compute-sanitizer memcheck on both, racecheck on the kernel tests;
#  4. tests/gpu/torch_bench.py (PyTorch GPT-2 124M, eager and compiled) if PyTorch sees the GPU
#     and MT_GPU_BENCH is not 0;
# and writes a compact report: $OUT/gpu-report.txt plus one log per step (7 files), or
# ./gpu-report/ when OUT is unset. Runs from a `make gpu-pack` folder (bin/, lib.tar.xz) or from
# the repository (build-gpu/tests, built by `make gpu` if missing). Without a GPU it prints one
# line and exits 77 (skipped, never passed); exit 1 when a step failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no NVIDIA GPU here (nvidia-smi absent or lists none): the CUDA kernel tests did not run"
    exit 77
fi
if [ -d "$here/bin" ]; then # a gpu-pack folder
    bin=$here/bin bench=$here/torch_bench.py
    libdir=$(mktemp -d)
    trap 'rm -rf "$libdir"' EXIT
    tar -C "$libdir" -xJf "$here/lib.tar.xz" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$here/lib.tar.xz" "$libdir" ||
        { echo "FAIL: cannot unpack $here/lib.tar.xz (no xz, no python3)"; exit 1; }
    export LD_LIBRARY_PATH=$libdir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
else # the repository
    root=$(cd "$here/../.." && pwd)
    bin=$root/build-gpu/tests bench=$here/torch_bench.py
    [ -x "$bin/test_kernels" ] || make -C "$root" -s gpu || { echo "FAIL: make gpu"; exit 1; }
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
fi
out=${OUT:-$PWD/gpu-report}
mkdir -p "$out"
rep=$out/gpu-report.txt
: > "$rep"
say() { echo "$*" | tee -a "$rep"; }
rc=0
step() { # step NAME LIMIT_S LOG CMD...: runs CMD with a time limit, the last lines into the report
    local name=$1 limit=$2 log=$3 start=$SECONDS r
    shift 3
    timeout "$limit" "$@" > "$out/$log" 2>&1
    r=$?
    say "== $name: exit $r, $((SECONDS - start)) s (log $log)"
    tail -n 4 "$out/$log" | sed 's/^/   /' | tee -a "$rep"
    [ $r -eq 0 ] || rc=1
    return $r
}
say "gpu run $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$rep"
missing=$(ldd "$bin/test_kernels" | grep 'not found' || true)
if [ -n "$missing" ]; then
    say "FAIL probe: libraries not found:"; say "$missing"; exit 1
fi
ldd "$bin/test_kernels" | awk '{print $1, $3}' > "$out/probe.log"
say "probe: every library found ($(grep -c . "$out/probe.log") in probe.log)"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
step "kernel tests" 120 kernels.log "$bin/test_kernels"
grep '^FAIL' "$out/kernels.log" | tee -a "$rep"
step "training steps (GPT-2, Llama) vs the CPU ops" 120 steps.log "$bin/test_step"
if [ -n "$san" ]; then
    step "memcheck" 240 memcheck.log sh -c "'$san' --tool memcheck --error-exitcode 3 '$bin/test_kernels' &&
        '$san' --tool memcheck --error-exitcode 3 '$bin/test_step'"
    step "racecheck" 300 racecheck.log "$san" --tool racecheck --error-exitcode 3 "$bin/test_kernels"
else
    say "FAIL: no compute-sanitizer (memcheck and racecheck did not run)"; rc=1
fi
if [ "${MT_GPU_BENCH:-1}" != 0 ] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step "torch_bench" 300 torch_bench.log python3 "$bench"
else
    say "torch_bench: not run (MT_GPU_BENCH=0 or no PyTorch with CUDA)"
fi
say "result: $([ $rc -eq 0 ] && echo all steps passed || echo a step FAILED)"
exit $rc
