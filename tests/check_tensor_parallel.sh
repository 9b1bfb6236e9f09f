#!/usr/bin/env bash
# Tensor parallelism (Megatron-LM), sequence parallelism and the 3-D mesh
# reproduce the single-process run.
# Model L=4 C=32 H=4 T=32 V=256, dropout 0.1, clipping 1.0, 20 steps of SGD
# with momentum (AdamW is compared at 1e-3 in one case: it turns round-off in
# the mathematically zero key-bias gradient into lr-sized steps, see
# check_dp_zero.sh), micro-batch 2, 2 microbatches per step:
#  - tp in {2, 4}, with and without --sequence-parallel; tp2 with full
#    recomputation; dp2 x tp2 with ZeRO-3 and with ZeRO-2 + SP; dp2 x tp2 x
#    pp2 on 8 ranks with ZeRO-1 (1f1b, and interleaved + SP) -- per-step
#    losses within 1e-5 relative and final parameters (the checkpoint
#    assembled from the tp slices, exported) within 1e-5 of the reference;
#  - a tp2 checkpoint resumed by one process continues the same losses;
#  - per-rank parameter bytes equal the Megatron split (sliced c_attn, c_fc,
#    c_proj weights, wte rows; replicated LayerNorms, row-parallel biases,
#    wpe) under tp2 and dp2 x tp2 x pp2;
#  - tensor-parallel communication per step equals the closed form: 2
#    all-reduces of b*T*C floats per block per pass, plus one each for the
#    embedding and the head, and a 3-floats-per-row exchange for the
#    vocabulary-parallel loss; with sequence parallelism the same volume as
#    reduce-scatters and all-gathers (plus the backward's re-gathers of the
#    LayerNorm outputs), and the LayerNorm/bias gradients summed once per step;
#  - bad tensor-parallel flags fail with one message.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
one_thread
STEPS=${TP_STEPS:-20}
corpus text
BASE="--train $W/text_train.bin --layers 4 --dim 32 --heads 4 --seq-len 32 --optimizer sgd --lr 0.05 --momentum 0.9 --dropout 0.1 --grad-clip 1.0 --log-every 0 --batch 4 --steps $STEPS --timeout 30"

$M train $BASE --micro-batch 2 --ckpt-dir $W/ref --metrics $W/ref.jsonl >/dev/null
$M export --ckpt $W/ref --format safetensors --out $W/ref.safetensors >/dev/null

run() { # name np flags...
    local name=$1 np=$2; shift 2
    $MPI -np $np $M train $BASE "$@" --ckpt-dir $W/$name --metrics $W/$name.jsonl >/dev/null
    check_run $name ref
}

echo "== equivalence with the single process =="
run tp2 2 --tp 2 --micro-batch 2
run tp4 4 --tp 4 --micro-batch 2
run tp2_sp 2 --tp 2 --sequence-parallel --micro-batch 2
run tp4_sp 4 --tp 4 --sequence-parallel --micro-batch 2
run tp2_recompute 2 --tp 2 --sequence-parallel --recompute full --micro-batch 2
run dp2_tp2_zero3 4 --dp 2 --tp 2 --zero 3 --micro-batch 1
run dp2_tp2_zero2_sp 4 --dp 2 --tp 2 --zero 2 --sequence-parallel --micro-batch 1
run dp2_tp2_pp2_zero1 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batch 1
run dp2_tp2_pp2_sp_interleaved 8 --dp 2 --tp 2 --pp 2 --zero 1 --micro-batch 1 --sequence-parallel --pp-schedule interleaved --pp-chunks 2

echo "== AdamW =="
$M train $BASE --micro-batch 2 --optimizer adamw --lr 1e-3 --ckpt-dir $W/refadam --metrics $W/refadam.jsonl >/dev/null
$M export --ckpt $W/refadam --format safetensors --out $W/refadam.safetensors >/dev/null
$MPI -np 4 $M train $BASE --optimizer adamw --lr 1e-3 --dp 2 --tp 2 --zero 1 --sequence-parallel --micro-batch 1 --ckpt-dir $W/adam --metrics $W/adam.jsonl >/dev/null
check_run adam refadam 1e-3

echo "== resume a tp2 checkpoint on one process =="
$MPI -np 2 $M train $BASE --tp 2 --micro-batch 2 --steps $((STEPS / 2)) --ckpt-dir $W/res --metrics $W/res.jsonl >/dev/null
$M train $BASE --micro-batch 2 --resume --ckpt-dir $W/res --metrics $W/res.jsonl >/dev/null
check_run res ref

echo "== parameter bytes per rank =="
$MPI -np 2 $M train $BASE --tp 2 --micro-batch 2 --steps 1 --report-json $W/tp2.json >/dev/null
$MPI -np 8 $M train $BASE --dp 2 --tp 2 --pp 2 --micro-batch 1 --steps 1 --report-json $W/3d.json >/dev/null
$PY - $W/tp2.json $W/3d.json <<'PY'
import json, sys
C, T, V, L = 32, 32, 256, 4
def block(tp):   # sliced: c_attn (w, b), attn c_proj w, c_fc (w, b), mlp c_proj w; replicated: 2 LN, 2 biases
    return (12 * C * C + 7 * C) // tp + 6 * C
def embed(tp):   # wte rows split, wpe replicated
    return V * C // tp + T * C
head = 2 * C
tp2 = json.load(open(sys.argv[1]))
want = 4 * (embed(2) + L * block(2) + head)
for rank, rec in enumerate(tp2["ranks"]):
    got = rec["memory"]["params"]
    assert got == want, f"tp2 rank {rank}: {got} parameter bytes, expected {want}"
    assert rec["memory"]["grads"] == want, f"tp2 rank {rank}: gradient bytes {rec['memory']['grads']}"
print(f"tp2: every rank holds {want} parameter bytes (whole model {4 * (embed(1) + L * block(1) + head)})")
d3 = json.load(open(sys.argv[2]))
# rank = (dp * pp + pp_idx) * tp + tp_idx: stage 0 has the embedding and 2
# blocks, stage 1 has 2 blocks, the final LayerNorm and a wte/wpe replica
for rank, rec in enumerate(d3["ranks"]):
    stage = (rank // 2) % 2
    want = 4 * (embed(2) + 2 * block(2) + (head if stage == 1 else 0))
    got = rec["memory"]["params"]
    assert got == want, f"dp2xtp2xpp2 rank {rank} (stage {stage}): {got} parameter bytes, expected {want}"
print("dp2 x tp2 x pp2: every rank holds its stage's tp slice")
PY

echo "== tensor-parallel communication per step =="
# 1 step of 2 microbatches of b=2, N = b*T rows; payload in bytes
$MPI -np 2 $M train $BASE --tp 2 --micro-batch 2 --steps 1 --report-json $W/tpc.json >/dev/null
$MPI -np 2 $M train $BASE --tp 2 --micro-batch 2 --steps 1 --sequence-parallel --report-json $W/spc.json >/dev/null
$PY - $W/tpc.json $W/spc.json <<'PY'
import json, sys
C, T, L, b, mb, tp = 32, 32, 4, 2, 2, 2
N = b * T
P = N * C * 4                       # one all-reduce of the b*T*C activation
stats = 3 * N * 4 * tp              # the vocabulary-parallel loss's all-gather
def tpcomm(path):
    return json.load(open(path))["comm_per_step"]["tp"]
t = tpcomm(sys.argv[1])
want_ar = mb * (2 * 2 * L + 2) * P  # 2 per block per pass, embedding forward, head backward
assert t["allreduce"]["payload"] == want_ar, f"tp all-reduce {t['allreduce']['payload']} B/step, expected {want_ar}"
assert t["allreduce"]["calls"] == mb * (4 * L + 2), t["allreduce"]
assert t["allgather"]["payload"] == mb * stats, f"tp all-gather {t['allgather']['payload']}, expected {mb * stats}"
assert t["reduce_scatter"]["calls"] == 0
print(f"tp2: {t['allreduce']['calls']:.0f} all-reduces = {t['allreduce']['payload']:.0f} B/step = "
      f"{mb} microbatches x (2 x 2 x {L} blocks + 2) x b*T*C x 4 B; loss statistics {t['allgather']['payload']:.0f} B")
s = tpcomm(sys.argv[2])
want_rs = mb * (2 * 2 * L + 2) * P  # the same points as the all-reduces
want_ag = mb * ((2 + 4) * L + 2) * P + mb * stats  # forward 2/block, backward 2 + 2 re-gathers, lnf, embedding backward
want_sp_ar = (6 * C * L + 2 * C) * 4  # LayerNorm + row-parallel bias gradients, once per step
assert s["reduce_scatter"]["payload"] == want_rs, f"sp reduce-scatter {s['reduce_scatter']['payload']}, expected {want_rs}"
assert s["allgather"]["payload"] == want_ag, f"sp all-gather {s['allgather']['payload']}, expected {want_ag}"
assert s["allreduce"]["payload"] == want_sp_ar, f"sp all-reduce {s['allreduce']['payload']}, expected {want_sp_ar}"
print(f"tp2 + sp: reduce-scatter {s['reduce_scatter']['payload']:.0f} B = the all-reduce points; all-gather "
      f"{s['allgather']['payload']:.0f} B; bytes sent {s['reduce_scatter']['bytes_sent'] + s['allgather']['bytes_sent']:.0f} "
      f"vs all-reduce {t['allreduce']['bytes_sent']:.0f}")
PY

echo "== bad tensor-parallel flags =="
bad() { # expected message, then the mpirun arguments
    expect_failure "$1" $MPI "${@:2}"
}
bad "does not divide the 3 attention heads" -np 2 $M train $BASE --heads 3 --dim 33 --tp 2
bad "needs --tp > 1" -np 1 $M train $BASE --sequence-parallel
bad "token rows of a microbatch" -np 2 $M train $BASE --tp 2 --sequence-parallel --micro-batch 1 --batch 2 --seq-len 31
bad "adafactor with --tp 2" -np 2 $M train $BASE --tp 2 --optimizer adafactor
bad "needs --zero 0, --pp 1 and --tp 1" -np 2 $M train $BASE --tp 2 --dump-grads $W/g.bin
echo OK
