#!/usr/bin/env bash
# Runs every test: the C unit tests (build/tests/test_*) and the scripted
# tests (tests/check_*.sh, which may call mpirun, PyTorch or node). Each is
# one test; the last line is "N passed, N failed, N skipped" (exit 77: cannot run here, e.g. no GPU).
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
B=${MT_BUILD:-build} # make asan: build-asan
mkdir -p $B/test-logs
pass=0; fail=0; skip=0; failed=()
filter=${1:-}
run_one() {
    local name=$1; shift
    if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then return; fi
    local log=$B/test-logs/$name.log start=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then
        pass=$((pass+1)); echo "PASS $name ($((SECONDS-start))s)"
    elif [ $rc -eq 77 ]; then # a test that cannot run here (no GPU): said so, never counted as passed
        skip=$((skip+1)); echo "SKIP $name: $(grep -m1 '^SKIP' "$log" || tail -n 1 "$log")"
    else
        fail=$((fail+1)); failed+=("$name"); echo "FAIL $name ($((SECONDS-start))s); last lines of $log:"
        tail -n 25 "$log" | sed 's/^/    /'
    fi
}
for t in $B/tests/test_*; do
    [ -x "$t" ] && run_one "$(basename "$t")" "$t"
done
for s in tests/check_*.sh; do
    name=$(basename "$s" .sh)
    [ -n "${MT_ONLY_CHECKS:-}" ] && [[ " $MT_ONLY_CHECKS " != *" $name "* ]] && continue # make asan's subset
    [ -f "$s" ] && run_one "$name" bash "$s"
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
