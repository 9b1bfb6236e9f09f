#!/usr/bin/env bash
# The straggler report (issue 35): with more than one rank every --metrics
# step line carries rank_step_ms and rank_wait_ms (each rank's step time and
# its time waiting in communication), and rank 0 warns, naming the rank and
# its host, once a rank's compute time (step - wait) stays above the median
# of its pipeline stage's ranks for 5 steps. --test-slow-rank R:MS (a test
# aid) makes rank R sleep MS ms at the start of every step:
#  - dp 2, rank 1 slow by 40 ms: its compute is >= 30 ms above rank 0's in
#    every step after the first, rank 0 waits for it, one warning names
#    rank 1 and this host (on stdout and in --log-file); the losses are
#    bitwise those of the run without the aid, which has the arrays and no
#    warning;
#  - dp 2 x pp 2, rank 3 slow: the warning names rank 3 against the 2 ranks
#    of its stage; losses bitwise those of the run without the aid;
#  - one process: the metrics lines keep their fields (no arrays);
#  - a rank outside the world is refused.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus d
T="--train $W/d_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --steps 10"
host=$(uname -n)

$MPI -np 2 $M train $T --dp 2 --test-slow-rank 1:40 --metrics $W/slow.jsonl --log-file $W/slow.log >$W/slow.out ||
    fail "dp 2 with a slow rank"
$MPI -np 2 $M train $T --dp 2 --metrics $W/fast.jsonl --log-file $W/fast.log >$W/fast.out || fail "dp 2"
$PY - $W/slow.jsonl $W/fast.jsonl <<'PY' || fail "dp 2 metrics"
import json, sys
def rows(p): return [json.loads(l) for l in open(p) if '"loss"' in l]
slow, fast = rows(sys.argv[1]), rows(sys.argv[2])
assert len(slow) == len(fast) == 10
for r in slow + fast:
    assert len(r["rank_step_ms"]) == 2 and len(r["rank_wait_ms"]) == 2, r
    assert r["rank_step_ms"][0] == r["ms"], r
comp = [[s - w for s, w in zip(r["rank_step_ms"], r["rank_wait_ms"])] for r in slow[1:]]
gap = min(c[1] - c[0] for c in comp)
assert gap >= 30, f"rank 1's compute is only {gap:.1f} ms above rank 0's in some step: {comp}"
wait0 = min(r["rank_wait_ms"][0] for r in slow[1:])
assert wait0 >= 20, f"rank 0 waits only {wait0:.1f} ms for the slow rank"
print(f"ok   dp 2, rank 1 slow by 40 ms: its compute >= {gap:.1f} ms above rank 0's, rank 0 waits >= {wait0:.1f} ms "
      f"(steps 2-10); e.g. {json.dumps({k: slow[-1][k] for k in ('rank_step_ms', 'rank_wait_ms')})}")
PY
W1="^step +[0-9]+ \| warning: rank 1 \(host ($host|${host%%.*})\) is persistently slower than the median: compute [0-9.]+ ms per step \([0-9.]+x the median [0-9.]+ ms of all 2 ranks\) for 5 steps in a row"
if [ "$(grep -cE "$W1" $W/slow.out)" = 1 ] && [ "$(grep -c warning $W/slow.out)" = 1 ] && grep -qE "$W1" $W/slow.log; then
    echo "ok   one warning (stdout and --log-file): $(grep warning $W/slow.log)"
else
    fail "no single warning naming rank 1 and host $host:"; grep -E 'warning|^step +5' $W/slow.out
fi
grep -q warning $W/fast.out $W/fast.log && fail "a warning without a slow rank: $(grep warning $W/fast.out)" ||
    echo "ok   no warning without the slow rank"
cmp -s <(step_losses $W/slow.jsonl) <(step_losses $W/fast.jsonl) && echo "ok   dp 2: losses bitwise equal with and without the slow rank" ||
    fail "dp 2: the slow rank changed the losses"

P="$T --dp 2 --pp 2 --micro-batch 2"
$MPI -np 4 $M train $P --test-slow-rank 3:40 --metrics $W/pslow.jsonl >$W/pslow.out || fail "dp 2 x pp 2 with a slow rank"
$MPI -np 4 $M train $P --metrics $W/pfast.jsonl >/dev/null || fail "dp 2 x pp 2"
if grep -qE "warning: rank 3 \(host [^)]+\) is persistently slower than the median: .* of the 2 ranks of its pipeline stage\)" $W/pslow.out &&
    [ "$(grep -c warning $W/pslow.out)" = 1 ]; then
    echo "ok   dp 2 x pp 2: one warning names rank 3 against its stage"
else
    fail "dp 2 x pp 2: the warning"; grep warning $W/pslow.out
fi
$PY - $W/pslow.jsonl <<'PY' || fail "dp 2 x pp 2 arrays"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
assert all(len(r["rank_step_ms"]) == 4 == len(r["rank_wait_ms"]) for r in rows)
comp = [[s - w for s, w in zip(r["rank_step_ms"], r["rank_wait_ms"])] for r in rows[1:]]
gap = min(c[3] - c[1] for c in comp)
assert gap >= 30, f"rank 3's compute is only {gap:.1f} ms above rank 1's (the same stage): {comp}"
print(f"ok   dp 2 x pp 2: 4-rank arrays, rank 3's compute >= {gap:.1f} ms above rank 1's")
PY
cmp -s <(step_losses $W/pslow.jsonl) <(step_losses $W/pfast.jsonl) && echo "ok   dp 2 x pp 2: losses bitwise equal" ||
    fail "dp 2 x pp 2: the slow rank changed the losses"

$M train $T --metrics $W/one.jsonl >/dev/null || fail "one process"
$PY - $W/one.jsonl <<'PY' || fail "one process: the metrics fields changed"
import json, sys
keys = ["step", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "gflops", "elapsed_s", "eta_s"]
assert all(list(json.loads(l)) == keys for l in open(sys.argv[1])), open(sys.argv[1]).readline()
print("ok   one process: the metrics lines keep their 9 fields")
PY
if $MPI -np 2 $M train $T --dp 2 --test-slow-rank 2:10 >$W/bad.out 2>&1; then fail "rank 2 of 2 accepted"
else grep -q "test-slow-rank R:MS needs a rank R in \[0, 2)" $W/bad.out && echo "ok   a rank outside the world is refused" ||
    fail "rank 2 of 2: $(grep error $W/bad.out)"; fi
exit $fails
