#!/usr/bin/env bash
# The CUDA kernels on the CPU emulation (`make gpu-emu`, docs/usage.md "GPU kernels"):
#  - every launcher of src/cuda/kernels.h is called in tests/gpu/test_kernels.cu;
#  - tests/gpu/test_kernels.cu (every kernel against its CPU op) and tests/gpu/test_step.cu (10
#    training steps of a 1-layer GPT-2 and Llama composed of the kernels against the same steps
#    composed of the CPU ops: losses within 1e-6) pass under both thread schedules, plain and
#    with ASan + UBSan;
#  - tests/gpu/emu_shim.cu (the emulation's own checks) passes under both schedules, and each of
#    its two planted missing __syncthreads gives a wrong result under at least one schedule;
#  - its planted out-of-bounds write is reported by ASan (heap-buffer-overflow in the kernel), its
#    planted divergent __syncthreads stops the emulation with a message naming both lines, and its
#    planted deadlock (half a warp at __syncthreads, half in a shuffle) is reported;
#  - tests/gpu/torch_bench.py runs its CPU smoke test (tiny model, eager).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# every launcher declared in src/cuda/kernels.h is called by the kernel test
grep -o 'mt_cuda_[a-z0-9_]*(' src/cuda/kernels.h | sort -u | tr -d '(' > "$W/launchers"
missing=$(while read -r f; do grep -q "$f(" tests/gpu/test_kernels.cu || echo "$f"; done < "$W/launchers")
[ -z "$missing" ] || { echo "FAIL: launchers without a test in tests/gpu/test_kernels.cu: $missing"; exit 1; }
echo "all $(wc -l < "$W/launchers") launchers of src/cuda/kernels.h are called by tests/gpu/test_kernels.cu"
make -s gpu-emu > "$W/build.log" 2>&1 || { tail -n 30 "$W/build.log"; echo "FAIL: make gpu-emu"; exit 1; }
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for s in forward reverse; do
    for b in build-gpu-emu build-gpu-emu/asan; do
        MT_EMU_SCHEDULE=$s $b/tests/test_kernels > "$W/kernels.txt" 2>&1 ||
            { grep -v '^ok' "$W/kernels.txt" | tail -n 30; echo "FAIL: $b/tests/test_kernels, schedule $s"; exit 1; }
        echo "$b/tests/test_kernels, schedule $s: $(tail -n 1 "$W/kernels.txt")"
        MT_EMU_SCHEDULE=$s $b/tests/test_step > "$W/step.txt" 2>&1 ||
            { cat "$W/step.txt"; echo "FAIL: $b/tests/test_step, schedule $s"; exit 1; }
        [ $s = forward ] && [ $b = build-gpu-emu ] && cat "$W/step.txt"
        MT_EMU_SCHEDULE=$s $b/tests/emu_shim > "$W/shim-$s-${b//\//_}.txt" 2>&1 ||
            { cat "$W/shim-$s-${b//\//_}.txt"; echo "FAIL: $b/tests/emu_shim, schedule $s"; exit 1; }
    done
    grep -h '^planted' "$W/shim-$s-build-gpu-emu.txt" | sed "s/^/schedule $s: /"
done
for bug in tree-sum-without-barrier broadcast-without-barrier; do
    cat "$W"/shim-*.txt > "$W/all.txt"
    grep -q "^planted $bug: caught" "$W/all.txt" || { echo "FAIL: the planted $bug was missed by both schedules"; exit 1; }
done
if build-gpu-emu/asan/tests/emu_shim oob > "$W/oob.txt" 2>&1; then
    cat "$W/oob.txt"; echo "FAIL: the planted out-of-bounds write was not reported"; exit 1
fi
grep -q 'heap-buffer-overflow' "$W/oob.txt" && grep -q 'in write_past_end' "$W/oob.txt" ||
    { cat "$W/oob.txt"; echo "FAIL: the out-of-bounds run failed without ASan's report"; exit 1; }
echo "ASan reported the planted out-of-bounds write: $(grep -m1 'ERROR: AddressSanitizer' "$W/oob.txt" | sed 's/ on address.*//')"
if build-gpu-emu/tests/emu_shim divergent > "$W/div.txt" 2>&1; then
    cat "$W/div.txt"; echo "FAIL: the planted divergent __syncthreads was not stopped"; exit 1
fi
grep -q 'divergent __syncthreads' "$W/div.txt" || { cat "$W/div.txt"; echo "FAIL: no divergent-barrier message"; exit 1; }
echo "stopped the planted divergent barrier: $(grep -m1 'divergent __syncthreads' "$W/div.txt")"
if build-gpu-emu/tests/emu_shim deadlock > "$W/dead.txt" 2>&1; then
    cat "$W/dead.txt"; echo "FAIL: the planted deadlock was not stopped"; exit 1
fi
grep -q 'mt_emu: deadlock' "$W/dead.txt" || { cat "$W/dead.txt"; echo "FAIL: no deadlock message"; exit 1; }
echo "stopped the planted deadlock: $(grep -m1 'mt_emu: deadlock' "$W/dead.txt")"
# MT_EMU_GUARD_HOST=1: device memory inaccessible to the host outside the CUDA calls: a kernel and a
# copy run, the planted direct host write stops the run with its message (exit 97)
set +e
MT_EMU_GUARD_HOST=1 build-gpu-emu/tests/emu_shim host_touch > "$W/touch.txt" 2>&1
rc=$?
set -e
[ $rc = 97 ] && grep -q '^kernel and copy ran' "$W/touch.txt" && grep -q 'host read or wrote device memory' "$W/touch.txt" ||
    { cat "$W/touch.txt"; echo "FAIL: MT_EMU_GUARD_HOST did not stop the planted host write (exit $rc)"; exit 1; }
echo "MT_EMU_GUARD_HOST stopped the planted host write: $(grep -m1 'host read or wrote' "$W/touch.txt" | cut -c1-90)"
# tests/gpu/torch_bench.py (the device's PyTorch baseline) runs here on a tiny model: eager, manual attention
$PY tests/gpu/torch_bench.py --tiny > "$W/bench.txt" 2>&1 || { cat "$W/bench.txt"; echo "FAIL: torch_bench.py --tiny"; exit 1; }
tail -n 1 "$W/bench.txt" | $PY -c 'import json, sys; r = json.load(sys.stdin)["results"][0]; assert r["tokens_per_s"] > 0 and 0 < r["loss"] < 10, r'
echo "torch_bench.py --tiny: $(head -n 1 "$W/bench.txt")"
echo "check_gpu_emu: ok"
