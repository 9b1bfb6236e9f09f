#!/usr/bin/env bash
# Disk offload of the optimizer state in training (--offload-optimizer disk:DIR):
#  - 5 AdamW steps give losses bitwise equal to the in-memory optimizer, on
#    1 process and on dp=2 with ZeRO-1 and ZeRO-3 (each rank streams its own
#    shard), with a 16 KiB buffer that forces many chunks per unit; the same
#    under --precision bf16 (ZeRO 0, 1, 3) and fp16 (ZeRO 2), where the fp32
#    master weights are streamed from the file with m and v;
#  - every rank's optimizer-state bytes (--report-json: the fp32 master
#    included under mixed precision) stay within the buffer bound;
#  - a checkpoint saved from the offloaded state (3 steps) resumes, offloaded
#    again, to the same losses as 5 straight in-memory steps (fp32, and bf16
#    on dp=2 ZeRO-3); a bf16 checkpoint written from the offloaded master is
#    byte for byte the in-memory run's;
#  - Adafactor and 8-bit AdamW (paged a unit at a time: their own encodings
#    go through one resident buffer) give the in-memory losses bitwise (1
#    process; dp=2 ZeRO-3 bf16), and a checkpoint written from the paged
#    state is byte for byte the in-memory one and resumes to the same losses;
#  - a malformed flag or a missing directory fails with one error line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
mkdir -p $W/off
corpus text
T="--train $W/text_train.bin --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --steps 5 --dropout 0.1 --log-every 0"
OFF="--offload-optimizer disk:$W/off --offload-buffer-mb 0.015625"
losses() { cut -d, -f1-2 "$1"; }
for layout in "1" "2 --dp 2 --zero 1" "2 --dp 2 --zero 3" "1 --precision bf16" "2 --dp 2 --zero 1 --precision bf16" \
              "2 --dp 2 --zero 3 --precision bf16" "2 --dp 2 --zero 2 --precision fp16"; do
    set -- $layout; np=$1; shift
    $MPI -np $np $M train $T "$@" --metrics $W/mem.jsonl >/dev/null
    $MPI -np $np $M train $T "$@" $OFF --metrics $W/off.jsonl --report-json $W/off.json >/dev/null
    cmp <(losses $W/mem.jsonl) <(losses $W/off.jsonl) || { echo "np=$np $*: offloaded losses differ"; exit 1; }
    $PY - $W/off.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for rank, rec in enumerate(r["ranks"]):
    opt = rec["memory"]["optimizer"]
    assert opt <= 16384, f"rank {rank}: {opt} optimizer bytes resident, budget 16384"
print(f"optimizer state resident per rank: {[rec['memory']['optimizer'] for rec in r['ranks']]} bytes (budget 16384)", end="; ")
PY
    rm -rf $W/mem.jsonl $W/off.jsonl
    echo "np=$np $*: losses bitwise equal to in-memory AdamW"
done
$M train $T --metrics $W/straight.jsonl >/dev/null
$M train ${T/--steps 5/--steps 3} $OFF --ckpt-dir $W/ck --metrics $W/res.jsonl >/dev/null
$M train $T $OFF --ckpt-dir $W/ck --resume --metrics $W/res.jsonl >/dev/null
cmp <(losses $W/straight.jsonl) <(losses $W/res.jsonl) || { echo "offloaded checkpoint resume differs"; exit 1; }
echo "offloaded 3 steps + resume 2: losses bitwise equal to 5 in-memory steps"
B="--precision bf16 --dp 2 --zero 3"
$MPI -np 2 $M train $T $B --metrics $W/straight16.jsonl >/dev/null
$MPI -np 2 $M train ${T/--steps 5/--steps 3} $B $OFF --ckpt-dir $W/ck16 --metrics $W/res16.jsonl >/dev/null
$MPI -np 2 $M train $T $B $OFF --ckpt-dir $W/ck16 --resume --metrics $W/res16.jsonl >/dev/null
cmp <(losses $W/straight16.jsonl) <(losses $W/res16.jsonl) || { echo "bf16 offloaded checkpoint resume differs"; exit 1; }
echo "bf16 dp=2 ZeRO-3, offloaded 3 steps + resume 2: losses bitwise equal to 5 in-memory steps"
$M train ${T/--steps 5/--steps 3} --precision bf16 --ckpt-dir $W/ckm >/dev/null
$M train ${T/--steps 5/--steps 3} --precision bf16 $OFF --ckpt-dir $W/cko >/dev/null
cmp $W/ckm/tensors-000003-r00000.bin $W/cko/tensors-000003-r00000.bin || { echo "bf16 checkpoint from the offloaded master differs"; exit 1; }
echo "bf16 checkpoint after 3 steps: the offloaded run's tensors are byte for byte the in-memory run's"
for opt in adafactor adamw8bit; do
    for layout in "1" "2 --dp 2 --zero 3 --precision bf16"; do
        set -- $layout; np=$1; shift
        $MPI -np $np $M train $T --optimizer $opt "$@" --metrics $W/mem.jsonl >/dev/null
        $MPI -np $np $M train $T --optimizer $opt "$@" $OFF --metrics $W/off.jsonl >/dev/null
        cmp <(losses $W/mem.jsonl) <(losses $W/off.jsonl) || { echo "$opt np=$np $*: offloaded losses differ"; exit 1; }
        rm -f $W/mem.jsonl $W/off.jsonl
        echo "$opt np=$np $*: offloaded (paged) losses bitwise equal to in-memory"
    done
    $M train ${T/--steps 5/--steps 3} --optimizer $opt --ckpt-dir $W/ckm_$opt >/dev/null
    $M train ${T/--steps 5/--steps 3} --optimizer $opt $OFF --ckpt-dir $W/cko_$opt >/dev/null
    cmp $W/ckm_$opt/tensors-000003-r00000.bin $W/cko_$opt/tensors-000003-r00000.bin || { echo "$opt: offloaded checkpoint differs"; exit 1; }
    $M train $T --optimizer $opt --metrics $W/straight_$opt.jsonl >/dev/null
    $M train $T --optimizer $opt $OFF --ckpt-dir $W/cko_$opt --resume --metrics $W/res_$opt.jsonl >/dev/null
    cmp <(losses $W/straight_$opt.jsonl | tail -2) <(losses $W/res_$opt.jsonl) || { echo "$opt: offloaded resume differs"; exit 1; }
    echo "$opt: checkpoint from the paged state byte for byte the in-memory one; resumed offloaded = straight run"
done
bad() { # expected message, then the train flags
    expect_failure "$1" $M train $T "${@:2}"
}
bad "must be disk:DIR" --offload-optimizer $W/off
bad "$W/missing" --offload-optimizer disk:$W/missing
echo OK
