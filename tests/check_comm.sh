#!/usr/bin/env bash
# MPI tests of src/comm (collectives, counters, timeouts) and src/parallel/mesh
# (groups), plus bench-comm. Builds tests/comm_driver.c against
# build/libmeshtrain.a with the Makefile's flags, runs it under mpirun with up
# to 8 oversubscribed ranks, and checks:
#   - every collective's results (odd sizes, in place, non-blocking) and the
#     byte counters against the documented formulas, on 1, 3 and 4 ranks;
#   - mesh groups for dp2 x pp2 x tp2 and dp4 x tp2 with shard group 2 on 8
#     ranks; bad layouts are one clear message and a non-zero exit;
#   - a rank that SIGSTOPs itself before a collective: every survivor prints
#     the timeout line naming the collective and the missing rank, and the job
#     ends non-zero within two timeouts (a peer silent at two deadlines in a row;
#     + diagnosis windows + grace + linger + start-up);
#   - SIGKILL: by default the launcher ends the job at once; with the
#     launcher's recovery mode the survivors' timeout names the dead rank;
#   - bench-comm prints a row per size with a passing correctness check.
# Leftover processes (the stopped rank) are killed by pid.
set -u
. "$(dirname "$0")/lib.sh"

ok() { echo "ok: $*"; }

# ---- build the driver with the Makefile's own flags
make -s build/libmeshtrain.a >/dev/null || { echo "FAIL: make build/libmeshtrain.a"; exit 1; }
mkvar() { make -s --no-print-directory --eval "print-var: ; @echo \$($1)" print-var; }
CFLAGS=$(mkvar CFLAGS) LDFLAGS=$(mkvar LDFLAGS) LDLIBS=$(mkvar LDLIBS)
DRIVER=build/tests/comm_driver
mkdir -p build/tests
# shellcheck disable=SC2086
mpicc $CFLAGS -Itests -o $DRIVER tests/comm_driver.c src/cli/cmd_bench_comm.c src/cli/args.c \
    build/libmeshtrain.a $LDFLAGS $LDLIBS || { echo "FAIL: building $DRIVER"; exit 1; }

# ---- launcher flavour
if mpirun --version 2>&1 | grep -q "Open MPI"; then
    LAUNCH=(mpirun --oversubscribe -np) RECOVER=(--enable-recovery)
else # MPICH (hydra)
    LAUNCH=(mpiexec -n) RECOVER=(-disable-auto-cleanup)
fi

TMP=$W
cleanup_pids() { # kill exactly the driver processes this script started
    local f pid
    for f in "$TMP"/pids/pid.*; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; fi
        rm -f "$f"
    done
}
on_exit cleanup_pids

# run NAME NP [launcher flags --] ARGS...: output in $TMP/NAME.out, sets RC and ELAPSED
run() {
    local name=$1 np=$2; shift 2
    local extra=()
    if [ "${1:-}" = "--extra" ]; then extra=("$2"); shift 2; fi
    mkdir -p "$TMP/pids"
    local t0 t1
    t0=$(date +%s.%N)
    COMM_DRIVER_PIDDIR="$TMP/pids" timeout -s KILL 40 "${LAUNCH[@]}" "$np" "${extra[@]}" \
        "$DRIVER" "$@" >"$TMP/$name.out" 2>&1
    RC=$?
    t1=$(date +%s.%N)
    ELAPSED=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    cleanup_pids
}
show() { sed 's/^/    /' "$TMP/$1.out" | grep -v -e PMIX -e ORTE_ERROR | head -n "${2:-20}"; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# ---- collectives and counters
for np in 4 3 1; do
    run coll$np $np collectives
    good=$(grep -c "comm_driver collectives: rank .*checks, 0 failed" "$TMP/coll$np.out")
    if [ $RC -eq 0 ] && [ "$good" -eq $np ]; then ok "collectives on $np ranks"
    else fail "collectives on $np ranks (rc $RC, $good/$np ranks passed)"; show coll$np 30; fi
done

# ---- mesh groups
for shape in "2 2 2" "4 1 2 2" "8 1 1 4"; do
    run mesh 8 mesh $shape
    good=$(grep -c "comm_driver mesh: rank .*checks, 0 failed" "$TMP/mesh.out")
    if [ $RC -eq 0 ] && [ "$good" -eq 8 ] && grep -q "^mesh: dp " "$TMP/mesh.out"; then
        ok "mesh $shape on 8 ranks"
    else fail "mesh $shape on 8 ranks (rc $RC, $good/8)"; show mesh 30; fi
done
run badmesh 4 mesh 3 1 1
n=$(grep -c "meshtrain: error: mesh dp 3 x pp 1 x tp 1 = 3 processes, but the job has 4" "$TMP/badmesh.out")
if [ $RC -ne 0 ] && [ "$n" -eq 1 ]; then ok "bad layout 3x1x1 on 4 ranks: one message, exit $RC"
else fail "bad layout (rc $RC, $n messages)"; show badmesh; fi
run badshard 4 mesh 4 1 1 3
if [ $RC -ne 0 ] && grep -q "shard-group 3 does not divide the data-parallel size 4" "$TMP/badshard.out"; then
    ok "bad shard group"
else fail "bad shard group (rc $RC)"; show badshard; fi

# ---- failures: SIGSTOP, timeout 5 s
run stop 4 stall stop 2 5
pat="meshtrain: rank [013]: timeout: allreduce #3 on group 'world' (size 4, 4096 bytes) waited 11.0 s .*did not arrive: 2 (world rank 2 on host [^:]*: no response"
n=$(grep -c "$pat" "$TMP/stop.out")
if [ $RC -ne 0 ] && [ "$n" -eq 3 ] && lt "$ELAPSED" 18 && lt 10 "$ELAPSED" && ! grep -q UNEXPECTED "$TMP/stop.out"; then
    ok "SIGSTOP of rank 2: 3 survivors named it, exit $RC after ${ELAPSED}s"
else fail "SIGSTOP (rc $RC, $n of 3 lines, ${ELAPSED}s)"; show stop; fi

# SIGKILL, default launcher: the launcher itself ends the job quickly
run killdef 4 stall kill 3 5
if [ $RC -ne 0 ] && lt "$ELAPSED" 12 && grep -Eiq "rank 3.*signal 9|signal: 9|killed" "$TMP/killdef.out"; then
    ok "SIGKILL of rank 3: launcher ended the job, exit $RC after ${ELAPSED}s"
else fail "SIGKILL default (rc $RC, ${ELAPSED}s)"; show killdef; fi

# SIGKILL with recovery: survivors keep running and our timeout names rank 1.
# (Open MPI's mpirun returns 0 after MPI_Abort in this mode, so the exit
# status is not asserted; the abort line is.)
run killrec 4 --extra "${RECOVER[0]}" stall kill 1 5
pat="meshtrain: rank [023]: timeout: allreduce #3 on group 'world' (size 4, 4096 bytes) .*did not arrive: 1 (world rank 1 on host [^:]*: no response"
n=$(grep -c "$pat" "$TMP/killrec.out")
if [ "$n" -ge 1 ] && lt "$ELAPSED" 18 && ! grep -q UNEXPECTED "$TMP/killrec.out"; then
    ok "SIGKILL of rank 1 with launcher recovery: $n survivors named it after ${ELAPSED}s"
else fail "SIGKILL with recovery ($n lines, ${ELAPSED}s)"; show killrec; fi

# other collectives, timeout 2 s: some rank names rank 0 as missing
# (recv: rank 1 waits for a message from rank 0; the others in a barrier)
for op in reduce_scatter allgather broadcast barrier recv; do
    run stop_$op 4 stall stop 0 2 $op
    what="$op #3 on group 'world'"
    [ $op = recv ] && what="recv from rank 0 (world rank 0) on group 'world' (size 4, 16 bytes)"
    if [ $RC -ne 0 ] && lt "$ELAPSED" 9 &&
        grep -q "timeout: .*did not arrive: .*0 (world rank 0 on host [^:]*: no response" "$TMP/stop_$op.out" &&
        grep -q "timeout: $what" "$TMP/stop_$op.out"; then
        ok "SIGSTOP before $op: named, ${ELAPSED}s"
    else fail "SIGSTOP before $op (rc $RC, ${ELAPSED}s)"; show stop_$op; fi
done

# mismatched calls (rank 0 broadcasts where the others all-reduce, under the
# same number) are named as such at the first deadline, not waited on as slow
run mismatch 4 stall stop 0 2 mismatch
if [ $RC -ne 0 ] && lt "$ELAPSED" 9 && grep -q "the ranks' calls do not match" "$TMP/mismatch.out" &&
    ! grep -q "a slow link" "$TMP/mismatch.out"; then
    ok "mismatched collectives: named as such, ${ELAPSED}s"
else fail "mismatched collectives (rc $RC, ${ELAPSED}s)"; show mismatch; fi

# ---- a slow operation is not a dead peer: an all-reduce that takes many
# timeouts, every rank inside it and answering, completes (one warning line
# says so) instead of aborting with "the MPI library is stuck"
run slow 2 slow 0.02 384
took=$(grep -o "comm_driver slow: rank 0: all-reduce of 384 MB took [0-9.]* s" "$TMP/slow.out" | grep -o "[0-9.]* s$" | grep -o "[0-9.]*")
good=$(grep -c "comm_driver slow: rank .*, 0 wrong values" "$TMP/slow.out")
if [ $RC -eq 0 ] && [ "$good" -eq 2 ] && [ -n "$took" ] && lt 0.04 "$took" &&
    grep -q "warning: allreduce #[0-9]* on group 'world' .* every rank of the group is inside it and answering: a slow link, not a dead peer" "$TMP/slow.out" &&
    ! grep -q "timeout:" "$TMP/slow.out"; then
    ok "all-reduce of 384 MB over ${took}s under a 0.02 s timeout: completed, one slow-link warning"
else fail "slow all-reduce (rc $RC, $good of 2 ranks, took ${took:-?}s)"; show slow; fi

# ---- bench-comm
run bench 4 bench --min-bytes 1K --max-bytes 256K --iters 3 --warmup 1 --factor 4
rows=$(grep -cE "^  (allreduce|reduce_scatter|allgather|broadcast) +[0-9]+ +[0-9]+ .* ok$" "$TMP/bench.out")
if [ $RC -eq 0 ] && [ "$rows" -eq 20 ] && ! grep -q WRONG "$TMP/bench.out"; then
    ok "bench-comm: $rows rows"
else fail "bench-comm (rc $RC, $rows of 20 rows)"; show bench 30; fi
run benchbad 2 bench --max-bytes 12Q
if [ $RC -ne 0 ] && grep -q "bad size suffix" "$TMP/benchbad.out"; then ok "bench-comm bad flag"
else fail "bench-comm bad flag (rc $RC)"; show benchbad; fi

echo "check_comm: $fails failed"
[ $fails -eq 0 ]
