#!/usr/bin/env bash
# Sharded checkpoints move between layouts (tiny GPT-2, byte-level fortunes):
#  - 5 steps under dp4 ZeRO-3 write one file per rank; resuming for 5 more
#    steps on 1 process, dp2 ZeRO-1, tp2, pp2, dp2 x tp2 x pp2 ZeRO-1 gives
#    the uninterrupted dp4 ZeRO-3 run's losses to 1e-6 relative, and dp4
#    ZeRO-3 itself gives them bitwise; bf16: a bf16 dp4 ZeRO-3 checkpoint
#    resumed under bf16 dp2 ZeRO-2 (1e-6 relative to the uninterrupted bf16
#    dp4 ZeRO-3 run);
#  - hybrid sharding and ZeRO-0 writers (each rank writes its share once)
#    resume on 1 process to the same losses;
#  - memory (--report-json peaks): under dp4 ZeRO-3 no rank's peak while
#    saving or loading exceeds what it holds plus one unit's fp32 parameters;
#  - `ckpt verify` passes and `ckpt info` names the saving layout.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
M=$PWD/$M
corpus d
T="--train $W/d_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --lr 1e-3 --log-every 0"
same() { # REF GOT BOUND: the last 5 losses of REF equal GOT's 5 (bound 0: bitwise)
    $PY - $W/$1.jsonl $W/$2.jsonl $2 $3 <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l][-5:]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
bound = float(sys.argv[4])
assert len(a) == len(b) == 5, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst <= bound, f"{sys.argv[3]}: resumed losses {worst:.3g} relative from the uninterrupted run's (bound {bound})"
print(f"{sys.argv[3]}: 5 resumed losses within {worst:.2g} relative (bound {bound})")
PY
}
$MPI -np 4 $M train $T --steps 10 --dp 4 --zero 3 --metrics $W/ref.jsonl >/dev/null
$MPI -np 4 $M train $T --steps 5 --dp 4 --zero 3 --ckpt-dir $W/ck --metrics $W/first.jsonl \
    --report-json $W/save.json >/dev/null
[ "$(ls $W/ck | grep -c '^tensors-000005-r0000[0-3].bin$')" = 4 ] || { echo "expected 4 rank files:"; ls $W/ck; exit 1; }
$M ckpt verify $W/ck
$M ckpt info $W/ck | tee $W/info.txt
grep -q "dp 4, tp 1, pp 1, ZeRO 3" $W/info.txt
resume() { # NAME NP FLAGS...: resume a copy of the checkpoint for 5 steps
    local name=$1 np=$2; shift 2
    rm -rf $W/$name; cp -r $W/ck $W/$name
    $MPI -np $np $M train $T --steps 10 --ckpt-dir $W/$name --resume --metrics $W/$name.jsonl "$@" >/dev/null
}
resume same 4 --dp 4 --zero 3 --report-json $W/load.json; same ref same 0
resume one 1;                                                same ref one 1e-6
resume dp2_z1 2 --dp 2 --zero 1;                             same ref dp2_z1 1e-6
resume tp2 2 --tp 2;                                         same ref tp2 1e-6
resume pp2 2 --pp 2;                                         same ref pp2 1e-6
resume dp2tp2pp2 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batch 2;  same ref dp2tp2pp2 1e-6
# the checkpoints the resumed runs wrote in their own layouts verify too
$M ckpt verify $W/dp2tp2pp2 >/dev/null
# other writers: hybrid sharding (only the first replica writes) and ZeRO-0
# (the dp ranks split each unit): 4 files, resumed on 1 process
for v in "hsdp --zero 3 --shard-group 2" "z0 --zero 0"; do
    set -- $v; name=$1; shift
    $MPI -np 4 $M train $T --steps 5 --dp 4 "$@" --ckpt-dir $W/$name >/dev/null
    [ "$(ls $W/$name | grep -c '^tensors-000005-r0000[0-3].bin$')" = 4 ]
    $M train $T --steps 10 --ckpt-dir $W/$name --resume --metrics $W/$name.jsonl >/dev/null
    same ref $name 1e-6
done
$MPI -np 4 $M train $T --steps 10 --dp 4 --zero 3 --precision bf16 --metrics $W/bref.jsonl >/dev/null
$MPI -np 4 $M train $T --steps 5 --dp 4 --zero 3 --precision bf16 --ckpt-dir $W/bck >/dev/null
rm -rf $W/bf16; cp -r $W/bck $W/bf16
$MPI -np 2 $M train $T --steps 10 --dp 2 --zero 2 --precision bf16 --ckpt-dir $W/bf16 --resume \
    --metrics $W/bf16.jsonl >/dev/null
same bref bf16 1e-6

# memory: the peak while saving (first run) and loading (the same-layout
# resume) stays within held + one unit (the largest: a block, fp32)
$PY - $W/save.json $W/load.json <<'PY'
import json, sys
C = 64
unit = 4 * (12 * C * C + 13 * C)  # one block's fp32 parameters
for path in sys.argv[1:]:
    top = json.load(open(path))
    for r in top["ranks"]:
        held = sum(r["memory"].values())
        peak = r["memory_peak_total"]
        assert peak <= held + unit, f"{path} rank {r['rank']}: peak {peak} > held {held} + one unit {unit}"
        print(f"{path.split('/')[-1]} rank {r['rank']}: peak {peak} <= held {held} + unit {unit}")
PY
echo "check_ckpt_reshard: ok"
