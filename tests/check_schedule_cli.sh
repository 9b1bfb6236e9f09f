#!/usr/bin/env bash
# meshtrain schedule: the text timeline, the check verdict, bubble vs closed
# form and activation peaks for small cases; --trace writes valid Chrome trace
# JSON whose spans equal the schedule; bad flags are one-line errors (exit 1).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
make -s build/meshtrain >/dev/null || { echo "FAIL: make build/meshtrain"; exit 1; }
expect_line() { # expect_line FILE "exact line"
    if grep -qxF -- "$2" "$1"; then echo "ok: $2"; else fail "missing line '$2' in:"; cat "$1"; fi
}

$M schedule --pp 4 --microbatches 8 >$W/1f1b || fail "1f1b p4 m8 exit $?"
expect_line $W/1f1b "rank 3  .  .  .  F0 B0 -- F1 B1 -- F2 B2 -- F3 B3 -- F4 B4 -- F5 B5 -- F6 B6 -- F7 B7 -- .  .  .  .  .  ."
expect_line $W/1f1b "rank 0  F0 F1 F2 F3 .  .  .  .  .  .  B0 -- F4 B1 -- F5 B2 -- F6 B3 -- F7 B4 -- .  B5 -- .  B6 -- .  B7 --"
expect_line $W/1f1b "check: OK (every message received, no deadlock, each forward and backward once, dependencies respected)"
expect_line $W/1f1b "makespan 33 time units; bubble fraction 0.272727 (mean over ranks of idle/makespan); closed form (p-1)/(m+p-1) = 0.272727 (equal)"
for r in 0 1 2 3; do
    expect_line $W/1f1b "$(printf '%-5d %-11g %-11g %-14.4f %d' $r 24 9 0.2727 $((4 - r)))"
done

$M schedule --pp 1 --microbatches 2 --pp-schedule gpipe --actions >$W/p1 || fail "p1 exit $?"
expect_line $W/p1 "rank 0 (4 actions): F0 B0 F1 B1"
expect_line $W/p1 "rank 0  F0 B0 -- F1 B1 --"

$M schedule --pp 2 --microbatches 4 --pp-schedule interleaved --fwd-cost 1 --bwd-cost 1 >$W/il || fail "interleaved exit $?"
expect_line $W/il "pipeline schedule interleaved: 2 stages, 4 microbatches, 2 chunks per stage (4 virtual stages)"
expect_line $W/il "makespan 9 time units; bubble fraction 0.111111 (mean over ranks of idle/makespan); closed form (p-1)/(v*m+p-1) = 0.111111 (equal)"

# The trace: valid JSON, one forward and one backward span per (rank, microbatch, chunk),
# and the idle fraction the trace helper reports equals the simulated one.
$M schedule --pp 4 --microbatches 8 --pp-schedule interleaved --pp-chunks 2 --trace $W/t.json >$W/tr || fail "trace exit $?"
expect_line $W/tr "trace: $W/t.json (4 ranks; 1 time unit = 1 ms); idle fraction per rank from the trace: 0.1579 0.1579 0.1579 0.1579"
/usr/bin/python3 - $W/t.json <<'PY' || fail "trace content"
import json, sys, collections
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
spans = collections.Counter((e["pid"], e["name"], e["args"]["microbatch"], e["args"]["chunk"])
                            for e in ev if e["ph"] == "X" and e["cat"] == "compute")
want = collections.Counter((r, n, mb, c) for r in range(4) for n in ("forward", "backward")
                           for mb in range(8) for c in range(2))
assert spans == want, "compute spans differ"
dur = {e["name"]: e["dur"] for e in ev if e["ph"] == "X" and e["cat"] == "compute"}
assert dur == {"forward": 500.0, "backward": 1000.0}, dur   # f/v = 0.5 ms, b/v = 1 ms
assert {e["args"]["name"] for e in ev if e["name"] == "process_name"} == {"rank 0", "rank 1", "rank 2", "rank 3"}
print("ok: trace has %d events" % len(ev))
PY

expect_error() { # expect_error "words" args...
    local words=$1; shift
    $M schedule "$@" >$W/out 2>$W/err
    local rc=$?
    if [ $rc -eq 0 ]; then fail "exit 0: schedule $*"; return; fi
    if [ $rc -ne 1 ] || [ "$(wc -l <$W/err)" -ne 1 ] || ! grep -qF -- "$words" $W/err; then
        fail "schedule $*: rc $rc, stderr:"; cat $W/err; return
    fi
    echo "ok: $(cat $W/err)"
}
expect_error "--pp P (pipeline stages) is required" --microbatches 4
expect_error "--microbatches M is required" --pp 2
expect_error "unknown --pp-schedule 'zb'" --pp 2 --microbatches 4 --pp-schedule zb
expect_error "multiple of the pipeline stages (4): use 4 or 8" --pp 4 --microbatches 6 --pp-schedule interleaved
expect_error "need the interleaved schedule" --pp 2 --microbatches 4 --pp-chunks 2
expect_error "must be positive" --pp 2 --microbatches 4 --bwd-cost 0
expect_error "expects an integer, got 'four'" --pp 2 --microbatches four
expect_error "cannot create trace file $W/no/t.json" --pp 2 --microbatches 4 --trace $W/no/t.json
[ $fails -eq 0 ] && echo "all schedule CLI checks passed"
exit $fails
