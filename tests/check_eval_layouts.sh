#!/usr/bin/env bash
# The validation loss does not depend on the layout: the same weights
# (a 3-step checkpoint, evaluated after one step at --lr 0) give the same
# val_loss on 1 process, micro-batches 1/2/4, dp2 ZeRO-3, tp2, pp2 and
# dp2 x tp2 (<= 1e-6 relative; tp changes only reduction orders), and it
# equals `meshtrain eval --batch 8 --batches 8` (the same definition: the
# first eval-batches x eval-batch sequences of the shard, in order). An
# --eval-batch that is not a multiple of the micro-batch is refused.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus d
B="--train $W/d_train.bin --val $W/d_val.bin --layers 2 --dim 32 --heads 4 --seq-len 32 --batch 8 --log-every 0"
$M train $B --steps 3 --ckpt-dir $W/ck >/dev/null
T="$B --init-from $W/ck --steps 1 --lr 0 --eval-every 1 --eval-batches 8"
run() { # name np flags...
    local name=$1 np=$2; shift 2
    $MPI -np $np $M train $T "$@" --metrics $W/$name.jsonl >/dev/null
}
run one 1
run mb1 1 --micro-batch 1
run mb2 1 --micro-batch 2
run mb4 1 --micro-batch 4
run dp2z3 2 --dp 2 --zero 3
run tp2 2 --tp 2
run pp2 2 --pp 2 --micro-batch 2
run dp2tp2 4 --dp 2 --tp 2 --micro-batch 2
$M eval --ckpt $W/ck --val $W/d_val.bin --batch 8 --batches 8 > $W/eval.txt
$PY - $W <<'PY'
import json, sys
W = sys.argv[1]
def val(n):
    return [json.loads(l)["val_loss"] for l in open(f"{W}/{n}.jsonl") if '"val_loss"' in l][-1]
ref = val("one")
ok = True
for n in ["mb1", "mb2", "mb4", "dp2z3", "tp2", "pp2", "dp2tp2"]:
    v = val(n); rel = abs(v - ref) / ref
    good = rel <= 1e-6; ok &= good
    print(f"{'ok  ' if good else 'FAIL'} {n}: val_loss {v:.17g} vs one process {ref:.17g} (relative {rel:.1e})")
ev = float(open(f"{W}/eval.txt").read().split()[1])
good = abs(ev - ref) <= 5e-7 * 10  # eval prints 6 decimals
ok &= good
print(f"{'ok  ' if good else 'FAIL'} meshtrain eval --batch 8 --batches 8: {ev} (train's {ref:.6f})")
sys.exit(0 if ok else 1)
PY
set +e; out=$($M train $T --micro-batch 2 --eval-batch 3 2>&1); rc=$?; set -e
[ $rc -ne 0 ] && echo "$out" | grep -q -- "--eval-batch 3 must be a multiple of --micro-batch 2" || { echo "FAIL: --eval-batch 3: $out"; exit 1; }
echo "ok   --eval-batch 3 with --micro-batch 2 refused"
