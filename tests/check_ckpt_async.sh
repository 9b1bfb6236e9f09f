#!/usr/bin/env bash
# --ckpt-async (the --ckpt-every saves written by a thread while training
# goes on; the manifest committed later on the main thread):
#  1. its losses and its final checkpoint (manifest and data file) are
#     bitwise those of the synchronous run, the final save coming from the
#     asynchronous path;
#  2. a resume from an asynchronous checkpoint continues bitwise like the
#     uninterrupted run;
#  3. kill -9 at random moments of a run saving a 39 MB checkpoint every 2
#     steps: `ckpt verify` passes on the directory every time, and
#     --resume auto carries on from it (to the end, verified);
#  4. dp2 ZeRO-1 (two files, one per rank): losses and files equal the
#     synchronous run's;
#  5. SIGTERM just after a snapshot (a save likely in flight): exit 0 with a
#     committed, verified checkpoint of the step it stopped at.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
pid=; on_exit 'kill -9 $pid 2>/dev/null || true'
fails=0
corpus d
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1"; }
# same_manifest A B: the manifests agree but for the run config (whose text names the flags and directory)
same_manifest() {
    $PY - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for m in (a, b):
    for k in ("run_config", "manifest_checksum"): m.pop(k, None)
sys.exit(a != b)
PY
}
ok() { [ $fails -eq $1 ] && echo "ok   $2"; }
T="--train $W/d_train.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --log-every 0"

# 1. equal to the synchronous run
f0=$fails
$M train $T --steps 28 --ckpt-dir $W/s --ckpt-every 7 --metrics $W/s.jsonl >/dev/null || fail "sync run"
$M train $T --steps 28 --ckpt-dir $W/a --ckpt-every 7 --ckpt-async --metrics $W/a.jsonl --log-every 1 >$W/a.out ||
    fail "async run"
grep -q "checkpoint of step 28 saved" $W/a.out || fail "the final checkpoint did not come from the async path: $(grep checkpoint $W/a.out)"
cmp -s <(losses $W/s.jsonl) <(losses $W/a.jsonl) || fail "losses differ with --ckpt-async"
cmp -s $W/s/tensors-000028-r00000.bin $W/a/tensors-000028-r00000.bin || fail "the data file differs with --ckpt-async"
same_manifest $W/s/manifest.json $W/a/manifest.json || fail "the manifest differs with --ckpt-async"
[ "$(ls $W/a)" = "$(ls $W/s)" ] || fail "files left: $(ls $W/a)"
ok $f0 "1: --ckpt-async --ckpt-every 7: 28 losses, the data file and the manifest (but its run config) bitwise equal to the synchronous run's"

# 2. resume from an asynchronous checkpoint (step 14, saved by the async path)
f0=$fails
$M train $T --steps 14 --ckpt-dir $W/r --ckpt-every 7 --ckpt-async >/dev/null || fail "async run to 14"
$M ckpt verify $W/r >/dev/null || fail "verify of the step-14 checkpoint"
$M train $T --steps 28 --ckpt-dir $W/r --ckpt-every 7 --ckpt-async --resume --metrics $W/r.jsonl >/dev/null || fail "resume"
cmp -s <(losses $W/s.jsonl | sed -n 15,28p) <(losses $W/r.jsonl) || fail "resumed losses differ from the uninterrupted run"
cmp -s $W/s/tensors-000028-r00000.bin $W/r/tensors-000028-r00000.bin || fail "resumed run's final checkpoint differs"
ok $f0 "2: resume from the async checkpoint of step 14: steps 15-28 and the final checkpoint bitwise equal"

# 3. kill -9 at random moments during background writes of a 39 MB checkpoint
B="--train $W/d_train.bin --layers 4 --dim 256 --heads 4 --seq-len 32 --batch 4 --steps 80 --log-every 0"
kills=0 verified=0 midwrite=0 had=0 f0=$fails
for i in 1 2 3 4 5; do
    $M train $B --ckpt-dir $W/k --ckpt-every 2 --ckpt-async --resume auto --log-every 1 >$W/k$i.out 2>&1 &
    pid=$!
    # once this run has taken its first snapshot, a random moment within 0.4 s
    for t in $(seq 1 300); do grep -q "checkpoint snapshot" $W/k$i.out && break; sleep 0.05; done
    sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", r / 32767 * 0.4 }')"
    kill -9 $pid 2>/dev/null && kills=$((kills + 1)); wait $pid 2>/dev/null; pid=
    # a data file (or its temporary) the manifest does not name: killed during a save
    for f in $W/k/tensors-*; do [ -e "$f" ] && ! grep -q "\"$(basename "${f%.tmp}")\"" $W/k/manifest.json 2>/dev/null &&
        { midwrite=$((midwrite + 1)); break; }; done
    # a kill before the first save committed leaves none (there was no previous one); once one exists, every
    # later kill leaves the previous or the new one, verified
    if [ -e $W/k/manifest.json ]; then
        had=1
        v=$($M ckpt verify $W/k 2>&1) && verified=$((verified + 1)) || fail "kill $i: ckpt verify: $v"
    elif [ $had = 1 ]; then
        fail "kill $i: the checkpoint an earlier run had committed is gone"
    fi
done
$M train $B --ckpt-dir $W/k --ckpt-every 2 --ckpt-async --resume auto >$W/kend.out 2>&1 || fail "the last resume: $(tail -3 $W/kend.out)"
$M ckpt verify $W/k >/dev/null 2>&1 || fail "verify after the last resume"
grep -q '"step":80' $W/k/manifest.json || fail "the last resume did not reach step 80"
[ "$verified" -ge 3 ] || fail "only $verified of the kills came after a committed checkpoint (a loaded machine?)"
ok $f0 "3: $kills kill -9 at random moments (saves every 2 steps, 39 MB): ckpt verify passed $verified times ($midwrite killed with a save not yet committed); --resume auto finished at step 80, verified"

# 4. dp2 ZeRO-1
f0=$fails
P="$T --dp 2 --zero 1 --steps 12 --ckpt-every 4"
$MPI -np 2 $M train $P --ckpt-dir $W/ds --metrics $W/ds.jsonl >/dev/null 2>&1 || fail "dp2 sync"
$MPI -np 2 $M train $P --ckpt-dir $W/da --ckpt-async --metrics $W/da.jsonl >/dev/null 2>&1 || fail "dp2 async"
cmp -s <(losses $W/ds.jsonl) <(losses $W/da.jsonl) || fail "dp2: losses differ with --ckpt-async"
same_manifest $W/ds/manifest.json $W/da/manifest.json || fail "dp2: the manifest differs with --ckpt-async"
for f in tensors-000012-r00000.bin tensors-000012-r00001.bin; do
    cmp -s $W/ds/$f $W/da/$f || fail "dp2: $f differs with --ckpt-async"
done
$M ckpt verify $W/da >/dev/null || fail "dp2: verify"
ok $f0 "4: dp2 ZeRO-1 --ckpt-async: losses, the manifest and both ranks' files bitwise equal to the synchronous run's"

# 5. SIGTERM while a save is being written: it is committed, the final save follows, exit 0
f0=$fails
$M train $B --steps 200 --log-every 1 --ckpt-dir $W/t --ckpt-every 2 --ckpt-async >$W/t.out 2>&1 &
pid=$!
for t in $(seq 1 300); do grep -aq "checkpoint snapshot" $W/t.out && break; sleep 0.05; done
sleep 0.05; kill -TERM $pid; wait $pid; rc=$?; pid=
[ $rc -eq 0 ] || fail "SIGTERM during an async save: exit status $rc"
grep -aq "^stopped by a signal after step" $W/t.out || fail "SIGTERM: no 'stopped by a signal' line"
$M ckpt verify $W/t >/dev/null 2>&1 || fail "SIGTERM: ckpt verify"
n=$(grep -ao "stopped by a signal after step [0-9]*" $W/t.out | grep -o "[0-9]*$")
grep -q "\"step\":$n," $W/t/manifest.json || fail "SIGTERM: the checkpoint is not of step $n"
ok $f0 "5: SIGTERM just after a snapshot: exit 0, a verified checkpoint of step $n"

o=$($M train $T --steps 2 --ckpt-async 2>&1) && fail "--ckpt-async without --ckpt-dir accepted" ||
    { grep -q -- "--ckpt-async needs --ckpt-dir" <<<"$o" || fail "refusal: $o"; }
[ $fails -eq 0 ] && echo "check_ckpt_async: ok" || { echo "check_ckpt_async: $fails failure(s)"; exit 1; }
