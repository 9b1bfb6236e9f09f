#!/usr/bin/env bash
# A stalled or dead rank ends a data-parallel training run on every rank:
#  - SIGSTOP one of 4 ranks (dp=4, ZeRO-3) mid-run: every rank exits
#    non-zero within two --timeouts (5 s each; a peer silent at two deadlines in a row) + grace, and the messages name the
#    stalled collective and world rank 2 as the one that did not arrive;
#  - SIGKILL one rank: the job ends non-zero (the launcher notices).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
victim=; on_exit '[ -n "$victim" ] && kill -CONT $victim 2>/dev/null'
corpus text
T="--train $W/text_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --steps 1000000 --log-every 0"
for sig in STOP KILL; do
    mpirun --oversubscribe -np 4 $M train $T --dp 4 --zero 3 --timeout 5 >$W/out 2>$W/err & mp=$!
    # wait until training runs (all 4 ranks up), then signal world rank 2
    for _ in $(seq 100); do [ "$(pgrep -P $mp | wc -l)" = 4 ] && break; sleep 0.1; done
    sleep 2
    victim=$(pgrep -P $mp | sort -n | sed -n 3p)
    start=$SECONDS
    kill -$sig $victim
    rc=0; wait $mp || rc=$?
    took=$((SECONDS - start))
    [ $sig = STOP ] && kill -CONT $victim 2>/dev/null; victim=
    [ $rc -ne 0 ] || { echo "SIG$sig: job exited 0"; exit 1; }
    [ $took -le 20 ] || { echo "SIG$sig: job took ${took}s to end"; exit 1; }
    if [ $sig = STOP ]; then
        grep -q "timeout: .* on group .*did not arrive: 2 (world rank 2 on host [^:]*: no response" $W/err ||
            { echo "no message naming rank 2:"; cat $W/err; exit 1; }
    fi
    echo "SIG$sig of rank 2: all ranks ended (rc $rc) after ${took}s"
done
echo OK
