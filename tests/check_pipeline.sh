#!/usr/bin/env bash
# Pipeline parallelism reproduces the single-process run.
# Model L=8 C=32 H=4 T=32 V=256, dropout 0.1, clipping 1.0, 20 steps of SGD
# with momentum (as in check_dp_zero.sh: AdamW turns round-off in the
# mathematically zero key-bias gradient into lr-sized steps, so its
# parameters are compared at 1e-3 in one AdamW case), micro-batch 2, m
# microbatches per step (batch 2m):
#  - pp in {2, 4} x schedule gpipe / 1f1b with m in {1, p, 2p+1}, and
#    interleaved (2 chunks per rank) with m in {p, 2p} (interleaved needs m to
#    be a multiple of p, as in Megatron-LM; see pipeline_schedule.h);
#  - dp2 x pp2 with ZeRO-1 (4 ranks), an uneven split --pp-layers 5,3 and
#    5,1,1,1 -- against the single-process run with the same batch and
#    micro-batch: per-step losses within 1e-5 relative and final parameters
#    (exported from the pipeline's checkpoint) within 1e-5;
#  - resume: a pp=2 checkpoint resumed on pp=4 continues the same losses;
#  - per-rank parameter bytes (--report-json) equal the layer split: stage 0
#    holds the embedding and its blocks, the last stage its blocks, the final
#    LayerNorm and a replica of the tied wte (and wpe, which stays zero-grad);
#  - bad pipeline flags fail with one message.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
STEPS=${PP_STEPS:-20}
corpus text
BASE="--train $W/text_train.bin --layers 8 --dim 32 --heads 4 --seq-len 32 --optimizer sgd --lr 0.05 --momentum 0.9 --dropout 0.1 --grad-clip 1.0 --log-every 0 --micro-batch 2 --steps $STEPS --timeout 30"

declare -A have_ref
ref() { # single-process reference for m microbatches
    local m=$1
    [ -n "${have_ref[$m]:-}" ] && return
    $M train $BASE --batch $((2 * m)) --ckpt-dir $W/ref$m --metrics $W/ref$m.jsonl >/dev/null
    $M export --ckpt $W/ref$m --format safetensors --out $W/ref$m.safetensors >/dev/null
    have_ref[$m]=1
}

check() { # name m [param tol]: compares $W/name.jsonl and $W/name's checkpoint with reference m
    check_run "$1" "ref$2" "${3:-1e-5}"
}

run() { # name m np flags...
    local name=$1 m=$2 np=$3; shift 3
    ref $m
    $MPI -np $np $M train $BASE --batch $((2 * m)) "$@" --ckpt-dir $W/$name --metrics $W/$name.jsonl >/dev/null
    check $name $m
}

for p in 2 4; do
    for s in gpipe 1f1b; do
        for m in 1 $p $((2 * p + 1)); do
            run pp${p}_${s}_m$m $m $p --pp $p --pp-schedule $s
        done
    done
    for m in $p $((2 * p)); do
        run pp${p}_interleaved_m$m $m $p --pp $p --pp-schedule interleaved --pp-chunks 2
    done
done
run dp2_pp2_zero1 4 4 --dp 2 --pp 2 --zero 1 --micro-batch 1
run pp2_uneven 3 2 --pp 2 --pp-layers 5,3
run pp4_uneven 5 4 --pp 4 --pp-layers 5,1,1,1

echo "== AdamW =="
$M train $BASE --batch 8 --optimizer adamw --lr 1e-3 --ckpt-dir $W/refadam --metrics $W/refadam.jsonl >/dev/null
$M export --ckpt $W/refadam --format safetensors --out $W/refadam.safetensors >/dev/null
$MPI -np 4 $M train $BASE --batch 8 --optimizer adamw --lr 1e-3 --pp 2 --dp 2 --zero 1 --micro-batch 1 --pp-schedule interleaved --pp-chunks 2 --ckpt-dir $W/adam --metrics $W/adam.jsonl >/dev/null
check adam adam 1e-3

echo "== resume across pipeline layouts =="
ref 4
$MPI -np 2 $M train $BASE --batch 8 --pp 2 --steps $((STEPS / 2)) --ckpt-dir $W/res --metrics $W/res.jsonl >/dev/null
$MPI -np 4 $M train $BASE --batch 8 --pp 4 --pp-schedule gpipe --resume --ckpt-dir $W/res --metrics $W/res.jsonl >/dev/null
check res 4

echo "== parameter bytes per stage =="
$MPI -np 2 $M train $BASE --batch 4 --pp 2 --steps 1 --report-json $W/mem.json >/dev/null
$PY - $W/mem.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
C, T, V, L = 32, 32, 256, 8
block = 12 * C * C + 13 * C
embed = V * C + T * C
head = 2 * C
want = [4 * (embed + 4 * block), 4 * (4 * block + head + embed)]
for rank, rec in enumerate(r["ranks"]):
    got = rec["memory"]["params"]
    assert got == want[rank], f"pp rank {rank}: {got} parameter bytes, expected {want[rank]}"
    assert rec["memory"]["grads"] == want[rank], f"pp rank {rank}: gradient bytes {rec['memory']['grads']}"
    print(f"pp rank {rank}: {got} parameter bytes = the layer split", end="; ")
print()
PY

echo "== trace of a dp1 x pp4 run =="
# --trace writes one Chrome trace-event JSON for all ranks: it must parse,
# hold each rank's forward/backward of every microbatch (2 steps x 8
# microbatches) plus send/recv spans, and the idle fraction of every rank is
# printed.
$MPI -np 4 $M train $BASE --batch 16 --pp 4 --steps 2 --trace $W/trace.json >$W/trace.out
grep -q "idle fraction per rank .*0:0\.[0-9]* 1:0\.[0-9]* 2:0\.[0-9]* 3:0\.[0-9]*" $W/trace.out || { cat $W/trace.out; exit 1; }
$PY - $W/trace.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
for pid in range(4):
    mine = [e for e in ev if e["pid"] == pid]
    for name in ("forward", "backward"):
        n = sum(1 for e in mine if e["name"] == name)
        assert n == 16, f"rank {pid}: {n} {name} spans, expected 16"
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in mine)
    kinds = {e["name"] for e in mine}
    want = {"send_act", "recv_grad"} if pid == 0 else {"recv_act", "send_grad"}
    assert want <= kinds, f"rank {pid}: spans {kinds}"
    assert "optimizer" in kinds and "step" in kinds
meta = {e["pid"]: e["args"]["name"] for e in d["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
assert meta == {r: f"rank {r}" for r in range(4)}, meta
print(f"trace: {len(ev)} spans from 4 ranks, valid Chrome trace JSON")
PY
grep "idle fraction" $W/trace.out

echo "== bad pipeline flags =="
T="$BASE --batch 6"
bad() { # expected message, then the mpirun arguments
    expect_failure "$1" $MPI "${@:2}"
}
bad "3 microbatches of --micro-batch 2 x --dp 1 per step: the interleaved schedule needs" -np 2 $M train $T --pp 2 --pp-schedule interleaved --pp-chunks 2
bad "needs --pp-schedule interleaved" -np 2 $M train $T --pp 2 --pp-chunks 2
bad "sums to 7 blocks" -np 2 $M train $T --pp 2 --pp-layers 4,3
bad "gives 3 stages" -np 2 $M train $T --pp 2 --pp-layers 4,3,1
bad "is not supported" -np 2 $M train $T --pp 2 --zero 2
bad "cannot fill" -np 4 $M train $T --pp 4 --pp-schedule interleaved --pp-chunks 4 --batch 8
bad "unknown\|gpipe" -np 2 $M train $T --pp 2 --pp-schedule zigzag
echo OK
