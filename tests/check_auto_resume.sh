#!/usr/bin/env bash
# --resume auto and the schedule a resumed run keeps:
#  - with no checkpoint in --ckpt-dir it says so and starts fresh;
#  - after kill -9 of a run (periodic checkpoints every 20 steps), the same
#    command line with --resume auto continues from the last checkpoint and
#    its losses equal those of an uninterrupted run, bitwise;
#  - resuming at --steps says there is nothing left to train;
#  - under cosine decay a changed --steps (or any run's --lr) is refused
#    naming both values, and accepted with --allow-schedule-change.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
pid=; on_exit 'kill -9 $pid 2>/dev/null || true'
corpus d
T="--train $W/d_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --steps 400 --lr-schedule cosine --warmup 10 --log-every 0"
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1"; }
$M train $T --metrics $W/straight.jsonl >/dev/null
$M train $T --ckpt-dir $W/ck --ckpt-every 20 --resume auto --metrics $W/a.jsonl > $W/a.out 2>&1 &
pid=$!
# wait for the checkpoint of step 60, then kill -9 mid-run
for i in $(seq 1 600); do
    grep -q '"step":\(6\|8\|1[0-9]\)0,' $W/ck/manifest.json 2>/dev/null && break; sleep 0.1
done
kill -9 $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; pid=
grep -q "^no checkpoint in $W/ck: starting fresh" $W/a.out || { echo "FAIL: no 'starting fresh' line"; cat $W/a.out; exit 1; }
ck=$(grep -o '"step":[0-9]*' $W/ck/manifest.json | head -1 | cut -d: -f2)
done_steps=$(grep -c '"loss"' $W/a.jsonl)
[ "$done_steps" -lt 400 ] || { echo "FAIL: the run finished before it was killed"; exit 1; }
$M train $T --ckpt-dir $W/ck --ckpt-every 20 --resume auto --metrics $W/b.jsonl > $W/b.out
grep -q "resumed from $W/ck at step $ck" $W/b.out || { echo "FAIL: no resume line"; cat $W/b.out; exit 1; }
cmp <(losses $W/straight.jsonl | sed -n "$((ck + 1)),400p") <(losses $W/b.jsonl) ||
    { echo "FAIL: resumed losses differ from the uninterrupted run"; exit 1; }
echo "ok   --resume auto without a checkpoint: 'starting fresh'; kill -9 after $done_steps steps, --resume auto from step $ck: steps $((ck + 1))-400 bitwise equal to the uninterrupted run"
expect() { # WANT FLAGS...
    local want=$1; shift
    set +e; o=$($M train "$@" 2>&1); local rc=$?; set -e
    [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$o" || { echo "FAIL: $* -> $o"; exit 1; }
    echo "ok   refused: $(grep -m1 error: <<<"$o" | cut -c1-150)"
}
expect "is at step 400 and --steps is 400: nothing left to train" $T --ckpt-dir $W/ck --resume
expect "started with --steps 400, this one says --steps 500" ${T/--steps 400/--steps 500} --ckpt-dir $W/ck --resume
expect "started with --lr 0.0003, this one says --lr 0.001" $T --lr 1e-3 --ckpt-dir $W/ck --resume
$M train ${T/--steps 400/--steps 405} --ckpt-dir $W/ck --resume --allow-schedule-change > $W/c.out
grep -q "resumed from $W/ck at step 400" $W/c.out || { echo "FAIL: --allow-schedule-change"; cat $W/c.out; exit 1; }
echo "ok   --allow-schedule-change lets --steps 405 continue from step 400"
