#!/usr/bin/env bash
# ZeRO++ hpZ (parallel/zero_hpz.c) on dp4 ZeRO-3 with nodes of two ranks
# (--ranks-per-node 2, --zeropp-hpz 2), fp32 and bf16, 20 steps:
#  - losses and gradient norms bitwise those of plain ZeRO-3, and every
#    rank's checkpoint file byte for byte the same (parameters and Adam state);
#  - the backward all-gathers leave the shard group for the node group: the
#    shard group's all-gather bytes drop by (n-1)/(G-1) = 3/2 times what the
#    hpz group sends, and nothing the hpz group sends crosses nodes, so the
#    inter-node bytes fall by the backward all-gathers' share;
#  - the secondary copy costs exactly padded/G parameter elements per unit
#    held: the params bytes grow by the hpz bytes per microbatch;
#  - a group that does not divide the shard group, or --zero 1, is refused.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
corpus text
T="--train $W/text_train.bin --layers 2 --dim 40 --heads 4 --seq-len 32 --batch 8 --steps 20 --log-every 0 --dropout 0.1 --timeout 30 --dp 4 --zero 3 --ranks-per-node 2"
MPI="$MPI -np 4"
for prec in fp32 bf16; do
    $MPI $M train $T --precision $prec --metrics $W/z3.jsonl --report-json $W/z3.json --ckpt-dir $W/z3 >/dev/null
    $MPI $M train $T --precision $prec --zeropp-hpz 2 --metrics $W/hpz.jsonl --report-json $W/hpz.json --ckpt-dir $W/hpz >/dev/null
    cmp <(step_losses $W/z3.jsonl) <(step_losses $W/hpz.jsonl) || { echo "$prec: hpZ losses differ from ZeRO-3"; exit 1; }
    for r in 0 1 2 3; do
        f=tensors-000020-r0000$r.bin
        cmp $W/z3/$f $W/hpz/$f || { echo "$prec: rank $r checkpoint differs"; exit 1; }
    done
    echo "ok   $prec: 20 steps of hpZ bitwise equal to ZeRO-3 (losses, grad norms, every rank's checkpoint file)"
    $PY - $W $prec <<'PY'
import json, sys
W, prec = sys.argv[1], sys.argv[2]
def load(name):
    out = []
    for r in json.load(open(f"{W}/{name}.json"))["ranks"]:
        c = r["comm_per_step"]
        tot = lambda ax, f: sum(k[f] for k in c[ax].values())
        out.append(dict(shard_ag=c["shard"]["allgather"]["bytes_sent"], hpz=tot("hpz", "bytes_sent"),
                        hpz_inter=tot("hpz", "bytes_inter"), inter=sum(tot(a, "bytes_inter") for a in c),
                        params=r["memory"]["params"]))
    return out
z3, hp = load("z3"), load("hpz")
ok = True
for r, (a, b) in enumerate(zip(z3, hp)):
    checks = [(a["hpz"] == 0 and b["hpz"] > 0, "hpz group used"),
              (abs((a["shard_ag"] - b["shard_ag"]) - 1.5 * b["hpz"]) < 1e-6, "shard all-gather bytes drop by 3/2 of hpz bytes"),
              (b["hpz_inter"] == 0, "hpz bytes stay inside the node"),
              (b["params"] - a["params"] == b["hpz"], "params grow by the secondary parts")]
    for cond, what in checks:
        if not cond: print(f"FAIL {prec} rank {r}: {what}: z3 {a} hpz {b}"); ok = False
inter = [(a["inter"], b["inter"]) for a, b in zip(z3, hp)]
print(f"ok   {prec}: inter-node bytes per step per rank ZeRO-3 -> hpZ {inter} "
      f"(ratio {sum(b for a, b in inter) / sum(a for a, b in inter):.3f}); hpz group {hp[0]['hpz']:.0f} B/step inside the node; "
      f"params +{hp[0]['params'] - z3[0]['params']} B per rank")
sys.exit(0 if ok else 1)
PY
    rm -rf $W/z3 $W/hpz
done
err() { # expected message, then flags
    local want=$1; shift
    set +e; out=$($MPI $M train $T --steps 1 "$@" 2>&1); rc=$?; set -e
    [ $rc -ne 0 ] && echo "$out" | grep -qF -- "$want" || { echo "FAIL: $* not refused with '$want': $out"; exit 1; }
    echo "ok   $* refused: $want"
}
err "--zeropp-hpz 3 must be >= 2 and divide the ZeRO shard group of 4 ranks" --zeropp-hpz 3
err "--zeropp-hpz needs --zero 3" --zero 1 --zeropp-hpz 2
